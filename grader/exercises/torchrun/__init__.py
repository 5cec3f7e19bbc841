"""Checks of exercise 04_torchrun: launching jobs with torchrun (lessons/lesson_04_torchrun.ipynb).

Tasks, and the module that holds their checks:

    checks_env.py           read_dist_env(environ) -> DistEnv: checked on real torchrun workers against their
                            environment
    checks_command.py       torchrun_command(script, ...) -> list: checked by running the command it builds,
                            on loopback
    checks_script.py        train_script (source text): launched with real torchrun: 2 workers, a killed worker
                            with --max-restarts=1, two "nodes"
    checks_resume.py        train_script: a snapshot every --snapshot-every steps resumes at the same batch
    checks_script_async.py  train_script: its asynchronous checkpoints (torch.distributed.checkpoint, async_save)
    checks_diagnosis.py     diagnose_hang(dumps) -> tuple: checked on staged dumps of hung jobs (hangs.py), in
                            one rank

Student code (the functions, and `train_script` as a value) runs only in ranks
or in torchrun workers; the checks here run torchrun as subprocesses from the
parent side, each in a fresh directory, every wait bounded.

Helpers of the checks: command.py (reading a torchrun command line), script_runs.py (the training-script
scenarios), problem.py (the model, data and hyperparameters the script trains; the job imports it as `problem`),
probe_worker.py and probe_runs.py (the grader's own worker script and its runs), resumes.py (how far a snapshot
got), saves.py (what async_save calls say), dcp_load.py (loading the script's checkpoints at another world size),
grader_free_python.py (a Python for the student's job in which no grader module imports), output_evidence.py
(torchrun's output made into short evidence), torchrun_process.py (one torchrun job of the grader's: bounded,
killable, observable).

This file declares the exercise; its checks_*.py and hidden_*.py modules are found by
grader.exercises.discover() (the contract is in grader/exercises/__init__.py).
"""

from grader.checks import Exercise

# Its checks start real torchrun agents (seconds of CPU each): one at a time, and not held
# to the notebook benchmark's one-second target.
EXERCISE = Exercise(
    "04_torchrun",
    tasks=["read_dist_env", "torchrun_command", "train_script", "diagnose_hang"],
    side_by_side=False,
    judged_by_bench=False,
)
check = EXERCISE.check
