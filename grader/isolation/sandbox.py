"""One bubblewrap sandbox per submission (and per phase): what `make grade` runs student code in.

The command built for one grading worker, when the grader runs as root (the usual case on a hub):

    prlimit --nproc=N --data=B --fsize=B --core=0 --        limits, inherited by everything in the sandbox
      bwrap --unshare-pid --unshare-net --unshare-ipc       own PID, network, IPC, UTS, cgroup namespaces: no
            --unshare-uts --unshare-cgroup-try              network but its own loopback (gloo works there)
            --hostname grading
            --die-with-parent --new-session                 dies with the grader; no TIOCSTI into its terminal
            --ro-bind /usr /usr --symlink usr/bin /bin ...  the OS's programs and libraries, read-only
            --ro-bind /etc/{ld.so.cache,passwd,...}         the few /etc files a Python process reads, and an
            --ro-bind HOSTS /etc/hosts                      /etc/hosts naming localhost and the hostname
            --ro-bind <python prefix> <same>                Python, the venv and the grader package, read-only,
            --ro-bind <venv> <same>                         each at its own path over an empty root (the
            --ro-bind <grader> <same>                       editable install finds `grader` there); pyenv's
                                                            prefix under /root is bound back, /root is not
            --ro-bind EMPTY <grader>/.../hidden_*           public phase: the hidden checks (and their .pyc)
                                                            are empty files; hidden phase: those of every
                                                            other exercise (its own are all imported by the
                                                            one worker that runs its hidden checks)
            --ro-bind <private copy> /grading/submission.ipynb   that one submission, read-only
            --proc /proc --dev /dev                         the PID namespace's own /proc; a minimal /dev
            --ro-bind EMPTY /proc/keys (and key-users)      kernel keys are in no namespace: listed nowhere
            --perms 1777 --size B --tmpfs /dev/shm          a private, size-limited /dev/shm
            --ro-bind /sys /sys                             read-only (NVML and NCCL's topology read it)
            --dev-bind /dev/nvidia* (nvidia-caps, -uvm)     the GPUs and the driver's libraries outside /usr,
            --ro-bind <driver library folders>              found when the grading run starts (gpu_nodes)
            --perms 1777 --size B --tmpfs /tmp              private, size-limited /tmp and HOME
            --perms 1777 --size B --tmpfs /home/grading
            --remount-ro / --remount-ro /dev                the sandbox's own root and /dev, once every mount is made
            --seccomp 3                                     denies the key calls and a few more (seccomp_filter.py);
                                                            `sh -c 'exec "$@" 3<PROGRAM'` opens it for each sandbox
            --chdir /tmp
            setpriv --reuid=UID --regid=UID                 the worker runs as its job's own uid, which no
                    --clear-groups --inh-caps=-all          account, process or other job has (slot_uids.py; no
                    --bounding-set=-all --no-new-privs      user namespace: it is not root mapped into one), with
                                                            no capabilities and no way to gain any
            python -m grader.isolation.grading_worker ...

bwrap sets the mounts up as root because the job's uid could not reach pyenv's prefix under /root (0700). Run as
another user, the grader builds the same sandbox with `--unshare-all --cap-drop ALL` (a user namespace) and no
setpriv: the worker keeps that user's uid (no other can be had without root), and the namespaces leave it nothing
of that user's: no file but the read-only binds below, no process (its own PID namespace), no socket or network.

Nothing else is there: not the course directory, `solutions/`, other submissions, `graded/`, the gradebook,
/root or /home. The environment is empty (the process is started with only PATH, HOME, LANG, the thread
settings, the CUDA driver's own variables (DRIVER_ENV), PYTORCH_NVML_BASED_CUDA_CHECK=1, and the phase marker
GRADER_HIDDEN_MASKED=1 in the public phase), so NBGRADER_DB_URL and the like never reach it. Limits: RLIMIT_NPROC
counts every process and thread of a uid in a user namespace; a job of its own uid gets NPROC_PER_SANDBOX here,
otherwise this is the budget of every job together and each job takes NPROC_PER_SANDBOX of it inside its own user
namespace (job_limits.bound_own_processes), so one job's fork bomb cannot take a classmate's processes, cgroups
or not; memory is bounded per process with RLIMIT_DATA (RLIMIT_AS breaks torch, which reserves large virtual ranges) and
the size of /tmp, HOME and /dev/shm. Where the grader can make cgroups, each job also gets its own (job_limits.py):
pids.max and a memory bound for the whole job, so one job's fork bomb or hog takes nothing from the others. bwrap is PID 1 of the
sandbox's PID namespace: when the grader kills it, the kernel kills everything inside, double forks included.
Results come back on the worker's stdout only (worker_pool.py); the parent alone writes `graded/` and the gradebook.

Nurseries (nursery.py, the default): the same sandbox, without a submission, holds one long-lived,
torch-preloaded process per phase; each job is forked from it and enters a user, mount, PID, network, IPC and UTS
namespace of its own, with fresh /tmp, HOME, /dev/shm, /proc and its submission, before it reads a student byte
(nursery_job.py). The sandbox then also binds the host's /proc under NURSERY_DIR (nursery_job.py says why; a
fresh one where the host's has submounts, host_proc.py). As root, the nursery
runs as nobody with CAP_SETUID and CAP_SETGID alone, which each job's first process uses to take its own uid
before it unshares its user namespace (and with it every capability of the nursery's).
"""

from __future__ import annotations

import atexit
import functools
import glob
import os
import shutil
import sys
import sysconfig
import tempfile

from grader.isolation import seccomp_filter
from grader.isolation.sandbox_env import HOME, environment

BWRAP = "bwrap"
INSTALL_HINT = "apt-get install bubblewrap"
SUBMISSION = "/grading/submission.ipynb"
NOBODY = 65534
NPROC_PER_SANDBOX = 1024  # processes and threads: 3 ranks of torch use about 100
DATA_BYTES = int(os.environ.get("GRADER_PROCESS_MEMORY") or 6 << 30)  # per process (RLIMIT_DATA)
TMP_BYTES = 1 << 30  # /tmp and HOME, each (tmpfs: memory)
_ETC = ["ld.so.cache", "passwd", "group", "nsswitch.conf", "localtime", "os-release"]
HOSTNAME = "grading"
NURSERY_DIR = "/run/nursery"  # a nursery's copy of the host's /proc (nursery.py, nursery_job.py); every job covers it
SECCOMP_FD = 3  # where bwrap reads the seccomp filter's program (seccomp_filter.py)
KEY_FILES = ("/proc/keys", "/proc/key-users")
GRADER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SandboxMissing(RuntimeError):
    pass


def available() -> bool:
    return shutil.which(BWRAP) is not None


def require() -> None:
    if not available():
        raise SandboxMissing(
            f"grading runs each submission in a bubblewrap sandbox, and `bwrap` is not on PATH: "
            f"install it ({INSTALL_HINT}), or pass --no-sandbox to grade unsandboxed "
            "(only for a class you trust)"
        )
    _seccomp_program()


def _seccomp_program() -> str:
    """The seccomp filter's compiled program, in a read-only file of ours (seccomp_filter.py)."""
    try:
        return _read_only_file("grader-seccomp-", seccomp_filter.program())
    except (RuntimeError, OSError) as exc:
        raise SandboxMissing(
            f"grading runs each submission in a sandbox whose seccomp filter denies kernel keys, and it cannot be "
            f"made here ({exc}): {seccomp_filter.INSTALL_HINT}, or pass --no-sandbox to grade unsandboxed "
            "(only for a class you trust)"
        ) from None


def read_only_prefixes() -> list[str]:
    """Python's install prefix, the venv, and the grader package: all a worker imports from."""
    paths = [sys.base_prefix, sys.prefix, GRADER_DIR]
    paths += [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    out = []
    for path in map(os.path.realpath, paths):
        if not any(path == p or path.startswith(p + os.sep) for p in out):
            out = [p for p in out if not p.startswith(path + os.sep)] + [path]
    return out


def _parents(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


@functools.lru_cache(maxsize=None)
def _read_only_file(prefix: str, text: str | bytes) -> str:
    """A read-only file of ours on the host, bound into every sandbox; removed when the grader exits."""
    fd, path = tempfile.mkstemp(prefix=prefix)
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)
    os.chmod(path, 0o444)
    atexit.register(os.remove, path)
    return path


def _named_uid_files(uid: int) -> dict[str, str]:
    """/etc/passwd and /etc/group with the job's uid and gid named "grading", for its sandbox."""
    files = {}
    for name, entry in (
        ("passwd", f"grading:x:{uid}:{uid}::{HOME}:/usr/sbin/nologin\n"),
        ("group", f"grading:x:{uid}:\n"),
    ):
        try:
            with open(f"/etc/{name}") as f:
                text = f.read()
        except OSError:
            text = ""
        files[name] = _read_only_file(f"grader-{name}-", text.rstrip("\n") + "\n" + entry)
    return files


def _empty_file() -> str:
    """What a masked hidden module reads as: an empty file (/dev/null would not open: binds are nodev)."""
    return _read_only_file("grader-masked-", "")


def _hosts_file() -> str:
    """The sandbox's /etc/hosts: localhost and its own hostname on its own loopback (torchrun's workers
    connect to the agent by hostname; the host's file names neither)."""
    return _read_only_file("grader-hosts-", f"127.0.0.1\tlocalhost {HOSTNAME}\n::1\tlocalhost ip6-localhost\n")


def hidden_files(but_of: str | None = None) -> list[str]:
    """Every hidden check module of the grader, source and bytecode (but those of the exercise `but_of`)."""
    found = glob.glob(os.path.join(GRADER_DIR, "exercises", "*", "hidden_*"))
    found += glob.glob(os.path.join(GRADER_DIR, "exercises", "*", "__pycache__", "hidden_*"))
    if but_of is not None:
        from grader.exercises import discover

        own = os.path.realpath(discover()[but_of].folder) + os.sep
        found = [path for path in found if not os.path.realpath(path).startswith(own)]
    return sorted(found)


def _exercise_of(worker_argv: list[str]) -> str | None:
    """The exercise a worker grades: the one argument of its command line that names one."""
    from grader.exercises import discover

    return next((arg for arg in worker_argv if arg in discover()), None)


DEV, SYS = "/dev", "/sys"  # where the host's device nodes and sysfs are found (a test points them at fake trees)


def gpu_nodes() -> list[str]:
    """The NVIDIA device nodes to bind in (names under /dev), the folder nvidia-caps (MIG) and nvidia-uvm (CUDA's
    memory manager) among them; found again for every sandbox, so a node the driver created since is there too."""
    return sorted(n for n in _listdir(DEV) if n.startswith("nvidia"))


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def driver_folders(covered: list[str], library_path: str | None = None) -> list[str]:
    """Folders of LD_LIBRARY_PATH (where a driver or NCCL may be found) that the sandbox would otherwise not have:
    existing, absolute, and not under /usr or a prefix already bound."""
    library_path = os.environ.get("LD_LIBRARY_PATH", "") if library_path is None else library_path
    found = []
    for folder in library_path.split(":"):
        folder = os.path.realpath(folder) if os.path.isabs(folder) else ""
        if (
            folder
            and os.path.isdir(folder)
            and folder not in found
            and not any(folder == p or folder.startswith(p.rstrip("/") + "/") for p in ["/usr", *covered])
        ):
            found.append(folder)
    return found


# As root, no user namespace: bwrap mounts as root (it can reach pyenv's prefix under /root, 0700) and the worker
# then drops to nobody with setpriv, so the sandbox's uid is the host's 65534, not root mapped into a namespace.
_AS_ROOT = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]


class Sandbox:
    """argv and environment of one sandboxed worker."""

    def __init__(
        self,
        worker_argv: list[str],
        submission: str | None,
        masked: bool,
        jobs: int,
        nursery: bool = False,
        uid: int | None = None,
    ):
        """uid: as root, the job's own uid (slot_uids.py); a nursery's jobs each take theirs (nursery_job.py)."""
        root = os.geteuid() == 0
        args = [
            BWRAP,
            *(_AS_ROOT if root else ["--unshare-all", "--cap-drop", "ALL"]),
            "--hostname",
            HOSTNAME,
            "--die-with-parent",
            "--new-session",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{link}"):
                args += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        args += _etc_binds(root, uid)
        args += _filesystem_binds(worker_argv, submission, masked)
        args += ["--proc", "/proc", *_hide_keys(), "--dev", "/dev"]
        args += ["--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/dev/shm"]
        if os.path.isdir(SYS):
            args += ["--ro-bind", SYS, "/sys"]
        if nursery:  # each job mounts its own /proc and tmpfs here (nursery_job.py says why the host's /proc is needed)
            args += [
                "--perms",
                "0755",
                "--dir",
                os.path.dirname(SUBMISSION),
                "--perms",
                "0755",
                "--dir",
                NURSERY_DIR,
                "--bind",
                "/proc",
                os.path.join(NURSERY_DIR, "proc"),
            ]  # writable: see nursery_job.py
        for name in gpu_nodes():  # GPUs, when the machine has them
            args += ["--dev-bind", os.path.join(DEV, name), f"/dev/{name}"]
        # the sandbox's own root and /dev read-only once every mount is made (a nursery's jobs add their own)
        args += ["--remount-ro", "/", "--remount-ro", "/dev", "--seccomp", str(SECCOMP_FD), "--chdir", "/tmp"]
        args += _drop_privileges(root, nursery, uid)
        args += worker_argv
        # RLIMIT_NPROC: a job of its own uid is bounded here; otherwise this is the budget of every job together, and
        # each job bounds itself to NPROC_PER_SANDBOX inside its own uid or user namespace (job_limits.py)
        nproc = NPROC_PER_SANDBOX * (1 if root and uid is not None else max(1, jobs) + 1)
        limits = [f"--nproc={nproc}", f"--data={DATA_BYTES}", f"--fsize={TMP_BYTES}", "--core=0"]
        # bwrap reads the filter from a descriptor: the shell opens our file there, afresh for each sandbox
        self.argv = ["/bin/sh", "-c", f'exec "$@" {SECCOMP_FD}<"$0"', _seccomp_program(), "prlimit", *limits, "--"]
        self.argv += args
        self.env = environment(masked)


def _hide_keys() -> list[str]:
    """/proc/keys and /proc/key-users read as empty files: kernel keys are in no namespace, and these list every
    key the job's uid may view (a non-root instructor's own among them), by description."""
    return [a for name in KEY_FILES if os.path.exists(name) for a in ("--ro-bind", _empty_file(), name)]


def _etc_binds(root: bool, uid: int | None) -> list[str]:
    """A /etc that nobody can list, with the few host files a worker needs (and, as root, its job's uid named)."""
    args = ["--perms", "0755", "--dir", "/etc", "--ro-bind", _hosts_file(), "/etc/hosts"]  # nobody enters /etc
    etc = {name: f"/etc/{name}" for name in _ETC if os.path.exists(f"/etc/{name}")}
    if root and uid is not None:  # the job's own uid has a name (getpass.getuser() must not fail)
        etc.update(_named_uid_files(uid))
    return args + [a for name, path in etc.items() for a in ("--ro-bind", path, f"/etc/{name}")]


def _filesystem_binds(worker_argv: list[str], submission: str | None, masked: bool) -> list[str]:
    """A private /tmp and HOME; the grader and its Python read-only, with the hidden modules the phase may not read
    bound empty; the submission; the driver folders of LD_LIBRARY_PATH."""
    args = []
    # private /tmp and HOME first: a venv or grader that lies under /tmp (a CI checkout) is bound inside it
    for tmp in ("/tmp", HOME):  # writable by the worker (nobody), like /tmp
        args += ["--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", tmp]
    for path in read_only_prefixes():
        for parent in _parents(path):  # readable by nobody, whatever the umask
            if parent not in ("/tmp", HOME, "/home"):
                args += ["--perms", "0755", "--dir", parent]
        args += ["--ro-bind", path, path]
    exercise = None if masked else _exercise_of(worker_argv)
    if masked or exercise:  # the hidden phase reads its own exercise's hidden modules, no other's
        for path in hidden_files(but_of=exercise):
            args += ["--ro-bind", _empty_file(), path]
    if submission is not None:
        args += ["--perms", "0755", "--dir", os.path.dirname(SUBMISSION), "--ro-bind", submission, SUBMISSION]
    for folder in driver_folders(read_only_prefixes()):
        args += [
            a
            for parent in _parents(folder)
            if parent not in ("/tmp", HOME, "/home")
            for a in ("--perms", "0755", "--dir", parent)
        ] + ["--ro-bind", folder, folder]
    return args


def _drop_privileges(root: bool, nursery: bool, uid: int | None) -> list[str]:
    """As root, the setpriv that the worker (or nursery) runs under; nothing otherwise (bwrap dropped them)."""
    if root and nursery:  # the nursery runs as nobody, keeping only what it takes to put each job it forks
        return [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",  # in its own uid
            "--inh-caps=-all,+setuid,+setgid",
            "--ambient-caps=+setuid,+setgid",
            "--bounding-set=-all,+setuid,+setgid",
            "--no-new-privs",
            "--",
        ]
    if root:  # bwrap set the sandbox up as root; the worker runs as its job's own uid, without capabilities
        return [
            "setpriv",
            f"--reuid={uid or NOBODY}",
            f"--regid={uid or NOBODY}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
    return []
