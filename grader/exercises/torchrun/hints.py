"""Hints of exercise 04_torchrun: hint("task") reveals them one by one (grader/notebook/hints.py).

Each ladder goes from a nudge to the key API, never to the answer's code
(tests/test_hints.py compares every hint with the solution cells).
"""

HINTS = {
    "read_dist_env": [
        "Every value is a string in `environ`; the dataclass wants ints for all fields but `master_addr`. Write "
        "one small helper that reads a required variable, so the error message is written once.",
        "The helper checks `name in environ` and raises `RuntimeError` with a message naming the variable and "
        "saying to launch with torchrun; otherwise it returns `environ[name]`. Wrap the integer fields in `int()`.",
        '`TORCHELASTIC_RESTART_COUNT` is optional: `environ.get(name, "0")` gives a default for it only. Do not '
        "mix up `RANK` (the whole job) and `LOCAL_RANK` (this node).",
    ],
    "torchrun_command": [
        "Build a list of strings in three parts: the launcher (this Python with `-m torch.distributed.run`), "
        "torchrun's options, and the script last.",
        "`sys.executable` is this Python. Options as single strings with an `=`, e.g. an f-string "
        "`--nnodes=...`; numbers converted to text by the f-string.",
        "Without an endpoint: `--standalone`, and `ValueError` when there is more than one node. With one: the "
        "c10d rendezvous backend, the endpoint and the node rank (`--rdzv-backend`, `--rdzv-endpoint`, "
        "`--node-rank`), and no `--standalone`.",
    ],
    "train_script": [
        "Write and run the script outside the notebook first (the optional cell in the task shows how); add the "
        "snapshot only once plain training works. Parse the five options with `argparse` "
        "(`--epoch-log` becomes `args.epoch_log`).",
        'Resume before wrapping: load the snapshot (`torch.load(..., map_location="cpu")`) into the plain model and '
        "the optimizer on every rank when the file exists, take `epochs_run` and `batches_run` from it, then wrap "
        "in DDP. Loop over the epochs from `epochs_run` up to `args.epochs`, give the sampler the true epoch number "
        "first, and in the resumed epoch skip its first `batches_run` batches (`itertools.islice(loader, "
        "batches_run, None)`).",
        "Only `dist.get_rank() == 0` writes: `torch.save` to a temporary file next to the "
        "snapshot, then `os.replace` it over the snapshot, after every `--snapshot-every` steps and at each epoch's "
        "end, where it then appends the epoch line to the log. At the end rank 0 saves the "
        "plain model's state_dict to `--out`; every rank then calls `dist.barrier` and "
        "`dist.destroy_process_group`. The checkpoints: `dcp.async_save` hands back a future at once; keep it in a "
        "variable that outlives the epoch and ask where else the script must wait for it. Which process group "
        "would its background collectives share with DDP's, and how do you avoid that?",
    ],
    "diagnose_hang": [
        '"Behind" is measured in collectives, not in entries or states: every rank numbers the collectives it '
        "calls 1, 2, 3, ... in call order, so one number is the same call on every rank. How far did each rank "
        "get, in those numbers? Print it for the notebook's example first.",
        "Compare the ranks by their newest entries (a list is oldest first, and the ring buffer drops old entries, "
        "so its length says nothing). Which way points to the rank the others wait for, given that with NCCL a "
        "waiting rank may have queued a few more collectives? And how far did a rank with no entries get?",
        "The collective the rank behind never called is not in its own dump: which number would it have had "
        "there, and which ranks recorded a call with that number? Its name is the one they recorded, unchanged.",
    ],
}

# The hint of the check that failed: hint(task) shows it first, once per failure, then the task's ladder
# (grader/notebook/hints.py). Each public check carries one; it names the mistake's idea, not the code.
CHECK_HINTS = {
    "read_dist_env_on_torchrun_workers": (
        "Read every value from the mapping you are given, not from the process's own environment, and keep "
        "`RANK` (the whole job) apart from `LOCAL_RANK` (this node); all but the address are integers."
    ),
    "read_dist_env_names_a_missing_variable": (
        "When a variable is missing, raise an error that names it and says to launch with torchrun, instead of "
        "letting a bare `KeyError` escape."
    ),
    "torchrun_command_runs_one_node": (
        "The command must start torchrun with this very Python, give one option per list item, and end with the "
        "script; one node without an endpoint needs the standalone rendezvous."
    ),
    "train_script_matches_single_process": (
        "Run the plain training first: each rank its share of every global batch, the sampler told the epoch, "
        "the log written once per epoch by rank 0, the final model saved without DDP's prefix."
    ),
    "train_script_resumes_after_a_killed_worker": (
        "After a restart every rank must load the snapshot before wrapping the model and continue in the epoch "
        "where the kill happened, not from the start."
    ),
    "train_script_resumes_mid_epoch": (
        "The snapshot must say how many batches of its epoch were done, be taken often enough, and the restart "
        "must skip exactly those batches of that epoch."
    ),
    "train_script_checkpoints_while_training_goes_on": (
        "The asynchronous save returns at once: let training go on, and wait for its result only where the next "
        "save or the end of the script needs it; its collectives need a process group of their own."
    ),
    "diagnose_hang_names_the_rank_behind": (
        "Compare each rank's newest entry: is the rank the others wait for the one that got furthest, or the one "
        "that got least far? Its missing collective is the one the others recorded after its last."
    ),
}
