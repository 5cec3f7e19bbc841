"""The system calls no sandboxed process may make: a seccomp filter that bubblewrap loads (`--seccomp FD`) just
before it execs the sandbox's first process (a grading worker, a nursery, the GPU probe), so it binds every process
of every sandbox, in every mode, as root and as any other user; a filter can never be removed, only added to.

Each denied call fails with EPERM; every other call is allowed. Kernel keys belong to no mount, PID, network or
IPC namespace: without this, a job could leave a key behind for the next job of its uid, pass one to a
classmate's job, or (run as a non-root instructor's uid) read that account's own keys. The rest is what a grading
job never needs and container runtimes deny by default. libseccomp (Debian's libseccomp2) compiles the program,
through pyseccomp; without it sandboxed grading is refused in one line (sandbox.require), never run unfiltered.
"""

from __future__ import annotations

import errno
import functools

DENIED = {
    "add_key": "kernel keys are in no namespace: a key outlives the job and other jobs can read it",
    "request_key": "finds a key by its description: a classmate's, or a non-root instructor's own",
    "keyctl": "reads, links, searches and revokes keys (the user and session keyrings among them)",
    "bpf": "loads programs and maps into the kernel: kernel attack surface and a channel between jobs",
    "perf_event_open": "performance counters of the CPU and the kernel: a side channel on other processes",
    "userfaultfd": "lets a process stall the kernel mid-copy, a common step of kernel exploits",
    "io_uring_setup": "io_uring: a large kernel attack surface that no grading job uses",
    "kexec_load": "loads a new kernel",
    "kexec_file_load": "loads a new kernel",
    "init_module": "loads a kernel module",
    "finit_module": "loads a kernel module",
}
INSTALL_HINT = "apt-get install libseccomp2, and pip install pyseccomp"


def _compat_arches(seccomp) -> tuple[int, ...]:
    """The other ABIs a process of the native one can call the kernel through (int 0x80, x32): filtered alike."""
    arch = seccomp.system_arch()
    if arch == seccomp.Arch.X86_64:
        return (seccomp.Arch.X86, seccomp.Arch.X32)
    if arch == seccomp.Arch.AARCH64:
        return (seccomp.Arch.ARM,)
    return ()


@functools.lru_cache(maxsize=1)
def program() -> bytes:
    """The compiled BPF program (what bwrap's --seccomp reads). Raises RuntimeError when libseccomp is missing."""
    import tempfile

    try:
        import pyseccomp as seccomp
    except (ImportError, OSError, RuntimeError) as exc:  # pyseccomp raises RuntimeError without libseccomp
        raise RuntimeError(f"no libseccomp here ({exc})") from None
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for arch in _compat_arches(seccomp):
        try:
            rules.add_arch(arch)
        except OSError:  # a kernel or libseccomp without that ABI: calls through it are killed instead
            pass
    for name in DENIED:
        rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
    with tempfile.TemporaryFile() as f:
        rules.export_bpf(f)
        f.seek(0)
        data = f.read()
    if not data or len(data) % 8:  # struct sock_filter is 8 bytes
        raise RuntimeError(f"libseccomp exported {len(data)} bytes, not a BPF program")
    return data
