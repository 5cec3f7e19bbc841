"""Hidden checks of checks_reshard.py, and the grader's own DCP save and load (instructor only: the reference
is the answer, so a student build leaves this module out). Each student function is crossed with the
reference counterpart, between world sizes 2 and 3."""

from __future__ import annotations

from grader.exercises.syncbn_sharded.checks_reshard import round_trip
from grader.exercises.syncbn_sharded import EXERCISE


def reference_save(model, optimizer, path: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)


def reference_load(model, optimizer, path: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


@EXERCISE.check(
    "save_and_reshard", points=1, hidden=True, world_size=3, depends_on=("checkpoint_has_every_shard_and_adam_state",)
)
def your_save_by_two_loaded_by_three(g):
    """Saved by your function on 2 ranks, loaded by the grader's on 3: training continues exactly."""
    round_trip(g, 2, 3, load=reference_load)


@EXERCISE.check(
    "save_and_reshard", points=1, hidden=True, world_size=3, depends_on=("checkpoint_has_every_shard_and_adam_state",)
)
def your_save_by_three_loaded_by_two(g):
    """Saved by your function on 3 ranks, loaded by the grader's on 2."""
    round_trip(g, 3, 2, load=reference_load)


@EXERCISE.check(
    "load_resharded",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("saved_by_two_loaded_by_three_continues", "saved_by_two_loaded_by_one_continues"),
)
def reference_save_by_two_your_load_by_three(g):
    """Saved by the grader on 2 ranks, loaded by your function on 3: training continues exactly."""
    round_trip(g, 2, 3, save=reference_save)


@EXERCISE.check(
    "load_resharded",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("saved_by_two_loaded_by_three_continues", "saved_by_two_loaded_by_one_continues"),
)
def reference_save_by_three_your_load_by_two(g):
    """Saved by the grader on 3 ranks, loaded by your function on 2."""
    round_trip(g, 3, 2, save=reference_save)
