"""Hidden check of checks_hsdp.py (instructor only): nodes [0, 2] and [1, 3], another seed and width."""

from __future__ import annotations

from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.checks_hsdp import SPEC, run_hsdp, verify_step
from grader.exercises.syncbn_sharded.hsdp_groups import verify_groups

# Interleaved nodes whose replicate pairs (0-1, 2-3) are init_device_mesh's shard pairs: rank order fails here.
OTHER = SPEC | {"nodes": ((0, 2), (1, 3)), "width": 12, "depth": 2, "seed": 9}

# make selfcheck's mistake for this task: the nodes' ranks left in the order given.
EXERCISE.typical_mistakes.append(
    (
        "layout = torch.tensor([sorted(node) for node in nodes], dtype=torch.int)",
        "layout = torch.tensor(nodes, dtype=torch.int)",
    )
)


@EXERCISE.check(
    "build_hsdp_model",
    points=1,
    hidden=True,
    world_size=4,
    depends_on=("hsdp_groups_follow_the_nodes", "hsdp_step_matches_one_process"),
)
def hsdp_with_interleaved_nodes(g):
    """Nodes [0, 2] and [1, 3]: the groups follow them, and one step equals one process's."""
    results = run_hsdp(g, OTHER)
    verify_groups(results, OTHER["nodes"])
    verify_step(g, results, OTHER)
