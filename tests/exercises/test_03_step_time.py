"""03_syncbn_sharded, plan_layout: the solution gets full marks (public and hidden) from one launch each; the
untouched release and lazy answers earn nothing; each typical mistake fails its check with a message that names it;
right answers written otherwise get full marks; a tie accepts either layout."""

import ast
import os
from pathlib import Path

import pytest

from grader.exercises import get_exercise
from grader.exercises.syncbn_sharded import checks_step_time as public
from grader.exercises.syncbn_sharded import hidden_step_time as hidden_module
from grader.exercises.syncbn_sharded import step_time_expected
from grader.exercises.syncbn_sharded.hidden_step_time_model import costs, expected, fastest_that_fits
from grader.exercises.syncbn_sharded.step_time_mistakes import MISTAKES
from grader.runner import run_checks
from grader.submission import read_notebook
from tests.helpers import (
    assert_fails_its_check,
    graded_mutants_fixture,
    ROOT,
    assert_lazy_answer_earns_nothing,
    failed,
    graded_counting_launches,
    solution_source,
)

EXERCISE, TASK = "03_syncbn_sharded", "plan_layout"
TIMES, MEMORY, CHOICE = (
    "layout_times_follow_the_alpha_beta_model",
    "layout_memory_follows_the_plan",
    "layout_choice_is_the_fastest_that_fits",
)
CHECKS = [TIMES, MEMORY, CHOICE]


def _choices(scenarios):
    out = []
    for model, cluster, batch, lays in scenarios:
        plans = [costs(model, cluster, batch, lay) for lay in lays]
        out.append(fastest_that_fits(plans, cluster["memory"], public.RTOL))
    return out


def test_scenarios_make_the_answer_change_and_the_memory_matter():
    # public: TP within nodes on the slow network, FSDP on the fast one (where plain DP is faster and does not fit),
    # nothing in 16 GB; hidden: another choice again on each of its clusters
    assert _choices(public.SCENARIOS) == [{7}, {1}, set()]
    assert _choices(hidden_module.SCENARIOS) == [{2}, {1}]
    model, cluster, batch, lays = public.SCENARIOS[1]
    steps = [costs(model, cluster, batch, lay)["step"] for lay in lays]
    assert min(range(len(steps)), key=steps.__getitem__) == 0  # ignoring the memory picks DP


def test_every_named_mistake_changes_some_number_of_the_public_scenarios():
    for name in MISTAKES:
        assert any(
            costs(m, c, b, lay, name) != costs(m, c, b, lay) for m, c, b, lays in public.SCENARIOS for lay in lays
        ), name


def test_stored_public_numbers_are_the_hidden_models():
    # the public checks compare with stored numbers: they must be the model's, to the last bit
    assert step_time_expected.EXPECTED == expected(public.SCENARIOS, public.RTOL)
    assert [sorted(c) for c in _choices(public.SCENARIOS)] == [s["right"] for s in step_time_expected.EXPECTED]
    stored = {name for s in step_time_expected.EXPECTED for name in s["mistakes"]}
    assert stored == set(MISTAKES)  # every mistake a message names has its numbers stored


def test_stored_numbers_are_data_only():
    # the student build holds step_time_expected.py: a literal, no formula a student could call
    tree = ast.parse(Path(step_time_expected.__file__).read_text())
    docstring, assign = tree.body
    assert isinstance(docstring, ast.Expr) and isinstance(assign, ast.Assign), ast.dump(tree)[:200]
    assert ast.literal_eval(assign.value) == step_time_expected.EXPECTED


def _hidden_module(dotted: str) -> bool:
    last = dotted.split(".")[-1]
    return last.startswith("hidden_") and (Path(ROOT) / (dotted.replace(".", "/") + ".py")).is_file()


def test_no_public_module_imports_a_hidden_one():
    grader = Path(ROOT) / "grader"
    importing = []
    for path in grader.rglob("*.py"):
        if path.name.startswith("hidden_"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:  # a module, or a name of one
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n.startswith("grader.") and _hidden_module(n) for n in names):
                importing.append(f"{path.relative_to(grader)}:{node.lineno}")
    assert not importing, importing


def test_a_tie_accepts_either_layout():
    model, cluster, batch, lays = public.SCENARIOS[0]
    twice = [lays[7], lays[0], dict(lays[7])]
    scenario = [(model, cluster, batch, twice)]
    plans = [{q: v for q, v in costs(model, cluster, batch, lay).items()} for lay in twice]
    for choice in (0, 2):
        public.verify_choices([[{"plans": plans, "choice": choice}]], scenario, expected(scenario, public.RTOL))
    with pytest.raises(Exception, match="the memory is ignored"):
        public.verify_choices([[{"plans": plans, "choice": 1}]], scenario, expected(scenario, public.RTOL))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("hidden", [False, True], ids=["public", "hidden"])
def test_solution_full_marks_from_one_launch(hidden):
    report, launched = graded_counting_launches(EXERCISE, solution_source(EXERCISE), TASK, hidden)
    assert report.checks and report.score == report.max_score, "\n".join(report.lines())
    assert launched == ["_in_rank_layouts"], launched  # the three public checks judge the same launch


# Right answers written otherwise: the costs as tables of (count, collective, bytes, axis) terms, bandwidths
# instead of β, each axis's link from coordinates, numpy numbers, the choice from a sort (a numpy integer).
TERMS = """
import itertools

import numpy as np


def plan_layout(model, cluster, batch, layouts):
    g, m, T = cluster["gpus_per_node"], batch["micro_batches"], batch["tokens"]
    G = g * cluster["nodes"]

    def nodes_differ(lay, axis):
        sizes = {"dp": lay["dp"], "pp": lay["pp"], "tp": lay["tp"]}
        for coords in itertools.product(*(range(sizes[a]) for a in ("dp", "pp", "tp") if a != axis)):
            fixed = dict(zip([a for a in ("dp", "pp", "tp") if a != axis], coords))
            ranks = [((fixed.get("dp", i) if axis != "dp" else i) * lay["pp"] + (fixed.get("pp", i) if axis != "pp" else i)) * lay["tp"] + (fixed.get("tp", i) if axis != "tp" else i) for i in range(sizes[axis])]
            if len({r // g for r in ranks}) > 1:
                return True
        return False

    def cost(kind, k, nbytes, link):
        bandwidth = 1 / link["beta"]
        steps = {"ring": 2 * (k - 1), "gather": k - 1, "send": 1}[kind]
        volume = {"ring": 2 * (k - 1) / k, "gather": (k - 1) / k, "send": 1}[kind] * nbytes
        return 0.0 if kind != "send" and k == 1 else steps * link["alpha"] + volume / bandwidth

    plans = []
    for lay in layouts:
        dp, tp, pp = lay["dp"], lay["tp"], lay["pp"]
        links = {a: cluster["inter" if nodes_differ(lay, a) else "intra"] for a in ("dp", "tp", "pp")}
        w, a = np.float64(model["params"]) * 4 / tp / pp, np.float64(T) / dp / m * model["hidden"] * 4
        terms = [(3, "gather", dp, w, "dp")] if lay["sharded"] else [(1, "ring", dp, w, "dp")]
        terms.append((4 * m * model["layers"] // pp, "ring", tp, a, "tp"))
        if pp > 1:
            terms.append((2 * m, "send", pp, a, "pp"))
        comm = sum(n * cost(kind, k, b, links[axis]) for n, kind, k, b, axis in terms)
        ideal = 6 * model["params"] * T / G / cluster["flops"]
        compute = ideal + ideal * (pp - 1) / m
        step = compute + comm
        state = 16 * model["params"] / (tp * pp * (dp if lay["sharded"] else 1))
        acts = model["activation_bytes"] * (T / dp / m) * (model["layers"] / pp) * min(pp, m) / tp
        plans.append(dict(compute=compute, comm=comm, step=step, mfu=ideal / step, memory=state + acts))
    order = np.argsort([p["step"] if p["memory"] <= cluster["memory"] else np.inf for p in plans])
    best = order[0]
    return {"plans": plans, "choice": best if plans[best]["memory"] <= cluster["memory"] else None}
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("hidden", [False, True], ids=["public", "hidden"])
def test_a_right_answer_written_otherwise_gets_full_marks(hidden):
    report, _ = graded_counting_launches(EXERCISE, TERMS, TASK, hidden)
    assert report.checks and report.score == report.max_score, "\n".join(report.lines())


@pytest.mark.timeout(240)
def test_untouched_release_earns_nothing():
    notebook = os.path.join(ROOT, "exercises", EXERCISE, f"{EXERCISE}.ipynb")
    report = run_checks(get_exercise(EXERCISE), read_notebook(notebook), task=TASK, timeout=60)
    assert report.checks and report.score == 0, "\n".join(report.lines())


WEIGHTS = "        weights = 4 * n / (tp * pp)"
ACTS = "        acts = 4 * tokens / (dp * m) * hidden"
BUBBLE = '        compute = useful / (devices * cluster["flops"]) * (m + pp - 1) / m\n'
TP_LINK = "all_reduce(tp, acts, link(lay, 1, tp))"
PICK = '    fits = [i for i, plan in enumerate(plans) if plan["memory"] <= cluster["memory"]]\n'
STATE = '        state = 16 * n / (tp * pp) / (dp if lay["sharded"] else 1)\n'
# (replacements in the solution, the check that must fail, a phrase of its message)
MUTANTS = {
    "typical_mistake": (dict([hidden_module.TYPICAL_MISTAKE]), TIMES, "the 2(k−1)/k factor is missing"),
    "elements_not_bytes": (
        {WEIGHTS: "        weights = n / (tp * pp)", ACTS: "        acts = tokens / (dp * m) * hidden"},
        TIMES,
        "count elements, not bytes",
    ),
    "bubble_forgotten": ({BUBBLE: BUBBLE.replace(" * (m + pp - 1) / m", "")}, TIMES, "bubble is forgotten"),
    "tp_across_nodes": ({TP_LINK: 'all_reduce(tp, acts, cluster["inter"])'}, TIMES, "on the wrong link"),
    "memory_ignored": (
        {PICK: PICK.replace(' if plan["memory"] <= cluster["memory"]', "")},
        CHOICE,
        "memory is ignored",
    ),
    "state_not_split": ({STATE: '        state = 16 * n / (dp if lay["sharded"] else 1)\n'}, MEMORY, "16 bytes per"),
}


graded = graded_mutants_fixture(EXERCISE, TASK, MUTANTS, CHECKS)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(MUTANTS))
def test_typical_mistake_fails_its_check(graded, name):
    assert_fails_its_check(graded[name], *MUTANTS[name][1:])


def test_times_right_choice_wrong_keeps_the_time_points(graded):
    assert set(failed(graded["memory_ignored"])) == {CHOICE}


ALWAYS_DP = """
def plan_layout(model, cluster, batch, layouts):
    zero = {"compute": 0.0, "comm": 0.0, "step": 0.0, "mfu": 1.0, "memory": 0.0}
    return {"plans": [dict(zero) for _ in layouts], "choice": 0}
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "code, phrase",
    [
        ("def plan_layout(model, cluster, batch, layouts):\n    return 0", "returned a value of type int"),
        (ALWAYS_DP, "the α-β model of the task gives"),
        ("def plan_layout(model, cluster, batch, layouts):\n    return {'plans': [], 'choice': 0}", "must be a list"),
    ],
    ids=["zero", "always_dp", "no_plans"],
)
def test_laziest_answers_earn_nothing(code, phrase):
    assert_lazy_answer_earns_nothing(EXERCISE, TASK, code, phrase)
