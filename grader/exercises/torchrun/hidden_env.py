"""Hidden checks of checks_env.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.checks import CheckFailed
from grader.exercises.torchrun import probe_runs
from grader.exercises.torchrun.hidden_reference import node_command
from grader.exercises.torchrun.probe_worker import FIELDS
from grader.exercises.torchrun import EXERCISE
from grader.exercises.torchrun.checks_env import (
    _expected_from,
    _compare,
    _check_probe_records,
    SAMPLE_ENV,
    _read_env_cases,
)  # noqa: F401


@EXERCISE.check(
    "read_dist_env",
    points=0.5,
    hidden=True,
    depends_on=("read_dist_env_on_torchrun_workers", "read_dist_env_names_a_missing_variable"),
)
def read_dist_env_on_two_nodes(g):
    """Two torchrun agents (--nnodes=2, one worker each) on 127.0.0.1: the worker of node 1
    has RANK 1 but LOCAL_RANK 0, WORLD_SIZE 2 but LOCAL_WORLD_SIZE 1."""
    with probe_runs.ProbeDir(g.submission) as probe:
        output, timed_out = probe_runs.run_two_node_probe(
            lambda endpoint: [node_command(probe.script, i, endpoint) for i in range(2)], probe
        )
        _check_probe_records(probe.records(), [(0, 0), (1, 0)], output, timed_out, "a 2-node run")


@EXERCISE.check(
    "read_dist_env",
    points=0.5,
    hidden=True,
    depends_on=("read_dist_env_on_torchrun_workers", "read_dist_env_names_a_missing_variable"),
)
def read_dist_env_reads_its_argument(g):
    """A mapping that is not os.environ (rank 5 of 8, restart 2) is read exactly, into a dataclass;
    without TORCHELASTIC_RESTART_COUNT (a plain launcher) restart_count is 0."""
    without_restarts = {k: v for k, v in SAMPLE_ENV.items() if k != "TORCHELASTIC_RESTART_COUNT"}
    results = g.run(_read_env_cases, [SAMPLE_ENV, without_restarts], world_size=1, init_group=False)[0]
    full, plain_launcher = results
    _compare(
        full,
        _expected_from(SAMPLE_ENV),
        SAMPLE_ENV,
        "for a mapping with RANK=5, WORLD_SIZE=8 (is os.environ read instead of the `environ` argument?)",
    )
    if not full.get("dataclass"):
        raise CheckFailed(
            f"read_dist_env returned a {full['returned']}; return a DistEnv dataclass "
            "(@dataclass with the fields " + ", ".join(FIELDS) + ")"
        )
    if "error" in plain_launcher:
        raise CheckFailed(
            "read_dist_env raised without TORCHELASTIC_RESTART_COUNT "
            f"({plain_launcher['error']}); a launcher other than torchrun does not set it: "
            "restart_count is then 0"
        )
    _compare(plain_launcher, _expected_from(without_restarts), without_restarts, "without TORCHELASTIC_RESTART_COUNT")
