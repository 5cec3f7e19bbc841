"""Back a forking process's private memory with 2 MiB pages, so that its forks and their exits cost less.

    huge_pages.collapse()   # once, in a process that forks ranks all run long: a nursery, a grading worker

A process with torch imported holds about 230 MB of private memory in 4 KiB pages. Every fork copies
its page tables (about 60,000 entries) and every exit tears the copy down: about 30 ms of kernel time
per 2-rank launch here (copy_page_range, unmap_page_range; `make bench` prints it: grading_profile.launch_cpu).
Collapsed into transparent huge pages (madvise MADV_HUGEPAGE, then MADV_COLLAPSE, Linux 6.1 and later),
a fork copies one entry per 2 MiB, and a child splits only the ranges it writes. The collapse copies the
memory once (about 1 s here), so only a process that forks many times calls it; a notebook's engine does
not (its first check would wait for it). Best effort: on an older kernel, with THP off, or for a range
the kernel refuses, nothing changes but the speed.
"""

from __future__ import annotations

import ctypes

MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25
_HUGE = 2 << 20
_SMALLEST = 2 * _HUGE  # a range worth the system calls


def _private_ranges() -> list[tuple[int, int]]:
    """This process's writable private anonymous ranges (malloc's heap, mmap'd arenas), 2 MiB aligned."""
    ranges = []
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if fields[1] != "rw-p" or (len(fields) > 5 and fields[5] != "[heap]"):
                continue  # a file's pages, the stack, vdso: not ours to reshape
            start, end = (int(x, 16) for x in fields[0].split("-"))
            start, end = (start + _HUGE - 1) & ~(_HUGE - 1), end & ~(_HUGE - 1)
            if end - start >= _SMALLEST:
                ranges.append((start, end))
    return ranges


def collapse() -> int:
    """Collapse this process's private memory into huge pages; returns the bytes collapsed (0: nothing could be)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        ranges = _private_ranges()
    except (OSError, AttributeError):
        return 0
    done = 0
    for start, end in ranges:
        madvise(start, end - start, MADV_HUGEPAGE)  # later faults in the range (the heap grows) get huge pages too
        if madvise(start, end - start, MADV_COLLAPSE) == 0:
            done += end - start
    return done


def enabled() -> bool:
    """Whether this kernel offers transparent huge pages at all (collapse() then may do something)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False
