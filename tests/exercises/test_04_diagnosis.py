"""04_torchrun, diagnose_hang: each typical mistake fails with a message that names it; the laziest answers earn
nothing. The solution's full marks on the notebook's hung jobs and the hidden ones: tests/test_selfcheck.py
(test_each_solution_passes_every_check_of_every_task), from make selfcheck's grading. The checks run the student's
function in one rank on staged dumps (grader/exercises/torchrun/hangs.py): one cheap run per check."""

import os
import random

import pytest

from grader.exercises.torchrun.hangs import EXAMPLES, stage
from grader.exercises.torchrun.hidden_diagnosis import unseen_hangs
from grader.submission import read_notebook
from tests.helpers import (
    assert_lazy_answer_earns_nothing,
    assert_one_reason,
    failed,
    grade_source,
    ROOT,
    mutate,
    replace_definition,
    solution_source,
)

EXERCISE = "04_torchrun"
TASK = "diagnose_hang"
PUBLIC, HIDDEN = "diagnose_hang_names_the_rank_behind", "diagnose_hang_on_unseen_hangs"
NEWEST = (
    '    newest = {rank: max((e["collective_seq_id"] for e in dump["entries"]), default=0)\n'
    "              for rank, dump in dumps.items()}\n"
)


def grade(source: str):
    return grade_source(EXERCISE, source, task=TASK)


def test_the_untouched_release_earns_nothing():
    release = read_notebook(os.path.join(ROOT, "exercises", EXERCISE, f"{EXERCISE}.ipynb"))
    report = grade("\n\n".join(cell.source for cell in release.cells))
    assert report.checks and report.score == 0, "\n".join(report.lines())
    assert "replace the stub with your code" in failed(report)[PUBLIC], "\n".join(report.lines())
    assert_one_reason(report, PUBLIC)  # the hidden check points to it


@pytest.mark.parametrize("seed", range(20))
def test_the_staged_hangs_hold_the_traps_the_mistakes_fall_into(seed):
    """Every staged set can tell the mistakes apart, in every draw of the hidden one: the rank that queued the most
    is never the one behind, the missing collective's name differs from the last completed one, some hang is not
    rank 0's and (hidden) one is; a full buffer makes entry counts tie; a rank has no entry at all."""
    unseen = unseen_hangs(random.Random(seed))
    for hangs in (EXAMPLES, unseen):
        assert any(h.behind != 0 for h in hangs)
        for h in hangs:
            assert h.behind != max(range(h.world_size), key=h.newest)
            assert h.last_completed() is None or h.last_completed()[1] != h.answer()[2]
    assert any(h.behind == 0 for h in unseen)
    counts = [{len(d["entries"]) for d in stage(h).values()} for h in unseen if h.behind != 0]
    assert any(len(c) == 1 for c in counts), "no hidden hang where every rank's buffer is full"
    assert any(h.missing_seq == 1 for h in unseen), "no hidden hang with a rank that never called a collective"


HIGHEST = """
def diagnose_hang(dumps):
    newest = {rank: dump["entries"][-1]["collective_seq_id"] for rank, dump in dumps.items()}
    rank = max(newest, key=newest.get)
    return rank, newest[rank], dumps[rank]["entries"][-1]["profiling_name"]
"""
LAST_COMPLETED = """
def diagnose_hang(dumps):
    newest = {rank: dump["entries"][-1]["collective_seq_id"] for rank, dump in dumps.items()}
    rank = min(newest, key=newest.get)
    return rank, newest[rank], dumps[rank]["entries"][-1]["profiling_name"]
"""
RANK_0 = """
def diagnose_hang(dumps):
    newest = {rank: dump["entries"][-1]["collective_seq_id"] for rank, dump in dumps.items()}
    missing = min(newest.values()) + 1
    entry = next(e for d in dumps.values() for e in d["entries"] if e["collective_seq_id"] == missing)
    return 0, missing, entry["profiling_name"]
"""
COUNTED = """
def diagnose_hang(dumps):
    behind = min(dumps, key=lambda r: len(dumps[r]["entries"]))
    entries = dumps[behind]["entries"]
    seq = entries[-1]["collective_seq_id"] + 1 if entries else 1
    names = [e["profiling_name"] for d in dumps.values() for e in d["entries"] if e["collective_seq_id"] == seq]
    return behind, seq, names[0] if names else ""
"""

# (what the student did, the solution with it, the check that fails, a phrase of its message)
MUTANTS = [
    (
        "the rank with the highest seq",
        lambda s: replace_definition(s, TASK, HIGHEST),
        PUBLIC,
        "enqueued the most collectives",
    ),
    (
        "the last completed collective",
        lambda s: replace_definition(s, TASK, LAST_COMPLETED),
        PUBLIC,
        "the last collective every rank completed",
    ),
    ("rank 0 assumed", lambda s: replace_definition(s, TASK, RANK_0), PUBLIC, "you named rank 0"),
    (
        "entries counted",
        lambda s: replace_definition(s, TASK, COUNTED),
        HIDDEN,
        "whose newest entry has the lowest collective_seq_id",
    ),  # every buffer full: the counts tie
    (
        "an empty buffer not handled",
        lambda s: mutate(s, NEWEST, NEWEST.replace(", default=0", "")),
        HIDDEN,
        "a rank that never called a collective has an empty `entries` list",
    ),
]


@pytest.mark.parametrize("make, check, phrase", [m[1:] for m in MUTANTS], ids=[m[0] for m in MUTANTS])
def test_typical_mistake_fails_with_a_message_that_names_it(make, check, phrase):
    report = grade(make(solution_source(EXERCISE)))
    messages = failed(report)
    assert check in messages, "\n".join(report.lines())
    if check == HIDDEN and PUBLIC in messages:  # the public hangs caught it too: said once, there
        assert_one_reason(report, PUBLIC)
    else:
        assert phrase.lower() in messages[check].lower(), messages[check]
    assert report.score == 0 or check == HIDDEN, "\n".join(report.lines())


def test_a_hidden_failure_says_what_the_hidden_hangs_hold():
    report = grade(mutate(solution_source(EXERCISE), NEWEST, NEWEST.replace(", default=0", "")))
    message = failed(report)[HIDDEN]
    assert "a rank that never called a collective (empty entries)" in message, message


STUB = """
def diagnose_hang(dumps: dict) -> tuple:
    # YOUR CODE HERE
    raise NotImplementedError()
"""
LAZY = [
    (STUB, "replace the stub with your code"),
    ("def diagnose_hang(dumps):\n    pass", "diagnose_hang returned NoneType"),
    ("def diagnose_hang(dumps):\n    return 0, 0, ''", "you named rank 0"),
    ("def diagnose_hang(dumps):\n    return 0, 1, 'nccl:all_reduce'", "you named rank 0"),
]


@pytest.mark.parametrize("code, phrase", LAZY, ids=[p for _, p in LAZY])
def test_laziest_answers_earn_nothing(code, phrase):
    assert_lazy_answer_earns_nothing(EXERCISE, TASK, code, phrase)


# --- the public check: the notebook's hangs disguised at each grading ---

LOOKUP = """
def diagnose_hang(dumps):
    from grader.exercises.torchrun.hangs import EXAMPLES, stage
    for hang in EXAMPLES:  # the notebook's hangs, importable: a table of their answers
        if stage(hang) == dumps:
            return hang.answer()
    return 1, 1, "nccl:broadcast"
"""


def test_a_lookup_of_the_notebooks_hangs_earns_nothing():
    report = grade(replace_definition(solution_source(EXERCISE), TASK, LOOKUP))
    assert report.score == 0 and set(failed(report)) == {PUBLIC, HIDDEN}, "\n".join(report.lines())


def _run(code: str):
    namespace = {}
    exec(code, namespace)
    return namespace["diagnose_hang"]


SOLUTION_FN = None


def _solution():
    global SOLUTION_FN
    if SOLUTION_FN is None:
        source = solution_source(EXERCISE)
        start = source.index("def diagnose_hang(")
        end = source.index("### END SOLUTION", start)
        SOLUTION_FN = _run(source[start:end])
    return SOLUTION_FN


# each mistake -> what every one of its public failures names
NAMED = {
    "highest seq": (HIGHEST, "enqueued the most collectives"),
    "rank 0": (RANK_0, "you assumed rank 0"),
    "entries counted": (COUNTED, "you counted entries"),
    "last completed": (LAST_COMPLETED, "the last collective every rank completed"),
}


def _verdicts(fn, seed: int) -> list:
    from grader.exercises.torchrun.checks_diagnosis import _plain, public_hangs, verdict

    return [
        verdict(h, _plain(fn(stage(h))), f"in example {i + 1}") for i, h in enumerate(public_hangs(random.Random(seed)))
    ]


def test_the_public_draw_changes_the_answers_and_keeps_every_verdict():
    """Over 50 draws: the answers differ from the notebook's (a lookup table fails), the solution passes every
    time, and each mistake fails every time (the same score), with a message naming it."""
    from grader.exercises.torchrun.checks_diagnosis import public_hangs

    for seed in range(50):
        hangs = public_hangs(random.Random(seed))
        assert all(h.answer() != e.answer() for h, e in zip(hangs, EXAMPLES)), seed
        assert all(h.behind != max(range(h.world_size), key=h.newest) for h in hangs)
        assert [h.behind == 0 for h in hangs] == [e.behind == 0 for e in EXAMPLES]
        assert _verdicts(_solution(), seed) == [None, None, None], seed
        for name, (code, phrase) in NAMED.items():
            wrong = [v for v in _verdicts(_run(code), seed) if v is not None]
            assert wrong, (name, seed)
            assert phrase in wrong[0], (name, seed, wrong[0])


def test_a_count_or_rank_0_mistake_is_not_told_only_about_the_highest_seq():
    """Rank 0 waiting with the most collectives queued: an answer of rank 0 is told every reading it fits."""
    from grader.exercises.torchrun.checks_diagnosis import verdict

    hang = EXAMPLES[0]  # rank 0 enqueued the most
    assert max(range(hang.world_size), key=hang.newest) == 0
    message = verdict(hang, {"answer": [0, hang.missing_seq, hang.answer()[2]]}, "here")
    assert "you assumed rank 0" in message and "enqueued the most collectives" in message, message
