"""Inside a rank: which tensors of a full parameter's shape were allocated in real memory during a call.

Building a model under torch.device("meta") allocates nothing; sharding it with FSDP2 and to_empty allocates only
the shards. A model built on a real device first allocates every full weight. A dispatch mode of our own sees each
operator's outputs (the local tensors inside DTensors too) and keeps those that are new memory (no input's storage)
on a real device with a full 2-D weight's shape (1-D shards can coincide with a smaller full bias). It patches
nothing, so the integrity guard stays quiet; it judges shapes, never a duration. Student code can switch the
mode off (dispatch_mode.py): checks_fsdp2.py also has the grader's `make_model` say where the parameters it
built lie and whether the grader's modes were on while it ran.
"""

from __future__ import annotations

import contextlib

import torch

from grader.exercises.dispatch_mode import WatchedMode, is_traceable_wrapper_subclass, tensors_in


def _plain(value) -> list[torch.Tensor]:
    """The real-memory tensors in value, subclasses (DTensor) opened to their inner tensors."""
    out = []
    for t in tensors_in(value):
        if is_traceable_wrapper_subclass(t):
            names, _ = t.__tensor_flatten__()
            out += _plain([getattr(t, n) for n in names])
        elif t.device.type != "meta":
            out.append(t)
    return out


def _storage(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:  # no storage of its own (a functional wrapper)
        return 0


class _Probe(WatchedMode):
    def __init__(self, shapes: set, found: list):
        super().__init__()
        self.shapes, self.found = shapes, found

    def dispatch(self, func, types, args, kwargs):
        out = func(*args, **kwargs)
        inputs = {_storage(t) for t in _plain((args, kwargs))}
        for t in _plain(out):
            if tuple(t.shape) in self.shapes and _storage(t) not in inputs:
                self.found.append(tuple(t.shape))
        return out


@contextlib.contextmanager
def full_shape_allocations(full_shapes):
    """Yields the list it fills with the shape of each new real-memory tensor whose shape is in full_shapes."""
    found: list = []
    with _Probe({tuple(s) for s in full_shapes}, found):
        yield found
