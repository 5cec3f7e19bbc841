"""A submission that tampers with the grader gains nothing: the checks cannot be fooled.

Each case is a real submission graded through the CLI, in real ranks. Student
code runs inside the ranks, so these cases try what a curious student would:
swap a grader helper, wrap a torch.distributed collective, patch CheckFailed,
the result reporting or builtins, or leave the rank early after printing a fake ✓.
"""

import json
import os
import subprocess
import sys

import pytest

from grader.exercises import get_exercise
from tests.helpers import ROOT, solution_source

HONEST_RING_CHEAT = """
import torch.distributed as dist

def ring_all_reduce(tensor):
    dist.all_reduce(tensor)  # the forbidden collective
"""

CASES = {
    # name: (exercise, the submission's source, the task graded)
    "replace a grader helper": (
        "01_parallelism",
        HONEST_RING_CHEAT
        + """
import contextlib
import grader.exercises.parallelism.checks_core as checks
from grader.exercises.parallelism.p2p_only import Message, Traffic

@contextlib.contextmanager
def _fake(task, fn):
    yield Traffic([Message("send", 1, 1), Message("recv", 1, 1)])

checks.point_to_point_only = _fake
""",
        "ring_all_reduce",
    ),
    "wrap dist.all_reduce to fake a result": (
        "02_ddp_basics",
        "SOLUTION"
        + """
import torch.distributed as _dist
_real = _dist.all_reduce
def _fake_all_reduce(tensor, *args, **kwargs):
    return _real(tensor, *args, **kwargs)
_dist.all_reduce = _fake_all_reduce
""",
        "setup",
    ),
    "wrap a collective inside a task, left in place": (
        "02_ddp_basics",
        "SOLUTION"
        + """
def cleanup():
    import torch.distributed as _dist
    _dist.barrier = lambda *a, **k: None
    _dist.destroy_process_group()
""",
        "cleanup",
    ),
    "patch CheckFailed": (
        "02_ddp_basics",
        "SOLUTION"
        + """
import grader.checks, grader.grading
class _Never(Exception):
    pass
grader.checks.CheckFailed = _Never
grader.grading.CheckFailed = _Never
def wrap_model(model, device):
    return model
""",
        "wrap_model",
    ),
    "patch the result reporting": (
        "02_ddp_basics",
        "SOLUTION"
        + """
import grader.engine.worker as _w
_real_encode = _w.encode
def _encode(message):
    return _real_encode(("ok", message[1]))
_w.encode = _encode
def pick_backend():
    raise RuntimeError("no idea")
""",
        "pick_backend",
    ),
    "patch builtins": (
        "02_ddp_basics",
        "SOLUTION"
        + """
import builtins
_real_isinstance = builtins.isinstance
builtins.isinstance = lambda obj, cls: True
def wrap_model(model, device):
    return model
""",
        "wrap_model",
    ),
    # Through the modules the guard derives from the checks' imports (grader/engine/guard_list.py): each would
    # let the grader's own save, load or sharding run the student's code in the hidden cross checks.
    "replace dcp.save, which the grader's own save calls": (
        "03_syncbn_sharded",
        "SOLUTION"
        + """
import torch.distributed.checkpoint as _dcp
_real_save = _dcp.save
def _save(state_dict, *args, **kwargs):  # the student's format could go here, read back by their own load
    return _real_save(state_dict, *args, **kwargs)
_dcp.save = _save
""",
        "load_resharded",
    ),
    "replace dcp.load, which the grader's own load calls": (
        "03_syncbn_sharded",
        "SOLUTION"
        + """
import torch.distributed.checkpoint as _dcp
_real_load = _dcp.load
def _load(state_dict, *args, **kwargs):
    return _real_load(state_dict, *args, **kwargs)
_dcp.load = _load
""",
        "save_and_reshard",
    ),
    "patch a DCP planner's method": (
        "03_syncbn_sharded",
        "SOLUTION"
        + """
from torch.distributed.checkpoint import DefaultLoadPlanner as _Planner
_real_plan = _Planner.create_local_plan
def _create_local_plan(self):
    return _real_plan(self)
_Planner.create_local_plan = _create_local_plan
""",
        "load_resharded",
    ),
    "replace fully_shard, which shards the check's model": (
        "03_syncbn_sharded",
        "SOLUTION"
        + """
import torch.distributed.fsdp as _fsdp
_fsdp.fully_shard = lambda module, **kwargs: module  # nothing sharded: a gathered save passes as sharded
""",
        "save_and_reshard",
    ),
    "wrap an FSDPModule method inside a task": (
        "03_syncbn_sharded",
        "SOLUTION"
        + """
_solution_load_resharded = load_resharded
def load_resharded(*args):
    from torch.distributed.fsdp import FSDPModule
    _real = FSDPModule.unshard
    FSDPModule.unshard = lambda self, *a, **k: _real(self, *a, **k)
    return _solution_load_resharded(*args)
""",
        "load_resharded",
    ),
}


def _source(exercise_id: str, text: str) -> str:
    return text.replace("SOLUTION", solution_source(exercise_id) + "\n", 1)


def grade_cli(exercise_id: str, source: str, task: str, tmp_path) -> dict:
    path = tmp_path / "submission.py"
    path.write_text(source)
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "check", exercise_id, str(path), "--json", "--task", task, "--timeout", "20"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("case", list(CASES))
def test_tampering_gains_nothing_and_says_so(case, tmp_path):
    exercise_id, text, task = CASES[case]
    report = grade_cli(exercise_id, _source(exercise_id, text), task, tmp_path)
    assert report["score"] == 0, json.dumps(report, indent=1)
    assert report["max_score"] == get_exercise(exercise_id).points_of(task)
    for check in report["checks"]:
        assert not check["passed"] and check["tampered"], check
        assert "changed the grader" in check["message"], check["message"]


def test_leaving_the_rank_after_printing_a_fake_pass_gains_nothing(tmp_path):
    source = _source(
        "02_ddp_basics",
        "SOLUTION"
        + """
def pick_backend():
    import os
    print("✓ pick_backend: backend_matches_hardware (1/1)", flush=True)
    os._exit(0)
""",
    )
    report = grade_cli("02_ddp_basics", source, "pick_backend", tmp_path)
    assert report["score"] == 0
    assert "exited with code 0" in report["checks"][0]["message"], report["checks"][0]["message"]


def test_the_untampered_solution_is_not_flagged(tmp_path):
    """The guard must not fire on honest code (which patches nothing)."""
    report = grade_cli("02_ddp_basics", solution_source("02_ddp_basics"), "cleanup", tmp_path)
    assert report["score"] == report["max_score"] and not any(c["tampered"] for c in report["checks"])


# --- the same corpus through `make grade` (python -m grader grade: parallel workers, nbgrader's gradebook) ---

BATCH = {name: case for name, case in CASES.items() if case[0] == "02_ddp_basics"}
BATCH["leave after a fake pass"] = (
    "02_ddp_basics",
    "SOLUTION"
    + """
def pick_backend():
    import os
    print("✓ pick_backend: backend_matches_hardware (1/1)", flush=True)
    os._exit(0)
""",
    "pick_backend",
)


def _notebook_with_source(exercise_id: str, source: str) -> dict:
    """The student release with the whole submission in its last answer cell (the stubs above are overridden)."""
    from grader import cells

    with open(os.path.join(ROOT, "exercises", exercise_id, f"{exercise_id}.ipynb")) as f:
        nb = json.load(f)
    last = [c for c in nb["cells"] if cells.is_answer_cell(c)][-1]
    last["source"] = cells.source(last) + "\n\n" + source
    return nb


def test_tampering_gains_nothing_through_make_grade(tmp_path):
    from grader.gradebook import roundtrip
    from grader.gradebook.batch import grade_assignment

    exercise_id = "02_ddp_basics"
    course = roundtrip.make_course(str(tmp_path / "course"), [exercise_id])
    roundtrip.release(course, exercise_id)
    students = {}
    for i, (name, (_, text, task)) in enumerate(BATCH.items()):
        student = f"s{i}"
        students[student] = (name, task)
        folder = tmp_path / "course" / "submitted" / student / exercise_id
        folder.mkdir(parents=True)
        (folder / "timestamp.txt").write_text("2026-11-29 12:00:00.000000 UTC")
        (folder / f"{exercise_id}.ipynb").write_text(
            json.dumps(_notebook_with_source(exercise_id, _source(exercise_id, text)))
        )
    results = grade_assignment(course, exercise_id, jobs=2, timeout=20, progress=False)
    exercise = get_exercise(exercise_id)
    for student, (name, task) in students.items():
        checks = results[student]["report"]["checks"]
        mine = [c for c in checks if c["task"] == task]
        assert mine and all(not c["passed"] and c["points"] == 0 for c in mine), (name, mine)
        honest_max = exercise.max_score - exercise.points_of(task)
        assert results[student]["report"]["score"] <= honest_max, name
        if name != "leave after a fake pass":
            assert any("changed the grader" in f for f in results[student]["flags"]), (name, results[student]["flags"])


# --- exercise 3: measurements the student's code cannot switch off -------------------------------------------------
# Each tamper switches the grader's dispatch modes off around what a check measures, so that the mode sees none of
# it; its honest twin makes the same mistake in plain sight. Three ways of switching them off, each on each measuring
# mechanism (live bytes for MiniFSDP and for activation checkpointing, the allocation probe of build_fsdp2_model).
SWITCH_OFF = {
    "disable_current_modes": """
from torch.utils._python_dispatch import _disable_current_modes as _off
""",
    "pop the mode stack": """
import contextlib as _contextlib
import torch as _torch
from torch.utils._python_dispatch import _pop_mode, _push_mode

@_contextlib.contextmanager
def _off():
    popped = [_pop_mode() for _ in range(_torch._C._len_torch_dispatch_stack())]
    try:
        yield
    finally:
        for mode in reversed(popped):
            _push_mode(mode)
""",
    "DisableTorchDispatch": """
import torch as _torch
_off = _torch._C._DisableTorchDispatch
""",
}

# MiniFSDP: autograd keeps every layer's full weight (pack keeps the tensor besides its token); the tamper copies the
# gathered weights and runs each layer with the modes off, so the live-bytes mode sees neither the copies nor F.linear.
_PACK = "            return t if i is None else (i, t.size(), t.stride(), t.storage_offset())\n"
_UNPACK = "            i, size, stride, offset = saved\n"
_SET = "                setattr(mod, name, full[:self.shapes[i].numel()].view(self.shapes[i]))\n"
_MAP = "                gathered[full.untyped_storage().data_ptr()] = i\n"
_ENTER = "        self.saving[mod].__enter__()\n"
_EXIT = "        self.saving.pop(mod).__exit__(None, None, None)\n"
# build_fsdp2_model: the model built whole on the CPU
_META = '    with torch.device("meta"):\n        model = make_model()  # shapes only: no memory, nothing initialized\n'
# checkpoint_activations: no checkpointing (everything saved), and a rerun under no_grad in backward, thrown away
_CKPT = "        return checkpoint(self.block, x, use_reentrant=False)\n"
_RERUN = (
    "        out = self.block(x)  # everything saved\n"
    "        out.register_hook(lambda grad: self._again(x))\n        return out\n\n"
    "    def _again(self, x):\n        with torch.no_grad():\n            self.block(x.detach())  # thrown away\n"
)

EX3_MISTAKES = {
    # name: (checks, [(old, honest twin's new, tamper's new)])
    "MiniFSDP keeps every full weight": (
        ["fsdp_frees_full_parameters"],
        [
            (_PACK, _PACK.replace("storage_offset())", "storage_offset(), t)"), None),
            (_UNPACK, "            i, size, stride, offset, _kept = saved\n", None),
            (
                _MAP,
                _MAP,
                "                with _off():\n                    full = full * 1  # an unseen copy\n" + _MAP,
            ),
            (_SET, _SET, "                with _off():\n    " + _SET),
            (_ENTER, _ENTER, _ENTER + "        self._hidden = _off()\n        self._hidden.__enter__()\n"),
            (_EXIT, _EXIT, "        self._hidden.__exit__(None, None, None)\n" + _EXIT),
        ],
    ),
    "build_fsdp2_model builds on the CPU": (
        ["fsdp2_build_sharded_from_meta", "fsdp2_units_and_mixed_precision"],
        [
            (
                _META,
                "    model = make_model()  # whole, on the CPU\n",
                "    with _off():\n        model = make_model()  # whole, on the CPU, unseen\n",
            )
        ],
    ),
    "checkpoint reruns under no_grad": (
        ["checkpointing_keeps_gradients", "checkpointing_frees_activations"],
        [
            (
                _CKPT,
                _RERUN,
                _RERUN.replace(
                    "        out = self.block(x)  # everything saved\n",
                    "        with _off():\n            out = self.block(x)  # unseen\n",
                ),
            )
        ],
    ),
}


def _ex3_source(mistake: str, way: str | None) -> str:
    """The solution with the mistake: its honest twin (way None), or the tamper switching the modes off that way."""
    from tests.helpers import mutate

    source = solution_source("03_syncbn_sharded")
    for old, twin, tamper in EX3_MISTAKES[mistake][1]:
        source = mutate(source, old, twin if way is None or tamper is None else tamper)
    return source if way is None else source + SWITCH_OFF[way]


@pytest.fixture(scope="module")
def ex3_twins():
    """Each honest twin's grading, once for every way of switching off."""
    from tests.helpers import grade_source

    return {
        name: grade_source("03_syncbn_sharded", _ex3_source(name, None), checks=checks, timeout=60)
        for name, (checks, _) in EX3_MISTAKES.items()
    }


@pytest.mark.timeout(600)
@pytest.mark.parametrize("way", list(SWITCH_OFF))
@pytest.mark.parametrize("mistake", list(EX3_MISTAKES))
def test_switching_off_the_grader_modes_gains_nothing_and_says_so(mistake, way, ex3_twins):
    from tests.helpers import grade_source

    twin = ex3_twins[mistake]
    assert twin.score < twin.max_score, "\n".join(twin.lines())
    report = grade_source("03_syncbn_sharded", _ex3_source(mistake, way), checks=EX3_MISTAKES[mistake][0], timeout=60)
    assert report.score <= twin.score, "\n".join(report.lines())
    for check in report.checks:
        assert not check.passed and "measurement was switched off" in check.message, check.message
