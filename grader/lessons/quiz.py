"""The lessons' Quick Checks: check a student's answers, and read them back from a saved lesson.

Taught: the "Quick Check" section at the end of each lesson (lessons/lesson_0N_*.ipynb). In the lesson:

    answers = {"q1": "", "q2": "", ...}      # the student's letters
    check("02_ddp_basics", answers)          # ✓/✗ and a one-line explanation per answered question

The questions' keys and explanations are in quiz_questions.py, not in plain text: each question keeps a random salt and the truncated
SHA-256 of salt and right letter (tests/test_quiz.py holds the plain key). With four options a
determined reader can still try every letter; the hash only keeps the key from being read at a glance.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from dataclasses import dataclass

from grader.i18n import _
from grader.lessons.quiz_questions import QUIZZES, Question

ANSWERS_TAG = "quiz-answers"  # the metadata tag of the lesson cell that holds `answers = {...}`


def _digest(salt: str, answer: str) -> str:
    return hashlib.sha256(f"{salt}:{answer}".encode()).hexdigest()[:16]


def _normal(answer) -> str:
    return answer.strip().lower().strip("()") if isinstance(answer, str) else ""


def _quiz(lesson: str) -> dict[str, Question]:
    if lesson not in QUIZZES:
        raise ValueError(f"no Quick Check for lesson {lesson!r}; known: {', '.join(QUIZZES)}")
    return QUIZZES[lesson]


def verdicts(lesson: str, answers: dict) -> dict[str, str]:
    """'right', 'wrong' or 'unanswered' for each question of the lesson, in order."""
    if not isinstance(answers, dict):
        raise TypeError(_("answers must be a dict such as {{'q1': 'a'}}, not {type}", type=type(answers).__name__))
    out = {}
    for name, q in _quiz(lesson).items():
        given = _normal(answers.get(name, ""))
        out[name] = "unanswered" if not given else "right" if _digest(q.salt, given) == q.digest else "wrong"
    return out


@dataclass
class QuizScore:
    lesson: str
    right: int
    answered: int
    total: int

    def __str__(self) -> str:
        if not self.answered:
            return _("not answered yet")
        unanswered = self.total - self.answered
        return _("{right}/{total} right", right=self.right, total=self.total) + (
            " " + _("({n} unanswered)", n=unanswered) if unanswered else ""
        )


def score(lesson: str, answers: dict) -> QuizScore:
    v = verdicts(lesson, answers)
    return QuizScore(lesson, sum(x == "right" for x in v.values()), sum(x != "unanswered" for x in v.values()), len(v))


def check(lesson: str, answers: dict) -> None:
    """Print ✓/✗ and the explanation for each answered question, "unanswered" for the others.

    Taught: each lesson's "Quick Check" section. Never raises on a wrong answer, so the lesson runs to the end.
    """
    unknown = sorted(set(answers) - set(_quiz(lesson))) if isinstance(answers, dict) else []
    for name, verdict in verdicts(lesson, answers).items():
        if verdict == "unanswered":
            print(f"{name}  " + _("unanswered"))
        else:
            mark = "✓" if verdict == "right" else "✗"
            print(f"{name}  {mark} {_normal(answers[name])}: {_(_quiz(lesson)[name].why)}")
    if unknown:
        print(_("(ignored: {names} is not a question of this lesson)", names=", ".join(unknown)))
    result = score(lesson, answers)
    print(
        _("{right}/{total} right", right=result.right, total=result.total)
        if result.answered
        else _("No answers yet: fill in `answers` above.")
    )


# --- reading a saved lesson, for the progress overview --------------------------------------


def read_answers(path: str) -> dict:
    """The `answers` dict of a saved lesson notebook, parsed from its source without running it.

    Raises ValueError when the notebook or its answer cell cannot be read.
    """
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    cells = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    tagged = [c for c in cells if ANSWERS_TAG in c.get("metadata", {}).get("tags", [])]
    for cell in tagged or cells:
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            if tagged:
                raise ValueError(
                    _("the answer cell does not parse: {error} (line {line})", error=exc.msg, line=exc.lineno)
                ) from None
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "answers" for t in node.targets
            ):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    raise ValueError(_("`answers` must be a plain dict of letters, e.g. {'q1': 'a'}")) from None
                if not isinstance(value, dict):
                    raise ValueError(_("`answers` must be a dict, e.g. {'q1': 'a'}"))
                return value
    raise ValueError(_("no `answers = {...}` cell found"))


def lesson_scores(root: str) -> list[tuple[str, str]]:
    """(lesson, what to show) for each lesson, from the saved notebooks in <root>/lessons."""
    rows = []
    for lesson in QUIZZES:
        path = os.path.join(root, "lessons", f"lesson_{lesson}.ipynb")  # the Quick Check of lesson_<id>.ipynb is <id>
        if not os.path.isfile(path):
            rows.append((lesson, _("no lesson notebook found")))
            continue
        try:
            rows.append((lesson, str(score(lesson, read_answers(path)))))
        except (OSError, ValueError) as exc:
            rows.append((lesson, _("cannot read the answers: {error}", error=exc)))
    return rows


def quiz_report(root: str) -> str:
    """The lessons' rows of the progress overview (`python -m grader progress`, show_progress())."""
    lines = [_("Lesson Quick Checks (the `answers` cell of your saved lessons/*.ipynb):")]
    lines += [f"{lesson:<30} {shown}" for lesson, shown in lesson_scores(root)]
    return "\n".join(lines)
