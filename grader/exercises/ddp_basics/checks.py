"""Checks of exercise 02_ddp_basics (lesson: lessons/02_ddp_basics.ipynb).

Each check runs the student's task in real ranks (world size 2; the hidden
ones also 3) and compares with a single-process reference from reference.py.
Expectations about the hardware come from the ranks' own context (ctx.backend,
ctx.device: the run's hardware plan), never from the grader's torch.cuda.

    checks_group.py     pick_backend, pick_device, setup, cleanup
    checks_training.py  wrap_model, make_dataloader, train_one_epoch
    checks_state.py     save_checkpoint, load_checkpoint, MiniDDP
    checks_practice.py  train_with_accumulation, train_uneven
    checks_bucketed.py  BucketedDDP
"""
# Imported in the notebook's order: each module registers its checks with EXERCISE.
from grader.exercises.ddp_basics import checks_group  # noqa: F401, I001
from grader.exercises.ddp_basics import checks_training  # noqa: F401
from grader.exercises.ddp_basics import checks_state  # noqa: F401
from grader.exercises.ddp_basics import checks_practice  # noqa: F401
from grader.exercises.ddp_basics import checks_bucketed  # noqa: F401
from grader.exercises.ddp_basics.exercise import EXERCISE
from grader.exercises.instructor import load_hidden

load_hidden(EXERCISE, __package__, ["hidden_training", "hidden_state", "hidden_bucketed"])

__all__ = ["EXERCISE"]
