"""python -m grader check: the command-line contract, and bad submissions.

Every bad submission gives a clear message and exit 2 or failed checks,
never a hang, and the submission file is unchanged byte for byte.
"""

import hashlib
import json
import os
import subprocess
import sys

import pytest

from grader import answers_reachable
from grader.exercises import get_exercise
from tests.helpers import solution_notebook, solution_source

EXERCISE = "02_ddp_basics"


def grader(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "grader", *args], capture_output=True, text=True, timeout=timeout)


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_json_contract_on_the_solution():
    path = solution_notebook(EXERCISE)
    before = digest(path)
    proc = grader("check", EXERCISE, path, "--json", "--task", "wrap_model")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report) >= {"exercise", "score", "max_score", "checks"}
    points = get_exercise(EXERCISE).points_of("wrap_model")
    assert report["exercise"] == EXERCISE and report["score"] == report["max_score"] == points
    for check in report["checks"]:
        assert set(check) >= {"name", "task", "passed", "points", "max_points", "message"}
        assert check["task"] == "wrap_model" and check["passed"]
    assert digest(path) == before


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "name, content, phrase",
    [
        ("broken.ipynb", '{"cells": [', "is not a readable notebook"),
        (
            "no_answers.ipynb",
            json.dumps(
                {
                    "cells": [{"cell_type": "code", "source": "x = 1", "metadata": {}}],
                    "metadata": {},
                    "nbformat": 4,
                    "nbformat_minor": 5,
                }
            ),
            "no answer cells",
        ),
        ("syntax.py", "def pick_backend(:\n    return 'gloo'\n", "syntax error at line 1"),
        ("notes.txt", "hello", "expected a notebook"),
    ],
)
def test_unreadable_submission_exits_2_with_one_clear_line(tmp_path, name, content, phrase):
    path = write(tmp_path, name, content)
    before = digest(path)
    proc = grader("check", EXERCISE, path)
    assert proc.returncode == 2
    assert phrase in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert digest(path) == before


def test_unknown_exercise_and_missing_file_exit_2(tmp_path):
    assert grader("check", "99_nope", solution_notebook(EXERCISE)).returncode == 2
    assert grader("check", EXERCISE, str(tmp_path / "missing.py")).returncode == 2


def _json(proc):
    assert proc.returncode == 1, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize(
    "prelude, phrase",
    [
        ("import sys\nsys.exit(3)\n", "SystemExit"),
        ("import os\nos._exit(5)\n", "exited with code 5"),
        ("while True:\n    pass\n", "hung"),
    ],
)
def test_student_code_that_exits_or_loops_at_import_fails_checks_cleanly(tmp_path, prelude, phrase):
    path = write(tmp_path, "answers.py", prelude + solution_source(EXERCISE))
    before = digest(path)
    report = _json(grader("check", EXERCISE, path, "--json", "--task", "pick_backend", "--timeout", "5"))
    assert report["score"] == 0
    assert all(phrase in c["message"] for c in report["checks"]), report["checks"][0]["message"]
    assert digest(path) == before


def test_sys_exit_inside_a_task_fails_that_task(tmp_path):
    source = solution_source(EXERCISE).replace(
        "def pick_backend() -> str:\n", "def pick_backend() -> str:\n    import sys; sys.exit(0)\n", 1
    )
    report = _json(grader("check", EXERCISE, write(tmp_path, "answers.py", source), "--json", "--task", "pick_backend"))
    assert "SystemExit" in report["checks"][0]["message"]


def test_fifty_megabytes_of_printing_is_bounded(tmp_path):
    path = write(tmp_path, "answers.py", solution_source(EXERCISE) + "\nprint('x' * 50_000_000)\n")
    proc = grader("check", EXERCISE, path, "--json", "--task", "pick_backend")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout) < 100_000


def test_missing_task_fails_only_its_own_checks(tmp_path):
    source = solution_source(EXERCISE)
    source = source[: source.index("def save_checkpoint")] + source[source.index("def load_checkpoint") :]
    path = write(tmp_path, "answers.py", source)
    for task in ("save_checkpoint", "load_checkpoint"):
        proc = grader("check", EXERCISE, path, "--json", "--task", task)
        report = json.loads(proc.stdout)
        if task == "save_checkpoint":
            assert proc.returncode == 1 and report["score"] == 0
            assert all("`save_checkpoint` is not defined" in c["message"] for c in report["checks"])
        else:
            assert proc.returncode == 0 and report["score"] == report["max_score"]


def test_crashing_task_fails_its_checks_with_the_students_frame(tmp_path):
    source = solution_source(EXERCISE).replace(
        "def pick_backend() -> str:\n", 'def pick_backend() -> str:\n    raise RuntimeError("not yet")\n', 1
    )
    path = write(tmp_path, "answers.py", source)
    report = _json(grader("check", EXERCISE, path, "--json", "--task", "pick_backend"))
    message = report["checks"][0]["message"]
    assert "RuntimeError: not yet" in message and "in your code" in message and "answers.py" in message


def test_concurrent_graders_do_not_clash(tmp_path):
    """Four graders at once, each opening TCP rendezvous ports (setup) and FileStores."""
    path = solution_notebook(EXERCISE)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "grader", "check", EXERCISE, path, "--json", "--task", task],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for task in ("setup", "setup", "cleanup", "wrap_model")
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err


def test_commands_leave_slow_notebook_imports_to_those_that_use_them():
    """Every `python -m grader` command builds the whole parser (and a make-grade worker is one): nbformat (and,
    through it, jsonschema's format checkers: 2.3 s here) is imported only by the commands that write notebooks.
    The gradebook writer does import nbformat, without rfc3987_syntax's Lark parsers (inject.py says why)."""
    probe = (
        "import sys\nfrom grader.cli import build_parser\nbuild_parser()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'nbformat', 'jsonschema', 'nbconvert'}))\n"
        "import grader.gradebook.inject\nprint(sys.modules.get('rfc3987_syntax'), 'nbformat' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "None True"]


def test_check_says_once_that_readable_answers_make_its_scores_proof_of_nothing(tmp_path):
    # the course checkout holds solutions/: the first check says so, the next ones do not
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    run = ["check", EXERCISE, solution_notebook(EXERCISE), "--task", "pick_backend"]
    first = subprocess.run([sys.executable, "-m", "grader", *run], capture_output=True, text=True, timeout=240, env=env)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count("the course's answers are readable on this machine") == 1, first.stderr
    assert "`make grade`" in first.stderr and "student install" in first.stderr
    again = subprocess.run([sys.executable, "-m", "grader", *run], capture_output=True, text=True, timeout=240, env=env)
    assert again.returncode == 0 and "answers are readable" not in again.stderr, again.stderr


def test_no_notice_where_no_answers_are_readable(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert answers_reachable.notice_once([tmp_path]) is None  # no solutions/ there
    (tmp_path / "solutions").mkdir()
    assert "readable" in answers_reachable.notice_once([tmp_path])
    assert answers_reachable.notice_once([tmp_path]) is None  # once


def test_help_lists_every_public_command_and_no_internal_one():
    import io
    from contextlib import redirect_stdout

    from grader.cli import build_parser

    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = out.getvalue()
    assert "SUPPRESS" not in text and "_grade-worker" not in text, text
    for command in ("check", "list", "demo", "grade", "report", "collect", "translate"):
        assert command in text
