"""What a sandbox's processes inherit from the grader's environment: a few variables of Python, the driver and
NCCL, never the grader's own; and NCCL pointed at the loopback, the one network a sandbox has (sandbox.py).
"""

from __future__ import annotations

import os
import re
import sys

from grader.engine.processes import SANDBOXED as SANDBOXED_ENV
from grader.exercises.instructor import MASKED_ENV  # the public phase's marker: load_hidden imports none

HOME = "/home/grading"

# What the CUDA driver, NCCL and torch read from the environment: kept (an instructor's NCCL_SOCKET_IFNAME, a
# driver found through LD_LIBRARY_PATH); GRADER_FAKE_GPUS and GRADER_CUDA_WATCH are the tests' hooks.
DRIVER_ENV = ("LD_LIBRARY_PATH", "GRADER_FAKE_GPUS", "GRADER_CUDA_WATCH", "PYTORCH_NVML_BASED_CUDA_CHECK")
DRIVER_ENV_PREFIXES = ("CUDA_", "NCCL_", "NVIDIA_", "CUBLAS_", "CUDNN_", "TORCH_NCCL_")


def environment(masked: bool) -> dict[str, str]:
    env = {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
        "HOME": HOME,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
    }
    for name, value in os.environ.items():
        if name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", *DRIVER_ENV) or name.startswith(DRIVER_ENV_PREFIXES):
            env[name] = value
    if re.fullmatch(r"[A-Za-z]{2,3}(_[A-Za-z]{2})?", os.environ.get("COURSE_LANG", "")):
        env["COURSE_LANG"] = os.environ["COURSE_LANG"]  # the feedback's language (grader/i18n.py)
    _nccl_on_loopback(env)
    env[SANDBOXED_ENV] = "1"  # its own loopback: no port locks needed (engine/processes.py)
    if masked:
        env[MASKED_ENV] = "1"
    return env


# The sandbox's network namespace has only `lo`: a site's NCCL_SOCKET_IFNAME, InfiniBand or network plugin would
# point NCCL at what is not there. Its ranks are on one machine (shared memory, P2P, or the loopback socket).
NCCL_DROPPED = ("NCCL_IB_", "NCCL_NET")


def _nccl_on_loopback(env: dict[str, str]) -> None:
    for name in [n for n in env if n.startswith(NCCL_DROPPED)]:
        del env[name]
    env["NCCL_SOCKET_IFNAME"] = "lo"


def nccl_env_notice() -> str | None:
    """The one line said at start when this environment's NCCL settings do not reach the sandbox."""
    changed = sorted(n for n in os.environ if n.startswith(NCCL_DROPPED))
    if os.environ.get("NCCL_SOCKET_IFNAME", "lo") != "lo":
        changed.append(f"NCCL_SOCKET_IFNAME={os.environ['NCCL_SOCKET_IFNAME']}")
    if not changed:
        return None
    return (
        "grader: the sandbox has only the loopback network: its ranks run NCCL with NCCL_SOCKET_IFNAME=lo and "
        f"without {', '.join(changed[:6])}"
    )
