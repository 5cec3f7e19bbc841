"""The hardware plan of a run: which backend, and which device each rank gets.

    plan_for(world_size=2, gpus=1).describe()
    # '2 ranks, gloo on CPU (1 GPU visible: nccl needs one GPU per rank)'

Decided once per run, in the parent, from the world size and the GPUs it sees:
- at least one GPU per rank: nccl, rank r on GPU r (its local rank);
- fewer: gloo on CPU, and the GPUs hidden from the ranks (CUDA_VISIBLE_DEVICES="")
  before anything in them touches CUDA. A student's idiomatic code
  ("nccl" if torch.cuda.is_available() else "gloo", cuda:{local_rank}) is then
  right in every case, as under torchrun. NCCL refuses two ranks on one GPU.
Taught in lessons/lesson_02_ddp_basics.ipynb ("One GPU per rank").
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from grader.engine.cuda import cuda_devices
from grader.i18n import _, ngettext

_assigned: tuple[str, ...] | None = None  # the GPUs this grading job was given (assign_gpus), None: all it sees


@dataclass(frozen=True)
class HardwarePlan:
    world_size: int
    gpus: int  # GPUs the grader's process sees
    visible: str | None = None  # the ranks' CUDA_VISIBLE_DEVICES: this job's own GPUs (None: left as it is)

    @property
    def backend(self) -> str:
        return "nccl" if self.uses_gpus else "gloo"

    @property
    def uses_gpus(self) -> bool:
        return self.gpus >= self.world_size

    @property
    def hides_gpus(self) -> bool:
        """The ranks must not see GPUs they are not given."""
        return not self.uses_gpus

    def device(self, rank: int) -> str:
        return f"cuda:{rank}" if self.uses_gpus else "cpu"

    def describe(self) -> str:
        """The hardware-plan line a check shows, in the student's language (grader/i18n.py)."""
        ranks = ngettext("{n} rank", "{n} ranks", self.world_size)
        if self.uses_gpus:
            return _("{ranks}, nccl, rank r on cuda:r ({gpus} visible)", ranks=ranks, gpus=_gpus(self.gpus))
        if self.gpus == 0:
            return _("{ranks}, gloo on CPU (no GPU visible)", ranks=ranks)
        return _(
            "{ranks}, gloo on CPU ({gpus} visible: nccl needs one GPU per rank; the GPUs are hidden from the ranks)",
            ranks=ranks,
            gpus=_gpus(self.gpus),
        )


def _gpus(n: int) -> str:
    return ngettext("{n} GPU", "{n} GPUs", n)


def plan_for(world_size: int, gpus: int, visible: str | None = None) -> HardwarePlan:
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    return HardwarePlan(world_size, max(0, int(gpus)), visible)


def visible_gpus() -> int:
    """GPUs this process may use: this job's own (assign_gpus), else those CUDA counts (asked in a child
    process, so CUDA is never initialized here: the forkserver forks after)."""
    if _assigned is not None:
        return len(_assigned)
    return cuda_devices().count


def assign_gpus(devices: tuple[str, ...] | None) -> None:
    """This grading job's own GPUs (CUDA_VISIBLE_DEVICES entries of the grader's parent; () none): its runs'
    plans count only these, and its ranks see only them, as cuda:0..; None: every GPU this process sees."""
    global _assigned
    _assigned = None if devices is None else tuple(devices)


def current_plan(world_size: int) -> HardwarePlan:
    visible = None if _assigned is None else ",".join(_assigned)
    return plan_for(world_size, visible_gpus(), visible)


def widest_job(gpus: int, world_size: int, widest: int) -> int:
    """GPUs each grading job gets: the exercise's widest run (hidden checks: 3 ranks) when there are that many,
    else the grading world size, else none (every run of the job is then gloo on CPU)."""
    for width in (widest, world_size):
        if 1 <= width <= gpus:
            return width
    return 0


def gpu_groups(gpus: int, width: int) -> list[tuple[str, ...]]:
    """The GPUs shared out: distinct groups of `width` devices, one per concurrent job, named as the parent's
    CUDA_VISIBLE_DEVICES names them (so a job's ranks see only their own)."""
    if width < 1:
        return []
    names = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    names = names[:gpus] if len(names) >= gpus else [str(i) for i in range(gpus)]
    return [tuple(names[i : i + width]) for i in range(0, gpus - width + 1, width)]


def default_jobs(cores: int, gpus: int, width: int) -> int:
    """--jobs when not given: one per core, and no more than there are GPU groups when GPUs are used."""
    cores = max(1, cores)
    return min(cores, gpus // width) if width >= 1 and gpus // width >= 1 else cores
