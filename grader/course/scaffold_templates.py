"""The files `python -m grader new-exercise` writes (grader/course/scaffold.py fills them in).

They make a small exercise that works as it stands: one task (sum a tensor over all ranks), one
public check and one hidden check, a solution that gets full marks and a release that gets 0.
The newcomer replaces the example task and checks with theirs; `make exercises` then stamps the
check cell's points from the checks and regenerates the release.

Placeholders ($name) are string.Template's: $id, $package, $task, $snake (the task in snake_case),
$title, and nbgrader's region markers (MARKERS: spelled here only as values, so that the student build,
which refuses any file holding a solution or hidden-tests region, can ship this module).
"""

from string import Template

from grader import cells

MARKERS = dict(
    solution_begin="### BEGIN SOLUTION",
    solution_end="### END SOLUTION",
    hidden_begin=cells.HIDDEN_BEGIN,
    hidden_end=cells.HIDDEN_END,
)

INIT = Template('''\
"""Exercise $id: $title.

Found by convention (grader/exercises/__init__.py): this file declares the exercise, the checks_*.py
modules hold its public checks, the hidden_*.py modules its hidden ones (never in a student build),
reference.py the single-process references the checks compare with. Every other module is named here
(tests/test_maps.py):

    checks_$snake.py  $task
"""

from grader.checks import Exercise

# The tasks in the notebook's order; each has an answer cell and a check cell in solutions/$id/$id.ipynb.
EXERCISE = Exercise("$id", tasks=["$task"])
''')

CHECKS = Template('''\
"""$id: $task, the public checks (students see these, and their messages in full).

A check runs in the grader's process (the parent). `g.run(fn, ...)` runs fn in every rank, with the
student's answers loaded (`student.task("$task")`), and returns one value per rank: send back data
(tensors, numbers, strings), not verdicts. The parent compares with a single-process reference
(reference.py) and raises CheckFailed with the likely mistake: that message is what the student reads.
The rules every check follows: grader/runner.py's docstring and CONTRIBUTING.md, "Adding a check".
"""

from __future__ import annotations

import torch

from grader.checks import CheckFailed
from grader.exercises.$package import EXERCISE
from grader.exercises.$package import reference as ref


def answer_in_rank(ctx, student, length):
    """In every rank: the student's $task on this rank's input; what it returned, on the CPU."""
    answer = student.task("$task")
    result = answer(ref.rank_input(ctx.rank, length).to(ctx.device))
    if not isinstance(result, torch.Tensor):
        raise CheckFailed(f"$task returned {type(result).__name__}, not a tensor")
    return result.detach().cpu()


def judge_sums(g, per_rank, length):
    """The parent's verdict on what every rank returned (the hidden checks use it too)."""
    expected = ref.sum_over_ranks(len(per_rank), length)
    for rank, got in enumerate(per_rank):
        if got.shape == expected.shape and torch.equal(got, ref.rank_input(rank, length)):
            raise CheckFailed(f"rank {rank} returned its own tensor: sum every rank's tensor (dist.all_reduce)")
        g.assert_close(got, expected, f"rank {rank}'s result", "every rank must return the sum of all ranks' tensors")


@EXERCISE.check("$task", points=2)
def returns_the_sum_over_ranks(g):
    """The grader's world size, 8 elements: every rank returns the sum of all ranks' tensors."""
    judge_sums(g, g.run(answer_in_rank, 8), 8)
''')

HIDDEN = Template('''\
"""$id: $task, the hidden checks (instructor only: left out of the student build).

A hidden check's message is the parent's words only: what ranks sent is shown as [...], and what a rank
raised or printed never reaches the student (CONTRIBUTING.md, "What students never receive"). Hidden
inputs (edge cases, other world sizes) and references that are themselves an answer live here.
"""

from __future__ import annotations

from grader.exercises.$package import EXERCISE
from grader.exercises.$package.checks_$snake import answer_in_rank, judge_sums

# make selfcheck grades the solution with this line of its answers replaced: the task must lose points;
# it quotes the answer, so it lives here, out of the student build (tests/test_selfcheck_mistakes.py).
EXERCISE.typical_mistakes.append(("dist.all_reduce(total)", "pass  # no all_reduce: each rank keeps its own"))


@EXERCISE.check("$task", points=1, hidden=True, world_size=3)
def sums_over_three_ranks(g):
    """Three ranks, 5 elements."""
    judge_sums(g, g.run(answer_in_rank, 5, world_size=3), 5)
''')

REFERENCE = Template('''\
"""$id: the single-process references and the inputs the checks share.

What goes here: the inputs each rank gets, seeded so that the parent can rebuild them, and what a
correct answer computes, written without torch.distributed (one process, the whole batch), so the
parent knows the expected result. Never the task's answer itself: a function a student could paste
as the answer goes in a hidden_*.py module, and no function here is named after a task.
"""

import torch


def rank_input(rank: int, length: int) -> torch.Tensor:
    """The tensor rank `rank` starts with."""
    return torch.randn(length, generator=torch.Generator().manual_seed(1000 + rank))


def sum_over_ranks(world_size: int, length: int) -> torch.Tensor:
    return sum(rank_input(rank, length) for rank in range(world_size))
''')

TEST = Template('''\
"""Exercise $id: the solution gets full marks, and each typical mistake fails the check that targets
it, with a message naming it (real multi-process runs, like the grader). The untouched release scoring
0 and the notebook's cells and points are tested for every exercise (tests/test_selfcheck.py,
tests/test_cells.py)."""

from __future__ import annotations

from grader.exercises import get_exercise
from tests.helpers import failed, grade_source, replace_definition, solution_source

EXERCISE = "$id"


def test_solution_gets_full_marks():
    report = grade_source(EXERCISE, solution_source(EXERCISE))
    assert failed(report) == {}, "\\n".join(report.lines())
    assert report.score == report.max_score == get_exercise(EXERCISE).max_score


def test_returning_its_own_tensor_earns_nothing():
    # The laziest wrong answer: give back the input untouched.
    lazy = "def $task(tensor):\\n    return tensor\\n"
    lazy_source = replace_definition(solution_source(EXERCISE), "$task", lazy)
    report = grade_source(EXERCISE, lazy_source, task="$task")
    assert report.score == 0, "\\n".join(report.lines())
    assert "returned its own tensor" in failed(report)["returns_the_sum_over_ranks"]
''')

HINTS = Template('''\
"""Hints of exercise $id: hint("$task") reveals them one by one (grader/notebook/hints.py).

Every task of the exercise has a ladder of 2 or 3 hints, from a nudge to the key API, never the answer's
code (tests/test_hints.py compares every hint with the solution cells). Replace the example's with yours.
A hint shows in English until it is marked for translation: wrap it in N_ (from grader.i18n import N_),
run `make translations` and translate its entries in grader/locale/<lang>/LC_MESSAGES/grader.po
(tests/test_i18n.py then wants every language's entry filled in).
"""

HINTS = {
    "$task": [
        "Every rank starts with a different tensor and all must end with the same one: which collective "
        "combines one tensor from every rank?",
        "`dist.all_reduce` sums in place, into the tensor you pass it: give it a copy, so that the caller's "
        "input stays as it was.",
    ],
}

# Each public check's own hint: after that check failed, hint(task) shows it first (tests/test_hints.py wants one
# per public check, a nudge, never the answer's code).
CHECK_HINTS = {
    "returns_the_sum_over_ranks": "Every rank must return the same tensor: the sum of every rank's input.",
}
''')

TASK_TEXT = Template("""\
## Task 1: `$task`

```python
def $task(tensor: torch.Tensor) -> torch.Tensor
```

Return the sum of `tensor` over all ranks: every rank gets the same result. (The example task of a new
exercise: replace this text, the answer below and the checks in `grader/exercises/$package/` with yours.)""")

INTRO = Template("""\
# Exercise $number: $title

What this exercise asks and which lesson explains it.

**How checking works.** Each task ends with a check cell such as `check("$task")`. It takes the code
currently defined in this notebook, starts real separate processes (2 ranks, gloo on CPU), runs your
function in each of them, and compares the result with a single-process reference.""")

ANSWER = Template("""\
import torch
import torch.distributed as dist


def $task(tensor: torch.Tensor) -> torch.Tensor:
    $solution_begin
    total = tensor.clone()
    dist.all_reduce(total)
    return total
    $solution_end""")

CHECK_CELL = Template("""\
check("$task")
$hidden_begin
check("$task", hidden=True)
$hidden_end""")

SETUP_CELL = Template("""\
from grader.notebook import checker, hinter

check = checker("$id")
hint = hinter("$id")""")

PROGRESS_CELL = """\
from grader.progress import show_progress

show_progress()  # which tasks of every assignment pass, from your saved notebooks (save first)"""
