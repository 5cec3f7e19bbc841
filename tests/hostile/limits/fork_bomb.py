def _attack():
    # A fork bomb: `sleep` processes (cheap: posix_spawn, no copy of the rank) until the kernel refuses one.
    # Without a bound per job this took every process of the uid that all sandboxes share.
    import os
    count, why = 0, "stopped at 20000"
    try:
        while count < 20000:
            os.posix_spawn("/bin/sleep", ["sleep", "30"], {})
            count += 1
    except OSError as exc:
        why = exc.strerror
    return f"spawned {count} processes, then: {why}"
