"""Feedback from the parent: what student code raises or prints never carries a hidden test's
source into a report or into feedback, whatever the exception's type; a hidden check's message is fixed
text of the grader's; a public check still names the student's own error.

Real processes throughout: the CLI's JSON report, and a class graded with nbgrader (feedback HTML).
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from grader import feedback_filter
from grader.exercises.instructor import is_student_build
from tests.helpers import ROOT, replace_definition, solution_source

pytestmark = pytest.mark.skipif(is_student_build(), reason="a student build has no hidden modules to leak")

LEAK = """
import importlib as _il, inspect as _ins


def _hidden_source():
    return _ins.getsource(_il.import_module("{module}"))
"""
# Each attack in its own task: raise it, print it and leave, raise it as a "CheckFailed" of one's own.
RAISES = """
def shard_indices(n_samples, rank, world_size):
    raise RuntimeError("MARK-RAISE " + _hidden_source())
"""
PRINTS = """
def average_gradients(model):
    import os
    print("MARK-PRINT " + _hidden_source(), flush=True)
    os._exit(1)
"""
FORGES = """
class CheckFailed(Exception):
    pass


def ring_all_reduce(tensor):
    raise CheckFailed("MARK-FORGED " + _hidden_source())
"""


def public_lines() -> set[str]:
    """Every line of the grader's public modules (a task's name in a list, a decorator's argument): not secrets."""
    found = set()
    for path in pathlib.Path(ROOT, "grader").rglob("*.py"):
        if not path.name.startswith("hidden_"):
            found |= {line.strip() for line in path.read_text(errors="replace").splitlines()}
    return found


def hidden_lines(module_file: str) -> list[str]:
    """The lines of a hidden module that say something of its own (not an import every module has, nor a line a
    public module holds too)."""
    public = public_lines()
    with open(os.path.join(ROOT, "grader", "exercises", module_file)) as f:
        lines = [line.strip() for line in f]
    return [line for line in lines if len(line) >= 20 and not line.startswith("from ") and line not in public]


def assert_no_hidden_text(text: str, module_file: str) -> None:
    leaked = [line for line in hidden_lines(module_file) if line in text or json.dumps(line)[1:-1] in text]
    assert not leaked, f"hidden source leaked: {leaked[:3]}"


def test_the_cli_report_holds_no_hidden_source_and_hidden_checks_say_fixed_text(tmp_path):
    source = solution_source("01_parallelism")
    for task, attack in (("shard_indices", RAISES), ("average_gradients", PRINTS), ("ring_all_reduce", FORGES)):
        source = replace_definition(source, task, attack)
    source = LEAK.format(module="grader.exercises.parallelism.hidden_core") + source
    path = tmp_path / "attack.py"
    path.write_text(source)
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "check", "01_parallelism", str(path), "--json", "--timeout", "20"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 1, proc.stderr
    assert_no_hidden_text(proc.stdout, "parallelism/hidden_core.py")
    report = json.loads(proc.stdout)
    attacked = {"shard_indices": "MARK-RAISE", "average_gradients": "MARK-PRINT", "ring_all_reduce": "MARK-FORGED"}
    for task, mark in attacked.items():
        mine = [c for c in report["checks"] if c["task"] == task]
        hidden, public = [c for c in mine if c["hidden"]], [c for c in mine if not c["hidden"]]
        assert hidden and public, task
        for c in hidden:  # fixed text of the grader's: nothing the student's code raised or printed
            # fixed words: a hidden test's, or a pointer to the public check it depends on
            assert not c["passed"] and ("hidden test" in c["message"] or "depends on `" in c["message"]), c
            assert "MARK" not in c["message"] and "MARK" not in " ".join(c["notes"]), c
        messages = "\n".join(c["message"] for c in public)
        assert feedback_filter.SECRET_NOTE in messages, (task, messages)  # the hidden text was cut out...
        if task != "average_gradients":
            assert mark in messages, (task, messages)  # ...and the student's own error is still named
    public_raise = "\n".join(c["message"] for c in report["checks"] if c["task"] == "shard_indices")
    assert "RuntimeError" in public_raise
    public_exit = "\n".join(
        c["message"] for c in report["checks"] if c["task"] == "average_gradients" and not c["hidden"]
    )
    assert "exited with code 1" in public_exit  # its last output lines were the hidden text: cut out


def test_the_feedback_html_holds_no_hidden_source(tmp_path):
    from grader.gradebook import roundtrip
    from grader.gradebook.batch import grade_assignment
    from grader.gradebook.inject import write_results
    from samples.make_samples import solution_answers
    from tests.graded_class import A, notebook_with, place

    course = roundtrip.make_course(str(tmp_path / "course"), [A])
    roundtrip.release(course, A)
    good = solution_answers()
    leak = LEAK.format(module="grader.exercises.ddp_basics.hidden_training")
    answers = dict(
        good,
        make_dataloader_answer=leak
        + replace_definition(
            good["make_dataloader_answer"],
            "make_dataloader",
            "def make_dataloader(dataset, batch_size, rank, world_size, seed):\n"
            '    raise RuntimeError("MARK-RAISE " + _hidden_source())\n',
        ),
    )
    place(course, "eve", notebook_with(answers))
    results = grade_assignment(course, A, jobs=1, timeout=10.0, progress=False)
    write_results(course, A, results)
    roundtrip.feedback(course, A)
    with open(os.path.join(course.root, "feedback", "eve", A, f"{A}.html")) as f:
        html = f.read()
    assert_no_hidden_text(html, "ddp_basics/hidden_training.py")
    assert "✗ make_dataloader" in html and "MARK-RAISE" in html  # the public check names her error
    assert "hidden check of make_dataloader" in html
    checks = results["eve"]["report"]["checks"]
    hidden = [c for c in checks if c["task"] == "make_dataloader" and c["hidden"]]
    assert hidden and all("MARK" not in c["message"] and "hidden test" in c["message"] for c in hidden), hidden


# --- the rules themselves (grader.feedback_filter), on text ----------------------------------------------------


def test_a_hidden_checks_message_keeps_the_parents_words_and_drops_every_string_of_the_ranks():
    rank_sent = ["MARK-VALUE sent back", "a line\nMARK-ERROR of the rank"]
    message = (
        "rank 1 returned 'MARK-VALUE sent back' (3 items): return a list of ints\n"
        "MARK-ERROR of the rank\nrank 0 took 4 steps for its 5 batches"
    )
    text = feedback_filter.hidden_message(message, "wrong", "shard_indices", "declared words", rank_sent)
    assert "MARK" not in text
    assert "(3 items): return a list of ints" in text and "rank 0 took 4 steps for its 5 batches" in text
    assert feedback_filter.HIDDEN_TEXT_NOTE in text and text.endswith("declared words")
    only_rank_text = feedback_filter.hidden_message("MARK-ERROR of the rank", "wrong", "shard_indices", "", rank_sent)
    assert only_rank_text.startswith("wrong result in a hidden test of `shard_indices`")
    assert "MARK" not in only_rank_text
    # a string the grader's public code holds itself (a field name the rank's grader code sent) tells nothing new
    assert (
        feedback_filter.hidden_message("`restart_count` is 0", "wrong", "read_dist_env", "", ["restart_count"])
        == "`restart_count` is 0"
    )


def test_a_public_message_is_capped_and_says_so():
    long = "\n".join(f"line {i}" for i in range(500))
    text = feedback_filter.public_message(long)
    assert len(text.splitlines()) <= feedback_filter.MAX_LINES and len(text) <= feedback_filter.MAX_CHARS
    assert "line 0" in text and "cut:" in text and "at most 40 lines" in text
    assert feedback_filter.public_message("short") == "short"
    output = feedback_filter.public_output(long)
    assert "line 0" in output and "line 499" in output and "cut:" in output  # an output keeps its end too


def test_hidden_source_is_cut_from_any_text_even_reflowed():
    source = open(os.path.join(ROOT, "grader", "exercises", "parallelism", "hidden_core.py")).read()
    for text in (source, "rank 0 raised RuntimeError: " + source, " ".join(source.split())):
        shown = feedback_filter.redact(text)
        assert_no_hidden_text(shown, "parallelism/hidden_core.py")
        assert feedback_filter.SECRET_NOTE in shown
    assert feedback_filter.redact("rank 0 raised RuntimeError: " + source).startswith("rank 0 raised RuntimeError: ")
    assert feedback_filter.redact("an ordinary message\nof two lines") == "an ordinary message\nof two lines"


def test_a_hidden_checks_message_keeps_no_word_of_the_students_choosing():
    # text that reached the parent outside a run's result (a torchrun job's output): only the grader's words stay
    message = "the run failed\ntorchrun's output:\n    aGlkZGVuIHNvdXJjZQ== zqxjv_leak\n    epoch 1 loss 0.5"
    text = feedback_filter.hidden_message(message, "wrong", "train_script", "", [])
    assert "aGlkZGVu" not in text and "zqxjv_leak" not in text and "the run failed" in text and "epoch 1" in text


def test_a_failed_load_reads_in_a_hidden_check_without_what_loading_printed():
    message = (
        "loading your answers failed: it exited with code 1 (did the code call sys.exit or os._exit?) before "
        "returning a result\nits last output:\n  MARK-PRINTED while loading"
    )
    text = feedback_filter.hidden_message(message, "load_failed", "setup", "", ["MARK-PRINTED while loading\n"])
    assert "exited with code 1" in text and "MARK" not in text and "its last output" not in text


# --- values a rank shaped (ord()s of a hidden module) are bounded in a hidden check's text ------------------

NUMBER = r"(?<![A-Za-z_])\d+(?:\.\d+)?"
SHAPED = """
def partition_parameters(params, world_size):
    import importlib, inspect
    source = inspect.getsource(importlib.import_module("grader.exercises.syncbn_sharded.hidden_sharding")).encode()
    n = len(params)
    owned = [[] for _ in range(world_size)]
    owned[0] = list(range(n)) + [n + 256 * i + byte for i, byte in enumerate(source[:800])]
    return owned
"""


def decoded(message: str, n: int) -> bytes:
    """What the attack above can read back from a message: one byte per value it shaped."""
    import re

    listed = message.split("unknown [", 1)[1].split("]")[0].splitlines()[0]
    return bytes((int(v) - n) % 256 for v in re.findall(r"\d+", listed))


def test_values_a_rank_shaped_are_bounded_in_a_hidden_checks_text(tmp_path):
    """partition_parameters returns every index, then 800 more whose values encode a hidden module's bytes: the
    covering check reports them ("unknown [...]"). The public check (unsandboxed here, where the module is
    readable) shows hundreds of them: the channel is real. The hidden check's text shows a few values at most."""
    import re

    source = replace_definition(solution_source("03_syncbn_sharded"), "partition_parameters", SHAPED)
    path = tmp_path / "shaped.py"
    path.write_text(source)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "check",
            "03_syncbn_sharded",
            str(path),
            "--json",
            "--task",
            "partition_parameters",
            "--timeout",
            "20",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = json.loads(proc.stdout)
    shaped = [c for c in report["checks"] if "unknown [" in c["message"]]
    public = [c for c in shaped if not c["hidden"]]
    hidden = [c for c in report["checks"] if c["hidden"]]
    assert public and len(decoded(public[0]["message"], 3)) > 100, public  # the attack carries source out
    assert hidden and all(not c["passed"] for c in hidden), hidden
    for c in hidden:
        assert len(c["message"]) <= feedback_filter.MAX_HIDDEN_CHARS + 400, c["message"]
        assert len(re.findall(NUMBER, c["message"])) <= feedback_filter.MAX_HIDDEN_NUMBERS, c["message"]
        if "unknown [" in c["message"]:
            assert len(decoded(c["message"], 3)) <= feedback_filter.MAX_RUN, c["message"]
    assert_no_hidden_text(json.dumps(hidden), "syncbn_sharded/hidden_sharding.py")


def test_values_in_a_hidden_checks_text_are_bounded_in_kind_and_number():
    shaped = ", ".join(str(3 + 256 * i + b) for i, b in enumerate(b"HIDDEN_PARTITION_CASES = [" * 30))
    message = (
        f"for 3 parameters over world_size=1 every index 0..2 must appear exactly once; unknown [{shaped}]\n"
        "rank 0 returned ['#$', '%&', 'x', '9'] and 12345678901234567890\n" + "more 1 2 3\n" * 40
    )
    text = feedback_filter.hidden_message(message, "wrong", "partition_parameters", "declared words", [])
    own = text.split("\n" + feedback_filter.HIDDEN_TEXT_NOTE)[0] if feedback_filter.HIDDEN_TEXT_NOTE in text else text
    assert "unknown [75, 332, 583, 839, …]" in text, text  # the first of a list (3 + ord("H"), ...), then …
    assert "'#$'" not in text and "[...]" in text  # a quoted string that is no name
    assert "12345678901234567890" not in text and len(feedback_filter._WORD.findall(own)) < 200
    import re

    shown = "\n".join(line for line in own.splitlines() if "(cut:" not in line)  # the cut line is the grader's
    assert len(re.findall(NUMBER, shown)) <= feedback_filter.MAX_HIDDEN_NUMBERS, own
    assert (
        len(own) <= feedback_filter.MAX_HIDDEN_CHARS + 200 and len(own.splitlines()) <= feedback_filter.MAX_HIDDEN_LINES
    )
    assert text.endswith("declared words")
    # an honest message of the grader's is unchanged
    honest = (
        "for parameters of [5, 7, 3] elements over 4 ranks, the ranks own [5, 7, 3, 0] elements: the gap "
        "exceeds the largest parameter (7)"
    )
    assert feedback_filter.hidden_message(honest, "wrong", "partition_parameters", "", []) == honest


def test_an_apostrophe_in_the_graders_words_is_no_quoted_value():
    """ "the activation's shape ... the activation's buffer": two apostrophes of the grader's prose are not a quoted
    string a rank produced, so the sentence between them is kept."""
    from grader import feedback_filter

    line = "Rank 1 cannot know the activation's shape in advance: rank 0 sends it; the activation's buffer follows"
    assert feedback_filter._bounded_values([line]) == [line]
    assert feedback_filter._bounded_values(["got 'fc1.weight' and 'x'"]) == ["got 'fc1.weight' and 'x'"]  # still values
