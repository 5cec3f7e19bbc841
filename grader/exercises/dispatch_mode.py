"""The one home of torch's TorchDispatchMode in the checks (tests/test_public_apis.py allows it here only).

A dispatch mode sees every operator a rank runs, autograd's backward included; the checks use it to count
collectives (collectives.py), measure live bytes (syncbn_sharded/live_bytes.py) and watch FSDP2's traffic.
`tensors_in` walks an operator's output (nested tuples, lists and dicts) without torch's private pytree.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass

__all__ = ["TorchDispatchMode", "is_traceable_wrapper_subclass", "tensors_in"]


def tensors_in(value) -> list[torch.Tensor]:
    """Every tensor in an operator's arguments or output, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item)]
    return []
