"""Comparisons shared by the 03_syncbn_sharded checks, under the backend of the check's runs (g.backend)."""

from __future__ import annotations

import torch

from grader.tolerances import tolerance


def close(g, actual, expected) -> bool:
    """float32 closeness, with the absolute part scaled to the tensor's magnitude: BatchNorm's input
    gradient is a difference of O(1) terms, so its small elements carry O(1)-sized rounding."""
    actual, expected = torch.as_tensor(actual).double(), torch.as_tensor(expected).double()
    if actual.shape != expected.shape:
        return False
    rtol, atol = tolerance(torch.float32, g.backend)
    scale = expected.abs().max().item() if expected.numel() else 0.0
    return bool(((actual - expected).abs() <= atol + rtol * (expected.abs() + scale)).all())


def assert_close_scaled(g, actual, expected, what: str, likely: str = "") -> None:
    if not close(g, actual, expected):
        g.assert_close(actual, expected, what, likely)  # raises, showing the largest difference


def cpu(t):
    return None if t is None else t.detach().cpu().clone()
