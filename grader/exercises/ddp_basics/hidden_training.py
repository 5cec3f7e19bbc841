"""Hidden checks of checks_training.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.ddp_basics import EXERCISE
from grader.exercises.ddp_basics.checks_training import (
    _check_training,
    _in_rank_loader,
    _in_rank_train,
    _shards_disjoint_and_covering,
)

# The hidden checks' runs of one submission share a launch (grader/shared_runs.py: no verdict changes).
EXERCISE.declare_runs("make_dataloader", ((_in_rank_loader, (20, 3, 0)),), hidden=True, world_size=3)
EXERCISE.declare_runs("train_one_epoch", ((_in_rank_train, ()),), hidden=True, world_size=3)


# make selfcheck grades the solution with this line replaced: its task must score less than full marks.
EXERCISE.typical_mistakes.append(("loader.sampler.set_epoch(epoch)", "pass  # no set_epoch"))


@EXERCISE.check(
    "make_dataloader",
    points=0.5,
    hidden=True,
    world_size=3,
    depends_on=("dataloader_shards_disjoint_and_cover",),
)
def dataloader_three_ranks_uneven(g):
    _shards_disjoint_and_covering(g, 20)  # 20 samples over 3 ranks: the sampler pads to 21


@EXERCISE.check(
    "train_one_epoch",
    points=1,
    hidden=True,
    world_size=3,
    depends_on=("train_calls_set_epoch", "training_matches_single_process"),
)
def training_matches_single_process_three_ranks(g):
    _check_training(g)
