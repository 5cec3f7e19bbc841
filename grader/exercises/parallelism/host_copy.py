"""Tensors a rank sends back to the grader."""

from __future__ import annotations

import torch


def host(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy to send back (a CPU tensor's .cpu() is the tensor itself,
    which the student's code may still change)."""
    return t.detach().cpu().clone()
