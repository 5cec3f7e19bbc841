"""Inside a rank: forbid collectives and count point-to-point traffic.

ring_all_reduce must build an all-reduce out of send/recv alone. While the
student's function runs, every collective of torch.distributed is replaced by
a function that raises CheckFailed (forbidding, not imitating: nothing is
ever computed on the student's behalf), and send/isend/recv/irecv are wrapped
so that each message's peer and size are recorded on the way to the real call.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

from grader.checks import CheckFailed
from grader.exercises.dist_patch import replaced

COLLECTIVES = (
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
    "all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce_coalesced",
    "all_gather_coalesced", "_broadcast_coalesced", "_all_gather_base", "_reduce_scatter_base",
    "all_to_all", "all_to_all_single", "scatter", "gather",
    "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
)
# The tensor-level functional collectives go through torch.ops, not through
# the names above, so they are forbidden by name in their own module.
FUNCTIONAL = ("all_reduce", "all_gather_tensor", "reduce_scatter_tensor", "broadcast", "all_to_all_single")
P2P = ("send", "isend", "recv", "irecv")


@dataclass
class Message:
    kind: str  # "send" or "recv"
    peer: int | None  # None: recv from any source
    numel: int


@dataclass
class Traffic:
    messages: list[Message] = field(default_factory=list)


def _forbidden(task: str, name: str):
    def refuse(*args, **kwargs):
        raise CheckFailed(f"{task} called dist.{name}: use only isend/irecv/send/recv")

    refuse.__name__ = name
    return refuse


def _peer(args, kwargs, positional_name: str, group_name: str):
    if len(args) > 1:
        return args[1]
    if kwargs.get(positional_name) is not None:
        return kwargs[positional_name]
    return kwargs.get(group_name)  # the default group: group ranks are global ranks


def _counting(original, kind: str, traffic: Traffic, depth: threading.local):
    names = ("dst", "group_dst") if kind == "send" else ("src", "group_src")

    def wrapper(*args, **kwargs):
        # dist.send calls dist.isend inside: count only the outermost call.
        outer = getattr(depth, "n", 0) == 0
        if outer:
            tensor = args[0] if args else kwargs.get("tensor")
            traffic.messages.append(Message(kind, _peer(args, kwargs, *names), int(tensor.numel())))
        depth.n = getattr(depth, "n", 0) + 1
        try:
            return original(*args, **kwargs)
        finally:
            depth.n -= 1

    wrapper.__name__ = original.__name__
    return wrapper


@contextlib.contextmanager
def point_to_point_only(task: str, student_fn):
    """Run the body with collectives forbidden; yields the Traffic seen."""
    try:
        from torch.distributed import _functional_collectives as funcol
    except ImportError:  # older torch
        funcol = None

    traffic, depth = Traffic(), threading.local()

    def p2p(name, real):
        return _counting(real, "send" if "send" in name else "recv", traffic, depth)

    def refuse(name, real):
        return _forbidden(task, name)

    with replaced(COLLECTIVES, refuse, student_fn), replaced(P2P, p2p, student_fn), \
            replaced(FUNCTIONAL, refuse, student_fn, modules=(funcol,)):
        yield traffic
