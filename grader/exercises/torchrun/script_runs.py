"""The training-script scenarios the checks of `train_script` run (04_torchrun).

Each writes the student's script to train.py (and problem.py next to it) in a
fresh directory, launches it with the grader's own torchrun command, in a Python
that cannot import the grader (grader_free_python.py) and with a seed drawn for the run,
and reads back what it wrote: the final model, the snapshot and the epoch log.
Verdicts are made from those files and the run's seed, never from torchrun's
exit code (a DDP worker can abort at teardown on CPU).

    python train.py --epochs E --snapshot-every N --snapshot snapshot.pt --out final.pt --epoch-log epochs.log \
        --checkpoints checkpoints
"""

from __future__ import annotations

import os
import random
import shutil
import stat
import tempfile
from dataclasses import dataclass, field

import torch

from grader.engine import reserved_port
from grader.exercises.torchrun import grader_free_python, problem
from grader.exercises.torchrun.torchrun_process import Torchrun
from grader.exercises.torchrun.reference import standalone_command

SNAPSHOT, FINAL, LOG, LINK = "snapshot.pt", "final.pt", "epochs.log", "snapshot-link.pt"
CHECKPOINTS = "checkpoints"  # --checkpoints: a folder of torch.distributed.checkpoint checkpoints, epoch_<n> each
LOADER, LOADED = "dcp_load.py", "dcp-loaded.pt"  # the grader's loader (dcp_load.py) and what it wrote
LOAD_WORKERS = 3  # the world size the checkpoints are loaded at: not the 2 that saved them
# Bounds, not expectations: one torchrun of a few tiny epochs takes 5-10 s on 2 idle cores and went
# past 60 s under a load of 20. A run that reaches its bound pays nothing and says so.
RUN_TIMEOUT_S = 180.0
KILL_RUN_TIMEOUT_S = 240.0  # two attempts
WORKERS = 2  # --nproc-per-node of the one-node scenarios (killed, linked)
SNAPSHOT_EVERY = 2  # --snapshot-every of every run: a snapshot at least every 2 of an epoch's 4 steps


def script_args(epochs: int) -> list[str]:
    return [
        "--epochs",
        str(epochs),
        "--snapshot-every",
        str(SNAPSHOT_EVERY),
        "--snapshot",
        SNAPSHOT,
        "--out",
        FINAL,
        "--epoch-log",
        LOG,
        "--checkpoints",
        CHECKPOINTS,
    ]


def checkpoint(epoch: int) -> str:
    """The checkpoint the script saves after `epoch`, relative to its working directory."""
    return f"{CHECKPOINTS}/epoch_{epoch}"


@dataclass
class Job:
    """Where one scenario runs: its working directory, the isolated Python's links folder, its seed."""

    directory: str
    site: str
    seed: int  # problem.SEED in the workers; drawn per run, so no script can know it in advance
    saves: str = ""  # problem.SAVES_ENV: where the workers note their dcp.async_save calls (outside `directory`)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        watched = {problem.SAVES_ENV: self.saves} if self.saves else {}
        return grader_free_python.isolated_env(
            self.site,
            {
                problem.SEED_ENV: str(self.seed),
                **watched,
                **grader_free_python.node_gpus(0, 1, WORKERS),
                **(extra or {}),
            },
        )

    def torchrun(
        self, cmd: list[str], cwd: str, timeout: float, extra: dict[str, str] | None, args: list[str]
    ) -> Torchrun:
        """The grader's torchrun command `cmd` (ending with the script), isolated, then the script's `args`."""
        return Torchrun(grader_free_python.isolated_command(cmd) + args, cwd, timeout, self.env(extra))


@dataclass
class ScriptRun:
    """What a run left behind, read before its directory is removed."""

    epochs: int
    seed: int
    output: str = ""
    timed_out: bool = False
    died_at_teardown: bool = False
    lost_rendezvous: bool = False  # the agents never met (their port taken meanwhile): the script never ran
    acted: bool = False  # the grader did its mid-run action (kill, link)
    log_when_acted: list[int] | None = None
    snapshot_when_acted: bool = False
    # linked: the snapshot's content when the grader linked it; killed: when the log got its first line
    snapshot_as_acted: object = None
    kill_step: int | None = None  # killed scenario: the step (0-based) at which the workers were paused and killed
    snapshot_at_kill: object = None  # killed scenario: the snapshot's content at that moment
    # killed scenario: (attempt, training forward of that attempt, the snapshot's content as it began)
    snapshots: list[tuple[int, int, object]] = field(default_factory=list)
    log: list[int] | None = None
    final: object = None  # a state dict, None (missing) or an error text
    snapshot: object = None
    link: object = None  # the hard link's content (linked scenario)
    other_files: list[str] = field(default_factory=list)  # what node 1 wrote (two_nodes)
    retried: str = ""  # why a first run was repeated (noise(): not the script's doing), or ""
    seen: dict[str, int] | None = None  # RANK -> samples its training forwards took (linked, killed)
    gate: dict[str, list[str]] | None = None  # linked: RANK -> the held checkpoint write's events (problem.GATE_ENV)
    loaded: object = None  # linked: what dcp_load.py loaded from the checkpoints, at LOAD_WORKERS ranks
    saves: dict[str, list[str]] | None = None  # RANK -> its dcp.async_save calls' events (problem.SAVES_ENV)

    def complete(self) -> bool:
        """The run got as far as a loadable final model and a full log."""
        return isinstance(self.final, dict) and self.log is not None and len(self.log) >= self.epochs

    def noise(self) -> str:
        """Why an incomplete run says nothing of the script ("" when it may): torch's teardown abort on CPU, or a
        rendezvous port another program took. A complete run is never noise."""
        if self.complete():
            return ""
        if self.died_at_teardown:
            return "a worker aborted at teardown before the outputs were complete (noise of torch on CPU)"
        if self.lost_rendezvous:
            return "the torchrun agents could not meet: another program took their rendezvous port"
        return ""

    def collect(self, directory: str) -> "ScriptRun":
        self.log = read_log(os.path.join(directory, LOG))
        self.final = load(os.path.join(directory, FINAL))
        self.snapshot = load(os.path.join(directory, SNAPSHOT))
        self.link = load(os.path.join(directory, LINK))
        return self

    def absorb(self, proc: Torchrun, label: str = "") -> None:
        proc.wait()
        self.output += (f"--- {label} ---\n" if label else "") + proc.output
        self.timed_out = self.timed_out or proc.timed_out
        self.died_at_teardown = self.died_at_teardown or proc.died_at_teardown()
        self.lost_rendezvous = self.lost_rendezvous or proc.lost_rendezvous()


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
            epochs.append(int(line.split()[0]))
        except (ValueError, IndexError):
            epochs.append(-1)  # an unreadable line, reported as such
    return epochs


def load(path: str):
    """torch.load with weights only (a student's file is never unpickled freely).
    Returns the object, None when the file is missing, or an error text. The model's checkpoint marker
    (problem.EXTRA_STATE, in the runs that carry it) is dropped: it is the grader's, not the model's."""
    if not os.path.exists(path):
        return None
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        return f"cannot be loaded ({type(exc).__name__}: {str(exc)[:200]})"
    for state in (loaded, loaded.get("model") if isinstance(loaded, dict) else None):
        if isinstance(state, dict):
            state.pop(problem.EXTRA_STATE, None)
    return loaded


def read_gate(folder: str, suffix: str = ".gate") -> dict[str, list[str]]:
    """RANK -> the events problem.GATE_ENV's marker (or SAVES_ENV's watch, suffix ".saves") wrote there, in order."""
    events = {}
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.endswith(suffix) and stat.S_ISREG(os.lstat(path).st_mode):
            with open(path) as f:
                events[name[len("rank") : -len(suffix)]] = f.read(1 << 16).split("\n")[:20]
    return events


def load_checkpoints(job: Job, run: ScriptRun, epochs: list[int]) -> None:
    """Launch the grader's loader (dcp_load.py) at LOAD_WORKERS ranks on the checkpoints of `epochs`."""
    directory = job.directory
    shutil.copyfile(os.path.join(os.path.dirname(problem.__file__), LOADER), os.path.join(directory, LOADER))
    with job.torchrun(
        standalone_command(LOADER, LOAD_WORKERS),
        directory,
        RUN_TIMEOUT_S,
        None,
        [LOADED] + [checkpoint(e) for e in epochs],
    ) as proc:
        proc.wait()
        run.output += "--- loading the checkpoints ---\n" + proc.output
    run.loaded = load(os.path.join(directory, LOADED))


def read_seen(folder: str) -> dict[str, int]:
    """RANK -> the samples that worker's training forwards took (problem.SEEN_ENV's files)."""
    seen = {}
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.endswith(".seen") and stat.S_ISREG(os.lstat(path).st_mode):  # never a link or a FIFO
            with open(path) as f:
                seen[name[len("rank") : -len(".seen")]] = sum(int(n) for n in f.read(1 << 20).split() if n.isdigit())
    return seen


def _logged(path: str) -> int:
    return len(read_log(path) or [])


# The crash run's kill: the training forward of step 7 (epoch 1, batch 3), the same in every grading. A later
# epoch follows (a resume that also skips batches in it shows), and the snapshot the solution took at step 6
# is mid-epoch (a resume at the epoch's start or at the wrong batch shows). The step is never given to the
# script: the workers stop at every step and only the grader knows where it kills.
KILL_STEP = 7


def killed(source: str, job: Job, epochs: int, every: int) -> ScriptRun:
    """Two workers, --max-restarts=1; SIGKILL local rank 1 at KILL_STEP.

    The given model stops every worker at each training forward of every attempt until the grader lets it
    go (problem.PAUSE_STEP_ENV). While they wait the grader reads the snapshot's progress (rank 0 writes
    nothing meanwhile): at each step before the kill and after the restart (run.snapshots), and at
    KILL_STEP, where the kill lands instead. No timing is involved: the same steps every time.
    """
    directory = job.directory
    grader_free_python.write_job(directory, source)
    run = ScriptRun(epochs, job.seed)
    run.kill_step = KILL_STEP
    log, snapshot = os.path.join(directory, LOG), os.path.join(directory, SNAPSHOT)
    grader_dir = os.path.dirname(directory)  # outside the script's directory
    paused, seen = os.path.join(grader_dir, "paused"), os.path.join(grader_dir, "seen")
    os.mkdir(paused)
    os.mkdir(seen)
    cmd = standalone_command("train.py", WORKERS, max_restarts=1)
    extra = {problem.PAUSE_STEP_ENV: paused, problem.SEEN_ENV: seen}
    with job.torchrun(cmd, directory, KILL_RUN_TIMEOUT_S, extra, script_args(epochs)) as proc:
        restarted = problem.arrived(paused, 1, 0, "0")  # the second attempt's first step: torchrun restarted
        for attempt in (0, 1):
            forward = 0
            while proc.wait_until(
                lambda: (
                    os.path.exists(problem.arrived(paused, attempt, forward, "0"))
                    or (attempt == 0 and os.path.exists(restarted))
                )
            ):
                if not os.path.exists(problem.arrived(paused, attempt, forward, "0")):
                    break  # the first attempt failed before the kill: let the restarted one run, unpaused
                run.snapshots.append((attempt, forward, load(snapshot)))
                if attempt == 0 and run.snapshot_as_acted is None and _logged(log):
                    run.snapshot_as_acted = run.snapshots[-1][2]  # the snapshot the log's first line came with
                if attempt == 0 and forward == KILL_STEP:
                    run.log_when_acted = read_log(log) or []
                    run.snapshot_at_kill = run.snapshots[-1][2]
                    run.snapshot_when_acted = run.snapshot_at_kill is not None
                    run.acted = proc.kill_worker(local_rank=1)
                    break
                open(problem.go(paused, attempt, forward), "w").close()
                forward += 1
            if not run.acted and not os.path.exists(restarted):
                break  # the first attempt ended (or timed out) before the kill, and none followed
        run.absorb(proc)
    run.seen = read_seen(seen)
    return run.collect(directory)


def linked(source: str, job: Job, epochs: int, link_after: int) -> ScriptRun:
    """Two workers; once the log lists `link_after` epochs (the workers paused), hard-link
    the snapshot to LINK and read it, then let the run go on. An atomic os.replace leaves the
    link's content as it was read; a snapshot rewritten in place changes it."""
    directory = job.directory
    grader_free_python.write_job(directory, source)
    run = ScriptRun(epochs, job.seed)
    log = os.path.join(directory, LOG)
    go = os.path.join(directory, "go")
    seen = os.path.join(os.path.dirname(directory), "seen")  # outside the script's directory
    gate = os.path.join(os.path.dirname(directory), "gate")
    os.mkdir(seen)
    os.mkdir(gate)
    with job.torchrun(
        standalone_command("train.py", WORKERS),
        directory,
        RUN_TIMEOUT_S,
        {problem.PAUSE_ENV: f"{log}:{link_after}:{go}", problem.SEEN_ENV: seen, problem.GATE_ENV: gate},
        script_args(epochs),
    ) as proc:
        if proc.wait_until(lambda: _logged(log) >= link_after):
            run.log_when_acted = read_log(log)
            snapshot = os.path.join(directory, SNAPSHOT)
            run.snapshot_when_acted = os.path.exists(snapshot)
            if run.snapshot_when_acted:
                try:
                    os.link(snapshot, os.path.join(directory, LINK))
                except FileNotFoundError:  # gone since: a script that does not pause removed or renamed it
                    run.snapshot_when_acted = False
                else:
                    run.snapshot_as_acted = load(os.path.join(directory, LINK))  # the linked file, whatever replaces it
                    run.acted = True
        open(go, "w").close()  # release the paused workers
        run.absorb(proc)
    run.seen = read_seen(seen)
    run.gate = read_gate(gate)
    if os.path.isdir(os.path.join(directory, CHECKPOINTS)):
        load_checkpoints(job, run, [0, epochs - 1])
    return run.collect(directory)


def two_nodes(source: str, job: Job, epochs: int, node_command) -> ScriptRun:
    """Two torchrun agents (--nnodes=2, one worker each) meeting over c10d on 127.0.0.1.

    node_command(script, node_rank, endpoint) is the torchrun command of one node.
    Each "node" runs in its own directory with the same relative paths, like two
    machines with their own disks: whatever node 1's worker writes shows there.
    """
    nodes = [os.path.join(job.directory, f"node{i}") for i in range(2)]
    for node in nodes:
        os.mkdir(node)
        grader_free_python.write_job(node, source)
    run = ScriptRun(epochs, job.seed)
    with reserved_port() as port:  # released after the run: other runs may use it again
        endpoint = f"127.0.0.1:{port}"
        procs = [
            job.torchrun(
                node_command("train.py", i, endpoint),
                node,
                RUN_TIMEOUT_S,
                grader_free_python.node_gpus(i, 2, 1),
                script_args(epochs),
            )
            for i, node in enumerate(nodes)
        ]
        try:
            for proc in procs:
                proc.start()
            for i, proc in enumerate(procs):
                run.absorb(proc, f"node {i}")
        finally:
            for proc in procs:
                proc.stop()
    given = {
        "train.py",
        grader_free_python.PROBLEM_FILE,
        "__pycache__",
        CHECKPOINTS,
    }  # every rank writes its checkpoint shard
    run.other_files = sorted(n for n in os.listdir(nodes[1]) if n not in given and not n.startswith("torchrun-"))
    return run.collect(nodes[0])


def with_retry(scenario, source: str, *args) -> ScriptRun:
    """Run a scenario in a fresh directory, isolated, with a fresh seed (and port); once more when it failed
    only for a reason outside the script (ScriptRun.noise: a teardown abort, a rendezvous port taken)."""
    noise = ""
    for attempt in range(2):
        root = tempfile.mkdtemp(prefix="torchrun-check-")
        try:
            site = grader_free_python.build_site(root)
            directory = os.path.join(root, "run")  # the links folder stays outside the script's directory
            os.mkdir(directory)
            saves = os.path.join(root, "saves")
            os.mkdir(saves)
            job = Job(directory, site, random.SystemRandom().randrange(1, 2**31), saves)
            grader_free_python.verify(directory, job.env())
            run = scenario(source, job, *args)
            run.saves = read_gate(saves, ".saves")
        finally:
            shutil.rmtree(root, ignore_errors=True)
        run.retried, noise = noise, run.noise()
        if not noise:
            return run
    return run
