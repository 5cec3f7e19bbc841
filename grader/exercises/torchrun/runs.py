"""The training-script scenarios the checks of `train_script` run (04_torchrun).

Each writes the student's script to train.py in a fresh directory, launches it
with the grader's own torchrun command and reads back what it wrote: the final
model, the snapshot and the epoch log. Verdicts are made from those files,
never from torchrun's exit code (a DDP worker can abort at teardown on CPU).

    python train.py --epochs E --snapshot snapshot.pt --out final.pt --epoch-log epochs.log
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from grader.engine import free_port
from grader.exercises.torchrun import problem
from grader.exercises.torchrun.launch import Torchrun, worker_env
from grader.exercises.torchrun.reference import grader_command

SNAPSHOT, FINAL, LOG = "snapshot.pt", "final.pt", "epochs.log"
RUN_TIMEOUT_S = 60.0  # one torchrun of a few tiny epochs takes 5-10 s on 2 busy cores
KILL_RUN_TIMEOUT_S = 90.0  # two attempts


def script_args(epochs: int) -> list[str]:
    return ["--epochs", str(epochs), "--snapshot", SNAPSHOT, "--out", FINAL, "--epoch-log", LOG]


@dataclass
class ScriptRun:
    dir: str  # where rank 0 ran
    epochs: int
    output: str = ""
    returncode: int | None = None
    timed_out: bool = False
    died_at_teardown: bool = False
    acted: bool = False  # the grader did its mid-run action (kill, link)
    log_when_acted: list[int] | None = None
    snapshot_when_acted: bool = False
    other_dirs: list[str] = field(default_factory=list)  # the other nodes' directories

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def log(self) -> list[int] | None:
        return read_log(self.path(LOG))

    def final(self):
        return load(self.path(FINAL))

    def complete(self) -> bool:
        """The run got as far as its final model and a full log."""
        final, log = self.final(), self.log()
        return isinstance(final, dict) and log is not None and len(log) >= self.epochs


def read_log(path: str) -> list[int] | None:
    """The epochs listed in the log (one integer per line); None when there is no log."""
    try:
        with open(path) as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return None
    epochs = []
    for line in lines:
        try:
            epochs.append(int(line.split()[0].removeprefix("epoch=").removeprefix("epoch")))
        except (ValueError, IndexError):
            epochs.append(-1)  # unreadable line, reported as such
    return epochs


def load(path: str):
    """torch.load with weights only (a student's file is never unpickled freely).
    Returns the object, None when the file is missing, or an error text."""
    if not os.path.exists(path):
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        return f"cannot be loaded ({type(exc).__name__}: {str(exc)[:200]})"


@contextmanager
def scratch(prefix: str = "torchrun-check-"):
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _write_script(directory: str, source: str) -> str:
    path = os.path.join(directory, "train.py")
    with open(path, "w") as f:
        f.write(source)
    return path


def _logged(path: str) -> int:
    log = read_log(path)
    return len(log) if log else 0


def _finish(run: ScriptRun, proc: Torchrun) -> None:
    proc.wait()
    run.output += proc.output
    run.returncode, run.timed_out = proc.returncode, proc.timed_out
    run.died_at_teardown = run.died_at_teardown or proc.died_at_teardown()


def plain(source: str, directory: str, epochs: int) -> ScriptRun:
    """torchrun --standalone --nproc-per-node=2 train.py ..."""
    _write_script(directory, source)
    run = ScriptRun(directory, epochs)
    with Torchrun(grader_command("train.py", 2) + script_args(epochs), directory, RUN_TIMEOUT_S) as proc:
        _finish(run, proc)
    return run


def killed(source: str, directory: str, epochs: int, kill_after: int) -> ScriptRun:
    """Two workers, --max-restarts=1; SIGKILL local rank 1 once the log lists `kill_after` epochs.

    The given model pauses the first attempt at its next forward (problem.PAUSE_ENV),
    so the kill lands between snapshot `kill_after` and the next one, every time.
    """
    _write_script(directory, source)
    run = ScriptRun(directory, epochs)
    log = run.path(LOG)
    never = os.path.join(directory, "never-released")  # the paused workers are killed, not released
    env = worker_env({problem.PAUSE_ENV: f"{log}:{kill_after}:{never}"})
    cmd = grader_command("train.py", 2, max_restarts=1) + script_args(epochs)
    with Torchrun(cmd, directory, KILL_RUN_TIMEOUT_S, env) as proc:
        if proc.wait_until(lambda: _logged(log) >= kill_after):
            run.log_when_acted = read_log(log)
            run.snapshot_when_acted = os.path.exists(run.path(SNAPSHOT))
            run.acted = proc.kill_worker(local_rank=1)
        _finish(run, proc)
    return run


def linked(source: str, directory: str, epochs: int, link_after: int, link_name: str) -> ScriptRun:
    """Two workers; once the log lists `link_after` epochs (the workers paused), hard-link
    the snapshot to `link_name`, then let the run go on. An atomic os.replace leaves the
    link's content alone; a snapshot rewritten in place changes it."""
    _write_script(directory, source)
    run = ScriptRun(directory, epochs)
    log = run.path(LOG)
    go = os.path.join(directory, "go")
    env = worker_env({problem.PAUSE_ENV: f"{log}:{link_after}:{go}"})
    with Torchrun(grader_command("train.py", 2) + script_args(epochs), directory, RUN_TIMEOUT_S, env) as proc:
        if proc.wait_until(lambda: _logged(log) >= link_after):
            run.log_when_acted = read_log(log)
            run.snapshot_when_acted = os.path.exists(run.path(SNAPSHOT))
            if run.snapshot_when_acted:
                os.link(run.path(SNAPSHOT), run.path(link_name))
                run.acted = True
        open(go, "w").close()  # release the paused workers
        _finish(run, proc)
    return run


def two_nodes(source: str, directory: str, epochs: int) -> ScriptRun:
    """Two torchrun agents (--nnodes=2, one worker each) meeting over c10d on 127.0.0.1.

    Each "node" runs in its own directory with the same relative paths, as two
    machines with their own disks: whatever node 1 writes shows there.
    """
    nodes = [os.path.join(directory, f"node{i}") for i in range(2)]
    for node in nodes:
        os.mkdir(node)
        _write_script(node, source)
    run = ScriptRun(nodes[0], epochs, other_dirs=nodes[1:])
    endpoint = f"127.0.0.1:{free_port()}"
    procs = [Torchrun(grader_command("train.py", 1, nnodes=2, rdzv_endpoint=endpoint)[:-1]
                      + [f"--node-rank={i}", "train.py"] + script_args(epochs), node, RUN_TIMEOUT_S)
             for i, node in enumerate(nodes)]
    try:
        for proc in procs:
            proc.start()
        for i, proc in enumerate(procs):
            proc.wait()
            run.output += f"--- node {i} ---\n{proc.output}\n"
            run.timed_out = run.timed_out or proc.timed_out
            run.died_at_teardown = run.died_at_teardown or proc.died_at_teardown()
            run.returncode = proc.returncode if run.returncode in (0, None) else run.returncode
    finally:
        for proc in procs:
            proc.stop()
    return run


def with_retry(scenario, source: str, *args) -> ScriptRun:
    """Run a scenario; once more when it failed only because a worker died at teardown
    before the outputs were complete (noise of torch on CPU, never the student's)."""
    with scratch() as first:
        run = scenario(source, first, *args)
        if run.complete() or not run.died_at_teardown:
            return _detach(run)
    with scratch() as second:
        return _detach(scenario(source, second, *args))


def _detach(run: ScriptRun) -> ScriptRun:
    """Read everything the checks need before the scratch directory goes."""
    run.cached = {  # type: ignore[attr-defined]
        "log": run.log(), "final": run.final(), "snapshot": load(run.path(SNAPSHOT)),
        "files": sorted(os.listdir(run.dir)) if os.path.isdir(run.dir) else [],
        "other_files": [sorted(os.listdir(d)) for d in run.other_dirs if os.path.isdir(d)],
    }
    return run
