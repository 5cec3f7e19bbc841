"""03_syncbn_sharded, checkpoint_activations (activation checkpointing, not checks_sharded_checkpoint.py's saved state):
the solution gets full marks (2 ranks and the hidden 3); each typical mistake fails its check with a message that
names it; the laziest answers earn nothing."""

import pytest

from tests.helpers import (
    assert_fails_its_check,
    graded_mutants_fixture,
    assert_lazy_answer_earns_nothing,
    failed,
    grade_source,
    replace_definition,
    solution_source,
)

EXERCISE, TASK = "03_syncbn_sharded", "checkpoint_activations"
CALL = "        return checkpoint(self.block, x, use_reentrant=False)\n"
WRAP = "        model.blocks[i] = Checkpointed(model.blocks[i])\n"
ORDER = "    for i in sorted(range(len(saved)), key=lambda i: -saved[i]):  # the largest first: the fewest recomputed\n"
STOP = "        if kept <= budget_bytes:\n"
SAVED = "    saved = [2 * rows * block.fc1.out_features * block.fc1.weight.element_size() for block in model.blocks]\n"


@pytest.mark.timeout(240)
def test_solution_gets_full_marks():
    report = grade_source(EXERCISE, solution_source(EXERCISE), task=TASK, timeout=60)
    assert report.checks and all(c.passed for c in report.checks), "\n".join(report.lines())
    assert report.score == report.max_score
    assert any(c.hidden for c in report.checks), "the hidden 3-rank check did not run"


WHOLE_MODEL = """
class WholeModel(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return checkpoint(self.model, x, use_reentrant=False)


def checkpoint_activations(model, rows, budget_bytes):
    return WholeModel(model)
"""

# (new answer: a replacement of the solution's call, or a whole definition; the check that must fail; a phrase)
MUTANTS = {
    "reentrant": (
        {CALL: "        return checkpoint(self.block, x, use_reentrant=True)\n"},
        "checkpointing_keeps_gradients",
        "With use_reentrant=True",
    ),
    "detached_input": (
        {CALL: "        return checkpoint(self.block, x.detach(), use_reentrant=False)\n"},
        "checkpointing_keeps_gradients",
        "do not detach it",
    ),
    "whole_model_as_one_block": (
        WHOLE_MODEL,
        "checkpointing_frees_activations",
        "Checkpointing the whole model as one unit saves nothing at the peak",
    ),
    # the model's parameters then get no gradient: not a use_reentrant or no_grad matter
    "copied_blocks": (
        {WRAP: "        model.blocks[i] = Checkpointed(__import__('copy').deepcopy(model.blocks[i]))\n"},
        "checkpointing_keeps_gradients",
        "Wrap each block (Checkpointed(block) keeps the block itself)",
    ),
    # the budget: every block (fits, recomputes too much), first blocks first, too few
    "every_block": (
        {STOP: "        if False:\n"},
        "checkpointing_frees_activations",
        "you checkpointed every block: the budget needs only 3",
    ),
    "in_order_from_the_first": (
        {ORDER: "    for i in range(len(saved)):  # in order\n"},
        "checkpointing_frees_activations",
        "Choose the blocks whose activations are the largest first",
    ),
    "too_few": (
        {STOP: "        if kept <= 1.2 * budget_bytes:\n"},
        "checkpointing_frees_activations",
        "over the budget of 150000: checkpoint more blocks",
    ),
    # the bytes undercounted: the plan thinks everything fits, and is told the budget, not "no block checkpointed"
    "one_activation_per_block": (
        {SAVED: SAVED.replace("2 * rows", "rows")},
        "checkpointing_frees_activations",
        "over the budget of 150000: checkpoint more blocks (you checkpointed 0). Each block that is not "
        "checkpointed keeps fc1's and GELU's outputs, 2 x rows x hidden x 4 bytes. You seem to count one "
        "activation per block",
    ),
    "elements_not_bytes": (
        {SAVED: SAVED.replace(" * block.fc1.weight.element_size()", "")},
        "checkpointing_frees_activations",
        "over the budget of 150000: checkpoint more blocks (you checkpointed 0). Each block that is not "
        "checkpointed keeps fc1's and GELU's outputs, 2 x rows x hidden x 4 bytes. You seem to count "
        "one activation per block, where each keeps two (fc1's output and GELU's), or elements, not bytes",
    ),
}


graded = graded_mutants_fixture(
    EXERCISE, TASK, MUTANTS, ["checkpointing_keeps_gradients", "checkpointing_frees_activations"]
)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", list(MUTANTS))
def test_typical_mistake_fails_its_check(graded, name):
    assert_fails_its_check(graded[name], *MUTANTS[name][1:])


def test_whole_model_keeps_the_gradient_points(graded):
    # the gradients are right: only the memory check fails (its message says why)
    assert set(failed(graded["whole_model_as_one_block"])) == {"checkpointing_frees_activations"}


NO_CHECKPOINTING = """
def checkpoint_activations(model, rows, budget_bytes):
    return model
"""

# The blocks' forwards, once, under no_grad: no gradients at all.
NO_GRAD = """
class NoGrad(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        with torch.no_grad():
            return self.block(x)


def checkpoint_activations(model, rows, budget_bytes):
    for i, block in enumerate(model.blocks):
        model.blocks[i] = NoGrad(block)
    return model
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "code, phrase",
    [(NO_CHECKPOINTING, "over the budget of 150000"), (NO_GRAD, "do not run the blocks under no_grad")],
    ids=["model_unchanged", "blocks_under_no_grad"],
)
def test_laziest_answers_earn_nothing(code, phrase):
    assert_lazy_answer_earns_nothing(EXERCISE, TASK, code, phrase)


# Right answers written otherwise than the solution: torch's checkpoint_wrapper (the task text allows it), the
# choice made from a dict of sizes.
WITH_TORCHS_WRAPPER = """
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper


def checkpoint_activations(model, rows, budget_bytes):
    saved = {i: 2 * rows * block.fc1.out_features * 4 for i, block in enumerate(model.blocks)}
    kept = sum(saved.values())
    for i, size in sorted(saved.items(), key=lambda item: item[1], reverse=True):
        if kept <= budget_bytes:
            break
        model.blocks[i] = checkpoint_wrapper(model.blocks[i])  # non-reentrant by default
        kept -= size
    return model
"""


# The task's rule (fit the budget after forward, fewest recomputed) with the other tie-break: keep the narrowest
# blocks while they fit and checkpoint the rest. Three blocks, the same bytes kept as the solution's choice.
NARROWEST_KEPT = """
def checkpoint_activations(model, rows, budget_bytes):
    saved = [2 * rows * block.fc1.out_features * 4 for block in model.blocks]
    kept = 0
    for i in sorted(range(len(saved)), key=lambda i: saved[i]):
        if kept + saved[i] <= budget_bytes:
            kept += saved[i]
        else:
            model.blocks[i] = Checkpointed(model.blocks[i])
    return model
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("code", [WITH_TORCHS_WRAPPER, NARROWEST_KEPT], ids=["torchs_wrapper", "narrowest_kept"])
def test_right_answers_written_otherwise_get_full_marks(code):
    source = replace_definition(solution_source(EXERCISE), TASK, code)
    report = grade_source(EXERCISE, source, task=TASK, timeout=60)
    assert report.checks and any(c.hidden for c in report.checks), "\n".join(report.lines())
    assert report.score == report.max_score, "\n".join(report.lines())
