"""Inside a rank: forbid collectives and count point-to-point traffic.

ring_all_reduce must build an all-reduce out of send/recv alone. While the
student's function runs, every collective of torch.distributed is replaced by
a function that raises CheckFailed (forbidding, not imitating: nothing is
ever computed on the student's behalf), and send/isend/recv/irecv are wrapped
so that each message's peer and size are recorded on the way to the real call.
"""
from __future__ import annotations

import contextlib
import inspect
import threading
from dataclasses import dataclass, field

from grader.checks import CheckFailed

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
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    try:
        from torch.distributed import _functional_collectives as funcol
    except ImportError:  # older torch
        funcol = None

    traffic, depth = Traffic(), threading.local()
    replacements = {}  # original object -> replacement
    patches = []  # (namespace, name, original)

    def patch(namespace, name, new):
        if namespace is None or not hasattr(namespace, name):
            return
        original = getattr(namespace, name)
        replacements.setdefault(id(original), new)
        patches.append((namespace, name, original))
        setattr(namespace, name, replacements[id(original)])

    for name in COLLECTIVES:
        refuse = _forbidden(task, name)
        patch(dist, name, refuse)
        patch(c10d, name, refuse)
    for name in FUNCTIONAL:
        patch(funcol, name, _forbidden(task, name))
    for name in P2P:
        kind = "send" if "send" in name else "recv"
        # dist.isend and c10d.isend are one function: patch both with the same
        # wrapper, so batch_isend_irecv's `op is isend` test still holds.
        wrapper = _counting(getattr(c10d, name), kind, traffic, depth)
        patch(c10d, name, wrapper)
        patch(dist, name, wrapper)
    # `from torch.distributed import all_reduce` in the answers binds the
    # original function in the answers' globals: replace it there too.
    student_fn = inspect.unwrap(student_fn)  # the grader wraps a task to verify after each call
    answer_globals = getattr(student_fn, "__globals__", None)
    if answer_globals is None:  # a class: look at its methods' globals
        for value in vars(student_fn).values() if hasattr(student_fn, "__dict__") else ():
            answer_globals = getattr(value, "__globals__", None) or answer_globals
    if isinstance(answer_globals, dict):
        for name, value in list(answer_globals.items()):
            if id(value) in replacements:
                patches.append((answer_globals, name, value))
                answer_globals[name] = replacements[id(value)]
    try:
        yield traffic
    finally:
        for namespace, name, original in reversed(patches):
            if isinstance(namespace, dict):
                namespace[name] = original
            else:
                setattr(namespace, name, original)
