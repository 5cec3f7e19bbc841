"""The exercise 03_syncbn_sharded itself: its tasks, in the notebook's order (checks_*.py register the checks)."""
from grader.checks import Exercise

EXERCISE = Exercise(
    "03_syncbn_sharded",
    tasks=["convert_to_sync_bn", "global_batch_stats", "DistributedBatchNorm", "partition_parameters",
           "ShardedOptimizer", "MiniFSDP", "save_sharded_checkpoint", "save_and_reshard", "load_resharded"],
)
check = EXERCISE.check
