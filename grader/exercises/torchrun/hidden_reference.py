"""The grader's two-node torchrun command (instructor only: close to the torchrun_command answer)."""

from __future__ import annotations

from grader.exercises.torchrun.torchrun_process import RUN_MODULE, worker_command


def node_command(script: str, node_rank: int, rdzv_endpoint: str, nnodes: int = 2) -> list[str]:
    """Node `node_rank` of an `nnodes`-node job, one worker per node, meeting over c10d at `rdzv_endpoint`."""
    return (
        RUN_MODULE
        + [
            "--nproc-per-node=1",
            f"--nnodes={nnodes}",
            "--max-restarts=0",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_endpoint}",
            "--rdzv-id=grader",
            f"--node-rank={node_rank}",
        ]
        + worker_command(script)
    )
