"""Checks of 04_torchrun, torchrun_command: checked by running the command it builds, on loopback."""

from __future__ import annotations


from grader.checks import CheckFailed
from grader.exercises.torchrun import command, probe_runs
from grader.exercises.torchrun.output_evidence import evidence

from grader.exercises.torchrun import EXERCISE


# ---------------------------------------------------------------- torchrun_command


def _call_torchrun_command(ctx, student, calls, expect_value_error=()):
    """In a rank: torchrun_command(*args, **kwargs) for each call, and what each call in
    `expect_value_error` did instead of raising ValueError (the parent judges: built_commands)."""
    fn = student.task("torchrun_command")
    not_refused = []
    for args, kwargs in expect_value_error:
        shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        try:
            value = fn(*args, **kwargs)
        except ValueError:
            continue
        except Exception as exc:
            not_refused.append((shown, f"raised {type(exc).__name__}"))
            continue
        not_refused.append((shown, "returned a command"))
    results = []
    for args, kwargs in calls:
        shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:
            raise CheckFailed(f"torchrun_command({shown}) raised {type(exc).__name__}: {exc}")
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            raise CheckFailed(
                f"torchrun_command({shown}) returned {value!r}; return a list of strings "
                "(every argument a str, e.g. '--nproc-per-node=2')"
            )
        results.append((shown, value))
    return {"built": results, "not_refused": not_refused}


def built_commands(run: dict) -> list:
    """The parent's verdict on a rank's _call_torchrun_command: the commands built, once every call that must
    raise ValueError did."""
    for shown, what in run["not_refused"]:
        raise CheckFailed(
            f"torchrun_command({shown}) {what}; a job on more than one node cannot be --standalone: "
            "raise ValueError when nnodes > 1 and there is no rdzv_endpoint"
        )
    return run["built"]


@EXERCISE.check("torchrun_command", points=2)
def torchrun_command_runs_one_node(g):
    """torchrun_command(script, 2) builds a --standalone command; run as is, it starts two
    workers of one job (WORLD_SIZE 2, RANK 0 and 1)."""
    with probe_runs.ProbeDir() as probe:
        ((shown, cmd),) = built_commands(
            g.run(_call_torchrun_command, [((probe.script, 2), {})], world_size=1, init_group=False)[0]
        )
        command.check_static(shown, cmd, probe.script, 2, 1, 0, None, 0)
        output, timed_out = probe_runs.run_probe([cmd], probe)
        _check_ranks(probe.records(), 2, output, timed_out, f"torchrun_command({shown})")


def _check_ranks(records: dict, world: int, output: str, timed_out: bool, what: str, attempts: int = 1) -> None:
    for attempt in range(attempts):
        got = {rank: r["env"] for (rank, a), r in records.items() if a == attempt}
        if sorted(got) != list(range(world)):
            raise CheckFailed(
                f"running {what} started workers with ranks {sorted(got)} on attempt {attempt}, "
                f"expected ranks 0..{world - 1}\n" + evidence(output, timed_out)
            )
        sizes = {env["WORLD_SIZE"] for env in got.values()}
        if sizes != {str(world)}:
            raise CheckFailed(f"running {what} gave WORLD_SIZE {sorted(sizes)}, expected {world}")
