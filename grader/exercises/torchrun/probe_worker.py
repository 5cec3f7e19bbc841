"""The grader's own worker script: what one torchrun worker sees (04_torchrun).

    torchrun ... probe_worker.py OUTDIR [SUBMISSION.pkl]

The grader copies this file into a fresh directory and launches it. Each
worker writes OUTDIR/rank<RANK>-attempt<TORCHELASTIC_RESTART_COUNT>.json with
the torchrun variables of its environment and, when a pickled submission is
given, what the student's read_dist_env(os.environ) returned (or raised).

With PROBE_FAIL_ONCE_RANK=R in the environment, rank R exits with code 3 on
the first attempt, after every worker of that attempt has written its file,
so that torchrun restarts the group (--max-restarts).
"""

import json
import os
import sys
import time
import traceback

VARS = [
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
    "TORCHELASTIC_RESTART_COUNT",
]
FIELDS = ["rank", "local_rank", "world_size", "local_world_size", "master_addr", "master_port", "restart_count"]
MISSING = "<missing>"


def _describe(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return {"value": value, "type": type(value).__name__}
    return {"value": repr(value)[:200], "type": type(value).__name__}


def student_answer(submission_path):
    import cloudpickle

    with open(submission_path, "rb") as f:
        submission = cloudpickle.load(f)
    namespace, report = submission.load()
    fn = getattr(namespace, "read_dist_env", None)
    if fn is None:
        return {
            "error": "read_dist_env is not defined in your answers"
            + ("; " + "; ".join(report.problems) if report.problems else "")
        }
    try:
        result = fn(os.environ)
    except BaseException as exc:  # the student's error, reported, not fatal to the probe
        return {"error": "".join(traceback.format_exception_only(type(exc), exc)).strip()}
    return describe_result(result)


def describe_result(result):
    """The DistEnv fields of `result`, JSON-ready (also used by the checks' own calls)."""
    fields = {
        f: _describe(getattr(result, f)) if hasattr(result, f) else {"value": MISSING, "type": "missing"}
        for f in FIELDS
    }
    return {"fields": fields, "returned": type(result).__name__}


def main():
    outdir = sys.argv[1]
    record = {"env": {v: os.environ.get(v) for v in VARS}, "pid": os.getpid()}
    if len(sys.argv) > 2:
        record["answer"] = student_answer(sys.argv[2])
    name = f"rank{os.environ['RANK']}-attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}.json"
    tmp = os.path.join(outdir, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(outdir, name))  # the grader never reads a half-written file

    fail_rank = os.environ.get("PROBE_FAIL_ONCE_RANK")
    if fail_rank == os.environ["RANK"] and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        # Let the other workers of this attempt write their files first (bounded wait).
        world = int(os.environ["WORLD_SIZE"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            done = [n for n in os.listdir(outdir) if n.endswith("-attempt0.json")]
            if len(done) >= world:
                break
            time.sleep(0.05)
        sys.exit(3)


if __name__ == "__main__":
    main()
