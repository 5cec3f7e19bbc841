"""Checks of exercise 01_parallelism: the core of data, tensor and pipeline
parallelism, built by hand, each run in real processes and compared with a
single-process reference (reference.py).

    checks_core.py         shard_indices, average_gradients, ring_all_reduce (here)
    checks_tensor.py       ColumnParallelLinear
    checks_dtensor.py      parallelize_mlp (DeviceMesh and DTensor: column-then-row, collectives counted)
    checks_pipeline.py     pipeline_step; pipeline_diagnosis.py names a failed pipeline's likely mistake
    checks_schedule.py     pipeline_schedule (interleaved 1F1B, 2 stages per rank: gradients, losses;
                           stage_watch.py: the stages and layers each rank ran and what it sent;
                           schedule_traffic.py: those against one process, in interleaved.py's order)
    checks_experts.py      moe_layer (expert parallelism: tokens to their experts by all-to-all and back;
                           all_to_all_watch.py: what each all-to-all carried; expert_traffic.py: that against
                           the routing; expert_setting.py: the experts, the routing and one process)
    checks_context.py      ring_attention (causal attention over one sequence block per rank: the key/value blocks
                           sent around the ring, the output against one process, the bytes held; causal_blocks.py)

Helpers of the checks: host_copy.py (tensors a rank sends back), p2p_only.py (collectives forbidden, point-to-point
traffic counted).

This file declares the exercise; its checks_*.py and hidden_*.py modules are found by
grader.exercises.discover() (the contract is in grader/exercises/__init__.py).
"""

from grader.checks import Exercise

EXERCISE = Exercise(
    "01_parallelism",
    tasks=[
        "shard_indices",
        "average_gradients",
        "ring_all_reduce",
        "ColumnParallelLinear",
        "parallelize_mlp",
        "pipeline_step",
        "pipeline_schedule",
        "moe_layer",
        "ring_attention",
    ],
)
check = EXERCISE.check
