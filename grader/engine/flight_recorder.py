"""Every collective of a rank, with where it was called: torch's Flight Recorder, read on the launcher's request.

torch records each collective of a process group as the group's backend runs it (every spelling: a
torch.distributed function, a name imported before a patch, DDP's reducer, `async_op=True`), with its
kind, its sequence number in the group, its state and the Python frames that called it. A rank that hangs
cannot say so itself (its main thread waits inside gloo), so a thread of the rank (serve) waits for the
launcher's request and writes the record as JSON (the pickle torch hands out is unpickled only in the
rank, never in the grader). The launcher asks each live rank of a failed run (request, collect); the
parent reads the record back (calls) as a rank's text: for messages of public checks only, never a verdict.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass

POLL_S = 0.05  # how often a rank's thread looks for the launcher's request
MAX_BYTES = 2_000_000  # of one rank's record read back
MAX_CALLS = 2000  # torch's own default ring size


def _paths(rundir: str, rank: int) -> tuple[str, str]:
    return os.path.join(rundir, f"rank{rank}.calls.request"), os.path.join(rundir, f"rank{rank}.calls.json")


# --- in the rank ---------------------------------------------------------------------------------------------


def serve(workdir: str, rank: int) -> None:
    """Start the thread that writes this rank's record when the launcher asks (the run's folder holds workdir)."""
    request, dump = _paths(os.path.dirname(workdir), rank)

    def wait_and_dump():
        while not os.path.exists(request):
            time.sleep(POLL_S)
        try:
            text = json.dumps(_record())
        except Exception as exc:  # no recorder in this torch: the message says less, nothing fails
            text = json.dumps({"error": type(exc).__name__})
        with open(dump + ".tmp", "w") as f:
            f.write(text)
        os.replace(dump + ".tmp", dump)

    threading.Thread(target=wait_and_dump, daemon=True, name="grader-flight-recorder").start()


def _record() -> list[dict]:
    import pickle

    from torch._C._distributed_c10d import _dump_fr_trace

    entries = pickle.loads(_dump_fr_trace()).get("entries", [])
    return [
        {
            "group": str(e.get("process_group", ("", ""))[0]),
            "seq": e.get("collective_seq_id"),
            "p2p": bool(e.get("is_p2p")),
            "kind": str(e.get("profiling_name", "")).partition(":")[2],
            "state": str(e.get("state", "")),
            "retired": bool(e.get("retired")),
            "frames": [
                [str(f.get("filename")), int(f.get("line") or 0), str(f.get("name"))] for f in e.get("frames", [])
            ][:40],
        }
        for e in entries[-MAX_CALLS:]
    ]


# --- in the launcher -----------------------------------------------------------------------------------------


def request(rundir: str, ranks) -> None:
    for rank in ranks:
        with open(_paths(rundir, rank)[0], "w"):
            pass


def collect(rundir: str, rank: int, deadline: float) -> str:
    """The rank's record as written (text of the rank), once complete or when the deadline passes ("")."""
    dump = _paths(rundir, rank)[1]
    while not os.path.exists(dump) and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        with open(dump, errors="replace") as f:
            return f.read(MAX_BYTES)
    except OSError:
        return ""


# --- in the parent: what the record says ---------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    kind: str  # "barrier", "allreduce", ... (the backend's name)
    group: str
    seq: int
    frames: tuple  # (file, line, function), innermost first
    done: bool


def calls(text: str) -> list[Call] | None:
    """The collectives of a rank's record, in order (point-to-point left out); None when there is none."""
    try:
        entries = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(entries, list):
        return None
    found = []
    for e in entries[-MAX_CALLS:]:
        try:
            if e["p2p"]:
                continue
            frames = tuple((str(f[0]), int(f[1]), str(f[2])) for f in e["frames"][:40])
            found.append(
                Call(
                    str(e["kind"])[:40],
                    str(e["group"])[:40],
                    int(e["seq"]),
                    frames,
                    bool(e["retired"]) or e["state"] == "completed",
                )
            )
        except (KeyError, TypeError, ValueError, IndexError):
            continue
    return found
