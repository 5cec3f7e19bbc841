"""The host's /proc as a nursery needs it: one procfs mount with nothing mounted inside it.

Each nursery job mounts its own /proc from a user namespace (nursery_job.py), which the kernel allows only while
some procfs mount it can see is fully visible: nothing mounted over a folder of it that has entries. The nursery's
sandbox binds the host's /proc for that. The NVIDIA container toolkit mounts a tmpfs on /proc/driver/nvidia, so
in a GPU container the host's /proc is not fully visible and every job's mount fails (EPERM). As root the nursery
then starts in a mount namespace of its own with a fresh procfs stacked on /proc (`unshare --mount-proc`), which
has no submount; as another user, nothing can mount one, and grading falls back to one sandbox per job
(GRADER_NURSERY=0), saying so once at start.
"""

from __future__ import annotations

import os
import shutil

# mounted on folders procfs keeps empty for them: the kernel accepts these (systemd mounts binfmt_misc there)
EMPTY_MOUNT_POINTS = ("/proc/sys/fs/binfmt_misc",)
MOUNTINFO = "/proc/self/mountinfo"


def proc_submounts(mountinfo: str | None = None) -> list[str]:
    """Mount points below /proc (mountinfo's text; None: this process's), those on kept-empty folders left out."""
    if mountinfo is None:
        try:
            with open(MOUNTINFO) as f:
                mountinfo = f.read()
        except OSError:
            return []
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ")
        if point.startswith("/proc/") and point not in EMPTY_MOUNT_POINTS:
            found.append(point)
    return found


def fresh_proc_prefix(submounts: list[str] | None = None) -> list[str]:
    """The command prefix that gives a nursery a /proc with no submount: as root, when the host's has some,
    `unshare --mount --mount-proc --` (a private mount namespace, a fresh procfs on /proc); otherwise none."""
    submounts = proc_submounts() if submounts is None else submounts
    if submounts and os.geteuid() == 0 and shutil.which("unshare"):
        return ["unshare", "--mount", "--mount-proc", "--"]
    return []


def nursery_unusable(submounts: list[str] | None = None) -> str | None:
    """Why nurseries cannot run here (None: they can): the host's /proc has submounts and no fresh one can be
    mounted for the nursery."""
    submounts = proc_submounts() if submounts is None else submounts
    if not submounts or fresh_proc_prefix(submounts):
        return None
    who = "not root" if os.geteuid() != 0 else "no `unshare` command"
    return (
        f"grader: one sandbox per job (GRADER_NURSERY=0): /proc has {', '.join(submounts[:3])} mounted inside it "
        f"(as the NVIDIA container toolkit does) and a nursery's jobs cannot mount their own /proc ({who})"
    )
