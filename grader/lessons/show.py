"""Text output of the lessons without the machine's paths, so committed outputs read the same anywhere."""

from __future__ import annotations

import os
import re
import site
import socket
import sys
import sysconfig
import tempfile


def _prefixes() -> list[tuple[str, str]]:
    """(machine path, neutral name), longest first: the installed packages, the interpreter, temp, home."""
    pairs = [
        (p, "") for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    ]
    pairs += [
        (os.path.dirname(sys.executable), "<python>"),
        (sys.prefix, "<python>"),
        (os.path.realpath(tempfile.gettempdir()), "<tmp>"),
        (tempfile.gettempdir(), "<tmp>"),
        (os.path.expanduser("~"), "~"),
    ]
    return sorted({(p.rstrip(os.sep), n) for p, n in pairs if p and p != os.sep}, key=lambda x: -len(x[0]))


def tidy(text: str) -> str:
    """`text` with the machine's folders replaced: site-packages paths become package-relative
    (torch/distributed/...), the temp folder `<tmp>`, the interpreter's `<python>`.

    Used by every lesson that prints a stack or a path (lesson 2 §13, lesson 3 §8, lesson 4).
    """
    for path, name in _prefixes():
        text = text.replace(path + os.sep, f"{name}{os.sep}" if name else "").replace(path, name or ".")
    # a random temporary folder name (tmpXXXX, lesson4-XXXX) still says nothing useful: shorten it
    text = re.sub(r"<tmp>/([A-Za-z0-9_.-]*?)[-_]?[a-z0-9_]{8}(?=/|\b)", r"<tmp>/\1", text)
    # the run's date and time (torchrun's summary, glog-style log prefixes) and this machine's name
    text = re.sub(r"\b\d{4}-\d\d-\d\d[_ T]\d\d:\d\d:\d\d(\.\d+)?", "<time>", text)
    text = re.sub(r"(?m)^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ ", r"\1<time> ", text)
    host = socket.gethostname()
    return re.sub(rf"\b{re.escape(host)}\b", "<host>", text) if len(host) > 2 else text


def summary(result) -> None:
    """One line per rank of a run_distributed result: what it returned, or why it did not.

    Used from lesson 2 §0 on, and in lessons 3 and 4.
    """
    for r in result.ranks:
        if r.status == "ok":
            print(f"rank {r.rank}: {r.value}")
        elif r.status == "error":
            print(f"rank {r.rank}: {r.error['type']}: {tidy(str(r.error['message']))}")
        else:  # hung, exited, or stopped because another rank failed first
            print(f"rank {r.rank}: {r.status}")


def failure(result) -> str:
    """result.failure() (which rank hung or failed, and where), with neutral paths. Lesson 2 §13, lesson 3 §8."""
    return tidy(result.failure())
