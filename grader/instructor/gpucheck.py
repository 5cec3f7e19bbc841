"""python -m grader gpucheck (make gpucheck): does the course's GPU path work on THIS machine? One verdict a line.

    ok   driver, CUDA and NCCL: driver 12080, CUDA 12.8, NCCL 2.27.3, 8 GPUs
    ok   fork safety (unsandboxed): no grader process called CUDA before forking ranks
    --   nccl runs (unsandboxed): no GPU (not run)

Steps: versions; facts (gpucheck_facts.py: first-use times, a rank's host memory, a CPU tensor's error under
nccl); fork safety (recorders on torch's CUDA entry points, engine/cuda.py); real nccl runs unsandboxed for
each world size the GPUs allow; the probe rank in the plain sandbox and in a nursery's job (CUDA available there,
the plan per world size); the checks no CPU machine runs (03's real nn.SyncBatchNorm under nccl, MiniFSDP's memory
peaks on CUDA; 2+ GPUs); a `make grade` of the demo class, each result's plans as this machine's GPUs call for
(gloo wherever a job needs more GPUs than there are: on one GPU every 2-rank run); on 2+ GPUs, `selfcheck` of
exercises 1 and 3. On a machine without GPUs the GPU steps say "no GPU" and pass nothing. Every line and the
facts go to one JSON file (gpucheck.json, or the path GRADER_GPUCHECK_JSON names). Exit 0 when no line says BAD.
Its steps use no API newer than torch 2.11; a check whose answer needs one is listed as skipped, naming it.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import tempfile
import time

from grader.instructor import gpucheck_facts
from grader.engine import run_distributed
from grader.engine.cuda import cuda_devices
from grader.engine.plan import current_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the course repository
DEMO = "02_ddp_basics"
SELFCHECKED = ("01_parallelism", "03_syncbn_sharded")
JSON_ENV = "GRADER_GPUCHECK_JSON"
_bad = 0
_lines: list[str] = []
_PLAN = re.compile(r"(\d+) ranks?, (nccl|gloo)")
_VISIBLE = re.compile(r"(\d+) GPUs? visible")
_MISSING_API = re.compile(r"(?:has no attribute|cannot import name) '(\w+)'")


def say(verdict: str, step: str, detail: str) -> None:
    global _bad
    _bad += verdict == "BAD"
    line = f"{verdict:<4} {step}: {detail}"
    _lines.append(line)
    print(line, flush=True)


def plan_as_expected(plan: str) -> bool:
    """A plan line (HardwarePlan.describe, in English) whose backend is what its GPUs call for: nccl when the
    job's visible GPUs are at least its ranks, gloo otherwise (one GPU and two ranks: gloo, by design)."""
    found = _PLAN.search(plan)
    if not found:
        return False
    visible = _VISIBLE.search(plan)
    enough = (int(visible.group(1)) if visible else 0) >= int(found.group(1))
    return found.group(2) == ("nccl" if enough else "gloo")


def demo_verdict(result: dict, gpus: int) -> str:
    """ok or BAD for one demo-class result: graded (no regrade), every plan as this machine calls for, and on 2+
    GPUs some run on nccl (on one GPU the jobs need two for nccl: gloo everywhere is right)."""
    plans = result.get("plans") or []
    ok = bool(plans) and not result.get("regrade") and all(plan_as_expected(p) for p in plans)
    if gpus >= 2:
        ok = ok and any(runs_nccl(p) for p in plans)
    return "ok" if ok else "BAD"


def runs_nccl(plan: str) -> bool:
    found = _PLAN.search(plan)
    return bool(found) and found.group(2) == "nccl"


def missing_api(message: str) -> str | None:
    """The torch API a failed check's message says this torch lacks (an answer written for a newer torch)."""
    found = _MISSING_API.search(message or "")
    return found.group(1) if found and "torch" in message else None


def versions(gpus: int) -> None:
    import torch

    counted = cuda_devices()
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else "none (a CPU build of torch)"
    except Exception as exc:  # a CUDA build without NCCL
        nccl = f"unknown ({type(exc).__name__})"
    detail = (
        f"torch {torch.__version__}, driver {counted.driver or 'none'}, CUDA {torch.version.cuda or 'none'}, "
        f"NCCL {nccl}, {gpus} GPU(s) CUDA counts" + (f" ({counted.error})" if counted.error else "")
    )
    say("ok" if gpus or not os.path.exists("/dev/nvidiactl") else "BAD", "driver, CUDA and NCCL", detail)


def fork_safety(worker_args: list[str]) -> None:
    from grader.isolation.gpu_gate import probe_where_graded
    from grader.isolation.sandbox import available

    os.environ["GRADER_CUDA_WATCH"] = "1"
    try:
        for where, sandbox in (("unsandboxed", False), ("sandboxed", True)):
            if sandbox and not available():
                say("BAD", f"fork safety ({where})", "bwrap is missing")
                continue
            called = probe_where_graded(worker_args, sandbox, False).get("rank", {}).get("cuda_before_fork")
            say(
                "ok" if called == [] else "BAD",
                f"fork safety ({where})",
                "no grader process called CUDA before forking ranks" if called == [] else f"called: {called}",
            )
    finally:
        os.environ.pop("GRADER_CUDA_WATCH", None)


def _all_reduce(ctx):
    import torch
    import torch.distributed as dist

    t = torch.full((4,), ctx.rank + 1.0, device=ctx.device)
    dist.all_reduce(t)
    return dist.get_backend(), str(ctx.device), t.sum().item()


def nccl_runs(gpus: int) -> None:
    if not gpus:
        say("--", "nccl runs (unsandboxed)", "no GPU (not run)")
        return
    for w in range(1, min(gpus, 3) + 1):
        result = run_distributed(_all_reduce, w, timeout=120, trusted=True)
        expected = 4.0 * w * (w + 1) / 2
        ok = result.ok and all(v[0] == "nccl" and v[2] == expected for v in result.values)
        say(
            "ok" if ok else "BAD",
            f"nccl run, {w} rank(s)",
            result.plan.describe() if ok else (result.failure() if not result.ok else str(result.values)),
        )


def sandboxes(worker_args: list[str], gpus: int) -> None:
    from grader.isolation.gpu_gate import probe_where_graded
    from grader.isolation.nursery_client import use_nursery
    from grader.isolation.sandbox import available

    places = [("plain sandbox", True, False)] + ([("nursery job", True, True)] if use_nursery() else [])
    for where, sandbox, nursery in places:
        if not available():
            say("BAD", where, "bwrap is missing")
            continue
        report = probe_where_graded(worker_args, sandbox, nursery)
        rank = report.get("rank", {})
        plans = "; ".join(f"W={w}: {p}" for w, p in (report.get("plans") or {}).items())
        needs = rank.get("comm") == "written" and rank.get("sys_pci") and rank.get("dumpable")
        say(
            "ok" if needs else "BAD",
            f"{where}: what the driver needs",
            f"comm {rank.get('comm')}, dumpable {rank.get('dumpable')}, /sys/bus/pci {rank.get('sys_pci')}",
        )
        if not gpus:
            say("--", f"{where}: CUDA", f"no GPU (not run); {plans}")
            continue
        ok = report.get("gpus", 0) > 0 and rank.get("cuda_count", 0) > 0 and not rank.get("cuda_error")
        say(
            "ok" if ok else "BAD",
            f"{where}: CUDA",
            f"{rank.get('cuda_count')} GPU(s) in the rank; {plans}"
            if ok
            else f"{rank.get('cuda_error') or report.get('cuda_error') or rank.get('failed')}",
        )


def never_run_checks(gpus: int) -> None:
    from grader.exercises import get_exercise
    from grader.runner import run_checks
    from grader.submission import read_notebook

    if gpus < 2:
        say("--", "03's nn.SyncBatchNorm and MiniFSDP's memory peaks", "no GPU (not run: they need 2)")
        return
    exercise = get_exercise("03_syncbn_sharded")
    solution = read_notebook(os.path.join(ROOT, exercise.notebook))
    for task, what in (
        ("convert_to_sync_bn", "real nn.SyncBatchNorm under nccl"),
        ("MiniFSDP", "MiniFSDP's memory peaks on CUDA"),
    ):
        report = run_checks(exercise, solution, task=task)
        bad = [c for c in report.checks if not c.passed or c.skipped]
        plans = sorted({p for c in report.checks for p in c.plan.split("; ") if p})
        api = next((missing_api(c.message) for c in bad if missing_api(c.message)), None)
        if api:
            say("--", f"03 {what}", f"skipped: the answer needs torch's {api}, which torch here lacks")
            continue
        say(
            "ok" if not bad and any(runs_nccl(p) for p in plans) else "BAD",
            f"03 {what}",
            f"{report.score:g}/{report.max_score:g}, ran on: {'; '.join(plans)}"
            + (f"; {bad[0].name}: {(bad[0].message or 'skipped').splitlines()[0]}" if bad else ""),
        )


def demo_class(gpus: int) -> None:
    if not gpus:
        say("--", "make grade of the demo class", "no GPU (not run: make demo grades it on CPU)")
        return
    import contextlib
    import io

    from grader.instructor import demo

    root = tempfile.mkdtemp(prefix="gpucheck-demo-")
    with contextlib.redirect_stdout(io.StringIO()):
        demo.main(DEMO, root)
    for path in sorted(glob.glob(os.path.join(root, "graded", DEMO, "*.json"))):
        with open(path) as f:
            result = json.load(f)
        plans = result.get("plans") or []
        say(demo_verdict(result, gpus), f"demo class: {result.get('student')}", "; ".join(plans) or "no run")


def selfcheck_step(gpus: int) -> None:
    if gpus < 2:
        have = f"{gpus} GPU" if gpus else "no GPU"
        say("--", "selfcheck of exercises 1 and 3", f"{have} (not run: nccl needs 2)")
        return
    from grader.instructor import selfcheck

    wrong = selfcheck.main(list(SELFCHECKED))
    say("ok" if not wrong else "BAD", "selfcheck of exercises 1 and 3", "as expected" if not wrong else "see above")


def facts_step() -> dict:
    facts, failed = gpucheck_facts.measure()
    say("BAD" if failed else "ok", "facts", failed.splitlines()[0] if failed else gpucheck_facts.summary(facts))
    return facts


def main() -> int:
    from grader.code_digest import grader_digest

    os.environ["COURSE_LANG"] = "en"  # plan lines are read back (plan_as_expected)
    start = time.monotonic()
    gpus = cuda_devices().count
    worker_args = [DEMO, "--timeout", "60", "--world-size", "2", "--version", grader_digest(DEMO)]
    versions(gpus)
    facts = facts_step()
    for w in (1, 2, 3):
        plan = current_plan(w).describe()
        say("ok" if plan_as_expected(plan) else "BAD", f"plan, world size {w}", plan)
    fork_safety(worker_args)
    nccl_runs(gpus)
    sandboxes(worker_args, gpus)
    never_run_checks(gpus)
    demo_class(gpus)
    selfcheck_step(gpus)
    last = f"gpucheck: {'every step as expected' if not _bad else f'{_bad} step(s) BAD'}"
    last += f" ({time.monotonic() - start:.0f} s)" + ("" if gpus else "; no GPU here: its GPU steps did not run")
    path = os.environ.get(JSON_ENV) or "gpucheck.json"
    gpucheck_facts.write(path, facts, _lines + [last])
    print(f"{last}; everything in {os.path.abspath(path)}")
    return 0 if not _bad else 1


def register(sub) -> None:
    parser = sub.add_parser(
        "gpucheck",
        help="does the course's GPU path work on this machine (a verdict a line)",
        description=__doc__.split("\n\n")[0],
    )
    parser.set_defaults(func=lambda args: main())


if __name__ == "__main__":
    sys.exit(main())
