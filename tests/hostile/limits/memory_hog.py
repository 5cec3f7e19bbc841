def _attack():
    # A memory hog: tmpfs (/dev/shm, /tmp, HOME) filled to its size, then anonymous memory, 256 MiB at a time,
    # touched, until refused or killed. Without a bound per job this took the host's memory from classmates.
    import os
    got = []
    for folder in ("/dev/shm", "/tmp", os.environ.get("HOME", "/tmp")):
        written = 0
        try:
            with open(os.path.join(folder, "hog"), "ab") as f:
                chunk = b"x" * (64 << 20)
                while written < 8 << 30:
                    f.write(chunk)
                    written += len(chunk)
        except OSError as exc:
            got.append(f"{folder}: {exc.strerror} at {written >> 20} MiB")
    hoard = []
    try:
        while len(hoard) < 64:
            hoard.append(b"\1" * (256 << 20))
    except MemoryError:
        got.append(f"MemoryError at {len(hoard) * 256} MiB")
    return "; ".join(got)
