"""The hardware plan of a run: which backend, and which device each rank gets.

    plan_for(world_size=2, gpus=1).describe()
    # '2 ranks, gloo on CPU (1 GPU visible: nccl needs one GPU per rank)'

Decided once per run, in the parent, from the world size and the GPUs it sees:
- at least one GPU per rank: nccl, rank r on GPU r (its local rank);
- fewer: gloo on CPU, and the GPUs hidden from the ranks (CUDA_VISIBLE_DEVICES="")
  before anything in them touches CUDA. A student's idiomatic code
  ("nccl" if torch.cuda.is_available() else "gloo", cuda:{local_rank}) is then
  right in every case, as under torchrun. NCCL refuses two ranks on one GPU.
Taught in lessons/02_ddp_basics.ipynb ("One GPU per rank").
"""
from __future__ import annotations

from dataclasses import dataclass

from grader.i18n import _, ngettext


@dataclass(frozen=True)
class HardwarePlan:
    world_size: int
    gpus: int  # GPUs the grader's process sees

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
        return _("{ranks}, gloo on CPU ({gpus} visible: nccl needs one GPU per rank; the GPUs are hidden from the "
                 "ranks)", ranks=ranks, gpus=_gpus(self.gpus))


def _gpus(n: int) -> str:
    return ngettext("{n} GPU", "{n} GPUs", n)


def plan_for(world_size: int, gpus: int) -> HardwarePlan:
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    return HardwarePlan(world_size, max(0, int(gpus)))


def visible_gpus() -> int:
    """GPUs this process sees, without initializing CUDA here (the forkserver forks after)."""
    import torch

    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken driver: no GPU for the plan
        return 0


def current_plan(world_size: int) -> HardwarePlan:
    return plan_for(world_size, visible_gpus())
