"""Inside a rank: forbid collectives and count point-to-point traffic.

ring_all_reduce must build an all-reduce out of send/recv alone. While the student's function runs,
every call that reaches torch's dispatcher as a c10d operator is seen (grader/exercises/collectives.py),
whatever its spelling: a collective is refused before any data moves (CheckFailed: forbidding, not
imitating, so nothing is ever computed on the student's behalf, and a refusal the student's code
catches still fails the check), and each send/recv is recorded with its peer and size.
A barrier moves no data, so it is allowed.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives

ALLOWED = ("send", "recv", "barrier")


@dataclass
class Message:
    kind: str  # "send" or "recv"
    peer: int | None  # None: recv from any source
    numel: int


@dataclass
class Traffic:
    messages: list[Message] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # the collectives refused, by kind


def _refusal(task: str, kind: str) -> CheckFailed:
    return CheckFailed(f"{task} called dist.{kind}: use only isend/irecv/send/recv")


@contextlib.contextmanager
def point_to_point_only(task: str, student_fn=None):
    """Run the body with collectives forbidden; yields the Traffic seen. (student_fn: unused, kept for callers:
    the dispatcher sees the answer's calls under any name.)"""
    traffic = Traffic()

    def watch(call):
        if call.kind in ("send", "recv"):
            traffic.messages.append(Message(call.kind, call.peer, call.numel))
        elif call.kind not in ALLOWED:
            traffic.refused.append(call.kind)
            raise _refusal(task, call.kind)

    with record_collectives(on_call=watch):
        yield traffic
    if traffic.refused:  # the student's code caught the refusal and went on
        raise _refusal(task, traffic.refused[0])
