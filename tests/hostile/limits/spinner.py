def _attack():
    # A spinner: keeps 100 processes busy on the CPU (topped up in every rank of every check that calls it), each
    # a shell counting to a bound. Without a CPU bound per job the scheduler gave each a share of the CPUs: the
    # load went to 201 and the class took 3x as long.
    import os
    def spinning():
        count = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    count += b"HOSTILE-SPINNER" in f.read()
            except OSError:
                pass
        return count
    started = 0
    try:
        for _ in range(100 - spinning()):
            os.posix_spawn(
                "/bin/sh",
                ["sh", "-c", "i=0; while [ $$i -lt 300000000 ]; do i=$$((i+1)); done", "HOSTILE-SPINNER"],
                {},
            )
            started += 1
    except OSError as exc:
        return f"started {started} spinners, then: {exc.strerror}"
    return f"started {started} spinners"
