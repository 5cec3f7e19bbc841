"""A hang and a gloo abort in Spanish (COURSE_LANG=es): every sentence the student reads about them is Spanish,
the divergence lines, each rank's state and stack, and the folded-frames line included. Real 2-rank runs."""

from __future__ import annotations

import re

import pytest

from grader import i18n
from tests.helpers import BARRIER_ON_RANK_0_ONLY, failed, grade_source, mutate, replace_definition, solution_source

EX = "02_ddp_basics"
# Words of English prose that no Spanish sentence of ours holds (identifiers and code are taken out first).
ENGLISH = re.compile(
    r"\b(the|your|you|called|made|waiting|hung|before|which|with|line|was|were|returned|exited|other|every|never|"
    r"none|frames?|folded|stack|code|in|of|and|to|is|not|by|at|its|grader's)\b"
)


def _prose(message: str) -> list[str]:
    """The message's lines without what is not ours to translate: inline code, gloo's own C++ words (an aborted
    rank's last output), and the names of files and functions in a list of frames."""
    lines, in_output = [], False
    for line in message.splitlines():
        if line.strip() == "su última salida:":
            in_output = True
            continue
        if in_output and line.startswith("  "):
            continue
        in_output = False
        line = re.sub(r"`[^`]*`", "", line)
        line = re.sub(r"(en|at) \S+ \(\S+:\d+\)", "", line)  # a function and its file:line
        line = re.sub(r"\S+\.py(:\d+)? \S+", "", line)  # a folded frame: file:line function
        line = re.sub(r"[\w./<>\[\]-]+\.py\b", "", line)
        line = re.sub(r", en \w+: .*$", "", line)  # a frame's code after its function
        line = re.sub(r"\b\w*_\w*\b|<\w+>", "", line)  # identifiers (all_reduce, train_one_epoch, <listcomp>)
        lines.append(line)
    return lines


def english_lines(message: str) -> list[str]:
    """The lines of a Spanish message that hold English prose (tests/test_browser.py reads the page with it)."""
    return [line for line in _prose(message) if ENGLISH.search(line)]


@pytest.fixture
def spanish(monkeypatch):
    for name in i18n.LANGUAGE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COURSE_LANG", "es")


def test_a_spanish_hang_has_no_english_sentence(spanish):
    source = replace_definition(solution_source(EX), "save_checkpoint", BARRIER_ON_RANK_0_ONLY)
    report = grade_source(EX, source, task="save_checkpoint", timeout=5)
    messages = failed(report)
    assert len(messages) == len(report.checks) and any(c.hung for c in report.checks), "\n".join(report.lines())
    text = "\n".join(messages.values())
    assert "el rank 0 se colgó: esperando en barrier" in text, text
    assert "nunca llamó en tu código" in text and "línea" in text, text
    assert not english_lines(text), "\n".join(english_lines(text)) + "\n\n" + text


def test_a_spanish_abort_has_no_english_sentence(spanish):
    source = mutate(
        solution_source(EX),
        "    dist.all_reduce(totals)\n",
        "    if dist.get_rank() == 0:\n        dist.all_reduce(totals)\n",
    )
    report = grade_source(EX, source, checks=["train_calls_set_epoch"], timeout=10)
    message = failed(report)["train_calls_set_epoch"]
    assert "terminó con la señal SIGABRT" in message and "el all-reduce de gradientes que DDP ejecuta" in message
    assert "solo se ejecuta donde `dist.get_rank() == 0` es True" in message, message
    assert not english_lines(message), "\n".join(english_lines(message)) + "\n\n" + message


def test_ddps_gradient_all_reduce_is_named_even_when_its_line_is_unknown():
    """A student line whose source the parent lacks is never quoted as an empty `` (divergence._Step.said)."""
    from grader.engine.divergence import _Step

    autograd = "/usr/lib/python3/site-packages/torch/autograd/graph.py"
    step = _Step("all_reduce", ((autograd, 825, "_engine_run_backward"), ("<cell 77>", 9, "train_one_epoch")))
    said = step.said()
    assert "DDP runs inside your backward() call" in said and "``" not in said, said
