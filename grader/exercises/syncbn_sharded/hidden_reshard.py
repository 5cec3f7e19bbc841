"""Hidden checks of checks_reshard.py, and the grader's own DCP save and load (instructor only: the reference
is the answer, so a student build leaves this module out). Each student function is crossed with the
reference counterpart, between world sizes 2 and 3, on another setting than the public checks': 4 steps before
the save, and a load into a model that FSDP2 shards at the root only (one unit, not one per layer)."""

from __future__ import annotations

from grader.exercises.syncbn_sharded.checks_reshard import round_trip
from grader.exercises.syncbn_sharded import EXERCISE

HIDDEN_STEPS = 4
# The typical mistakes: the lesson's save as it stands (model and optimizer only); the scheduler's state loaded
# into a copy (its state_dict()) that nothing reads back.
EXERCISE.typical_mistakes += [
    ('"optim": optim_state, "scheduler": scheduler.state_dict(), "step": step}', '"optim": optim_state}'),
    ('"scheduler": scheduler, "step": 0}', '"scheduler": scheduler.state_dict(), "step": 0}'),
]


def reference_save(model, optimizer, scheduler, step, path: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state, "scheduler": scheduler, "step": step}, checkpoint_id=path)


def reference_load(model, optimizer, scheduler, path: str) -> int:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    # a step saved as a tensor loads into a tensor, one saved as an int replaces the int
    saved_step = dcp.FileSystemReader(path).read_metadata().state_dict_metadata.get("step")
    step = torch.zeros((), dtype=torch.int64) if isinstance(saved_step, TensorStorageMetadata) else 0
    state = {"model": model_state, "optim": optim_state, "scheduler": scheduler.state_dict(), "step": step}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    scheduler.load_state_dict(state["scheduler"])
    return int(state["step"])


@EXERCISE.check(
    "save_and_reshard", points=1, hidden=True, world_size=3, depends_on=("checkpoint_has_every_shard_and_adam_state",)
)
def your_save_by_two_loaded_by_three(g):
    """Saved by your function on 2 ranks after 4 steps, loaded by the grader's on 3 into a model sharded at the
    root only: training continues exactly."""
    round_trip(g, 2, 3, load=reference_load, steps=HIDDEN_STEPS, per_layer=False)


@EXERCISE.check(
    "save_and_reshard", points=1, hidden=True, world_size=3, depends_on=("checkpoint_has_every_shard_and_adam_state",)
)
def your_save_by_three_loaded_by_two(g):
    """Saved by your function on 3 ranks after 4 steps, loaded by the grader's on 2 (sharded per layer)."""
    round_trip(g, 3, 2, load=reference_load, steps=HIDDEN_STEPS)


@EXERCISE.check(
    "load_resharded",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("saved_by_two_loaded_by_three_continues", "saved_by_two_loaded_by_one_continues"),
)
def reference_save_by_two_your_load_by_three(g):
    """Saved by the grader on 2 ranks after 4 steps, loaded by your function on 3 into a model sharded at the
    root only: training continues exactly."""
    round_trip(g, 2, 3, save=reference_save, steps=HIDDEN_STEPS, per_layer=False)


@EXERCISE.check(
    "load_resharded",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("saved_by_two_loaded_by_three_continues", "saved_by_two_loaded_by_one_continues"),
)
def reference_save_by_three_your_load_by_two(g):
    """Saved by the grader on 3 ranks after 4 steps, loaded by your function on 2."""
    round_trip(g, 3, 2, save=reference_save, steps=HIDDEN_STEPS)
