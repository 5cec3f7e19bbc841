"""Hidden checks of checks_training.py (instructor only: a student build leaves this module out)."""
from __future__ import annotations

from grader.exercises.ddp_basics.exercise import check
from grader.exercises.ddp_basics.checks_training import _shards_disjoint_and_covering, _check_training  # noqa: F401


@check("make_dataloader", points=0.5, hidden=True, world_size=3)
def dataloader_three_ranks_uneven(g):
    _shards_disjoint_and_covering(g, 20)  # 20 samples over 3 ranks: the sampler pads to 21


@check("train_one_epoch", points=1, hidden=True, world_size=3)
def training_matches_single_process_three_ranks(g):
    _check_training(g)
