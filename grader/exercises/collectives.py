"""Inside a rank: record every collective the student's code makes, at the dispatcher.

Every spelling of a collective ends in one `c10d` operator of torch's dispatcher: `dist.all_reduce`,
a name imported before any patch (`from torch.distributed import all_gather_into_tensor`),
`all_gather_single` / `reduce_scatter_single`, `torch.distributed.distributed_c10d.<name>`,
`async_op=True`, the autograd-aware `torch.distributed.nn.functional` versions (their backward too),
the functional collectives (`_c10d_functional`), DDP's own all-reduces, and the redistributions DTensor
makes for an operator on DTensors (an all-gather that a plan's placements call for). A TorchDispatchMode
of our own sees each of them once, in call order, and patches nothing (the integrity guard stays quiet):

    with record_collectives() as calls:     # in a rank, around the student's call
        student_fn()
    [c.kind for c in calls]                 # e.g. ["all_gather", "all_gather", "reduce_scatter"]

What the mode cannot see (a call on the process group's backend object, a collective from another
thread, the mode popped or disabled by student code for a while) still moves the group's sequence
number: when the body returns and the groups issued more collectives than the recorded calls account
for, `CollectivesUnseen` says so, so a hidden collective never passes for none (a call deleted from the
list is one more unseen). A mode left off the stack at the end of the body (popped for good) fails
with `RecorderOff`: the body's end runs one operator that the recorder must see.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

import torch
from grader.exercises.dispatch_mode import TorchDispatchMode, watching

from grader.checks import CheckFailed

NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd")
KINDS = {  # dispatcher operator (namespace dropped) -> what it does
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "all_reduce_coalesced_": "all_reduce",
    "allgather_": "all_gather",
    "_allgather_base_": "all_gather",
    "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_out": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_": "reduce_scatter",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_out": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "broadcast_": "broadcast",
    "broadcast": "broadcast",
    "reduce_": "reduce",
    "gather_": "gather",
    "scatter_": "scatter",
    "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all",
    "all_to_all_single": "all_to_all",
    "barrier": "barrier",
    "monitored_barrier_": "barrier",
    "send": "send",
    "isend": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
    "irecv": "recv",
}
NOT_COMMUNICATION = {"wait_tensor", "_wrap_tensor_autograd", "check_for_nan"}
# The argument holding what this rank puts in (its payload), by the operator's schema names.
PAYLOAD_ARGS = ("input_tensor", "input_tensors", "input_list", "inputs", "input", "tensors", "tensor")
PEER_ARGS = ("dst", "src")
# gloo runs these operators as several collectives of its own, each moving the group's sequence number
# (measured on torch 2.13: a list reduce_scatter as world_size reduces, monitored_barrier as 2 (N - 1)
# messages); every other operator moves it once.
SEQUENCE_COST = {"reduce_scatter_": lambda n: n, "monitored_barrier_": lambda n: 2 * (n - 1)}


@dataclass(frozen=True)
class Collective:
    """One collective call of this rank, as the dispatcher saw it."""

    kind: str  # "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter",
    #            "all_to_all", "barrier", "send", "recv" (an operator unknown here: its own name)
    nbytes: int  # this rank's payload: the bytes it puts in (received bytes for recv; 0 for a barrier)
    numel: int
    dtype: str  # "float32", "bfloat16", ...; "" when the call carries no tensor
    op: str  # the dispatcher operator, e.g. "c10d._allgather_base_"
    index: int  # 0, 1, ...: the order of the calls within one recording
    peer: int | None = None  # send/recv: the other rank within the group (None: any source)
    async_op: bool | None = None  # the call's async_op (None: an operator without one, e.g. functional ones)
    sequence: int = 1  # how far the call moves its group's sequence number (gloo: SEQUENCE_COST)
    ranks: tuple[int, ...] | None = None  # the global ranks of the call's process group (None: not found)


class CollectivesUnseen(CheckFailed):
    """The process groups issued collectives that did not pass the dispatcher while recording."""


class RecorderOff(CheckFailed):
    """The recorder's dispatch mode was no longer on torch's mode stack when the body returned."""


RECORDER_OFF = (
    "your code turned off the grader's collective recorder (it popped torch's dispatch mode stack, "
    "or left torch's dispatch modes disabled), so the collectives it made cannot be counted. A check "
    "must see your code's own collectives: leave torch's dispatch modes alone"
)


def _tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _named(func, args, kwargs) -> dict:
    return {a.name: v for a, v in zip(func._schema.arguments, args)} | dict(kwargs)


def arguments(func, args, kwargs) -> dict:
    """A dispatcher call's arguments by their schema names (all_to_all_watch.py reads the split sizes)."""
    return _named(func, args, kwargs)


def _holds_dtensor(types) -> bool:
    """Whether the tensor subclasses among an operator's arguments (torch's `types`) include DTensor."""
    DTensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)  # not imported: none exists
    return DTensor is not None and any(issubclass(t, DTensor) for t in types)


def _sequence_cost(func, args, kwargs) -> int:
    cost = SEQUENCE_COST.get(func._schema.name.split("::", 1)[1])
    if cost is None:
        return 1
    try:
        size = _named(func, args, kwargs)["process_group"].size()
    except Exception:  # no group argument: the default group
        import torch.distributed as dist

        size = dist.get_world_size()
    return cost(size)


def group_ranks(named: dict) -> tuple[int, ...] | None:
    """The global ranks of a dispatcher call's process group: c10d operators pass the group as a ScriptObject,
    functional collectives by its name."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    try:
        group = named.get("process_group")
        if group is None and isinstance(named.get("group_name"), str):
            group = next((pg for pg in list(c10d._world.pg_map) if pg.group_name == named["group_name"]), None)
        if isinstance(group, torch.ScriptObject):
            group = dist.ProcessGroup.unbox(group)
        return None if group is None else tuple(dist.get_process_group_ranks(group))
    except Exception:  # a group torch no longer knows: the call is still recorded
        return None


def payload(func, args, kwargs) -> list:
    """The tensors a dispatcher call of a collective puts in (for a send: what it sends)."""
    named = _named(func, args, kwargs)
    return next((_tensors(named[n]) for n in PAYLOAD_ARGS if n in named), [])


def describe(func, args, kwargs, index: int, sequence: int = 1) -> Collective | None:
    """The Collective that a dispatcher call of `func` is, or None when it moves no data."""
    name = func._schema.name.split("::", 1)[1]
    if name in NOT_COMMUNICATION:
        return None
    kind = KINDS.get(name, name)
    named = _named(func, args, kwargs)
    tensors = [] if kind == "barrier" else payload(func, args, kwargs)
    peer = next((named[n] for n in PEER_ARGS if isinstance(named.get(n), int)), None)
    declared = next((a for a in func._schema.arguments if a.name == "async_op"), None)  # left out: its default
    async_op = None if declared is None else bool(named.get("async_op", declared.default_value))
    return Collective(
        kind=kind,
        nbytes=sum(t.numel() * t.element_size() for t in tensors),
        numel=sum(t.numel() for t in tensors),
        dtype=str(tensors[0].dtype).removeprefix("torch.") if tensors else "",
        op=f"{func.namespace}.{name}",
        index=index,
        peer=peer,
        async_op=async_op,
        sequence=sequence,
        ranks=group_ranks(named),
    )


class _Recorder(TorchDispatchMode):
    def __init__(self, calls: list, on_call):
        super().__init__()
        self.calls, self.on_call = calls, on_call
        self.sequence = 0  # how far the recorded calls move the groups' sequence numbers
        self.probe, self.probe_seen = torch.zeros(()), False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _holds_dtensor(types) and not watching():
            # DTensor's dispatch then runs with this mode still on the stack, so the collectives it issues on
            # the local shards (a redistribution its placements need) reach it; run from here they would not.
            # Not under a WatchedMode (live bytes, allocations): it would then see DTensor's inner operators too
            return NotImplemented
        if args and args[0] is self.probe:
            self.probe_seen = True
        elif func.namespace in NAMESPACES:
            call = describe(func, args, kwargs, len(self.calls), _sequence_cost(func, args, kwargs))
            if call is not None:
                self.calls.append(call)
                self.sequence += call.sequence
                if self.on_call is not None:
                    self.on_call(call)  # before the data moves: may refuse it by raising
        return func(*args, **kwargs)


def issued() -> int | None:
    """How many collectives (point-to-point included) this rank's process groups have issued so far;
    None where the backend keeps no count."""
    try:
        from torch.distributed import distributed_c10d as c10d

        return sum(pg._get_sequence_number_for_group() for pg in list(c10d._world.pg_map))
    except Exception:  # no group, or a backend without sequence numbers
        return None


@contextlib.contextmanager
def record_collectives(on_call=None):
    """Record every collective made in the body, in order; yields the list of Collective it fills.

    on_call(collective), if given, runs as each call enters the dispatcher, before any data moves
    (an exception it raises reaches the caller instead of the collective). Raises CollectivesUnseen
    when the body returns and the process groups issued collectives the dispatcher did not see."""
    calls: list[Collective] = []
    before = issued()
    recorder = _Recorder(calls, on_call)
    recorder.__enter__()
    try:
        yield calls
    finally:
        recorder.probe.add_(0)  # through the mode stack: the recorder sees it only if it is still on it
        if not recorder.probe_seen:
            raise RecorderOff(RECORDER_OFF)  # nothing of ours left on the stack to pop
        recorder.__exit__(None, None, None)
    after = issued()
    # the counter and the list agree unless one was edited: the lower of the two is what was seen
    seen = min(recorder.sequence, sum(c.sequence for c in calls))
    if before is not None and after is not None and after - before > seen:
        raise CollectivesUnseen(
            f"{after - before - seen} collective call(s) moved data where the grader could not see them "
            "(on the process group's backend object, in another thread, or with torch's dispatch modes turned "
            "off): call collectives through torch.distributed, from the thread that runs your code"
        )


def kinds(calls) -> list[str]:
    return [c.kind for c in calls]
