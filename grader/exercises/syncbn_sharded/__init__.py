"""Checks of exercise 03_syncbn_sharded (lesson: lessons/lesson_03_syncbn_and_sharded_state.ipynb).

    checks_syncbn.py      convert_to_sync_bn, global_batch_stats
    checks_batchnorm.py   DistributedBatchNorm
    checks_sharding.py    partition_parameters, ShardedOptimizer
    checks_fsdp.py        MiniFSDP (FSDP by hand)
    checks_sharded_checkpoint.py save_sharded_checkpoint
    checks_reshard.py     save_and_reshard, load_resharded (DCP with FSDP2, Adam, an LR warm-up and the step:
                          resumed exactly on another world size; reshard_training.py: that training)
    checks_fsdp2_build.py build_fsdp2_model (FSDP2 in practice: a tied model, units from a budget)
    checks_fsdp2.py       train_step_fsdp2
    checks_fsdp2_state.py export_full_state (FSDP2's full state on rank 0)
    checks_activation_checkpointing.py checkpoint_activations (selective activation checkpointing, from a budget;
                          checkpoint_budget.py: the budget's arithmetic and the miscounts it names)
    checks_memory_plan.py plan_memory (per-rank bytes of DDP, ZeRO-1, FSDP2, in fp32 and in bf16 with fp32 master
                          copies; which strategy fits a budget; memory_plan.py measures, master_weights.py is the
                          mixed-precision optimizer, memory_mistakes.py names the usual miscounts)
    checks_hsdp.py        build_hsdp_model (HSDP: FSDP2 on a 2-D mesh from a machine description;
                          hsdp_groups.py: the groups each collective ran on, against the nodes)
    checks_step_time.py   plan_layout (the α-β step time and MFU of (dp, tp, pp) layouts; the fastest that fits;
                          step_time_expected.py: the model's numbers, stored; step_time_mistakes.py:
                          the mistakes it names; hidden_step_time_model.py: the model)

Helpers of the checks: scaled_closeness.py (comparisons under the runs' backend), fsdp2_model.py (the model the FSDP2 tasks
shard), fsdp2_probe.py (which full-size tensors a call allocated), fsdp_memory.py, fsdp_traffic.py and
fsdp_reference.py (MiniFSDP: freed parameters and the memory probe's run, what was communicated, the unsharded
training every run must reproduce), live_bytes.py (peak bytes alive, by what exists), reshard_metadata.py
(what a DCP checkpoint lacks, from its metadata).

This file declares the exercise; its checks_*.py and hidden_*.py modules are found by
grader.exercises.discover() (the contract is in grader/exercises/__init__.py).
"""

from grader.checks import Exercise

EXERCISE = Exercise(
    "03_syncbn_sharded",
    tasks=[
        "convert_to_sync_bn",
        "global_batch_stats",
        "DistributedBatchNorm",
        "partition_parameters",
        "ShardedOptimizer",
        "MiniFSDP",
        "save_sharded_checkpoint",
        "save_and_reshard",
        "load_resharded",
        "build_fsdp2_model",
        "train_step_fsdp2",
        "export_full_state",
        "checkpoint_activations",
        "plan_memory",
        "build_hsdp_model",
        "plan_layout",
    ],
)
check = EXERCISE.check
