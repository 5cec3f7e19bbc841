"""The model, data and hyperparameters that exercise 04_torchrun's training script trains.

Taught in lessons/04_torchrun.ipynb. The grader copies this file next to a
student's train.py (its job cannot import `grader`: isolation.py), which imports it:

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
- SEEN_ENV: each worker's model counts the samples its training forwards (grad
  enabled) took, so that the grader sees every worker train on its own shard: a
  script where rank 0 trains on every global batch alone, without DDP, reaches
  the same weights but is not distributed training.
"""
from __future__ import annotations

import os
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


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))
        self._pause = _Pause.from_env()
        self._step_pause = _StepPause.from_env()
        self._seen = os.environ.get(SEEN_ENV)

    def forward(self, x):
        if self._pause is not None:
            self._pause.maybe_wait()
        if self._step_pause is not None and torch.is_grad_enabled():
            self._step_pause.count_and_maybe_wait()
        if self._seen and torch.is_grad_enabled():  # training forwards only: an evaluation runs under no_grad
            with open(os.path.join(self._seen, f"rank{os.environ.get('RANK', 'unknown')}.seen"), "a") as f:
                f.write(f"{x.shape[0]}\n")
        return self.body(x)


def make_model(seed: int | None = None) -> nn.Module:
    torch.manual_seed(SEED if seed is None else seed)  # the same initial weights in every process
    return Net()


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
