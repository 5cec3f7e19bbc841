"""The 04_torchrun exercise: its tasks and settings (the checks register in checks_*.py)."""
from grader.checks import Exercise

# Its checks start real torchrun agents (seconds of CPU each): one at a time, and not held
# to the notebook benchmark's one-second target.
EXERCISE = Exercise("04_torchrun", tasks=["read_dist_env", "torchrun_command", "train_script"],
                    side_by_side=False, judged_by_bench=False)
