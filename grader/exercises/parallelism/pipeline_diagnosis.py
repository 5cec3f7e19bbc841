"""01_parallelism: the likely mistake behind a failed or hung pipeline_step run."""

from __future__ import annotations

from grader.engine import stacks
from grader.grading import describe_failure
from grader.exercises.parallelism import reference as ref

SHAPE_MISMATCH = (
    "a message did not fit the buffer receiving it: a shape (or dtype) mismatch. Rank 1 cannot know the "
    "activation's shape in advance: rank 0 must first send it (its number of dimensions, then its sizes, as "
    "int64 tensors) and rank 1 allocate the activation buffer from that header, as float32; rank 0 receives the "
    "gradient into a buffer of the activation's shape. Both ranks must send and receive the same messages in the "
    "same order (ndim, shape, activation; then the gradient), with the same dtypes"
)
CONTIGUOUS = (
    "dist.send and dist.recv need contiguous tensors, and an activation need not be (this one comes out of a "
    "transpose): send activation.detach().contiguous(), and receive into torch.empty(shape, ...) (torch."
    "empty_like of a non-contiguous tensor is not contiguous either)"
)
NO_ACTIVATION_GRAD = (
    "the received activation has no .grad after the backward on rank 1: call activation.requires_grad_() after "
    "dist.recv and before running the stage, so that backward computes the gradient rank 0 needs"
)
ORDER = (
    "A blocking dist.send returns only once the peer has received the message, and dist.recv only once the peer "
    "has sent it, so the calls must pair up in the same order on both ranks: rank 0 sends ndim, shape and "
    "activation, then receives the gradient; rank 1 receives ndim, shape and activation, runs its stage, the loss "
    "and backward, then sends the gradient"
)


def crash_hint(rank: int, exc: BaseException, stage_ran: bool, loss_calls: int) -> str | None:
    """The likely mistake behind an exception in the student's pipeline_step."""
    text = str(exc)
    if "has to be contiguous" in text:
        return CONTIGUOUS
    if rank == 1 and "NoneType" in text:
        return NO_ACTIVATION_GRAD
    if rank == 1 and "floating point dtype can require gradients" in text:
        return (
            "rank 1's activation buffer is not a float tensor: allocate it as float32, the activation's dtype "
            "(not targets.dtype, an integer type with a classification loss)"
        )
    if rank == 1 and stage_ran and not loss_calls:
        return (
            "rank 1 ran its stage but never called loss_fn: compute the loss with the function passed in, "
            "loss_fn(output, targets), not with a loss of your own"
        )
    if rank == 0 and "does not require grad" in text:
        return (
            "rank 0 must call backward on the activation its stage returned (the one with a graph; send a "
            "detached copy, but keep the original), with the gradient received from rank 1"
        )
    return None


def _stuck_in(report) -> str:
    """The function a hung rank waits in (gloo's timed-out operation, or its stack's innermost frame)."""
    if report.error:
        return stacks.collective_timeout(report.error) or ""
    frames = stacks.main_frames(report.stack or "")
    return frames[0][2] if frames and stacks.busy_frame(report.stack or "") is None else ""


def _waiting_in(report) -> str | None:
    """ "send" or "recv" for a rank stuck there (hung, or stopped by gloo's own
    timeout, which is the run's), "" for one stuck elsewhere, None if not stuck."""
    if report.status == "hung":
        text = "waiting in " + _stuck_in(report)  # not describe(): that is in the student's language
    elif report.status == "error" and "Timed out" in report.error["message"]:
        text = report.error["message"]
    else:
        return None
    for op in ("send", "recv"):
        if f"waiting in {op}" in text or f"for {op} operation" in text:
            return op
    return ""


def failure_text(result, kind: str, n: int) -> str:
    for r in result.ranks:  # our own diagnosis from inside a rank comes first
        if r.status == "error" and r.error["type"] == "CheckFailed":
            return r.error["message"]
    what = f"pipeline_step failed on 2 ranks ({ref.pipeline_description(kind, n)})"
    output = "".join(r.output for r in result.ranks)
    stuck = [_waiting_in(r) for r in result.ranks]
    done = [r.status == "ok" for r in result.ranks]
    if "Received data size doesn't match" in output or "preamble.length" in output:
        hint = SHAPE_MISMATCH
    elif stuck[0] is not None and done[1]:
        hint = (
            "rank 1 returned while rank 0 still waits: rank 0 waits for a message rank 1 never sends (rank 1 must "
            "send the activation's gradient back after its backward), or sends one rank 1 never receives"
        )
    elif stuck[1] is not None and done[0]:
        hint = (
            "rank 0 returned while rank 1 still waits: rank 1 waits for a message rank 0 never sends (rank 0 must "
            "send the header, ndim then shape, and then the activation), or sends one rank 0 never receives"
        )
    elif stuck == ["send", "send"]:
        hint = (
            "a deadlock: both ranks are sending, neither is receiving, so a rank sends before its peer receives: "
            "the messages do not pair up (does rank 1 receive every message rank 0 sends, the header "
            "included, before it sends the gradient?). " + ORDER
        )
    elif stuck == ["recv", "recv"]:
        hint = (
            "a deadlock: both ranks are receiving, each waiting for a message the other sends only later "
            "(does rank 0 wait for the gradient before it has sent its activation?). " + ORDER
        )
    elif stuck[0] is not None and stuck[1] is not None:
        hint = "a deadlock: both ranks wait for each other. " + ORDER
    else:
        return describe_failure(result, what)
    return what + ": " + hint + "\n" + result.failure()
