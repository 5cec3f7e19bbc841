"""Limits per grading job, not per user: each sandboxed job's processes in cgroups of their own.

    limits = JobLimits.here()        # once per run; limits.missing says why there are none ("" when there are)
    group = limits.new_group()       # per job: None without cgroups
    group.join_argv(argv)            # a command that enters the group before it execs argv (bwrap's sandbox)
    group.add(pid)                   # or move a process in (a nursery's job, before it forks anything)
    group.exceeded()                 # the limits the job ran into, in words
    group.close()                    # kill what is left in it, remove it

RLIMIT_NPROC counts every process of a uid across the machine and every sandbox runs as nobody, so one job's fork
bomb took the processes its classmates needed; RLIMIT_DATA is per process and a tmpfs or memfd belongs to no
process, so one job could take the host's memory. A cgroup bounds the job as a whole: pids.max, and a memory
limit that counts its anonymous memory, tmpfs (/tmp, HOME, /dev/shm) and memfd pages alike. The groups are made
under the grader's own cgroup (so whatever bounds the grader still bounds its jobs), in the cgroup v1 hierarchies
`pids` and `memory` or in the unified v2 hierarchy, whichever the grader can write; it needs root here (no
delegated v2 subtree). GRADER_JOB_PIDS and GRADER_JOB_MEMORY (bytes) change the bounds.
"""

from __future__ import annotations

import itertools
import os
import resource
import signal
import time

ROOT = "/sys/fs/cgroup"
PIDS_MAX = int(os.environ.get("GRADER_JOB_PIDS") or 512)  # processes and threads: 3 ranks of torch use about 100
MEMORY_BYTES = int(os.environ.get("GRADER_JOB_MEMORY") or 6 << 30)  # a whole job: its ranks, worker, tmpfs
PROCESSES_PER_JOB = 1024  # RLIMIT_NPROC of a job, in its own uid or user namespace (with or without cgroups)
OFF_ENV = "GRADER_JOB_CGROUPS"  # "0": no cgroup per job, as on a machine that has none (the tests' fallback path)


def bound_own_processes() -> None:
    """This job's RLIMIT_NPROC, set by its first process inside its own user namespace (nursery_job.py) or its own uid
    (a bubblewrap sandbox's worker): the kernel counts RLIMIT_NPROC per uid of each user namespace, and checks an
    outer namespace's count against the limit its creator had, so each job gets its own budget, and all of them
    the sandbox's (sandbox.py), without any cgroup."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    bound = PROCESSES_PER_JOB if hard == resource.RLIM_INFINITY else min(PROCESSES_PER_JOB, hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (bound, bound))


def _own_groups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    found = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                found[name] = path
    return found


class JobLimits:
    def __init__(self, bases: dict[str, str], version: int, missing: str):
        self.bases, self.version, self.missing = bases, version, missing  # bases: kind ("pids", "memory") -> folder
        self._count = itertools.count()

    @classmethod
    def here(cls) -> "JobLimits":
        """This run's parent groups, made now; or none, with the reason in .missing."""
        if os.environ.get(OFF_ENV) == "0":
            return cls({}, 0, f"turned off by {OFF_ENV}=0")
        try:
            own = _own_groups()
        except OSError as exc:
            return cls({}, 0, f"/proc/self/cgroup is not readable ({exc.strerror})")
        name = f"ddp-grader-{os.getpid()}"
        v1 = {
            kind: os.path.join(ROOT, kind, own[kind].lstrip("/"), name)
            for kind in ("pids", "memory")
            if kind in own and os.path.isdir(os.path.join(ROOT, kind))
        }
        if len(v1) == 2:
            return cls._made(v1, 1)
        unified = os.path.join(ROOT, own.get("", "/").lstrip("/"))
        try:
            with open(os.path.join(unified, "cgroup.controllers")) as f:
                controllers = f.read().split()
        except OSError:
            controllers = []
        if {"pids", "memory"} <= set(controllers):
            base = os.path.join(unified, name)
            made = cls._made({"pids": base, "memory": base}, 2)
            if not made.missing:
                try:  # the jobs below get both controllers (base itself holds no process: v2's rule)
                    with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                        f.write("+pids +memory")
                except OSError as exc:
                    made.close()
                    return cls({}, 0, f"cannot enable pids and memory below {base} ({exc.strerror})")
            return made
        return cls({}, 0, "no writable cgroup with the pids and memory controllers (cgroup v1 or v2) here")

    @classmethod
    def probe(cls) -> str:
        """Why jobs would get no cgroup here ("" when they would), leaving nothing made."""
        limits = cls.here()
        limits.close()
        return limits.missing

    @classmethod
    def _made(cls, bases: dict[str, str], version: int) -> "JobLimits":
        for folder in dict.fromkeys(bases.values()):
            _remove_stale(os.path.dirname(folder))
        made = []
        try:
            for folder in dict.fromkeys(bases.values()):
                os.mkdir(folder, 0o755)
                made.append(folder)
        except OSError as exc:
            for folder in made:
                os.rmdir(folder)
            return cls({}, 0, f"cannot make a cgroup as uid {os.geteuid()} ({exc.strerror})")
        return cls(bases, version, "")

    def new_group(self) -> "JobGroup | None":
        if self.missing:
            return None
        number = next(self._count)
        folders = {kind: os.path.join(base, f"job-{number}") for kind, base in self.bases.items()}
        try:
            group = JobGroup(folders, self.version)
        except OSError:
            return None  # gone meanwhile: the job still has its per-process limits
        return group

    def close(self) -> None:
        for folder in dict.fromkeys(self.bases.values()):
            _remove(folder)


class JobGroup:
    def __init__(self, folders: dict[str, str], version: int):
        self.folders, self.version = folders, version
        for folder in dict.fromkeys(folders.values()):
            os.mkdir(folder, 0o755)
        self._write("pids", "pids.max", str(PIDS_MAX))
        if version == 1:
            self._write("memory", "memory.limit_in_bytes", str(MEMORY_BYTES))
            try:  # with swap, the same bound on memory and swap together
                self._write("memory", "memory.memsw.limit_in_bytes", str(MEMORY_BYTES))
            except OSError:
                pass
        else:
            self._write("memory", "memory.max", str(MEMORY_BYTES))
            try:
                self._write("memory", "memory.swap.max", "0")
            except OSError:
                pass

    def _write(self, kind: str, name: str, text: str) -> None:
        with open(os.path.join(self.folders[kind], name), "w") as f:
            f.write(text)

    def _procs_files(self) -> list[str]:
        return [os.path.join(folder, "cgroup.procs") for folder in dict.fromkeys(self.folders.values())]

    def join_argv(self, argv: list[str]) -> list[str]:
        """argv run by a shell that first moves itself into this group (echo 0: the writer itself): everything
        the command starts is in the group from its first instruction."""
        files = self._procs_files()
        joins = " && ".join(f'echo 0 > "${i + 1}"' for i in range(len(files)))
        return ["/bin/sh", "-c", f'{joins} && shift {len(files)} && exec "$@"', "sh", *files, *argv]

    def add(self, pid: int) -> None:
        for path in self._procs_files():
            with open(path, "w") as f:
                f.write(str(pid))

    def exceeded(self) -> list[str]:
        """The limits this job ran into, each named as an instructor or a student would look it up."""
        found = []
        if _events(self.folders["pids"], "pids.events").get("max", 0):
            found.append(f"processes and threads (at most {PIDS_MAX} per job: cgroup pids.max)")
        if self.version == 1:
            memory = _events(self.folders["memory"], "memory.oom_control").get("oom_kill", 0)
            name = "memory.limit_in_bytes"
        else:
            events = _events(self.folders["memory"], "memory.events")
            memory, name = events.get("oom_kill", 0) or events.get("max", 0), "memory.max"
        if memory:
            found.append(
                f"memory, /tmp and /dev/shm together (at most {MEMORY_BYTES / (1 << 30):g} GiB per job: cgroup {name})"
            )
        return found

    def close(self) -> None:
        """Kill every process still in the group (what a job left behind, whatever it did), then remove it."""
        for folder in dict.fromkeys(self.folders.values()):
            _remove(folder)


def _events(folder: str, name: str) -> dict[str, int]:
    try:
        with open(os.path.join(folder, name)) as f:
            pairs = [line.split() for line in f]
        return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}
    except OSError:
        return {}


def _remove_stale(parent: str) -> None:
    """The groups of grading runs that died without removing them (killed: no `finally` ran): their pid is gone."""
    try:
        entries = [e for e in os.scandir(parent) if e.is_dir() and e.name.startswith("ddp-grader-")]
    except OSError:
        return
    for entry in entries:
        pid = entry.name.removeprefix("ddp-grader-")
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            _remove(entry.path, bound_s=2.0)
        except OSError:
            pass  # alive, someone else's


def _remove(folder: str, bound_s: float = 10.0) -> None:
    """rmdir a group (and its job groups) once no process is in it, killing what is; bounded, best effort."""
    if not os.path.isdir(folder):
        return
    for child in [e.path for e in os.scandir(folder) if e.is_dir()]:
        _remove(child, bound_s)
    until = time.monotonic() + bound_s
    while True:
        try:
            with open(os.path.join(folder, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.rmdir(folder)
            return
        except OSError:
            if time.monotonic() > until:
                return
            time.sleep(0.05)
