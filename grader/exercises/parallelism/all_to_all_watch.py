"""Inside a rank: what each all-to-all puts in for each peer, seen at torch's dispatcher.

An `AllToAllWatch` (a WatchedMode) keeps, for every all-to-all the body makes (`all_to_all_single`, the list
`all_to_all`, the functional and autograd-aware versions), a copy of the chunk of the input meant for each
peer: `all_to_all_single` splits its input along dim 0 by `input_split_sizes` (even chunks when they are left
out), the list form sends input_tensors[peer] to peer. The parent then compares what travelled with what the
routing asks to travel (expert_traffic.py).
"""

from __future__ import annotations

import torch

from grader.exercises.collectives import arguments
from grader.exercises.dispatch_mode import WatchedMode
from grader.exercises.parallelism.host_copy import host

SINGLE = {"alltoall_base_", "all_to_all_single"}  # one input tensor, split along dim 0
LISTED = {"alltoall_"}  # one input tensor per peer


def chunks(func, args, kwargs, world_size: int) -> list[torch.Tensor] | None:
    """The input of an all-to-all call, per peer; None for any other operator."""
    name = func.name().split("::", 1)[1]
    named = arguments(func, args, kwargs)
    if name in LISTED:
        return list(named["input_tensors"])
    if name not in SINGLE:
        return None
    t, splits = named["input"], list(named.get("input_split_sizes") or [])
    if not splits:
        splits = [t.shape[0] // world_size] * world_size if t.dim() else [0] * world_size
    return list(torch.split(t, [int(s) for s in splits]))


class AllToAllWatch(WatchedMode):
    def __init__(self, world_size: int):
        super().__init__()
        self.world_size = world_size
        self.sent: list[list[torch.Tensor]] = []  # per all-to-all call: a copy of the chunk for each peer

    def dispatch(self, func, types, args, kwargs):
        if func.namespace in ("c10d", "_c10d_functional"):
            per_peer = chunks(func, args, kwargs, self.world_size)
            if per_peer is not None:
                self.sent.append([host(c) for c in per_peer])
        return func(*args, **kwargs)
