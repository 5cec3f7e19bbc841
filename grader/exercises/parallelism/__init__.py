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
    ],
)
check = EXERCISE.check
