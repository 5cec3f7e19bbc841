"""Sandboxed grading starts the next job's worker while the others grade, and feeds it only when a slot frees.

Stand-in workers (plain Python, no torch, no bwrap) log what they do to one file. The first two jobs' workers
(jobs=2) finish only once they see a third worker started (bounded wait): without the early start the
third worker would start after one of them, and the test fails instead of waiting forever."""

import os
import sys
import types

from grader.isolation.worker_pool import Job, Workers, run_pool

WORKER = r"""
import json, os, sys, time
log = sys.argv[1]
def event(text):
    with open(log, "a") as f:
        f.write(text + "\n")
def events():
    with open(log) as f:
        return f.read().split("\n")
event(f"start {os.getpid()}")
line = sys.stdin.readline()
if not line:
    sys.exit(0)
student, _, _, token, phase, _ = line.rstrip("\n").split("\t")
event(f"job {student}")
if student in ("s0", "s1"):  # the first two jobs: wait until a third worker has started (the early one)
    deadline = time.monotonic() + 60
    while sum(e.startswith("start") for e in events()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
event(f"done {student}")
print(token + "\t" + json.dumps({"student": student, "phase": phase}), flush=True)
"""


def test_next_worker_starts_early_and_gets_its_job_when_a_slot_frees(tmp_path):
    log = tmp_path / "log"
    log.write_text("")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    box = lambda argv, job: types.SimpleNamespace(
        argv=[sys.executable, str(script), str(log)],  # noqa: E731
        env=dict(os.environ),
    )
    queue = [Job(f"s{i}", None, f"s{i}.ipynb", "public") for i in range(4)]
    done = []
    run_pool(
        queue,
        Workers([], box),
        2,
        lambda job, result: done.append(result["student"]) or True,
        lambda student, why: done.append(f"stray {student}: {why}"),
        lambda suspects: None,
        False,
        4,
        "test",
    )
    assert sorted(done) == ["s0", "s1", "s2", "s3"], done
    lines = log.read_text().splitlines()
    first_done = min(lines.index("done s0"), lines.index("done s1"))
    assert sum(e.startswith("start") for e in lines[:first_done]) >= 3, lines  # started before a slot freed
    in_flight, most = set(), 0
    for line in lines:  # never more than `jobs` submissions graded at once
        kind, _, who = line.partition(" ")
        if kind == "job":
            in_flight.add(who)
        elif kind == "done":
            in_flight.discard(who)
        most = max(most, len(in_flight))
    assert most <= 2, lines
