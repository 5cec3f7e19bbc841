"""Inside a rank: the peak bytes of tensors alive at once, measured by what exists, never by a duration.

A TorchDispatchMode of ours sees every operator run inside it (autograd's backward included: the engine
carries the mode to the operators it runs), keeps a weak reference to each storage an operator returns,
and after each operator sums the bytes of the live ones larger than `above` (so that the small tensors of
the step do not blur what a check measures: full parameters, a block's activations). A storage resized
to nothing counts 0. The storages of `persistent()` (a wrapper's own shards, their .grad, optimizer state,
however viewed: `shard.detach()` shares its storage) never count: what is measured is what a step gathers
or saves, not what a rank keeps anyway. Outer saved_tensors_hooks would not do: activation checkpointing and a
hand-built FSDP install their own, and only the innermost hooks see what autograd saves.

A collective's tensors would outlive the program's last reference by a moment: gloo's worker thread keeps the
finished Work (which holds them) until it loops again, so under load a freed layer's gathered weight could still
count at the next operator. The mode therefore runs each collective on copies of its tensors, waits for it, and
copies the results back: the backend only ever holds the grader's copies, which are not measured, and what counts
is what the program holds, the same on every run.

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

from grader.exercises.collectives import KINDS
from grader.exercises.dispatch_mode import WatchedMode, tensors_in

POINT_TO_POINT = {"send", "recv"}  # waiting for these inside the mode could deadlock a pair of ranks


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
        if func.namespace == "c10d" and KINDS.get(func.name().split("::", 1)[1]) not in (None, *POINT_TO_POINT):
            out = on_copies(func, args, kwargs)
        else:
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


def on_copies(func, args, kwargs):
    """Run a c10d collective on copies of its tensors, wait for it, copy the results into the program's tensors,
    and answer what the operator answers with the program's tensors in place of the copies."""
    originals = tensors_in((list(args), kwargs))
    if any(t.is_sparse or t.device.type == "meta" for t in originals):  # no storage to count, nothing to copy
        return func(*args, **kwargs)
    copies = {id(t): t.clone() for t in originals}

    def swap(value, table):
        if isinstance(value, torch.Tensor):
            return table.get(id(value), value)
        if isinstance(value, (list, tuple)):
            return type(value)(swap(v, table) for v in value)
        if isinstance(value, dict):
            return {k: swap(v, table) for k, v in value.items()}
        return value

    out = func(*swap(args, copies), **swap(kwargs, copies))
    for value in out if isinstance(out, (list, tuple)) else (out,):
        if hasattr(value, "wait") and not isinstance(value, torch.Tensor):
            value.wait()
    back = {}
    for t in originals:
        if not torch.equal(copies[id(t)], t):
            t.copy_(copies[id(t)])
        back[id(copies[id(t)])] = t
    return swap(out, back)
