"""GPUs shared out among the jobs grading at once: each job its own W devices, never two jobs on one GPU.

    share = GpuShare.plan(gpus=8, world_size=2, widest=3, cores=16, jobs=None)
    share.jobs                   # 2: min(cores, 8 // 3)
    devices = share.take()       # ("0", "1", "2") for the job starting now; share.give(devices) when it ends

W is the exercise's widest run (its hidden checks' 3 ranks) when there are that many GPUs, else the grading world
size (engine/plan.py: widest_job), so the job's plans follow the README's plan table for its own GPUs. A job that
gets no group on a machine with GPUs (--jobs above the groups, or fewer GPUs than ranks) sees none: every run
of it is gloo on CPU, and its results say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grader.engine.plan import default_jobs, gpu_groups, widest_job


@dataclass
class GpuShare:
    gpus: int
    width: int
    jobs: int
    free: list[tuple[str, ...]] = field(default_factory=list)

    @classmethod
    def plan(cls, gpus: int, world_size: int, widest: int, cores: int, jobs: int | None) -> "GpuShare":
        width = widest_job(gpus, world_size, widest)
        return cls(gpus, width, jobs if jobs else default_jobs(cores, gpus, width), gpu_groups(gpus, width))

    def take(self) -> tuple[str, ...] | None:
        """The next job's GPUs: a free group, () for none on a machine with GPUs, None without GPUs (no change)."""
        if self.free:
            return self.free.pop(0)
        return () if self.gpus else None

    def give(self, devices: tuple[str, ...] | list | None) -> None:
        if devices:
            self.free.append(tuple(devices))

    def describe(self) -> str:
        if not self.gpus:
            return ""
        if not self.width:
            return f"{self.gpus} GPU(s), fewer than a run's ranks: every run on gloo (CPU)"
        groups = self.gpus // self.width
        text = f"{self.gpus} GPUs: {min(self.jobs, groups)} job(s) at a time get {self.width} each"
        if self.jobs > groups:
            text += f"; --jobs {self.jobs}: the other {self.jobs - groups} grade on gloo (CPU)"
        return text
