"""The grading worker's forkserver is a fork of the worker (engine/forked_forkserver.py): ranks come
from it, and they inherit neither the hidden checks the worker loads afterwards nor its result pipe."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = """
import json, os, sys
from multiprocessing import forkserver
from grader.engine import forked_forkserver, processes, run_distributed
from grader.exercises import find, get_exercise

result_pipe = os.readlink("/proc/self/fd/1")  # the worker's stdout: its result channel to the grader
processes.preload(find("02_ddp_basics").public)
started = forked_forkserver.start_here()
get_exercise("02_ddp_basics")  # the worker loads the hidden checks only now
hidden = list(find("02_ddp_basics").hidden)

def probe(ctx, hidden, public):
    import os, sys
    fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}")]
    return {"parent": os.getppid(), "hidden": [m for m in hidden if m in sys.modules],
            "public": [m for m in public if m in sys.modules], "fds": fds}

run = run_distributed(probe, 2, (hidden, list(find("02_ddp_basics").public)), trusted=True)
print(json.dumps({"started": started, "server": forkserver._forkserver._forkserver_pid, "worker_hidden":
                  [m for m in hidden if m in sys.modules], "pipe": result_pipe, "ranks": run.values}))
"""


def test_ranks_come_from_the_forked_server_without_hidden_modules_or_the_result_pipe():
    proc = subprocess.run([sys.executable, "-c", WORKER], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["started"], "start_here() did not fork a forkserver"
    assert out["worker_hidden"], "the worker itself should have loaded the hidden checks (the probe is void)"
    assert len(out["ranks"]) == 2
    for rank in out["ranks"]:
        assert rank["parent"] == out["server"], "a rank was not forked from the forked forkserver"
        assert rank["hidden"] == [], f"a rank has hidden check modules loaded: {rank['hidden']}"
        assert rank["public"], "the public check modules were not preloaded in the forkserver"
        assert out["pipe"] not in rank["fds"], "a rank holds the worker's result pipe"
