"""Load a training script's distributed checkpoints at another world size (exercise 04_torchrun's grader).

Not part of the grader's package code: the grader copies it next to a student's train.py and launches it with
torchrun in the same isolated Python (a student's checkpoint is unpickled only there). Every worker loads each
checkpoint given into problem.make_model() and its optimizer, resharded by torch.distributed.checkpoint for this
world size; rank 0 writes what it loaded to OUT as plain tensors and numbers (the grader reads it with
weights_only), or the error that stopped it.

    torchrun --nproc-per-node=3 ... dcp_load.py OUT CHECKPOINT [CHECKPOINT ...]
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import problem


def load_one(path: str) -> dict:
    if not os.path.isfile(os.path.join(path, ".metadata")):  # the same answer in every worker: one file system
        return {"error": "missing" if not os.path.isdir(path) else "incomplete"}
    model = problem.make_model()
    optimizer = problem.make_optimizer(model)
    model_state, optimizer_state = get_state_dict(model, optimizer)  # with empty momentum buffers to fill
    state = {"app": {"model": model_state, "optimizer": optimizer_state, "epochs_run": -1}}
    try:
        dcp.load(state, checkpoint_id=path)
    except BaseException as exc:  # noqa: BLE001 - a CheckpointException is a BaseException: report it
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    app = state["app"]
    set_state_dict(model, optimizer, model_state_dict=app["model"], optim_state_dict=app["optimizer"])
    epochs_run = app["epochs_run"]
    return {
        "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "epochs_run": epochs_run if type(epochs_run) is int else -2,
    }


def main() -> None:
    out, paths = sys.argv[1], sys.argv[2:]
    dist.init_process_group("gloo")
    loaded = {path: load_one(path) for path in paths}
    if dist.get_rank() == 0:
        torch.save({"world_size": dist.get_world_size(), "loaded": loaded}, out)
    dist.barrier()  # rank 0's file is written before any rank leaves
    del loaded
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
