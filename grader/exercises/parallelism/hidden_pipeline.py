"""Hidden checks of checks_pipeline.py (instructor only: a student build leaves this module out)."""

from __future__ import annotations

from grader.exercises.parallelism import EXERCISE
from grader.exercises.parallelism.checks_pipeline import _run_pipeline, _check_pipeline_loss, _check_pipeline_grads  # noqa: F401


@EXERCISE.check(
    "pipeline_step",
    points=1,
    hidden=True,
    world_size=2,
    depends_on=("pipeline_loss_matches", "pipeline_gradients_match"),
)
def pipeline_3d_activation_cross_entropy(g):
    """A non-contiguous 3-D activation (6, 3, 5) that rank 1's stage cannot reveal, CrossEntropyLoss with class targets."""
    per_rank, expected = _run_pipeline(g, "sequence", 6)
    _check_pipeline_loss(g, per_rank, expected, "sequence", 6)
    _check_pipeline_grads(g, per_rank, expected, "sequence", 6)


@EXERCISE.check(
    "pipeline_step",
    points=1,
    hidden=True,
    world_size=2,
    depends_on=("pipeline_loss_matches", "pipeline_gradients_match"),
)
def pipeline_other_batch_sizes(g):
    """Batches of 3 (MSELoss) and 1 sample (MSELoss with reduction='sum')."""
    for kind, n in (("mlp", 3), ("mlp_sum", 1)):
        per_rank, expected = _run_pipeline(g, kind, n)
        _check_pipeline_loss(g, per_rank, expected, kind, n)
        _check_pipeline_grads(g, per_rank, expected, kind, n)
