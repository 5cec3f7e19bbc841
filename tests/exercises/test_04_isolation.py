"""Exercise 4's train_script cannot read the grader's answer, and how it writes
its files earns nothing unless it trains.

The script's torchrun job runs in a Python that cannot import `grader` (grader_free_python.py) with a
seed drawn per run (problem.SEED), and the expected models are computed in the parent. So a
script that writes the grader's reference, one that pastes a result computed in advance, and
one that writes its files perfectly without training all score 0 on every train_script check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grader.exercises import get_exercise
from grader.exercises.torchrun import grader_free_python, problem, reference, script_runs
from grader.exercises.torchrun.torchrun_process import REPO_ROOT
from tests.helpers import failed, grade_source, solution_source

ID = "04_torchrun"
TRAIN_SCRIPT_CHECKS = [c.name for c in get_exercise(ID).checks if c.task == "train_script"]

# What a worker of the isolated job sees: can it import the grader, where does it look, what seed.
WHAT_A_WORKER_SEES = """
import importlib.util, json, os, sys
import problem
info = {"find_spec": importlib.util.find_spec("grader") is not None, "path": sys.path,
        "env": sorted(os.environ), "seed": problem.SEED, "no_site": sys.flags.no_site}
try:
    import grader  # noqa: F401
    info["imported"] = True
except ImportError as exc:
    info["imported"] = str(exc)
import torch
info["torch"] = torch.__version__
with open(f"rank{os.environ['RANK']}.json", "w") as f:
    json.dump(info, f)
"""


def test_a_worker_of_the_isolated_job_cannot_import_the_grader(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADER_SECRET_FOR_THIS_TEST", "1")  # the parent's environment does not leak
    monkeypatch.setenv("PYTHONPATH", REPO_ROOT)  # the grader's checkout on the parent's path: not the job's
    site = grader_free_python.build_site(str(tmp_path))
    work = tmp_path / "run"
    work.mkdir()
    job = script_runs.Job(str(work), site, 424242)
    grader_free_python.verify(str(work), job.env())
    grader_free_python.write_job(str(work), WHAT_A_WORKER_SEES)
    with job.torchrun(reference.standalone_command("train.py", 2), str(work), 120, None, []) as proc:
        proc.wait()
    assert not proc.timed_out, proc.output
    for rank in range(2):
        path = work / f"rank{rank}.json"
        assert path.exists(), f"rank {rank} wrote nothing:\n{proc.output}"
        info = json.loads(path.read_text())
        assert info["find_spec"] is False and info["imported"] == "No module named 'grader'", info
        assert info["no_site"] == 1, "the worker ran with site-packages (and their .pth hooks) enabled"
        assert info["torch"], info
        assert info["seed"] == 424242, "problem.SEED is the run's seed"
        assert not any(os.path.isdir(os.path.join(p, "grader")) for p in info["path"] if p), info["path"]
        assert "GRADER_SECRET_FOR_THIS_TEST" not in info["env"]
        assert not [
            k
            for k in info["env"]
            if k.startswith("PYTHON")
            and k
            not in (
                "PYTHONPATH",
                "PYTHONUNBUFFERED",
                "PYTHONNOUSERSITE",
                "PYTHONDONTWRITEBYTECODE",
                "PYTHONFAULTHANDLER",
            )
        ], info["env"]


def test_the_links_folder_leaves_out_every_way_to_the_grader(tmp_path):
    site = grader_free_python.build_site(str(tmp_path))
    names = os.listdir(site)
    assert "torch" in names
    assert not [
        n
        for n in names
        if n == "grader"
        or n.endswith(".pth")
        or n.startswith("__editable__")
        or n.lower().startswith("ddp_course_grader")
    ], names
    done = subprocess.run(
        [sys.executable, "-S", "-c", "import grader"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=grader_free_python.isolated_env(site),
        timeout=60,
    )
    assert done.returncode != 0 and "No module named 'grader'" in done.stderr, done.stderr


def test_verify_refuses_a_python_that_can_import_the_grader(tmp_path):
    site = grader_free_python.build_site(str(tmp_path))
    env = grader_free_python.isolated_env(site, {"PYTHONPATH": REPO_ROOT + os.pathsep + site})
    with pytest.raises(RuntimeError, match="can import the grader"):
        grader_free_python.verify(str(tmp_path), env)


def test_no_command_the_grader_builds_is_an_accepted_torchrun_command_answer():
    """A student's torchrun_command that returns the grader's own launcher's command (importable
    in the ranks: reference.py is public, hidden_reference.py is there when the instructor grades)
    fails the static check: the grader's commands end with --no-python and the interpreter."""
    from grader.checks import CheckFailed
    from grader.exercises.torchrun import command
    from grader.exercises.torchrun.hidden_reference import node_command

    for cmd, args in [
        (reference.standalone_command("p.py", 2, 1), (2, 1, 0, None, 1)),
        (node_command("p.py", 1, "127.0.0.1:29400"), (1, 2, 1, "127.0.0.1:29400", 0)),
    ]:
        with pytest.raises(CheckFailed, match="after torchrun's options comes only the script"):
            command.check_static("...", cmd, "p.py", *args)


def test_each_run_draws_its_own_seed_and_its_own_reference():
    one, two = reference.reference_state(3, 1), reference.reference_state(3, 2)
    assert one["body.0.weight"].ne(two["body.0.weight"]).any()
    again = problem.make_model(5).state_dict()["body.0.weight"]
    assert problem.make_model(5).state_dict()["body.0.weight"].equal(again), "one seed, one model"


# ---------------------------------------------------------------- answers that do not train

_ARGS_AND_WRITERS = """
import argparse
import os

import torch
import torch.distributed as dist

import problem


def save_atomically(obj, path):
    torch.save(obj, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)


def main():
    parser = argparse.ArgumentParser()
    for name in ("--epochs", "--snapshot-every", "--snapshot", "--out", "--epoch-log", "--checkpoints"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    epochs = int(args.epochs)
    dist.init_process_group("gloo")
    model = problem.make_model()
    optimizer = problem.make_optimizer(model)
    start = torch.load(args.snapshot)["epochs_run"] if os.path.exists(args.snapshot) else 0
    dist.barrier()  # every rank has read where to start before rank 0 writes again
    for epoch in range(start, epochs):
        state = STATE(epoch + 1, model)
        if dist.get_rank() == 0:  # one writer, atomic, snapshot before log: everything but the training
            save_atomically({"model": state, "optimizer": optimizer.state_dict(), "epochs_run": epoch + 1,
                             "batches_run": 0}, args.snapshot)
            with open(args.epoch_log, "a") as f:
                f.write(f"{epoch}\\n")
        dist.barrier()
    if dist.get_rank() == 0:
        save_atomically(STATE(epochs, model), args.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _reads_the_grader() -> str:
    """The strongest form of such a script: the grader's own reference, for this run's seed."""
    return (
        "from grader.exercises.torchrun import reference\n\n"
        "def STATE(epochs, model):\n    return reference.reference_state(epochs, problem.SEED)\n" + _ARGS_AND_WRITERS
    )


def _pastes_a_result() -> str:
    """The reference computed in advance (seed 0, as the notebook's problem.SEED reads), pasted in."""
    table = {e: {k: v.tolist() for k, v in reference.reference_state(e, 0).items()} for e in range(1, 5)}
    return (
        f"TABLE = {json.dumps(table)}\n\n"
        "def STATE(epochs, model):\n    return {k: torch.tensor(v) for k, v in TABLE[str(epochs)].items()}\n"
        + _ARGS_AND_WRITERS
    )


def _never_trains() -> str:
    return "def STATE(epochs, model):\n    return model.state_dict()\n" + _ARGS_AND_WRITERS


LAZY_SCRIPTS = {
    "reads_the_grader": (_reads_the_grader, "No module named 'grader'"),
    "pastes_a_result": (_pastes_a_result, "a run with seed 0, not of this run"),
    "never_trains": (_never_trains, "the untrained model"),
}


@pytest.mark.parametrize("name", sorted(LAZY_SCRIPTS))
def test_a_script_that_does_not_train_scores_0_on_every_train_script_check(name):
    make, phrase = LAZY_SCRIPTS[name]
    source = solution_source(ID) + f"\n\ntrain_script = {make()!r}\n"
    report = grade_source(ID, source, checks=TRAIN_SCRIPT_CHECKS)
    paying = {c.name: c.points for c in report.checks if c.points}
    assert not paying, "\n".join(report.lines())
    messages = failed(report)
    assert set(messages) == set(TRAIN_SCRIPT_CHECKS)
    # The kill checks name the first thing wrong in the order a run goes (the log, the resume, the snapshot's
    # age), then the model; every other check, those about how the script writes included, names the training first.
    kill_checks = ("train_script_resumes_after_a_killed_worker", "train_script_resumes_mid_epoch")
    hidden = {c.name for c in report.checks if c.hidden}  # their messages leave the run's own output out
    without = {
        n: m
        for n, m in messages.items()
        if n not in kill_checks
        and phrase not in m
        and not (n in hidden and "counts only when the training is right" in m)
    }
    assert not without, "\n\n".join(f"{n}:\n{m}" for n, m in without.items())  # in full: pytest cuts a dict
    assert "counts only when the training is right" in messages["train_script_replaces_the_snapshot_atomically"]
