"""BucketedDDP's traffic judged (checks_bucketed.py, parent side): per step, only all-reduces, every gradient once,
in the buckets bucket_cap_mb makes, launched again after the first step; each mistake named (a tied weight sent
twice, a bucket all-reduced twice, one all-reduce per parameter, per-step state never reset)."""

from __future__ import annotations

from grader.checks import CheckFailed
from grader.i18n import N_, _
from grader.exercises.ddp_basics import reference_practice as rp


RESET = N_(
    "reset the per-step state (the count of ready gradients, the pending handles) at the end of "
    "finish_gradient_synchronization"
)


def nth(step: int) -> str:
    """The step's ordinal, as it reads before "step" in the student's language."""
    return (_("first"), _("second"), _("third"))[step] if step < 3 else _("{n}th", n=step + 1)


def not_reset(steps: list, phase: str | None = None) -> int | None:
    """The first step after the first that launched no all-reduce (during `phase`) while the first one did."""

    def launched(record):
        return [c for c in record["calls"] if c[1] == "all_reduce" and (phase is None or c[0] == phase)]

    if not launched(steps[0]):
        return None
    return next((step for step, record in enumerate(steps) if step and not launched(record)), None)


def judge_traffic(name: str, cap: float, rank: int, steps: list) -> None:
    """Every step of one run of `name` at bucket_cap_mb=cap on `rank`: launched again after the first, carrying
    every gradient once, in the buckets the cap makes (a CheckFailed naming the likely mistake otherwise)."""
    model = rp.MODELS[name]()
    expected, nbytes = rp.bucket_counts(model, cap), rp.gradient_bytes(model)
    where = _("{name} model, bucket_cap_mb={cap}, rank {rank}", name=name, cap=cap, rank=rank)
    stale = not_reset(steps)
    if stale is not None:
        raise CheckFailed(
            _(
                "{where}: from the {nth} step on, no all-reduce was launched: {reset}",
                where=where,
                nth=nth(stale),
                reset=_(RESET),
            )
        )
    for step, record in enumerate(steps):
        _judge_step(where, model, cap, expected, nbytes, step, record)


def _judge_step(where: str, model, cap: float, expected, nbytes: int, step: int, record: dict) -> None:
    """One step's collectives: only all-reduces (barriers aside), carrying every gradient once, in the buckets."""
    others = sorted({kind for _, kind, _, _ in record["calls"] if kind not in ("all_reduce", "barrier")})
    if others:
        raise CheckFailed(
            _(
                "{where}, {nth} step: BucketedDDP also made {join} calls during the step: "
                "synchronize the gradients with one all_reduce per bucket and nothing else",
                where=where,
                nth=nth(step),
                join=", ".join(others),
            )
        )
    calls = [c for c in record["calls"] if c[1] == "all_reduce"]  # a barrier moves no data: allowed
    sent = sum(size for _, _, size, _ in calls)
    count = len(calls)
    if sent != nbytes:
        raise CheckFailed(
            _(
                "{where}, {nth} step: the all-reduces carried {sent} bytes, but the gradients "
                "are {nbytes} bytes: each gradient travels once per step, in its bucket.{hint}",
                where=where,
                nth=nth(step),
                sent=sent,
                nbytes=nbytes,
                hint=_bytes_hint(model, sent, nbytes),
            )
        )
    if count not in expected:
        raise CheckFailed(
            _(
                "{where}, {nth} step: {count} all-reduces, expected {expected} (one per bucket, "
                "gradients in reverse parameter order, a new bucket when the next one would "
                "exceed the cap).{hint}",
                where=where,
                nth=nth(step),
                count=count,
                expected=min(expected),
                hint=_count_hint(model, count),
            )
        )
    got = sorted(size for _, _, size, _ in calls)
    if got not in rp.bucket_sizes(model, cap):
        raise CheckFailed(
            _(
                "{where}, {nth} step: the buckets carried {got} bytes, expected "
                "{expected}: fill them with the gradients in reverse parameter order (the "
                "last layer's first, as backward produces them), a new bucket when the next "
                "gradient would take the current one past bucket_cap_mb",
                where=where,
                nth=nth(step),
                got=got,
                expected=rp.bucket_sizes(model, cap)[0],
            )
        )


def _count_hint(model, count: int) -> str:
    """A hint when there were as many all-reduces as parameters."""
    if count == len([p for p in model.parameters() if p.requires_grad]):
        return " " + _("One per parameter: group the gradients into buckets of up to bucket_cap_mb.")
    return ""


def _bytes_hint(model, sent: int, nbytes: int) -> str:
    """Why the all-reduces carried `sent` bytes rather than the gradients' `nbytes`, where it can be told."""
    hint = ""
    for names, size in rp.shared_parameters(model):
        if sent > nbytes and (sent - nbytes) % size == 0:
            hint = " " + _(
                "The tied weight {name} (the same Parameter as {others}) was sent {times} times: "
                "list each Parameter once (module.parameters() yields a shared one once), so that "
                "it travels once per step.",
                name=names[0],
                others=", ".join(names[1:]),
                times=(sent - nbytes) // size + 1,
            )
    if not hint and sent == 2 * nbytes:
        hint = " " + _(
            "Each bucket was all-reduced twice: launch it once (in the hook, or in "
            "finish_gradient_synchronization for a bucket that never became ready), then only wait "
            "for it."
        )
    return hint
