"""The lessons' Quick Checks: the plain answer key lives here, never in the package or the notebooks."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from grader.lessons import quiz
from tests.helpers import ROOT

KEY = {  # the plain key (the package stores salted hashes only)
    "01_data_vs_model_parallelism": "cbcdbadcba",
    "02_ddp_basics": "cdabbccdab",
    "03_syncbn_and_sharded_state": "bdcabadbcdcaa",
    "04_torchrun": "cbdabdacc",
}


def key_dict(lesson):
    return {f"q{i}": letter for i, letter in enumerate(KEY[lesson], 1)}


def lesson_path(lesson):
    return os.path.join(ROOT, "lessons", f"lesson_{lesson}.ipynb")


@pytest.mark.parametrize("lesson", KEY)
def test_exactly_the_key_is_right(lesson):
    assert list(quiz.QUIZZES[lesson]) == list(key_dict(lesson))
    for question, right in key_dict(lesson).items():
        for letter in "abcd":
            verdict = quiz.verdicts(lesson, {question: letter})[question]
            assert verdict == ("right" if letter == right else "wrong"), (lesson, question, letter)


@pytest.mark.parametrize("lesson", KEY)
def test_the_key_is_not_in_the_package_or_the_notebook(lesson):
    with open(quiz.__file__, encoding="utf-8") as f:
        package = f.read()
    with open(lesson_path(lesson), encoding="utf-8") as f:
        notebook = f.read()
    for text in (package, notebook):
        assert KEY[lesson] not in text
        assert json.dumps(key_dict(lesson)) not in text
    assert quiz.read_answers(lesson_path(lesson)) == {q: "" for q in key_dict(lesson)}, "ship the quiz unanswered"


def test_the_key_is_balanced_so_a_constant_guess_earns_little():
    for lesson in KEY:
        most = -(-len(KEY[lesson]) // 4)  # a quarter of the questions, rounded up
        for letter in "abcd":
            assert quiz.score(lesson, {q: letter for q in key_dict(lesson)}).right <= most, (lesson, letter)


def quick_check_options(lesson):
    """{question: {letter: option text}} parsed from the lesson's Quick Check cell, as the student reads it."""
    with open(lesson_path(lesson), encoding="utf-8") as f:
        cells = [c for c in json.load(f)["cells"] if c["cell_type"] == "markdown"]
    text = next("".join(c["source"]) for c in cells if "**q1.**" in "".join(c["source"]))
    return parse_options(text[text.index("**q1.**") :])


def parse_options(text):
    questions = {}
    for number, body in re.findall(r"\*\*q(\d+)\.\*\*(.*?)(?=\*\*q\d+\.\*\*|\Z)", text, flags=re.DOTALL):
        options, last = {}, None
        for line in body.splitlines():
            start = re.match(r"- ([a-d])\) (.*)", line)
            if start:
                last = start.group(1)
                options[last] = start.group(2).strip()
            elif last and line.startswith("  ") and line.strip():  # a wrapped option goes on
                options[last] += " " + line.strip()
            elif not line.strip():
                last = None
        questions[f"q{number}"] = options
    return questions


def key_stands_out(questions, key, longest=True):
    """The questions where the key is at least as long (or, longest=False, as short) as every other option:
    those a 'pick the longest' (or 'the shortest') guess wins."""

    def length(q, letter):
        return len(questions[q][letter]) if longest else -len(questions[q][letter])

    return [
        q
        for q, right in zip(questions, key)
        if all(length(q, right) >= length(q, letter) for letter in questions[q] if letter != right)
    ]


@pytest.mark.parametrize("lesson", KEY)
def test_the_length_of_an_option_says_little_about_the_key(lesson):
    questions = quick_check_options(lesson)
    assert list(questions) == list(key_dict(lesson)), "one Quick Check question per key letter, in order"
    assert all(sorted(options) == list("abcd") for options in questions.values()), questions
    for longest in (True, False):
        wins = key_stands_out(questions, KEY[lesson], longest)
        assert len(wins) <= len(questions) // 3, f"the key is the {'longest' if longest else 'shortest'} in {wins}"


def test_the_length_check_can_fail():
    text = (
        "**q1.** Why?\n- a) no\n- b) because every rank takes part in the collective\n- c) yes\n- d) maybe\n\n"
        "**q2.** And?\n- a) the long and right answer,\n  wrapped onto a second line\n- b) short\n- c) x\n- d) y\n"
    )
    questions = parse_options(text)
    assert questions["q2"]["a"] == "the long and right answer, wrapped onto a second line"
    assert key_stands_out(questions, "ba") == ["q1", "q2"]
    assert key_stands_out(questions, "ac", longest=False) == ["q1", "q2"]  # "x" and "y": a tie counts
    assert key_stands_out(questions, "db") == [] and key_stands_out(questions, "db", longest=False) == []


# A reason clause ("because ...", "so that ...", "...: it ...") tells a guesser which option was written with care.
REASON = re.compile(r"\b(because|since|so that|so|hence|thus|therefore|in order to|which is why)\b|: ", re.IGNORECASE)
NOT_PROSE = re.compile(r"`[^`]+`|\$[^$]+\$")  # code and formulas: their colons are not reasons


def key_alone_gives_a_reason(questions, key):
    """The questions where the key is the only option with a reason clause."""
    return [
        q
        for q, right in zip(questions, key)
        if {letter for letter, text in questions[q].items() if REASON.search(NOT_PROSE.sub(" ", text))} == {right}
    ]


@pytest.mark.parametrize("lesson", KEY)
def test_no_key_is_the_only_option_that_gives_a_reason(lesson):
    questions = quick_check_options(lesson)
    assert key_alone_gives_a_reason(questions, KEY[lesson]) == []


def test_the_reason_check_can_fail():
    text = (
        "**q1.** Why?\n- a) 3\n- b) 4, since every rank sends twice\n- c) 5\n- d) 6\n\n"
        "**q2.** And?\n- a) rank 2: it is late\n- b) rank 0: it leads\n- c) `a: b`\n- d) none\n\n"
        "**q3.** Then?\n- a) `x: y`\n- b) $a: b$\n- c) no\n- d) so that it fits\n"
    )
    questions = parse_options(text)
    assert key_alone_gives_a_reason(questions, "bad") == ["q1", "q3"]
    assert key_alone_gives_a_reason(questions, "aaa") == []


def section_numbers(lesson):
    """The numbers of the lesson's sections and subsections, from its headings: 4, 4.3, 6b, 14.2."""
    with open(lesson_path(lesson), encoding="utf-8") as f:
        markdown = "\n".join("".join(c["source"]) for c in json.load(f)["cells"] if c["cell_type"] == "markdown")
    return set(re.findall(r"^#{2,4} (\d+[a-z]?(?:\.\d+)?)\.? ", markdown, flags=re.MULTILINE))


def cited_sections(why):
    return re.findall(r"§(\d+[a-z]?(?:\.\d+)?)", why)


@pytest.mark.parametrize("lesson", KEY)
def test_every_section_an_explanation_cites_exists(lesson):
    sections = section_numbers(lesson)
    for question, item in quiz.QUIZZES[lesson].items():
        cited = cited_sections(item.why)
        assert cited, f"{question}'s explanation cites no section"
        missing = [s for s in cited if s not in sections]
        assert not missing, f"{question}'s explanation cites §{', §'.join(missing)}, which {lesson} does not have"


def test_the_citation_check_can_fail():
    assert cited_sections("3/7, about 43% (§3.2); see also §6b and §14.") == ["3.2", "6b", "14"]
    assert "3.2" not in section_numbers("01_data_vs_model_parallelism")
    assert {"4.3", "5", "8"} <= section_numbers("01_data_vs_model_parallelism")


def test_check_prints_a_verdict_and_an_explanation_per_answered_question(capsys):
    lesson = "02_ddp_basics"
    answers = {"q1": "c", "q2": "b", "q3": "(A)"}  # right, wrong, right in another spelling
    assert quiz.check(lesson, answers) is None
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("q1  ✓ c: ") and len(lines[0]) > 30
    assert lines[1].startswith("q2  ✗ b: ") and len(lines[1]) > 30
    assert lines[2].startswith("q3  ✓ a: ")
    assert lines[3:10] == [f"q{i}  unanswered" for i in range(4, 11)]
    assert lines[-1] == "2/10 right"
    assert str(quiz.score(lesson, answers)) == "2/10 right (7 unanswered)"


def test_all_unanswered_and_bad_input(capsys):
    quiz.check("02_ddp_basics", {})
    assert "No answers yet" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no Quick Check"):
        quiz.check("99_nope", {})
    with pytest.raises(TypeError, match="must be a dict"):
        quiz.check("02_ddp_basics", ["c"])


def student_lessons(tmp_path, answers_by_lesson):
    """A course folder whose lessons hold these answers, written into the tagged answer cell."""
    os.makedirs(tmp_path / "lessons")
    for lesson in KEY:
        with open(lesson_path(lesson), encoding="utf-8") as f:
            nb = json.load(f)
        if lesson in answers_by_lesson:
            cell = next(c for c in nb["cells"] if quiz.ANSWERS_TAG in c["metadata"].get("tags", []))
            cell["source"] = answers_by_lesson[lesson]
        with open(tmp_path / "lessons" / f"lesson_{lesson}.ipynb", "w", encoding="utf-8") as f:
            json.dump(nb, f)
    return str(tmp_path)


def test_scores_are_read_from_the_saved_lessons_without_running_them(tmp_path):
    right2 = key_dict("02_ddp_basics")
    root = student_lessons(
        tmp_path,
        {
            "02_ddp_basics": f"answers = {json.dumps(right2)}\n",
            "03_syncbn_and_sharded_state": "answers = {'q1': \n",  # a half-typed cell
        },
    )
    scores = dict(quiz.lesson_scores(root))
    assert scores["02_ddp_basics"] == "10/10 right"
    assert (
        scores["03_syncbn_and_sharded_state"]
        == "cannot read the answers: the answer cell does not parse: '{' was never closed (line 1)"
    )
    root = student_lessons(
        tmp_path / "again",
        {
            "02_ddp_basics": 'answers = {"q1": "c", "q2": "b"}  # two answered\n',
            "03_syncbn_and_sharded_state": "answers = dict(q1='b')\n",  # not a plain dict literal
        },
    )
    scores = dict(quiz.lesson_scores(root))
    assert scores["02_ddp_basics"] == "1/10 right (8 unanswered)"
    assert scores["03_syncbn_and_sharded_state"].startswith("cannot read the answers: `answers` must be a plain dict")
    os.remove(tmp_path / "again" / "lessons" / "lesson_01_data_vs_model_parallelism.ipynb")
    assert "no lesson notebook found" in quiz.quiz_report(root)


def test_progress_lists_the_quiz_scores(tmp_path):
    root = student_lessons(tmp_path, {"02_ddp_basics": 'answers = {"q1": "c"}\n'})
    shutil.copy(os.path.join(ROOT, "nbgrader_config.py"), root)
    os.makedirs(os.path.join(root, "exercises"))
    done = subprocess.run(
        [sys.executable, "-m", "grader", "progress", "--root", root],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "02_ddp_basics                  1/10 right (9 unanswered)" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "grader", "progress", "--root", root, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lessons = json.loads(done.stdout)["lessons"]
    assert {"lesson": "02_ddp_basics", "quiz": "1/10 right (9 unanswered)"} in lessons


@pytest.mark.parametrize("lesson", KEY)
def test_the_quick_check_works_from_a_fresh_kernel(lesson):
    """A student who jumps to the Quick Check from the table of contents runs only its two cells."""
    import nbformat
    from nbclient import NotebookClient

    with open(lesson_path(lesson), encoding="utf-8") as f:
        notebook = nbformat.read(f, as_version=4)
    at = next(i for i, c in enumerate(notebook.cells) if "quiz-answers" in c.metadata.get("tags", []))
    notebook.cells = notebook.cells[at : at + 2]  # `answers = {...}`, then the cell that checks them
    assert notebook.cells[1].source.lstrip().startswith("from grader.lessons.quiz import check"), notebook.cells[1]
    NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": os.path.dirname(lesson_path(lesson))}},
    ).execute()
    printed = "".join(o.get("text", "") for o in notebook.cells[1].outputs)
    assert "q1" in printed and "unanswered" in printed, notebook.cells[1].outputs


def _quick_check_cells(path: str):
    """(the Quick Check's code cell, the answers its previous code cell defines) of a saved lesson."""
    with open(path, encoding="utf-8") as f:
        cells = [c for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    for i, cell in enumerate(cells):
        if re.search(r'^check\("\w+", answers\)', "".join(cell["source"]), re.M):
            scope: dict = {}
            exec("".join(cells[i - 1]["source"]), scope)  # the answers cell: one dict literal
            return cell, scope["answers"]
    raise AssertionError(f"{path}: no Quick Check cell")


@pytest.mark.parametrize("lang", ["", "es", "nl", "ja"])
@pytest.mark.parametrize("lesson", KEY)
def test_the_stored_quick_check_is_unanswered_and_lists_every_question(lesson, lang, monkeypatch, capsys):
    """What a student sees before running anything: every question of the quiz unanswered, as check() prints it
    (a translated lesson keeps the English outputs, grader/translate)."""
    path = os.path.join(ROOT, "lessons", lang, f"lesson_{lesson}.ipynb")
    monkeypatch.delenv("COURSE_LANG", raising=False)
    cell, answers = _quick_check_cells(path)
    assert set(answers) == {f"q{i}" for i in range(1, len(KEY[lesson]) + 1)} and not any(answers.values())
    quiz.check(lesson, answers)
    expected = capsys.readouterr().out
    stored = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    assert stored == expected, f"{path}: the Quick Check's stored output is stale:\n{stored}"
