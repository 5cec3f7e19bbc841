"""Checks of exercise 02_ddp_basics (lesson: lessons/lesson_02_ddp_basics.ipynb).

Each check runs the student's task in real ranks (world size 2; the hidden
ones also 3) and compares with a single-process reference from reference.py.
Expectations about the hardware come from the ranks' own context (ctx.backend,
ctx.device: the run's hardware plan), never from the grader's torch.cuda.

    checks_group.py     pick_backend, pick_device, setup, cleanup
    checks_training.py  wrap_model, make_dataloader, train_one_epoch
    checks_state.py     save_checkpoint, load_checkpoint
    checks_mini_ddp.py  MiniDDP
    checks_practice.py  train_with_accumulation
    checks_uneven.py    train_uneven
    checks_bucketed.py  BucketedDDP (its ranks run bucketed_runs.py; bucketed_traffic.py judges the all-reduces)

Helpers of the checks: reference_practice.py (references and models of "DDP in practice"), simulated_cuda.py (the
student's code made to believe CUDA is, or is not, available).

This file declares the exercise; its checks_*.py and hidden_*.py modules are found by
grader.exercises.discover() (the contract is in grader/exercises/__init__.py).
"""

from grader.checks import Exercise

EXERCISE = Exercise(
    "02_ddp_basics",
    tasks=[
        "pick_backend",
        "pick_device",
        "setup",
        "cleanup",
        "wrap_model",
        "make_dataloader",
        "train_one_epoch",
        "save_checkpoint",
        "load_checkpoint",
        "MiniDDP",
        "train_with_accumulation",
        "train_uneven",
        "BucketedDDP",
    ],
)
check = EXERCISE.check
