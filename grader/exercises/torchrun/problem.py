"""The model, data and hyperparameters that exercise 04_torchrun's training script trains.

Taught in lessons/lesson_04_torchrun.ipynb. The grader copies this file next to a
student's train.py (its job cannot import `grader`: grader_free_python.py), which imports it:

    import problem
    model = problem.make_model()
    optimizer = problem.make_optimizer(model)
    dataset = problem.make_dataset()

It holds no answer: the grader's single-process reference trains the same
model on the same global batches (reference.py). SEED, the initial weights and
the data come from SEED_ENV, which the grader draws for each run: only a script
that really trains on them reproduces the reference.

Grader-only hooks, active only when the grader sets their environment
variable in its own runs (without them, forward does nothing extra):
- PAUSE_ENV: the model's forward waits at a known point of the first attempt so
  that the grader can act between two snapshots (inspect the snapshot file).
- PAUSE_STEP_ENV: a folder of the grader's. Every worker stops at each of its
  training forwards, says so with a file there and waits for the grader's go:
  meanwhile the grader reads the snapshot (every snapshot's age is checked),
  and at the step it chose it kills a worker instead: the kill lands at that
  step every time, whatever the load. Which step that is lives only in the
  grader: nothing here or in the environment tells the script.
- GATE_ENV: a folder of the grader's. The model's state_dict carries a marker (its extra state) that
  records the training forward at which the script took the state (model.state_dict(), get_state_dict).
  When a thread other than the training thread writes the marker (an asynchronous checkpoint's writer),
  the first time in the process, it holds the write until the training thread starts a later training
  forward, and notes what happened, in order: the write began; the next step began (or the training thread
  was found waiting for a future instead); then the write goes on and the checkpoint completes. The verdict
  is that sequence, never a measured time (the wait is bounded by PAUSE_LIMIT_S, for liveness only). The
  marker pickles as an empty OrderedDict (loadable with weights_only); the grader's reads drop it.
- SAVES_ENV: a folder of the grader's. dcp.async_save is watched in every worker (the name in
  torch.distributed.checkpoint, and a copy the script imported before `import problem`): each call notes,
  in order, the save or the mistake that stops it, raising in the script at once. A save without
  process_group= (or on the default group) would run its collectives on DDP's group and hang; a save
  started while the previous one is still running, or was never asked for (result(), done(),
  concurrent.futures.wait), breaks "one save in flight". The future the script gets resolves only once
  the script asked for it, so a script that never waits is caught at its next save whatever the timing.
- SEEN_ENV: each worker's model counts the samples its training forwards (grad
  enabled) took, so that the grader sees every worker train on its own shard: a
  script where rank 0 trains on every global batch alone, without DDP, reaches
  the same weights but is not distributed training.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import sys
import threading
import time

import torch
from torch import nn

SEED_ENV = "TORCHRUN_EXERCISE_SEED"  # set by the grader for each run; 0 elsewhere
SEED = int(os.environ.get(SEED_ENV, "0"))  # DistributedSampler(seed=SEED), the initial weights, the data
SAMPLES = 64
FEATURES = 8
GLOBAL_BATCH = 16  # samples per optimizer step, summed over all ranks
STEPS_PER_EPOCH = SAMPLES // GLOBAL_BATCH  # 4 optimizer steps per epoch
LR = 0.05
MOMENTUM = 0.9  # momentum makes the optimizer state part of what a snapshot must keep

PAUSE_ENV = "TORCHRUN_EXERCISE_PAUSE"  # "<log path>:<epochs>:<go file>", set by the grader
PAUSE_LIMIT_S = 120.0  # a paused worker never waits longer than this
PAUSE_STEP_ENV = "TORCHRUN_EXERCISE_PAUSE_STEP"  # "<folder>", set by the grader
SEEN_ENV = "TORCHRUN_EXERCISE_SEEN"  # a folder, set by the grader: rank<RANK>.seen gets one line per forward
GATE_ENV = "TORCHRUN_EXERCISE_GATE"  # a folder, set by the grader: rank<RANK>.gate gets the held write's events
SAVES_ENV = "TORCHRUN_EXERCISE_SAVES"  # a folder, set by the grader: rank<RANK>.saves gets the saves' events
EXTRA_STATE = "_extra_state"  # the state_dict key of the marker (torch's name for a module's extra state)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))
        self._pause = _Pause.from_env()
        self._step_pause = _StepPause.from_env()
        self._seen = os.environ.get(SEEN_ENV)

    def forward(self, x):
        if torch.is_grad_enabled():
            _FORWARDS[0] += 1  # before any pause: a held checkpoint write waits for exactly this
        if self._pause is not None:
            self._pause.maybe_wait()
        if self._step_pause is not None and torch.is_grad_enabled():
            self._step_pause.count_and_maybe_wait()
        if self._seen and torch.is_grad_enabled():  # training forwards only: an evaluation runs under no_grad
            with open(os.path.join(self._seen, f"rank{os.environ.get('RANK', 'unknown')}.seen"), "a") as f:
                f.write(f"{x.shape[0]}\n")
        return self.body(x)


class GatedNet(Net):
    """Net with the grader's checkpoint marker as its extra state (GATE_ENV); the same parameters."""

    def get_extra_state(self):
        return _Marker(os.environ[GATE_ENV], _FORWARDS[0])

    def set_extra_state(self, state) -> None:
        pass  # the marker carries nothing to restore


def make_model(seed: int | None = None) -> nn.Module:
    torch.manual_seed(SEED if seed is None else seed)  # the same initial weights in every process
    return GatedNet() if os.environ.get(GATE_ENV) else Net()


_FORWARDS = [0]  # this process's training forwards so far (GATE_ENV)
_HELD = threading.Lock()  # one held write per process: the first asynchronous one
_held_once = [False]


def _waiting_for_a_future(frame) -> bool:
    """The training thread's stack is inside concurrent.futures (Future.result, wait): it waits for a save."""
    while frame is not None:
        code = frame.f_code
        if os.path.join("concurrent", "futures") in code.co_filename and code.co_name in ("result", "wait"):
            return True
        frame = frame.f_back
    return False


class _Marker:
    """Taken with the model's state at training forward `taken_at`; see GATE_ENV."""

    def __init__(self, folder: str, taken_at: int):
        self.folder, self.taken_at = folder, taken_at

    def __deepcopy__(self, memo):
        return self  # a checkpoint's staging copies the state: the copy is this marker

    def _note(self, line: str) -> None:
        with open(os.path.join(self.folder, f"rank{os.environ.get('RANK', 'unknown')}.gate"), "a") as f:
            f.write(line + "\n")

    def __reduce__(self):
        main = threading.main_thread()
        if threading.current_thread() is not main:
            with _HELD:
                if not _held_once[0]:
                    _held_once[0] = True
                    self._hold(main)
        return collections.OrderedDict, ()

    def _hold(self, main: threading.Thread) -> None:
        self._note(f"write-began {self.taken_at} {_FORWARDS[0]}")
        deadline = time.monotonic() + PAUSE_LIMIT_S  # a liveness bound only: the verdict is the order below
        while _FORWARDS[0] <= self.taken_at and time.monotonic() < deadline:
            if _waiting_for_a_future(sys._current_frames().get(main.ident)):
                self._note(f"training-waits-for-the-future {_FORWARDS[0]}")
                return
            time.sleep(0.005)
        self._note(f"next-step-began {_FORWARDS[0]}" if _FORWARDS[0] > self.taken_at else "gave-up")


def make_dataset(seed: int | None = None) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(1234 + (SEED if seed is None else seed))
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True)) + 0.1 * torch.randn(SAMPLES, 1, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)


def loss_fn(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(prediction, target)


class _Pause:
    """Wait in forward once the log lists `epochs` epochs, until `go` exists.

    Only on the first attempt (TORCHELASTIC_RESTART_COUNT 0): after a restart
    the run goes straight on. Each worker waits at its first forward of the
    epoch after the logged ones, so no further snapshot is written meanwhile.
    """

    def __init__(self, log: str, epochs: int, go: str):
        self.log, self.epochs, self.go = log, epochs, go
        self.done = False

    @classmethod
    def from_env(cls):
        spec = os.environ.get(PAUSE_ENV)
        if not spec or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
            return None
        log, epochs, go = spec.rsplit(":", 2)
        return cls(log, int(epochs), go)

    def _logged(self) -> int:
        try:
            with open(self.log) as f:
                return sum(1 for line in f if line.strip())
        except OSError:
            return 0

    def maybe_wait(self) -> None:
        if self.done or self._logged() < self.epochs:
            return
        self.done = True
        deadline = time.monotonic() + PAUSE_LIMIT_S
        while not os.path.exists(self.go) and time.monotonic() < deadline:
            time.sleep(0.02)


def arrived(folder: str, attempt: int, forward: int, rank: str) -> str:
    """The file a worker creates when it reaches its training forward `forward` (0-based) of `attempt`."""
    return os.path.join(folder, f"at.{attempt}.{forward}.rank{rank}")


def go(folder: str, attempt: int, forward: int) -> str:
    """The file the grader creates to let the workers run that forward."""
    return os.path.join(folder, f"go.{attempt}.{forward}")


class _StepPause:
    """At each training forward of this process, on every attempt (TORCHELASTIC_RESTART_COUNT): create
    arrived(...), then wait (bounded) for go(...). The forward counted in SEEN_ENV's file is the one the
    grader let run: one where a worker was killed instead never trains."""

    def __init__(self, folder: str):
        self.folder, self.forwards = folder, 0
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        self.rank = os.environ.get("RANK", "unknown")

    @classmethod
    def from_env(cls):
        folder = os.environ.get(PAUSE_STEP_ENV)
        return cls(folder) if folder else None

    def count_and_maybe_wait(self) -> None:
        forward, self.forwards = self.forwards, self.forwards + 1
        open(arrived(self.folder, self.attempt, forward, self.rank), "w").close()
        release, deadline = go(self.folder, self.attempt, forward), time.monotonic() + PAUSE_LIMIT_S
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.005)


ON_THE_TRAINING_GROUP = (
    "the grader stopped this run: dcp.async_save was called without process_group= (or with the default "
    "group), so its background save would run collectives on DDP's group; give it a gloo group of its own"
)
WHILE_ONE_IN_FLIGHT = (
    "the grader stopped this run: dcp.async_save was called while the previous save's future had never "
    "been waited for; wait for it (future.result()) before the next save: one save in flight at a time"
)


class _Given(concurrent.futures.Future):
    """The future the script gets from a watched save: notes that the script asked it (result(), exception(),
    done(): a wait, or a poll until done) before it resolves."""

    asked = False

    def done(self) -> bool:
        self.asked = True
        return super().done()

    def result(self, timeout=None):
        self.asked = True
        return super().result(timeout)

    def exception(self, timeout=None):
        self.asked = True
        return super().exception(timeout)


class _SaveWatch:
    """dcp.async_save as the script calls it, watched (SAVES_ENV)."""

    def __init__(self, folder: str, real):
        self.folder, self.real, self.previous, self.count = folder, real, None, 0

    def note(self, line: str) -> None:
        with open(os.path.join(self.folder, f"rank{os.environ.get('RANK', 'unknown')}.saves"), "a") as f:
            f.write(line + "\n")

    def __call__(self, *args, **kwargs):
        import torch.distributed as dist

        self.count += 1
        group = kwargs.get("process_group")
        if dist.is_available() and dist.is_initialized() and (group is None or group is dist.group.WORLD):
            self.note(f"on-the-training-group {self.count}")
            raise RuntimeError(ON_THE_TRAINING_GROUP)
        if self.previous is not None and not (self.previous[1].asked and self.previous[0].done()):
            self.note(f"while-one-in-flight {self.count}")
            raise RuntimeError(WHILE_ONE_IN_FLIGHT)
        self.note(f"save {self.count}")
        future = self.real(*args, **kwargs)
        if not isinstance(future, concurrent.futures.Future):
            return future
        given = _Given()
        self.previous = (future, given)
        threading.Thread(target=self._hand_over, args=(future, given, self.count), daemon=True).start()
        return given

    def _hand_over(self, future, given: _Given, number: int) -> None:
        """Resolve `given` like `future`, once the save is done and the script asked for it (or waits in
        concurrent.futures.wait, seen on the training thread's stack)."""
        concurrent.futures.wait([future])
        main, deadline = threading.main_thread(), time.monotonic() + PAUSE_LIMIT_S  # liveness bound only
        while main.is_alive() and time.monotonic() < deadline and not given.asked:
            if _waiting_for_a_future(sys._current_frames().get(main.ident)):
                given.asked = True
            time.sleep(0.005)
        self.note(f"waited {number}")
        if future.exception() is not None:
            given.set_exception(future.exception())
        else:
            given.set_result(future.result())


def _watch_saves() -> None:
    folder = os.environ.get(SAVES_ENV)
    if not folder:
        return
    import torch.distributed.checkpoint as dcp

    real = dcp.async_save
    if isinstance(real, _SaveWatch):
        return
    watch = _SaveWatch(folder, real)
    dcp.async_save = watch
    script = sys.modules.get("__main__")
    for name, value in list(vars(script).items() if script is not None else ()):
        if value is real:  # `from torch.distributed.checkpoint import async_save` before `import problem`
            setattr(script, name, watch)


_watch_saves()
