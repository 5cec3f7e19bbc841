"""03_syncbn_sharded, build_hsdp_model (HSDP on a 2-D mesh, 4 gloo ranks): the solution gets full marks (public and
hidden, both public checks from one launch); the untouched release and the laziest answer earn nothing; each typical
mistake fails the check that names it; a mesh built another way gets full marks. One pytest module grades every
source once (the first launch pays the forkserver, each later one about 2 s)."""

import os

import pytest

from grader.exercises import get_exercise
from grader.runner import run_checks
from grader.submission import read_notebook
from tests.helpers import (
    mutated_solution,
    ROOT,
    failed,
    grade_source,
    graded_counting_launches,
    replace_definition,
    solution_source,
)

EXERCISE, TASK = "03_syncbn_sharded", "build_hsdp_model"
CHECKS = ["hsdp_groups_follow_the_nodes", "hsdp_step_matches_one_process"]
GROUPS, STEP = CHECKS
LAYOUT = "    layout = torch.tensor([sorted(node) for node in nodes], dtype=torch.int)\n"
MESH = '    mesh = DeviceMesh(device_type, layout, mesh_dim_names=("replicate", "shard"))\n'
BLOCK, ROOT_UNIT = "        fully_shard(block, mesh=mesh)\n", "    fully_shard(model, mesh=mesh)\n"

# (replacements in the solution, the checks that must fail, a phrase of the first one's message)
MUTANTS = {
    "dimensions_swapped": (
        {LAYOUT: "    layout = torch.tensor(nodes).T.sort(dim=1).values\n"},
        [GROUPS],
        "dimensions are swapped",
    ),
    "rank_order": (
        {
            MESH: "    from torch.distributed.device_mesh import init_device_mesh\n"
            "    mesh = init_device_mesh(device_type, (len(nodes), len(nodes[0])), mesh_dim_names=('r', 's'))\n"
        },
        [GROUPS],
        "built in rank order",
    ),
    "one_dimensional": ({MESH: "    mesh = DeviceMesh(device_type, sorted(sum(nodes, [])))\n"}, [GROUPS], "1-D mesh"),
    "no_replication": (
        {
            BLOCK: '        fully_shard(block, mesh=mesh["shard"])\n',
            ROOT_UNIT: '    fully_shard(model, mesh=mesh["shard"])\n',
        },
        [GROUPS, STEP],
        "no all-reduce ran across nodes",
    ),
    "node_order_kept": ({LAYOUT: "    layout = torch.tensor(nodes, dtype=torch.int)\n"}, [STEP], "ascending order"),
}

# Right, written otherwise: init_device_mesh when the nodes are in rank order, else a nested list (no tensor),
# the rows sorted by a tensor sort; one unit (the root only): the contract's groups and numbers hold.
OTHER_MESH = """
import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard


def build_hsdp_model(model, nodes, device_type):
    per_node = len(nodes[0])
    table = torch.tensor(nodes).sort(dim=1).values
    if table.flatten().tolist() == list(range(table.numel())):
        mesh = init_device_mesh(device_type, (len(nodes), per_node), mesh_dim_names=("across", "within"))
    else:
        mesh = DeviceMesh(device_type, table.tolist(), mesh_dim_names=("across", "within"))
    fully_shard(model, mesh=mesh)
    return model
"""

LAZY = """
def build_hsdp_model(model, nodes, device_type):
    return model
"""


@pytest.fixture(scope="module")
def graded():
    """Every source graded once, in one process (one forkserver): public checks unless the name says hidden."""
    runs = {name: graded_counting_launches(EXERCISE, solution_source(EXERCISE), TASK, h) for name, h in SOLUTION}
    runs |= {
        name: (grade_source(EXERCISE, mutated_solution(EXERCISE, c), checks=CHECKS, timeout=60), None)
        for name, (c, _, _) in MUTANTS.items()
    }
    runs |= {
        f"other_mesh_{i}": graded_counting_launches(EXERCISE, OTHER_MESH, TASK, h) for i, h in enumerate((False, True))
    }
    lazy = replace_definition(solution_source(EXERCISE), TASK, LAZY)
    runs["lazy"] = (grade_source(EXERCISE, lazy, checks=CHECKS, timeout=60), None)
    notebook = os.path.join(ROOT, "exercises", EXERCISE, f"{EXERCISE}.ipynb")
    runs["release"] = (run_checks(get_exercise(EXERCISE), read_notebook(notebook), task=TASK, timeout=60), None)
    return runs


SOLUTION = [("solution_public", False), ("solution_hidden", True)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["solution_public", "solution_hidden", "other_mesh_0", "other_mesh_1"])
def test_right_answers_get_full_marks(graded, name):
    report, launched = graded[name]
    assert report.checks and report.score == report.max_score, "\n".join(report.lines())
    assert launched == ["_in_rank_hsdp"], launched  # the public checks share one launch; the hidden one is one


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(MUTANTS))
def test_typical_mistake_fails_the_check_that_names_it(graded, name):
    changes, checks, phrase = MUTANTS[name]
    report, _ = graded[name]
    messages = failed(report)
    assert sorted(messages) == sorted(checks), "\n".join(report.lines())
    assert phrase in messages[checks[0]], messages[checks[0]]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", ["lazy", "release"])
def test_lazy_answer_and_untouched_release_earn_nothing(graded, name):
    report, _ = graded[name]
    assert report.checks and report.score == 0, "\n".join(report.lines())


def test_lazy_answer_is_told_it_shards_nothing(graded):
    assert "plain tensors" in failed(graded["lazy"][0])[GROUPS]
