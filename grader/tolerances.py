"""Explicit numeric tolerances, per dtype and backend, and the comparison
that reports the largest difference next to the tolerance.

The backend has no default: a check compares with `g.assert_close` (bound to the
backend of its runs' hardware plan, grader.grading.Grading) so that under nccl it
is held to nccl's bounds, never silently to gloo's (tests/test_tolerances.py)."""

from __future__ import annotations

import torch

from grader.checks import CheckFailed

# (rtol, atol). gloo on CPU reduces in a fixed order; nccl may reorder sums
# across ranks, and GPUs may use TF32, so its float32 bound is looser.
TOLERANCES = {
    ("gloo", torch.float64): (1e-9, 1e-11),
    ("gloo", torch.float32): (1e-4, 1e-6),
    ("nccl", torch.float64): (1e-7, 1e-9),
    ("nccl", torch.float32): (2e-3, 1e-4),
    ("gloo", torch.bfloat16): (2e-2, 1e-2),
    ("nccl", torch.bfloat16): (2e-2, 1e-2),
}
BACKENDS = ("gloo", "nccl")


def tolerance(dtype: torch.dtype, backend: str) -> tuple[float, float]:
    """(rtol, atol) for `dtype` under `backend`; a dtype without its own entry gets the backend's float32 bound."""
    if backend not in BACKENDS:
        raise ValueError(f"no tolerances for backend {backend!r}; known: {', '.join(BACKENDS)}")
    return TOLERANCES.get((backend, dtype), TOLERANCES[(backend, torch.float32)])


def allclose(actual, expected, backend: str) -> bool:
    """torch.allclose at the expected dtype's bound under `backend` (for choosing a hint, not a verdict)."""
    actual, expected = torch.as_tensor(actual).detach().cpu(), torch.as_tensor(expected).detach().cpu()
    rtol, atol = tolerance(expected.dtype, backend)
    return actual.shape == expected.shape and torch.allclose(actual.double(), expected.double(), rtol=rtol, atol=atol)


def assert_close(
    actual, expected, what: str, likely: str = "", *, backend: str, tol: tuple[float, float] | None = None
) -> None:
    """Raise CheckFailed naming `what`, the likely mistake, the largest
    difference and the tolerance, when actual and expected differ.
    `tol` (rtol, atol) replaces the dtype's and backend's default."""
    actual = torch.as_tensor(actual).detach().cpu()
    expected = torch.as_tensor(expected).detach().cpu()
    if actual.shape != expected.shape:
        raise CheckFailed(
            f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}" + (f". {likely}" if likely else "")
        )
    rtol, atol = tol or tolerance(expected.dtype, backend)
    a, e = actual.double(), expected.double()
    diff = (a - e).abs()
    bound = atol + rtol * e.abs()
    if diff.numel() and not bool((diff <= bound).all()):
        worst = int((diff - bound).argmax())
        raise CheckFailed(
            f"{what} differs from the reference"
            + (f": {likely}" if likely else "")
            + f"\n    largest difference {diff.flatten()[worst].item():.3g} (got {a.flatten()[worst].item():.6g}, "
            f"expected {e.flatten()[worst].item():.6g}); tolerance {atol:g} + {rtol:g}*|expected| "
            f"({expected.dtype}, {backend})"
        )
