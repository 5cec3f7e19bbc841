"""The exercise 01_parallelism itself: its tasks, in the notebook's order (the checks modules register the checks)."""
from grader.checks import Exercise

EXERCISE = Exercise(
    "01_parallelism",
    tasks=["shard_indices", "average_gradients", "ring_all_reduce", "ColumnParallelLinear", "pipeline_step"],
)
