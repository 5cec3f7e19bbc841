"""Failures that are the machine's, not the student's: a rank that never became ready, and a CUDA or NCCL fault
raised outside the student's code.

A rank says "ready" once its device and process group are set up (worker.py), before any student code runs in
it; one that never does within the launcher's start-up bound was stopped by the machine (a GPU that hangs in
cuInit, an NCCL communicator that never forms), and the ranks waiting on it by that. A fault of the GPU or of
NCCL's transport (an uncorrectable ECC error, a launch failure after an Xid, ncclSystemError) raised in the
grader's own code, with no frame of the student's, is the machine's too. Both read as "could not run on this
machine": nothing is paid and the submission is listed for regrading (grading.py).
"""

from __future__ import annotations

FAULTS = (
    "ncclSystemError",
    "ncclInternalError",
    "ncclUnhandledCudaError",
    "uncorrectable ECC error",
    "unspecified launch failure",
    "busy or unavailable",
    "cudaErrorDevicesUnavailable",
    "CUDA driver version is insufficient",
    "GPU has fallen off the bus",
)
RAISED_AS = ("RuntimeError", "DistBackendError", "DistError", "AcceleratorError", "CudaError")  # torch's types


def machine_fault(error: dict | None) -> bool:
    """A rank's described exception (stacks.describe_exception) is a CUDA or NCCL fault, raised as torch raises
    them, in none of the student's frames (a message of the student's own making, a ValueError of int("..."),
    is not one)."""
    if not isinstance(error, dict) or error.get("student_frames") or error.get("type") not in RAISED_AS:
        return False
    text = f"{error.get('message', '')}\n{error.get('traceback', '')}"
    return any(fault in text for fault in FAULTS)


def never_ready(startup_s: float) -> dict:
    """The error of a rank that never said ready, as a described exception."""
    return {
        "type": "NotReady",
        "message": f"its device and process group were not set up within {startup_s:.0f} s (no student code ran)",
        "student_frames": [],
        "traceback": "",
    }
