"""03_syncbn_sharded, save_and_reshard and load_resharded (DCP with FSDP2): the solution gets full marks, saved
by 2 ranks and loaded by 3 or 1; each typical mistake fails its own check with a message that names it; the
laziest answers earn nothing; no checkpoint folder is left behind."""

import glob
import os
import tempfile

import pytest

from tests.helpers import (
    assert_lazy_answer_earns_nothing,
    assert_one_reason,
    failed,
    grade_source,
    graded_counting_launches,
    mutate,
    solution_source,
)

EXERCISE = "03_syncbn_sharded"
SAVE = "    dcp.save(resumable, checkpoint_id=path)\n"
LOAD = (
    '    resumed = {"model": model_state, "optim": optim_state, "scheduler": scheduler, "step": 0}\n'
    "    dcp.load(resumed, checkpoint_id=path)\n"
    '    set_state_dict(model, optimizer, model_state_dict=resumed["model"], optim_state_dict=resumed["optim"])\n'
)
RETURN = '    return resumed["step"]\n'
LOAD_TEMPLATES = "    model_state, optim_state = get_state_dict(model, optimizer)\n    resumed = {"
SAVE_STATES = "    model_state, optim_state = get_state_dict(model, optimizer)  # this rank's shards, keyed by names\n"
FULL_STATE = (
    "    from torch.distributed.checkpoint.state_dict import StateDictOptions\n"
    "    model_state, optim_state = get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))\n"
)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The parent's temporary directory for this test alone (tests on the other worker make folders in /tmp)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _leftovers(tmp) -> list:  # the checkpoint folders of a check (grader-files-*) and of a submission (grader-shared-*)
    return sorted(glob.glob(os.path.join(tmp, "grader-files-*")) + glob.glob(os.path.join(tmp, "grader-shared-*")))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("task", ["save_and_reshard", "load_resharded"])
def test_solution_gets_full_marks_and_leaves_no_checkpoint_behind(task, private_tmp):
    report = grade_source(EXERCISE, solution_source(EXERCISE), task=task)
    assert report.checks and all(c.passed for c in report.checks), "\n".join(report.lines())
    assert report.score == report.max_score
    assert any(c.hidden for c in report.checks), "the hidden cross-checks with the grader's reference did not run"
    assert not _leftovers(private_tmp), "a checkpoint folder was left in the temporary directory"


@pytest.mark.timeout(240)
def test_the_checks_of_load_resharded_share_one_save_and_confirm_a_failure_with_their_own(private_tmp):
    report, launched = graded_counting_launches(EXERCISE, solution_source(EXERCISE), "load_resharded", hidden=False)
    assert report.score == report.max_score, "\n".join(report.lines())
    # one save by 2 ranks, loaded by 3 and by 1 (was a save per check)
    assert sorted(launched) == ["_in_rank_load_and_continue"] * 2 + ["_in_rank_train_and_save"], launched
    # A load that removes the checkpoint once loaded is right, and alone it passes; the other check's load then
    # finds no checkpoint in the shared folder, and its own save and load decide: full marks.
    tidy = mutate(
        solution_source(EXERCISE),
        RETURN,
        "    torch.distributed.barrier()\n"
        "    if torch.distributed.get_rank() == 0:\n        __import__('shutil').rmtree(path)\n" + RETURN,
    )
    report, launched = graded_counting_launches(EXERCISE, tidy, "load_resharded", hidden=False)
    assert report.score == report.max_score, "\n".join(report.lines())
    assert launched.count("_in_rank_train_and_save") == 2 and launched.count("_in_rank_load_and_continue") == 3, (
        launched
    )  # the shared save and both loads, then the second check's own save and load
    # A failed save is never shared and is each check's own launch: no confirmation (one save per check).
    crashing = mutate(solution_source(EXERCISE), SAVE, "    assert torch.distributed.get_rank() == 0, 'no'\n" + SAVE)
    report, launched = graded_counting_launches(EXERCISE, crashing, "load_resharded", hidden=False)
    assert set(failed(report)) == {c.name for c in report.checks}, "\n".join(report.lines())
    assert launched == ["_in_rank_train_and_save"] * 2, launched
    assert not _leftovers(private_tmp), "a checkpoint folder was left in the temporary directory"


RESUMABLE = (
    '    resumable = {"model": model_state, "optim": optim_state, "scheduler": scheduler.state_dict(), "step": step}\n'
)
SAVED = "checkpoint_has_every_shard_and_adam_state"  # the public check of save_and_reshard
LOADED = "saved_by_two_loaded_by_three_continues"  # the first public check of load_resharded


# (task, old, new, the check that must fail, a phrase of its message)
MUTANTS = [
    (
        "save_and_reshard",
        SAVE,
        '    torch.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, path)\n',
        SAVED,
        "torch.save of the full state cannot be resharded",
    ),
    # the lesson's save as it stands: model and optimizer only
    (
        "save_and_reshard",
        RESUMABLE,
        '    resumable = {"model": model_state, "optim": optim_state}\n',
        SAVED,
        "no 'step' entry",
    ),
    (
        "save_and_reshard",
        SAVE_STATES,
        "    model_state, optim_state = model.state_dict(), optimizer.state_dict()\n",
        SAVED,
        "keyed by parameter number",
    ),
    (
        "save_and_reshard",
        '"step": step}',
        '"step": 0}',
        SAVED,
        "the saved 'step' is 0, but the training had done 3 steps",
    ),
    # A load that restores only the model: Adam's moments stay those of a fresh optimizer.
    (
        "load_resharded",
        LOAD + RETURN,
        '    dcp.load({"model": model_state, "scheduler": scheduler}, checkpoint_id=path)\n    return 3\n',
        LOADED,
        "the optimizer state was not restored",
    ),
    # model.state_dict() and a fresh optimizer.state_dict() with plain load_state_dict: no Adam state at all.
    (
        "load_resharded",
        LOAD + RETURN,
        (
            '    state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "scheduler": scheduler, '
            '"step": 0}\n'
            "    dcp.load(state, checkpoint_id=path)\n"
            '    model.load_state_dict(state["model"])\n'
            '    optimizer.load_state_dict(state["optim"])\n'
            '    return state["step"]\n'
        ),
        LOADED,
        "the optimizer state was not restored",
    ),
    # Full (gathered) state dicts are copies with 2 or more ranks (with one, measured: they share the parameters'
    # storage, so that load works): without set_state_dict, dcp.load fills only the copies.
    (
        "load_resharded",
        LOAD_TEMPLATES,
        FULL_STATE + "    resumed = {",
        LOADED,
        None,
    ),
    # the scheduler's state loaded into a copy that nothing reads back (EXERCISE.typical_mistakes)
    (
        "load_resharded",
        '"scheduler": scheduler, "step": 0}',
        '"scheduler": scheduler.state_dict(), "step": 0}',
        LOADED,
        "the LR scheduler was not restored: after loading it has counted 0 step(s), the saved one 3",
    ),
    # the step kept in a variable of its own: dcp.load replaces the dictionary's entry, not the variable
    (
        "load_resharded",
        LOAD + RETURN,
        "    step = 0\n" + LOAD.replace('"step": 0}', '"step": step}') + "    return step\n",
        LOADED,
        "load_resharded returned 0, but the checkpoint holds step 3",
    ),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("task, old, new, check_name, phrase", MUTANTS, ids=[f"{m[0]}:{m[4]}" for m in MUTANTS])
def test_typical_mistake_fails_with_a_targeted_message(task, old, new, check_name, phrase):
    source = mutate(solution_source(EXERCISE), old, new)
    if phrase is None:  # the forgotten set_state_dict: the weights stay the fresh model's
        source = mutate(source, LOAD.splitlines(keepends=True)[-1], "")
        phrase = "the weights are still the fresh model's"
    report = grade_source(EXERCISE, source, checks=[check_name])
    messages = failed(report)
    assert check_name in messages, f"{check_name} passed; results:\n" + "\n".join(report.lines())
    assert phrase in messages[check_name], messages[check_name]


@pytest.mark.timeout(120)  # the check's own short timeout catches the deadlock
def test_saving_on_rank_0_only_deadlocks_and_says_so():
    source = mutate(solution_source(EXERCISE), SAVE, "    if torch.distributed.get_rank() == 0:\n    " + SAVE)
    report = grade_source(EXERCISE, source, checks=["checkpoint_has_every_shard_and_adam_state"])
    message = failed(report)["checkpoint_has_every_shard_and_adam_state"]
    assert "saving or loading on rank 0 only" in message and "every rank must call them" in message, message
    assert "rank 0 hung" in message, message  # the ranks' stacks, as for consolidate_state_dict


@pytest.mark.timeout(240)
def test_save_without_the_optimizer_names_the_missing_state_once():
    # What fails is the save: its check says so, without blaming a load ("keyed by parameter number"), and the
    # hidden crossings (which load with the grader's own function) point to it.
    source = mutate(
        solution_source(EXERCISE),
        RESUMABLE,
        '    resumable = {"model": model_state, "scheduler": scheduler.state_dict(), "step": step}\n',
    )
    report = grade_source(EXERCISE, source, task="save_and_reshard")
    messages = failed(report)
    assert set(messages) == {c.name for c in report.checks}, "\n".join(report.lines())
    message = messages[SAVED]
    assert "the optimizer state is missing" in message and "keyed by parameter number" not in message, message
    assert_one_reason(report, SAVED)  # the hidden crossings point to it


@pytest.mark.timeout(240)
def test_gathered_save_names_the_sharding_rule():
    # get_state_dict(..., full_state_dict=True): loadable anywhere, but every rank gathers the whole model, which
    # the text forbids ("this rank's shards, nothing gathered")
    source = mutate(solution_source(EXERCISE), SAVE_STATES, FULL_STATE)
    report = grade_source(EXERCISE, source, task="save_and_reshard")
    assert report.score == 0, "\n".join(report.lines())
    message = failed(report)[SAVED]
    assert "saved as one full tensor" in message and "nothing gathered" in message, message
    assert_one_reason(report, SAVED)


@pytest.mark.timeout(120)  # the check's own short timeout catches the deadlock
def test_loading_on_rank_0_only_deadlocks_and_says_so():
    source = mutate(
        solution_source(EXERCISE),
        LOAD + RETURN,
        "    if torch.distributed.get_rank() == 0:\n"
        + "".join("    " + line for line in (LOAD + RETURN).splitlines(keepends=True)),
    )
    report = grade_source(EXERCISE, source, checks=["saved_by_two_loaded_by_three_continues"])
    message = failed(report)["saved_by_two_loaded_by_three_continues"]
    assert "loading with 3 rank(s): deadlocked inside dcp.save/dcp.load" in message, message
    assert "every rank must call them" in message and "rank 0 hung" in message, message


STUB = """
def {name}({args}):
    # YOUR CODE HERE
    raise NotImplementedError()
"""
SAVE_ARGS, LOAD_ARGS = "model, optimizer, scheduler, step, path", "model, optimizer, scheduler, path"

LAZY = [
    ("save_and_reshard", STUB.format(name="save_and_reshard", args=SAVE_ARGS), "not implemented yet"),
    ("save_and_reshard", f"def save_and_reshard({SAVE_ARGS}):\n    pass", "no DCP checkpoint at `path`"),
    (
        "save_and_reshard",
        """
     def save_and_reshard(model, optimizer, scheduler, step, path):
         if torch.distributed.get_rank() == 0:
             torch.save(model.state_dict(), path)
     """,
        "is one file, not a DCP checkpoint folder",
    ),
    ("load_resharded", STUB.format(name="load_resharded", args=LOAD_ARGS), "not implemented yet"),
    ("load_resharded", f"def load_resharded({LOAD_ARGS}):\n    return 3", "still the fresh model's"),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("task, code, phrase", LAZY, ids=[f"{t}:{p}" for t, _, p in LAZY])
def test_laziest_answers_earn_nothing(task, code, phrase):
    assert_lazy_answer_earns_nothing(EXERCISE, task, code, phrase)
