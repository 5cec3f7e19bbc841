def _attack():
    # The instructor's own processes: pid $victim on the host is a `sleep` the grading account runs. Signal it,
    # open a pidfd of it, read its memory and environment, attach to it with ptrace.
    import ctypes
    import os
    import signal
    pid, got = $victim, []
    tries = {"kill": lambda: os.kill(pid, signal.SIGTERM), "pidfd_open": lambda: os.pidfd_open(pid),
             "mem": lambda: open(f"/proc/{pid}/mem", "rb").read(1),
             "environ": lambda: open(f"/proc/{pid}/environ", "rb").read()}
    for what, attempt in tries.items():
        try:
            attempt()
            got.append(what)
        except OSError:
            pass
    if ctypes.CDLL(None, use_errno=True).ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
        got.append("ptrace")
    if got:
        return got
    raise PermissionError(f"the instructor's process {pid}: kill, pidfd_open, /proc/{pid}, ptrace all refused")
