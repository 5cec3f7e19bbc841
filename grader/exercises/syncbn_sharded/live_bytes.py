"""Inside a rank: the peak bytes of tensors alive at once, measured by what exists, never by a duration.

A TorchDispatchMode of ours sees every operator run inside it (autograd's backward included: the engine
carries the mode to the operators it runs), keeps a weak reference to each storage an operator returns,
and after each operator sums the bytes of the live ones larger than `above` (so that the small tensors of
the step do not blur what a check measures: full parameters, a block's activations). A storage resized
to nothing counts 0. Outer saved_tensors_hooks would not do: activation checkpointing and a hand-built
FSDP install their own, and only the innermost hooks see what autograd saves.

    tracker = LiveBytes(above=1024)
    with tracker:
        loss = model(x).sum()
    tracker.phase = "backward"
    with tracker:
        loss.backward()
    tracker.peak                 # {"forward": bytes, "backward": bytes}
"""
from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from grader.exercises.dispatch_mode import TorchDispatchMode, tensors_in


class LiveBytes(TorchDispatchMode):
    """Peak bytes of live storages larger than `above`, made by operators run inside, per phase."""

    def __init__(self, above: int):
        super().__init__()
        self.above, self.phase = above, "forward"
        self.refs: dict[int, StorageWeakRef] = {}
        self.peak = {"forward": 0, "backward": 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tensors_in(out):
            if t.device.type != "meta":
                weak = StorageWeakRef(t.untyped_storage())
                known = self.refs.get(weak.cdata)
                if known is None or known.expired():  # an address reused after a free is a new storage
                    self.refs[weak.cdata] = weak
        self.sample()
        return out

    def sample(self) -> None:
        live = 0
        for key, weak in list(self.refs.items()):
            if weak.expired():
                del self.refs[key]
                continue
            nbytes = torch.UntypedStorage._new_with_weak_ptr(weak.cdata).nbytes()  # 0 once resized away
            live += nbytes if nbytes > self.above else 0
        self.peak[self.phase] = max(self.peak[self.phase], live)
