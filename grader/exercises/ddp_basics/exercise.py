"""The exercise 02_ddp_basics itself: its tasks, in the notebook's order (checks_*.py register the checks)."""
from grader.checks import Exercise

EXERCISE = Exercise(
    "02_ddp_basics",
    tasks=["pick_backend", "pick_device", "setup", "cleanup", "wrap_model", "make_dataloader",
           "train_one_epoch", "save_checkpoint", "load_checkpoint", "MiniDDP",
           "train_with_accumulation", "train_uneven", "BucketedDDP"],
)
check = EXERCISE.check
