"""Nothing a check compares with lives in a frame the student's code can reach, and the student's code is refused
the frames (grader/engine/frame_guard.py).

A probe answers every task of every exercise: it walks up the frames from inside the student's call and records
every grader frame's locals. Its walker is compiled under torch's file name, which is what gets past the frame
guard (its documented limit): the checks' own order must then hold, each calling the student before it computes
or loads what it compares with. Then a plain walk (the one an examiner found in plan_memory) is refused and named,
and code that only prints or logs a traceback is not refused."""

from __future__ import annotations

import json
import os
import tempfile

import pytest

from grader.exercises import exercise_ids, get_exercise
from grader.exercises.syncbn_sharded.checks_memory_plan import CASES, budgets
from grader.exercises.syncbn_sharded.memory_plan import expected_activations, expected_state
from tests.helpers import failed, grade_source, replace_definition, solution_source

# Local names that would hold what a check compares with (a measurement, a reference, an expectation).
EXPECTATION_NAMES = {"measured", "expected", "expectation", "want", "reference", "references", "ref_grads"}

WALKER = """
import json, numbers, sys

def _numbers(value, depth=0):
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return [float(value)]
    if depth < 3 and isinstance(value, dict):
        return [n for v in list(value.values()) for n in _numbers(v, depth + 1)]
    if depth < 3 and isinstance(value, (list, tuple)):
        return [n for v in list(value)[:100] for n in _numbers(v, depth + 1)]
    return []

def walk(task, path):
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        if "/grader/" in frame.f_code.co_filename:
            local = dict(frame.f_locals)
            frames.append([frame.f_code.co_name, sorted(local), [n for v in local.values() for n in _numbers(v)]])
        frame = frame.f_back
    with open(path, "a") as out:
        out.write(json.dumps([task, frames]) + "\\n")
"""


def _probe_source(tasks: list[str], path: str) -> str:
    lines = [
        "import torch",
        f"_walker = {{}}; exec(compile({WALKER!r}, torch.__file__, 'exec'), _walker)",  # past the frame guard
    ]
    for task in tasks:
        lines += [
            f"def {task}(*args, **kwargs):",
            f"    _walker['walk']({task!r}, {path!r})",
            "    raise NotImplementedError('a probe')",
        ]
    return "\n".join(lines) + "\n"


def _first_public_checks(exercise) -> list[str]:
    firsts = {}
    for check in exercise.checks:
        if not check.hidden:
            firsts.setdefault(check.task, check.name)
    return list(firsts.values())


@pytest.fixture(scope="module")
def walks() -> dict[str, list]:
    """task -> the grader frames (function, local names, numbers) above each call of the probe."""
    found: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "walks.jsonl")
        for exercise_id in exercise_ids():
            exercise = get_exercise(exercise_id)
            source = _probe_source(exercise.tasks, path)
            grade_source(exercise_id, source, timeout=20, checks=_first_public_checks(exercise))
        with open(path) as f:
            for line in f:
                task, frames = json.loads(line)
                found.setdefault(task, []).append(frames)
    return found


@pytest.mark.timeout(900)
def test_no_grader_frame_above_a_students_call_holds_an_expectation(walks):
    # the tasks whose checks call the student's function in a rank (script and command tasks run elsewhere)
    assert {"pipeline_schedule", "plan_memory", "checkpoint_activations", "train_step_fsdp2"} <= set(walks), walks
    for task, calls in walks.items():
        for frames in calls:
            for function, names, _ in frames:
                assert not EXPECTATION_NAMES & set(names), (task, function, EXPECTATION_NAMES & set(names))


@pytest.mark.timeout(900)
def test_plan_memorys_measurement_is_not_in_reach(walks):
    totals = [
        v + extra
        for spec in CASES
        for v in expected_state(spec, 2).values()
        for extra in (expected_activations(spec), 0)
    ]
    # the task's inputs, every case's (drawn once per process: the same as the ranks got): a bf16 budget may lie
    # within 1% of an fp32 total
    inputs = {b for spec in CASES for b in budgets(spec, 2)}
    seen = [n for frames in walks["plan_memory"] for _, _, numbers in frames for n in numbers if n not in inputs]
    near = [n for n in seen for t in totals if abs(n - t) <= 0.01 * t]
    assert not near, near


# The grader's own measurement read from a caller's frame, returned as the plan (5/5 before the checks' order and the
# frame guard).
FRAME_WALK = """
import sys


def plan_memory(model, world_size, activation_bytes, budget_bytes):
    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, dict) and {"ddp", "zero1", "fsdp2"} <= set(value):
                plan = {k: value[k] + activation_bytes for k in ("ddp", "zero1", "fsdp2")}
                fits = [k for k in ("ddp", "zero1", "fsdp2") if plan[k] <= budget_bytes]
                return {**plan, "choice": fits[0] if fits else None}
        frame = frame.f_back
    return {"ddp": 0, "zero1": 0, "fsdp2": 0, "choice": None}
"""

# The same walk through inspect, caught by the answer itself: refused all the same, and said.
INSPECT_WALK = FRAME_WALK.replace("import sys\n", "import inspect\n").replace(
    "    frame = sys._getframe(1)\n",
    "    try:\n        frame = inspect.stack()[1].frame\n    except Exception:\n        frame = None\n",
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("code", [FRAME_WALK, INSPECT_WALK], ids=["sys_getframe", "inspect_stack_caught"])
def test_a_frame_walk_is_refused_and_named(code):
    source = replace_definition(solution_source("03_syncbn_sharded"), "plan_memory", code)
    report = grade_source("03_syncbn_sharded", source, task="plan_memory", timeout=60)
    assert report.score == 0, "\n".join(report.lines())
    public = {c.name: failed(report).get(c.name, "") for c in report.checks if not c.hidden}
    assert public and all("asked for the grader's frames" in m for m in public.values()), failed(report)


# Printing or logging a traceback asks the standard library for frames, not the student's code: not refused.
LOGS_A_TRACEBACK = """    import logging, traceback
    logging.getLogger("student").warning("where: %s", traceback.format_stack()[-1])
    try:
        raise ValueError("shown, not raised")
    except ValueError:
        traceback.format_exc()
"""


@pytest.mark.timeout(300)
def test_a_printed_traceback_is_not_refused():
    source = solution_source("01_parallelism")
    anchor = "    ### BEGIN SOLUTION\n"
    start = source.index("def shard_indices")
    at = source.index(anchor, start) + len(anchor)
    source = source[:at] + LOGS_A_TRACEBACK + source[at:]
    report = grade_source("01_parallelism", source, task="shard_indices")
    assert report.score == report.max_score, "\n".join(report.lines())


FRAME_CYCLE_PROBE = """
import gc, sys, traceback, weakref
from grader.engine import frame_guard

class Held:
    pass

def formats_a_stack():
    held = Held()
    traceback.extract_stack()  # the guard's hook runs (sys._getframe) and lets traceback.py through
    return weakref.ref(held)

frame_guard.install()
gc.disable()  # only reference counts free things now: a cycle through a frame would keep `held`
print("freed" if formats_a_stack()() is None else "kept")
"""


def test_the_guards_hook_keeps_no_callers_locals_alive():
    # Its frame held by a local of its own was a cycle that kept every caller's locals (DDP's output, in
    # plan_memory's measurement) alive until the next garbage collection: a measured 12288 bytes too many.
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", FRAME_CYCLE_PROBE], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "freed", run.stdout + run.stderr
