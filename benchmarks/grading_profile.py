"""Where one submission's grading time goes (bench_grading.py prints it).

One submission of the assignment is graded by PROBE, a script that does what a grading worker does
(grading_worker.py) and records a timestamp after each phase: import torch and the public checks,
fork the forkserver, load the exercise (hidden checks too), read the notebook, three empty 2-rank
launches (the per-launch overhead), then every check, counting its launches. PROBE runs once plain
and once in the grading sandbox (sandbox.Sandbox, hidden modules readable: one run of every check):
the difference of their start-up is the sandbox's cost. launch_cpu() measures the CPU of an empty
launch from a forkserver in 4 KiB pages and from one in huge pages (engine/huge_pages.py). The
durations are measurements for the report only; no verdict depends on them.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

PROBE = r"""
import json, statistics, sys, time
t = [("start", time.perf_counter())]
def mark(name): t.append((name, time.perf_counter()))
from grader.engine import forked_forkserver, processes
from grader.exercises import find
processes.preload(find(sys.argv[1]).public)
for module in processes.PRELOAD: __import__(module)
mark("import torch, torch._dynamo and the public checks")
forked_forkserver.start_here()
mark("fork the forkserver")
from grader import grading
from grader.engine import run_distributed
from grader.exercises import get_exercise
from grader.runner import run_checks
from grader.submission import read_submission
exercise = get_exercise(sys.argv[1])
mark("load the exercise (hidden checks too)")
submission = read_submission(sys.argv[2])
mark("read the notebook")
def empty(ctx):
    return ctx.rank
launches = []
for _ in range(3):
    s = time.perf_counter(); run_distributed(empty, 2); launches.append(time.perf_counter() - s)
mark("3 empty 2-rank launches")
import grader.shared_runs as shared_runs
count = [0]
def counting(original):
    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)
    return counted
for module in (grading, shared_runs):  # the preflight's launch, and the checks' (those shared not counted)
    module.run_distributed = counting(module.run_distributed)
import os, resource
from multiprocessing import forkserver
def cpu():  # this process, and the ranks its forkserver has reaped
    own = resource.getrusage(resource.RUSAGE_SELF)
    with open(f"/proc/{forkserver._forkserver._forkserver_pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ranks = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime
    return own.ru_utime + own.ru_stime + ranks
before = cpu()
report = run_checks(exercise, submission)
mark("every check")
checks_cpu = cpu() - before
phases = [(name, round(b - a, 3)) for (_, a), (name, b) in zip(t, t[1:])]
print(json.dumps({"phases": phases, "launch": statistics.median(launches[1:]), "launches": count[0],
                  "checks": len(report.checks), "score": report.score, "checks_cpu": round(checks_cpu, 2)}))
"""


def probe(argv_of, assignment: str, notebook: str) -> dict:
    """Run PROBE through argv_of(argv) -> (argv, env); its phases, plus the process start-up as the
    parent saw it (from Popen to PROBE's first timestamp is not measurable across a sandbox: the
    start-up is the parent's wall time minus the sum of PROBE's phases)."""
    argv, env = argv_of([sys.executable, "-c", PROBE, assignment, notebook])
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"the grading profile failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["startup"] = wall - sum(s for _, s in out["phases"])
    out["wall"] = wall
    return out


def breakdown(assignment: str, notebook: str, sandboxed: bool) -> tuple[list[str], float]:
    """The profile's lines: one submission, plain and (if bwrap is there) sandboxed; and the CPU-seconds its
    checks took, plain (the grader process and its ranks)."""
    from grader.isolation import sandbox

    kinds = {"plain": lambda argv: (argv, None)}
    if sandboxed:
        kinds["sandboxed"] = lambda argv: (lambda box: (box.argv, box.env))(sandbox.Sandbox(argv, notebook, False, 1))
        notebook_in = {"plain": notebook, "sandboxed": sandbox.SUBMISSION}
    else:
        notebook_in = {"plain": notebook}
    lines = [f"where one submission's grading time goes ({assignment}, wall seconds, one worker, every check):"]
    runs = {kind: probe(fn, assignment, notebook_in[kind]) for kind, fn in kinds.items()}
    names = [name for name, _ in runs["plain"]["phases"]]
    lines.append(f"  {'phase':<52}" + "".join(f"{kind:>11}" for kind in runs))
    rows = [("process start (python; the sandbox: bwrap, setpriv)", {k: r["startup"] for k, r in runs.items()})]
    rows += [(name, {k: dict(r["phases"])[name] for k, r in runs.items()}) for name in names]
    for name, by_kind in rows:
        lines.append(f"  {name:<52}" + "".join(f"{by_kind[k]:>11.2f}" for k in runs))
    for kind, r in runs.items():
        own = dict(r["phases"])["every check"] - r["launches"] * r["launch"]
        lines.append(
            f"  {kind}: {r['checks']} checks in {r['launches']} launches; one empty 2-rank launch "
            f"{r['launch']:.3f} s, so launches ~{r['launches'] * r['launch']:.1f} s and the checks' "
            f"own work (references, student code) ~{own:.1f} s; score {r['score']:g}; every check took "
            f"{r['checks_cpu']:.1f} CPU-s (this process and its ranks)"
        )
    lines += launch_cpu(assignment)
    if sandboxed:
        from grader.isolation.nursery_client import NURSERY_ENV

        cold, jobs = nursery_startup(assignment)
        lines.append(
            f"  with nurseries ({NURSERY_ENV}=1): the cold start above (sandbox, python, torch, the public "
            f"checks) is paid once per phase per run ({cold:.2f} s to the first job's result here); a "
            f"submission's phase then costs a fork from the warm nursery: dispatch to the result of a job "
            f"with nothing to grade {min(jobs):.2f} s (median {statistics.median(jobs):.2f} s of {len(jobs)}: "
            f"fork, namespaces, tmpfs, /proc, the forkserver, loading the exercise)"
        )
    return lines, runs["plain"]["checks_cpu"]


LAUNCH_CPU = r"""
import os, sys, resource
from grader.engine import forked_forkserver, processes, run_distributed
from grader.exercises import find
processes.preload(find(sys.argv[1]).public)
forked_forkserver.start_here(huge_pages=sys.argv[2] == "huge")
from multiprocessing import forkserver
def cpu():  # the forkserver (it pays each fork) and the ranks it reaped: user, system
    with open(f"/proc/{forkserver._forkserver._forkserver_pid}/stat") as f:
        fields = [int(v) for v in f.read().rsplit(")", 1)[1].split()[11:15]]
    hz = os.sysconf("SC_CLK_TCK")
    return (fields[0] + fields[2]) / hz, (fields[1] + fields[3]) / hz
def empty(ctx):
    return ctx.rank
run_distributed(empty, 2)
before = cpu()
for _ in range(int(sys.argv[3])):
    run_distributed(empty, 2)
print(*(b - a for a, b in zip(before, cpu())))
"""


def launch_cpu(assignment: str, launches: int = 30, rounds: int = 3) -> list[str]:
    """CPU of one empty 2-rank launch (ranks and forkserver), from a forkserver in 4 KiB pages and from one in huge
    pages: `rounds` fresh forkservers of each kind, taken in turn, the median round of each."""
    cost = {"plain": [], "huge": []}
    for _ in range(rounds):
        for pages in cost:
            out = subprocess.run(
                [sys.executable, "-c", LAUNCH_CPU, assignment, pages, str(launches)],
                capture_output=True,
                text=True,
                timeout=600,
                check=True,
            ).stdout.split()
            cost[pages].append([1000 * float(v) / launches for v in out])
    (user, system), (huge_user, huge_system) = (sorted(cost[p], key=sum)[rounds // 2] for p in ("plain", "huge"))
    return [
        f"one empty 2-rank launch costs {user + system:.0f} CPU-ms ({system:.0f} in the kernel: forks, page faults, "
        f"exits) from a forkserver in 4 KiB pages, {huge_user + huge_system:.0f} CPU-ms ({huge_system:.0f}) from one "
        f"in huge pages (engine/huge_pages.py: nurseries and --no-sandbox workers); the median of {rounds} "
        f"forkservers of each, {launches} launches each"
    ]


def ceiling(checks_cpu: float, cores: int, nbgrader_per_submission: float, target: float) -> list[str]:
    """What the checks' own CPU allows: run on every core at once, one submission's checks still need
    checks_cpu / cores seconds, so no grading of the same checks beats plain nbgrader by more than that ratio."""
    best = checks_cpu / cores
    return [
        f"ceiling: one submission's checks take {checks_cpu:.1f} CPU-s (the same checks plain nbgrader runs in its "
        f"kernel); on {cores} cores they need at least {best:.2f} s per submission, so make grade is at most "
        f"{nbgrader_per_submission / best:.1f}x plain nbgrader ({nbgrader_per_submission:.1f} s per submission) "
        f"before it pays anything else (workers, sandboxes, the gradebook); {target:g}x needs the checks under "
        f"{nbgrader_per_submission * cores / target:.1f} CPU-s per submission, everything else included"
    ]


def nursery_startup(assignment: str, runs: int = 5) -> tuple[float, list[float]]:
    """Wall seconds from starting a public-phase nursery to its first job's result, then per job in the warm
    nursery: jobs with no submission (graded as unreadable at once), so only the per-job start is measured."""
    from grader.code_digest import grader_digest
    from grader.isolation.nursery_client import Nursery

    def one(nursery) -> float:
        start = time.perf_counter()
        proc = nursery.start(None)
        proc.stdin.write("\t".join(["nobody", "", "nothing.ipynb", "token", "public", "{}"]) + "\n")
        proc.stdin.close()
        line = proc.stdout.readline()
        proc.wait(timeout=60)
        if not line.startswith("token\t"):
            raise RuntimeError("a nursery job gave no result")
        return time.perf_counter() - start

    start = time.perf_counter()
    nursery = Nursery([assignment, "--version", grader_digest(assignment)], True, 1)
    try:
        one(nursery)
        cold = time.perf_counter() - start
        return cold, [one(nursery) for _ in range(runs)]
    finally:
        nursery.close()
