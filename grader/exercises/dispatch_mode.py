"""The one home of torch's TorchDispatchMode in the checks (tests/test_public_apis.py allows it here only).

A dispatch mode sees every operator a rank runs, autograd's backward included; the checks use it to count
collectives (collectives.py), measure live bytes (syncbn_sharded/live_bytes.py) and watch FSDP2's traffic.
`tensors_in` walks an operator's output (nested tuples, lists and dicts) without torch's private pytree.

Student code runs inside the modes and can switch them off (torch's `_disable_current_modes()`, popping the
mode stack, `_DisableTorchDispatch`): the operators it runs then pass unseen. A `WatchedMode` can tell: its
`on()` runs one tiny operator and answers whether the mode saw it, whatever way it was switched off.
`modes_on()` asks every WatchedMode entered and not yet left on this thread; the grader's own models ask it at
each forward, so a measurement switched off around them fails its check, with a message.
"""

from __future__ import annotations

import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass

__all__ = [
    "TorchDispatchMode",
    "WatchedMode",
    "is_traceable_wrapper_subclass",
    "modes_on",
    "watching",
    "tensors_in",
    "SWITCHED_OFF",
]

SWITCHED_OFF = (
    "the grader's measurement was switched off (torch's dispatch modes popped or disabled, e.g. with "
    "_disable_current_modes() or torch._C._DisableTorchDispatch()): leave torch's dispatch modes as they "
    "are"
)

_entered = threading.local()


def _stack() -> list:
    if not hasattr(_entered, "modes"):
        _entered.modes = []
    return _entered.modes


class WatchedMode(TorchDispatchMode):
    """A dispatch mode that can tell whether it sees operators now. Subclasses write `dispatch`, not
    `__torch_dispatch__`."""

    def __init__(self):
        super().__init__()
        self.pinged = False
        self.probing = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.probing:
            self.pinged = True
            return func(*args, **(kwargs or {}))
        return self.dispatch(func, types, args, kwargs or {})

    def dispatch(self, func, types, args, kwargs):
        return func(*args, **kwargs)

    def __enter__(self):
        _stack().append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        if self in _stack():
            _stack().remove(self)
        return super().__exit__(*exc)

    def on(self) -> bool:
        """Whether an operator run now reaches this mode."""
        self.pinged, self.probing = False, True
        try:
            torch.empty(0, device="cpu")
        finally:
            self.probing = False
        return self.pinged


def watching() -> bool:
    """Whether a WatchedMode is entered on this thread (and not left): a measurement that sees every operator."""
    return bool(_stack())


def modes_on() -> bool:
    """Whether every WatchedMode entered on this thread (and not left) sees operators now."""
    modes = list(_stack())
    for mode in modes:
        mode.pinged, mode.probing = False, True
    try:
        torch.empty(0, device="cpu")
    finally:
        for mode in modes:
            mode.probing = False
    return all(mode.pinged for mode in modes)


def tensors_in(value) -> list[torch.Tensor]:
    """Every tensor in an operator's arguments or output, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item)]
    return []
