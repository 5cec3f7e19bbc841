"""Hidden checks of checks_command.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.torchrun import command, probe_runs
from grader.exercises.torchrun import EXERCISE
from grader.exercises.torchrun.checks_command import _call_torchrun_command, _check_ranks, built_commands


@EXERCISE.check("torchrun_command", points=1, hidden=True, depends_on=("torchrun_command_runs_one_node",))
def torchrun_command_runs_two_nodes(g):
    """torchrun_command(script, 1, nnodes=2, node_rank=0/1, rdzv_endpoint='127.0.0.1:PORT'): two
    agents started with these commands form one job of two workers. Without an endpoint,
    nnodes=2 raises ValueError."""
    with probe_runs.ProbeDir() as probe:

        def commands_for(endpoint: str) -> list[list[str]]:
            calls = [((probe.script, 1), {"nnodes": 2, "node_rank": i, "rdzv_endpoint": endpoint}) for i in range(2)]
            no_endpoint = [((probe.script, 1), {"nnodes": 2})]
            built = built_commands(g.run(_call_torchrun_command, calls, no_endpoint, world_size=1, init_group=False)[0])
            for i, (shown, cmd) in enumerate(built):
                command.check_static(shown, cmd, probe.script, 1, 2, i, endpoint, 0)
            return [cmd for _, cmd in built]

        output, timed_out = probe_runs.run_two_node_probe(commands_for, probe)
        _check_ranks(probe.records(), 2, output, timed_out, "the two node commands")


@EXERCISE.check("torchrun_command", points=1, hidden=True, depends_on=("torchrun_command_runs_one_node",))
def torchrun_command_restarts(g):
    """torchrun_command(script, 2, max_restarts=1): when a worker fails once, torchrun starts
    the group again (TORCHELASTIC_RESTART_COUNT 1)."""
    with probe_runs.ProbeDir() as probe:
        ((shown, cmd),) = built_commands(
            g.run(_call_torchrun_command, [((probe.script, 2), {"max_restarts": 1})], world_size=1, init_group=False)[0]
        )
        command.check_static(shown, cmd, probe.script, 2, 1, 0, None, 1)
        output, timed_out = probe_runs.run_probe([cmd], probe, {"PROBE_FAIL_ONCE_RANK": "1"})
        _check_ranks(
            probe.records(), 2, output, timed_out, f"torchrun_command({shown}) with a worker failing once", attempts=2
        )
