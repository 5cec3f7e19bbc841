"""Inside a rank: the peak bytes of tensors alive at once, measured by what exists, never by a duration.

A TorchDispatchMode of ours sees every operator run inside it (autograd's backward included: the engine
carries the mode to the operators it runs), keeps a weak reference to each storage an operator returns,
and after each operator sums the bytes of the live ones larger than `above` (so that the small tensors of
the step do not blur what a check measures: full parameters, a block's activations). A storage resized
to nothing counts 0. The storages of `persistent()` (a wrapper's own shards, their .grad, optimizer state,
however viewed: `shard.detach()` shares its storage) never count: what is measured is what a step gathers
or saves, not what a rank keeps anyway. Outer saved_tensors_hooks would not do: activation checkpointing and a
hand-built FSDP install their own, and only the innermost hooks see what autograd saves.

Student code can switch the mode off (dispatch_mode.py): the grader's models then ask `modes_on()` at each
forward, and a second measurement outside the mode (weak references taken by the models) must agree.

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

from grader.exercises.dispatch_mode import WatchedMode, tensors_in


def storage_key(t: torch.Tensor) -> int:
    """The identity of a tensor's storage (shared by its views and detach())."""
    return StorageWeakRef(t.untyped_storage()).cdata


def live_nbytes(weak: StorageWeakRef) -> int:
    """The bytes of a weakly held storage now: 0 once freed or resized to nothing."""
    if weak.expired():
        return 0
    return torch.UntypedStorage._new_with_weak_ptr(weak.cdata).nbytes()


class LiveBytes(WatchedMode):
    """Peak bytes of live storages larger than `above`, made by operators run inside, per phase."""

    def __init__(self, above: int, persistent=lambda: ()):
        super().__init__()
        self.above, self.phase, self.persistent = above, "forward", persistent
        self.refs: dict[int, StorageWeakRef] = {}
        self.peak = {"forward": 0, "backward": 0}

    def dispatch(self, func, types, args, kwargs):
        out = func(*args, **kwargs)
        for t in tensors_in(out):
            if t.device.type != "meta" and not t.is_sparse:
                weak = StorageWeakRef(t.untyped_storage())
                known = self.refs.get(weak.cdata)
                if known is None or known.expired():  # an address reused after a free is a new storage
                    self.refs[weak.cdata] = weak
        self.sample()
        return out

    def live(self) -> int:
        """The bytes of the live storages larger than `above` now, the persistent ones left out."""
        kept = {storage_key(t) for t in self.persistent() if isinstance(t, torch.Tensor)}
        live = 0
        for key, weak in list(self.refs.items()):
            if weak.expired():
                del self.refs[key]
                continue
            nbytes = live_nbytes(weak)
            live += nbytes if nbytes > self.above and key not in kept else 0
        return live

    def sample(self) -> None:
        self.peak[self.phase] = max(self.peak[self.phase], self.live())
