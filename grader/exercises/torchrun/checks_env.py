"""Checks of 04_torchrun, read_dist_env: checked on real torchrun workers against their environment."""

from __future__ import annotations

import dataclasses

from grader.checks import CheckFailed
from grader.exercises.torchrun import probe_runs, reference
from grader.exercises.torchrun.output_evidence import evidence
from grader.exercises.torchrun.probe_worker import FIELDS, describe_result

from grader.exercises.torchrun import EXERCISE


# ---------------------------------------------------------------- read_dist_env


def _expected_from(env: dict) -> dict:
    """Each field as the task's table states it for `env` (which sets every variable but maybe the restart count)."""
    return {
        name: env[var] if name in reference.TEXT_FIELDS else int(env.get(var) or 0)
        for name, var in reference.ENV_VARS.items()
    }


def _compare(answer: dict, expected: dict, env: dict, where: str) -> None:
    """Raise CheckFailed naming the first wrong field of the student's DistEnv."""
    if answer.get("error", "").startswith("NotImplementedError"):
        raise CheckFailed("read_dist_env raises NotImplementedError: replace the stub with your code")
    if "error" in answer:
        raise CheckFailed(f"read_dist_env raised {where}: {answer['error']}")
    fields = answer["fields"]
    for name in FIELDS:
        got, kind = fields[name]["value"], fields[name]["type"]
        if kind == "missing":
            raise CheckFailed(
                f"read_dist_env returned a {answer['returned']} without the field `{name}`; "
                "return a DistEnv with the fields " + ", ".join(FIELDS)
            )
        want = expected[name]
        var = reference.ENV_VARS[name]
        if isinstance(want, int) and (kind != "int"):
            raise CheckFailed(
                f"`{name}` is {got!r} ({kind}) {where}; environment variables are strings: convert {var} with int()"
            )
        if isinstance(want, str) and kind != "str":
            raise CheckFailed(f"`{name}` is {got!r} ({kind}) {where}; keep {var} as the string it is")
        if got == want:
            continue
        if name in ("rank", "local_rank"):
            other = "local_rank" if name == "rank" else "rank"
            if got == expected[other] and fields[other]["value"] == want:  # both ways: a swap
                raise CheckFailed(
                    f"`{name}` is {got} {where}, but {var}={env.get(var)}: RANK and LOCAL_RANK "
                    "are swapped (RANK used where LOCAL_RANK belongs, or the reverse). RANK numbers "
                    "the workers of the whole job; LOCAL_RANK numbers them within one node"
                )
        if name in ("world_size", "local_world_size"):
            other = "local_world_size" if name == "world_size" else "world_size"
            if got == expected[other] and fields[other]["value"] == want:  # both ways: a swap
                raise CheckFailed(
                    f"`{name}` is {got} {where}, but {var}={env.get(var)}: WORLD_SIZE (all "
                    "workers) and LOCAL_WORLD_SIZE (workers on this node) are swapped"
                )
        if name == "restart_count":
            raise CheckFailed(
                f"`restart_count` is {got} {where}, but TORCHELASTIC_RESTART_COUNT="
                f"{env.get(var)}: read it from the environment (0 only when it is missing)"
            )
        raise CheckFailed(f"`{name}` is {got!r} {where}, but {var}={env.get(var)!r}")


def _check_probe_records(
    records: dict, expected_keys: list[tuple[int, int]], output: str, timed_out: bool, what: str
) -> None:
    missing = [k for k in expected_keys if k not in records]
    if missing:
        rank, attempt = missing[0]
        raise CheckFailed(
            f"the grader's probe did not report from rank {rank}, attempt {attempt} of {what} "
            f"(please tell the instructor if this repeats)\n" + evidence(output, timed_out)
        )
    for (rank, attempt), record in sorted(records.items()):
        env = record["env"]
        where = f"on torchrun worker RANK={env['RANK']} (attempt {attempt}) of {what}"
        _compare(record["answer"], _expected_from(env), env, where)


@EXERCISE.check("read_dist_env", points=1)
def read_dist_env_on_torchrun_workers(g):
    """On the workers of `torchrun --standalone --nproc-per-node=2 --max-restarts=1` whose
    rank 1 fails once, read_dist_env(os.environ) matches each worker's environment,
    restart count included."""
    with probe_runs.ProbeDir(g.submission) as probe:
        cmd = reference.standalone_command(probe.script, 2, max_restarts=1)
        output, timed_out = probe_runs.run_probe([cmd], probe, {"PROBE_FAIL_ONCE_RANK": "1"})
        _check_probe_records(
            probe.records(), [(0, 0), (1, 0), (0, 1), (1, 1)], output, timed_out, "a 2-worker run restarted once"
        )


SAMPLE_ENV = {
    "RANK": "5",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "8",
    "LOCAL_WORLD_SIZE": "4",
    "MASTER_ADDR": "10.0.0.7",
    "MASTER_PORT": "29501",
    "TORCHELASTIC_RESTART_COUNT": "2",
    "GROUP_RANK": "1",
    "PATH": "/usr/bin",
}


def _read_env_cases(ctx, student, cases):
    """In a rank: read_dist_env on each mapping; what it returned or raised."""
    fn = student.task("read_dist_env")
    results = []
    for env in cases:
        try:
            value = fn(dict(env))
        except Exception as exc:
            results.append({"error": f"{type(exc).__name__}: {exc}", "message": str(exc)})
            continue
        results.append(describe_result(value) | {"dataclass": dataclasses.is_dataclass(value)})
    return results


@EXERCISE.check("read_dist_env", points=1)
def read_dist_env_names_a_missing_variable(g):
    """Without one of RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
    read_dist_env raises an error that names it and says to launch with torchrun."""
    cases = [{k: v for k, v in SAMPLE_ENV.items() if k != var} for var in reference.REQUIRED]
    results = g.run(_read_env_cases, cases, world_size=1, init_group=False)[0]
    for var, result in zip(reference.REQUIRED, results):
        if result.get("error", "").startswith("NotImplementedError"):
            raise CheckFailed("read_dist_env raises NotImplementedError: replace the stub with your code")
        if "error" not in result:
            raise CheckFailed(
                f"read_dist_env returned normally for a mapping without {var}; it must raise an "
                "error naming it (does it read os.environ instead of its `environ` argument, or "
                "fall back to a default?)"
            )
        message = result["message"]
        if var not in message:
            raise CheckFailed(f"the error for a missing {var} does not name it: {result['error']}")
        if "torchrun" not in message.lower():
            raise CheckFailed(
                f"the error for a missing {var} should say to launch the script with torchrun: {result['error']}"
            )
