"""Limits per grading job, not per user: each sandboxed job's processes in cgroups of their own.

    limits = JobLimits.here(cpus, jobs)  # once per run; limits.missing says why there are none ("" when there are)
    group = limits.new_group()       # per job: None without cgroups
    group.join_argv(argv)            # a command that enters the group before it execs argv (bwrap's sandbox)
    group.add(pid)                   # or move a process in (a nursery's job, before it forks anything)
    group.exceeded()                 # the limits the job ran into, in words
    group.close()                    # kill what is left in it, remove it

RLIMIT_NPROC counts every process of a uid across the machine and every sandbox runs as nobody, so one job's fork
bomb took the processes its classmates needed; RLIMIT_DATA is per process and a tmpfs or memfd belongs to no
process, so one job could take the host's memory; and the scheduler shares the CPUs out per process, so a job of 200
spinning processes took 200 shares of them. A cgroup bounds the job as a whole: pids.max, a memory limit that
counts its anonymous memory, tmpfs (/tmp, HOME, /dev/shm) and memfd pages alike, and, where the cpu controller is
there, one share of the CPUs among the jobs and a quota of what its ranks compute on and a CPU for its worker
(cpu.cfs_quota_us, v2 cpu.max; cpu_bound.job_cpus). A job that wanted far more than that for most of its life is flagged
for review (exceeded; cpu_bound.py says when), never scored for it. The groups are made under the grader's own
cgroup (so whatever bounds the grader still bounds its jobs), in the cgroup v1 hierarchies `pids`, `memory` and
`cpu`, or in the unified v2 hierarchy, whichever the grader can write: as root, or as another user in a v2 subtree
delegated to it (systemd-run --user --scope -p Delegate=yes, docs/instructors.md). GRADER_JOB_PIDS,
GRADER_JOB_MEMORY (bytes) and GRADER_JOB_CPUS change the bounds; without any cgroup, memory_fit.py sizes --jobs to
the host's memory.
"""

from __future__ import annotations

import errno
import itertools
import os
import resource
import signal
import time

from grader.isolation import cpu_bound

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
    def __init__(self, bases: dict[str, str], version: int, missing: str, cpus: float = 0.0):
        # bases: kind ("pids", "memory", and "cpu" where there is one) -> folder
        self.bases, self.version, self.missing, self.cpus = bases, version, missing, cpus
        self._count = itertools.count()

    @classmethod
    def here(cls, cpus: float = 0.0, jobs: int = 1) -> "JobLimits":
        """This run's parent groups, made now; or none, with the reason in .missing. cpus: each job's CPU quota
        (cpu_bound.job_cpus; 0: none), where the cpu controller is there too; jobs: how many grade at once."""
        if os.environ.get(OFF_ENV) == "0":
            return cls({}, 0, f"turned off by {OFF_ENV}=0")
        try:
            own = _own_groups()
        except OSError as exc:
            return cls({}, 0, f"/proc/self/cgroup is not readable ({exc.strerror})")
        name = f"ddp-grader-{os.getpid()}"
        v1 = {
            kind: os.path.join(ROOT, kind, own[kind].lstrip("/"), name)
            for kind in ("pids", "memory", "cpu")
            if kind in own and os.path.isdir(os.path.join(ROOT, kind))
        }
        if {"pids", "memory"} <= set(v1):
            if "cpu" not in v1 or not cpus:
                v1 = {kind: folder for kind, folder in v1.items() if kind in ("pids", "memory")}
            return cls._made(v1, 1, cpus, jobs)
        return cls._unified(own, name, cpus, jobs)

    @classmethod
    def _unified(cls, own: dict[str, str], name: str, cpus: float, jobs: int) -> "JobLimits":
        """Groups in the v2 hierarchy: the grader's own group when it may write it (root, or a subtree delegated
        to this user: `systemd-run --user --scope -p Delegate=yes`, or one a hub gives its service)."""
        group = os.path.join(ROOT, own.get("", "/").lstrip("/"))
        wanted = ["pids", "memory"] + (["cpu"] if cpus and "cpu" in _words(group, "cgroup.controllers") else [])
        if not {"pids", "memory"} <= set(_words(group, "cgroup.controllers")):
            return cls({}, 0, "no writable cgroup with the pids and memory controllers (cgroup v1 or v2) here")
        why = _enable_below(group, wanted)
        if why:
            return cls({}, 0, why)
        base = os.path.join(group, name)
        made = cls._made({kind: base for kind in wanted}, 2, cpus, jobs)
        if not made.missing:
            why = _enable_below(base, wanted)  # the jobs below get them (base itself holds no process: v2's rule)
            if why:
                made.close()
                return cls({}, 0, why)
        return made

    @classmethod
    def probe(cls) -> str:
        """Why jobs would get no cgroup here ("" when they would), leaving nothing made."""
        limits = cls.here()
        limits.close()
        return limits.missing

    @classmethod
    def _made(cls, bases: dict[str, str], version: int, cpus: float, jobs: int) -> "JobLimits":
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
        limits = cls(bases, version, "", cpus)
        if "cpu" in bases:  # the run weighs what its jobs' ranks would weigh as processes beside it (one each)
            weight = max(1, jobs) * max(1, round(cpus))
            try:
                if version == 1:
                    _write(bases["cpu"], "cpu.shares", min(262144, 1024 * weight))  # the kernel's bounds
                else:
                    _write(bases["cpu"], "cpu.weight", min(10000, 100 * weight))
            except OSError:
                pass  # the default weight: still one share among its siblings
        return limits

    def new_group(self) -> "JobGroup | None":
        if self.missing:
            return None
        number = next(self._count)
        folders = {kind: os.path.join(base, f"job-{number}") for kind, base in self.bases.items()}
        try:
            group = JobGroup(folders, self.version, self.cpus)
        except OSError:
            for folder in folders.values():
                _remove(folder)
            return None  # gone meanwhile: the job still has its per-process limits
        return group

    def close(self) -> None:
        for folder in dict.fromkeys(self.bases.values()):
            _remove(folder)


def _words(folder: str, name: str) -> list[str]:
    try:
        with open(os.path.join(folder, name)) as f:
            return f.read().split()
    except OSError:
        return []


def _write(folder: str, name: str, value) -> None:
    with open(os.path.join(folder, name), "w") as f:
        f.write(str(value))


def _enable_below(group: str, controllers: list[str]) -> str:
    """Enable the controllers for the v2 group's children ("" once done, else why not). A group that holds
    processes cannot (v2's rule): in a group delegated to us (a scope with Delegate=yes), they are moved first into a
    leaf of their own; a group systemd did not delegate is left as it is."""
    if set(controllers) <= set(_words(group, "cgroup.subtree_control")):
        return ""
    change = " ".join(f"+{c}" for c in controllers)
    try:
        try:
            _write(group, "cgroup.subtree_control", change)
        except OSError as exc:
            if exc.errno != errno.EBUSY or not _delegated(group):
                raise
            leaf = os.path.join(group, "ddp-grader-leaf")
            os.makedirs(leaf, exist_ok=True)
            for pid in _words(group, "cgroup.procs"):
                try:
                    _write(leaf, "cgroup.procs", pid)
                except OSError:
                    pass  # ended meanwhile
            _write(group, "cgroup.subtree_control", change)
    except OSError as exc:
        return f"cannot enable {', '.join(controllers)} below {group} as uid {os.geteuid()} ({exc.strerror})"
    return ""


def _delegated(group: str) -> bool:
    """Whether systemd delegated this group (Delegate=yes marks it with an extended attribute)."""
    for name in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(group, name) == b"1":
                return True
        except OSError:
            pass
    return False


class JobGroup:
    def __init__(self, folders: dict[str, str], version: int, cpus: float = 0.0):
        self.folders, self.version, self.cpus = folders, version, cpus
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
        if "cpu" in folders:
            cpu_bound.set_quota(folders["cpu"], version, cpus)
        self.demand = cpu_bound.Demand(cpus)

    def _write(self, kind: str, name: str, text: str) -> None:
        _write(self.folders[kind], name, text)

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

    def sample(self) -> None:
        """Look once at how many of the job's processes want a CPU now (cpu_bound.Demand)."""
        self.demand.sample(os.path.join(self.folders["pids"], "cgroup.procs"))

    def cpu_stat(self) -> dict[str, int]:
        """The kernel's CPU bandwidth counters of this job: nr_periods, nr_throttled, throttled time; {} without."""
        return _events(self.folders["cpu"], "cpu.stat") if "cpu" in self.folders else {}

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
        cpu = cpu_bound.too_much(self.cpu_stat(), self.demand, self.cpus, self.version)
        if cpu:
            found.append(cpu)
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
