"""Exercise 04_torchrun: the solution gets full marks from real torchrun runs; each typical
mistake fails the check aimed at it, with the message naming it, and nothing unrelated.

Every torchrun start costs a few seconds, so each mutant runs only the check it targets
(the cheapest that shows the mistake) plus a cheap unrelated one, not all checks of its task;
the solution's full marks on every check, real torchrun runs included, are asserted by tests/test_selfcheck.py
from make selfcheck's grading (test_each_solution_passes_every_check_of_every_task).
"""

from __future__ import annotations

import pytest

from grader.exercises import get_exercise
from tests.helpers import failed, grade_source, mutate, solution_source

ID = "04_torchrun"
EXERCISE = get_exercise(ID)


def grade_checks(source: str, names: list[str]):
    """Grade `source` with only the named checks (hidden ones included)."""
    return grade_source(ID, source, checks=names)


@pytest.fixture(scope="module")
def solution() -> str:
    return solution_source(ID)


def test_every_task_has_visible_and_hidden_checks():
    for task in EXERCISE.tasks:
        kinds = {c.hidden for c in EXERCISE.checks if c.task == task}
        assert kinds == {False, True}, task


# (check aimed at, solution text, mutant text, key phrase of the message, an unrelated check that must pass)
MUTANTS = {
    "rank_local_rank_swapped": (
        "read_dist_env_on_two_nodes",
        'rank=int(need("RANK")),\n        local_rank=int(need("LOCAL_RANK")),',
        'rank=int(need("LOCAL_RANK")),\n        local_rank=int(need("RANK")),',
        "RANK and LOCAL_RANK are swapped",
        "read_dist_env_names_a_missing_variable",
    ),
    "bare_key_error": (
        "read_dist_env_names_a_missing_variable",
        'raise RuntimeError(f"{name} is not set',
        'raise KeyError(name)\n            raise RuntimeError(f"{name} is not set',
        "launch the script with torchrun",
        "read_dist_env_reads_its_argument",
    ),
    "restart_count_ignored": (
        "read_dist_env_reads_its_argument",
        'restart_count=int(environ.get("TORCHELASTIC_RESTART_COUNT", "0")),',
        "restart_count=0,",
        "TORCHELASTIC_RESTART_COUNT=2",
        "read_dist_env_names_a_missing_variable",
    ),
    "port_left_a_string": (
        "read_dist_env_reads_its_argument",
        'master_port=int(need("MASTER_PORT")),',
        'master_port=need("MASTER_PORT"),',
        "convert MASTER_PORT with int()",
        "read_dist_env_names_a_missing_variable",
    ),
    "reads_os_environ": (
        "read_dist_env_reads_its_argument",
        "    def need(name: str) -> str:",
        "    environ = __import__('os').environ\n\n    def need(name: str) -> str:",
        "os.environ",
        "torchrun_command_runs_one_node",
    ),
    "restart_count_required": (
        "read_dist_env_reads_its_argument",
        'restart_count=int(environ.get("TORCHELASTIC_RESTART_COUNT", "0")),',
        'restart_count=int(need("TORCHELASTIC_RESTART_COUNT")),',
        "restart_count is then 0",
        "read_dist_env_names_a_missing_variable",
    ),
    "nproc_nnodes_swapped": (
        "torchrun_command_runs_one_node",
        'f"--nproc-per-node={nproc_per_node}",\n           f"--nnodes={nnodes}",',
        'f"--nproc-per-node={nnodes}",\n           f"--nnodes={nproc_per_node}",',
        "swapped",
        "read_dist_env_names_a_missing_variable",
    ),
    "no_standalone": (
        "torchrun_command_runs_one_node",
        'cmd.append("--standalone")',
        "pass",
        "use --standalone",
        "read_dist_env_names_a_missing_variable",
    ),
    "script_not_last": (
        "torchrun_command_runs_one_node",
        "return cmd + [script]",
        "return cmd[:3] + [script] + cmd[3:]",
        "the script must be the last element",
        "read_dist_env_names_a_missing_variable",
    ),
    "standalone_for_two_nodes": (
        "torchrun_command_runs_two_nodes",
        """            raise ValueError("a job on more than one node needs an rdzv_endpoint that every node can reach")""",
        "            pass",
        "raise ValueError when nnodes > 1",
        "read_dist_env_names_a_missing_variable",
    ),
    "max_restarts_ignored": (
        "torchrun_command_restarts",
        'f"--max-restarts={max_restarts}"]',
        '"--max-restarts=0"]',
        "--max-restarts=1",
        "read_dist_env_names_a_missing_variable",
    ),
    "batch_not_divided": (
        "train_script_matches_single_process",
        "batch_size=problem.GLOBAL_BATCH // world_size",
        "batch_size=problem.GLOBAL_BATCH",
        "GLOBAL_BATCH // world_size",
        "read_dist_env_names_a_missing_variable",
    ),
    "sampler_seed_written_as_a_number": (
        "train_script_matches_single_process",
        "DistributedSampler(dataset, shuffle=True, seed=problem.SEED)",
        "DistributedSampler(dataset, shuffle=True, seed=0)",
        "not problem.SEED",
        "read_dist_env_names_a_missing_variable",
    ),
    "rank_0_trains_alone": (  # the same global batches, on rank 0 only, without DDP: the final model matches
        "train_script_matches_single_process",
        "        for batch, (x, y) in enumerate(itertools.islice(loader, skip, None), start=skip):\n"
        "            optimizer.zero_grad()\n"
        "            problem.loss_fn(ddp_model(x), y).backward()\n            optimizer.step()",
        "        shards = [DataLoader(dataset, batch_size=problem.GLOBAL_BATCH // world_size, sampler="
        "DistributedSampler(dataset, num_replicas=world_size, rank=r, shuffle=True, seed=problem.SEED))"
        " for r in range(world_size)]\n"
        "        for shard in shards:\n            shard.sampler.set_epoch(epoch)\n"
        "        for batch, batches in enumerate(zip(*shards)):\n"
        "            if rank == 0:\n"
        "                x = torch.cat([b[0] for b in batches])\n"
        "                y = torch.cat([b[1] for b in batches])\n"
        "                optimizer.zero_grad()\n"
        "                problem.loss_fn(model(x), y).backward()\n"
        "                optimizer.step()",
        "rank 0: 192, rank 1: 0",
        "read_dist_env_names_a_missing_variable",
    ),
    "resume_from_epoch_0": (
        "train_script_resumes_after_a_killed_worker",
        'epochs_run, batches_run = snapshot["epochs_run"], snapshot["batches_run"]',
        "epochs_run, batches_run = 0, 0",
        "started again from epoch 0",
        "read_dist_env_names_a_missing_variable",
    ),
    "optimizer_not_restored": (
        "train_script_resumes_after_a_killed_worker",
        'optimizer.load_state_dict(snapshot["optimizer"])',
        "pass",
        "when the optimizer starts afresh at the restart",  # its own message: not set_epoch's too
        "read_dist_env_names_a_missing_variable",
    ),
    "set_epoch_counts_from_the_restart": (  # an uninterrupted run is right; the resumed epochs repeat 0, 1's order
        "train_script_resumes_after_a_killed_worker",
        "sampler.set_epoch(epoch)  # the true epoch",
        "sampler.set_epoch(epoch - epochs_run)  # counted from the restart",
        "sampler.set_epoch got the count of epochs since the restart",
        "read_dist_env_names_a_missing_variable",
    ),
    "every_node_saves": (
        "train_script_on_two_nodes",
        "if rank == 0:  # one writer",
        'if int(os.environ["LOCAL_RANK"]) == 0:  # one writer',
        "only global rank 0 may write",
        "read_dist_env_names_a_missing_variable",
    ),
    # The blocking dcp.save writes from the training thread: the marker's test on real threads and the verdicts'
    # test below cover it without another torchrun run (the test budget); this one runs end to end.
    "checkpoint_future_waited_at_once": (  # async_save(...).result(): training waits for the write all the same
        "train_script_checkpoints_while_training_goes_on",
        "process_group=checkpoint_group)  # returns once the state is copied",
        "process_group=checkpoint_group)\n        pending.result()",
        "waited for its future",
        "read_dist_env_names_a_missing_variable",
    ),
    # Both stopped by the grader's watch of dcp.async_save at the call (problem.SAVES_ENV), within seconds: before,
    # the first took 799 s and lost 1 point, the second got no verdict in 400 s.
    "checkpoint_future_never_waited": (  # more than one save in flight: the public check enforces one
        "train_script_checkpoints_while_training_goes_on",
        "            pending.result()  # one checkpoint in flight at a time",
        "            pass",
        "while the future of the previous save had never been waited for",
        "read_dist_env_names_a_missing_variable",
    ),
    "checkpoint_on_the_training_group": (
        "train_script_checkpoints_while_training_goes_on",
        ",\n                                 process_group=checkpoint_group)",
        ")",
        "without process_group=",
        "read_dist_env_names_a_missing_variable",
    ),
    "snapshot_written_in_place": (
        "train_script_replaces_the_snapshot_atomically",
        "    torch.save(obj, tmp)\n    os.replace(tmp, path)",
        "    torch.save(obj, path)",
        "rewritten in place",
        "read_dist_env_names_a_missing_variable",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_fails_its_check(solution, name):
    target, old, new, phrase, unrelated = MUTANTS[name]
    report = grade_checks(mutate(solution, old, new), [target, unrelated])
    failures = failed(report)
    assert set(failures) == {target}, failures
    assert phrase in failures[target], failures[target]


def test_a_crash_before_the_kill_is_answered_with_the_workers_traceback_not_a_timeout(solution):
    """Every attempt fails at its first snapshot (a folder that does not exist): the grader lets the restarted
    attempt run instead of waiting for a step of the dead one until the run's time limit, and shows the error."""
    source = mutate(solution, '    tmp = f"{path}.tmp"\n', '    tmp = f"no-such-folder/{path}.tmp"\n')
    report = grade_checks(source, ["train_script_resumes_after_a_killed_worker"])
    message = failed(report)["train_script_resumes_after_a_killed_worker"]
    assert "Parent directory no-such-folder does not exist" in message and 'File "train.py", line' in message, message
    assert "did not finish within its time limit" not in message, message


MKSTEMP = (
    '    tmp = f"{path}.tmp"\n',
    "    import tempfile\n    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)))\n"
    "    os.close(fd)\n",
)
LOG_MID_EPOCH = (
    "save_snapshot(epoch, done)  # mid-epoch; the epoch's end is saved below",
    "save_snapshot(epoch, done)  # mid-epoch\n"
    "                if rank == 0:\n"
    '                    with open(args.epoch_log, "a") as f:\n'
    '                        f.write(f"{epoch}\\\\n")',
)


def test_a_log_line_at_mid_epoch_snapshots_is_named_and_mkstemp_is_atomic(solution):
    """Rank 0 alone logs, also at its mid-epoch snapshots, and saves through mkstemp + os.replace: told about the
    mid-epoch lines, not about a second writer; the snapshot is replaced atomically (the hidden probe passes: mkstemp
    and os.replace is a correct alternative, its check's point earned, in the same grading)."""
    source = mutate(mutate(solution, *MKSTEMP), *LOG_MID_EPOCH)
    report = grade_checks(
        source, ["train_script_matches_single_process", "train_script_replaces_the_snapshot_atomically"]
    )
    failures = failed(report)
    assert set(failures) == {"train_script_matches_single_process"}, failures
    message = failures["train_script_matches_single_process"]
    assert "came with a mid-epoch snapshot" in message and "only rank 0 may write" not in message, message
    atomic = next(c for c in report.checks if c.name == "train_script_replaces_the_snapshot_atomically")
    assert atomic.passed and atomic.points == atomic.max_points == 1, report.lines()


# --- the checkpoint marker (problem.GATE_ENV) on real threads, without torchrun ---


def _fresh_problem(tmp_path, monkeypatch):
    """A private copy of problem.py (its counters are per process), with the marker armed."""
    import importlib.util

    from grader.exercises.torchrun import problem

    monkeypatch.setenv(problem.GATE_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    spec = importlib.util.spec_from_file_location("problem_copy", problem.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _events(tmp_path) -> list[str]:
    path = tmp_path / "rank0.gate"
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def _background_write(problem, then):
    """Take the model's state, write it from a pool thread (as DCP's async_save does), run `then(future)`."""
    import concurrent.futures
    import io
    import pickle

    model = problem.make_model(0)
    state = model.state_dict()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(lambda: pickle.dump(state, io.BytesIO()))
        then(model, future)
        future.result(timeout=60)


def test_the_marker_sees_the_next_step_begin_during_the_write(tmp_path, monkeypatch):
    import torch

    problem = _fresh_problem(tmp_path, monkeypatch)
    _background_write(problem, lambda model, future: model(torch.zeros(2, problem.FEATURES)))
    assert _events(tmp_path) == ["write-began", "next-step-began"]


def test_the_marker_sees_the_training_thread_wait_for_the_future(tmp_path, monkeypatch):
    problem = _fresh_problem(tmp_path, monkeypatch)
    _background_write(problem, lambda model, future: future.result(timeout=60))
    assert _events(tmp_path) == ["write-began", "training-waits-for-the-future"]


def test_the_marker_ignores_a_write_from_the_training_thread(tmp_path, monkeypatch):
    import io

    import torch

    problem = _fresh_problem(tmp_path, monkeypatch)
    torch.save(problem.make_model(0).state_dict(), io.BytesIO())  # torch.save on rank 0: never held
    assert _events(tmp_path) == []
    buffer = io.BytesIO()
    torch.save(problem.make_model(0).state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)  # the marker loads as plain data
    assert set(loaded) == {"body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias", problem.EXTRA_STATE}


def test_the_save_watch_stops_a_second_save_while_one_is_in_flight(tmp_path, monkeypatch):
    import concurrent.futures
    import time

    import threading

    problem = _fresh_problem(tmp_path, monkeypatch)
    written = threading.Semaphore(0)  # not concurrent.futures: a wait there would count as waiting for the save

    def save():
        written.release()
        return "metadata"

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        watch = problem._SaveWatch(str(tmp_path), lambda *args, **kwargs: pool.submit(save))
        waited = watch({})
        assert waited.result(timeout=60) == "metadata"  # the training thread waits: the future resolves
        polled = watch({})
        deadline = time.monotonic() + 60  # a bound only
        while not polled.done() and time.monotonic() < deadline:  # polling until done is waiting too
            time.sleep(0.01)
        assert polled.result(timeout=0) == "metadata"
        never_waited = watch({})
        assert written.acquire(timeout=60) and written.acquire(timeout=60) and written.acquire(timeout=60)
        with pytest.raises(RuntimeError, match="never been waited for"):
            watch({})
        assert never_waited._state != "FINISHED"
    lines = (tmp_path / "rank0.saves").read_text().split()
    assert lines[:8] == ["save", "1", "waited", "1", "save", "2", "waited", "2"], lines
    assert lines[-2:] == ["while-one-in-flight", "4"], lines


@pytest.mark.parametrize(
    "saves, phrase",
    [
        (
            {"0": ["on-the-training-group 1"], "1": ["on-the-training-group 1"]},
            "rank 0: dcp.async_save was called without",
        ),
        ({"0": ["save 1", "while-one-in-flight 2"]}, "save 2\\) while the future of the previous save had never"),
    ],
)
def test_a_save_the_watch_stopped_is_named(saves, phrase):
    from grader.checks import CheckFailed
    from grader.exercises.torchrun.saves import check_saves

    with pytest.raises(CheckFailed, match=phrase):
        check_saves(saves)
    check_saves({"0": ["save 1", "waited 1", "save 2", "waited 2", ""]})


@pytest.mark.parametrize(
    "gate, loaded, phrase",
    [
        ({}, None, "no checkpoint under --checkpoints checkpoints"),  # the laziest: no DCP save at all
        ({}, {"loaded": {}}, "written by the training thread"),  # a checkpoint, never written in the background
        ({"0": ["write-began 4 4", "gave-up"]}, {"loaded": {}}, "no training step began while it was"),
        (
            {"0": ["write-began 4 4", "training-waits-for-the-future 4"], "1": []},
            {"loaded": {}},
            "waited for its future",
        ),
    ],
)
def test_the_order_of_events_names_each_mistake(gate, loaded, phrase):
    """What the marker wrote (the real-thread tests above) -> the verdict, for every order it can write."""
    from grader.checks import CheckFailed
    from grader.exercises.torchrun import script_runs
    from grader.exercises.torchrun.checks_script_async import check_order

    run = script_runs.ScriptRun(3, 1, gate=gate, loaded=loaded)
    with pytest.raises(CheckFailed, match=phrase):
        check_order(run)
    check_order(
        script_runs.ScriptRun(3, 1, gate={"0": ["write-began 4 9", "next-step-began 9"], "1": []}, loaded=loaded)
    )


@pytest.mark.parametrize(
    "error, phrase",
    [
        ("missing", "no checkpoint at checkpoints/epoch_2"),
        ("incomplete", "has no .metadata: its save never completed"),
        ("CheckpointException: bad key", "could not be loaded at 3 ranks"),
    ],
)
def test_a_checkpoint_the_loader_could_not_read_is_named(error, phrase):
    from grader.checks import CheckFailed
    from grader.exercises.torchrun import script_runs
    from grader.exercises.torchrun.checks_script_async import loaded_checkpoint

    run = script_runs.ScriptRun(3, 1, loaded={"world_size": 3, "loaded": {script_runs.checkpoint(2): {"error": error}}})
    with pytest.raises(CheckFailed, match=phrase):
        loaded_checkpoint(run, 2, 3)


def test_the_checks_of_train_script_share_each_scenario_run(solution, monkeypatch):
    """Every train_script check judges one of four scenarios (plain, crash, two nodes): each is run once per
    submission, whichever checks read it, and the solution still gets every point of the task."""
    from grader.exercises.torchrun import script_runs

    made = []
    real = script_runs.with_retry

    def counted(scenario, *args):
        made.append(scenario.__name__)
        return real(scenario, *args)

    monkeypatch.setattr(script_runs, "with_retry", counted)
    names = [c.name for c in EXERCISE.checks if c.task == "train_script"]
    report = grade_checks(solution, names)
    assert report.score == report.max_score > 0, "\n".join(report.lines())
    assert sorted(made) == ["killed", "linked", "two_nodes"], made  # not one run per check
