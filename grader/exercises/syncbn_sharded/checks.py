"""Checks of exercise 03_syncbn_sharded (lesson: lessons/03_syncbn_and_sharded_state.ipynb).

    checks_syncbn.py      convert_to_sync_bn, global_batch_stats
    checks_batchnorm.py   DistributedBatchNorm
    checks_sharding.py    partition_parameters, ShardedOptimizer
    checks_fsdp.py        MiniFSDP (FSDP by hand)
    checks_checkpoint.py  save_sharded_checkpoint
    checks_reshard.py     save_and_reshard, load_resharded (DCP with FSDP2)
"""
# Imported in the notebook's order: each module registers its checks with EXERCISE.
from grader.exercises.syncbn_sharded import checks_syncbn  # noqa: F401, I001
from grader.exercises.syncbn_sharded import checks_batchnorm  # noqa: F401
from grader.exercises.syncbn_sharded import checks_sharding  # noqa: F401
from grader.exercises.syncbn_sharded import checks_fsdp  # noqa: F401
from grader.exercises.syncbn_sharded import checks_checkpoint  # noqa: F401
from grader.exercises.syncbn_sharded import checks_reshard  # noqa: F401
from grader.exercises.syncbn_sharded.exercise import EXERCISE
from grader.exercises.instructor import load_hidden

load_hidden(EXERCISE, __package__, ["hidden_syncbn", "hidden_batchnorm", "hidden_sharding", "hidden_fsdp", "hidden_checkpoint",
                                    "hidden_reshard"])

__all__ = ["EXERCISE"]
