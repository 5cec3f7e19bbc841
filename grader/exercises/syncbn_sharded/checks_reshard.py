"""03_syncbn_sharded: save_and_reshard, load_resharded (torch.distributed.checkpoint with an FSDP2 model).

A checkpoint saved by W ranks is loaded by another number of ranks, so every check makes two runs that share
a folder the parent creates (and removes). The public checks hold no answer: the save is judged from the DCP
metadata it wrote, the load by the student's own round trip; training then continues and is compared with one
process training a plain nn.Module with Adam on the whole batch. hidden_reshard.py crosses each function with
the grader's own counterpart.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile

import torch
from torch import nn

from grader.checks import CheckFailed, describe_failure
from grader.exercises.syncbn_sharded import reference as ref
from grader.exercises.syncbn_sharded.exercise import check
from grader.tolerances import assert_close

RESHARD_TIMEOUT_S = 15.0  # a correct save or load takes about a second; a deadlock should not cost 30
STEPS_BEFORE, STEPS_AFTER = 3, 2
LR = 0.01
FRESH_SEED = 123  # the loading model starts from other weights: the checkpoint must overwrite them
# Every rank trains on the whole batch, so the ranks average W identical gradients: exact for W = 1, 2 and
# within an ulp for W = 3 (measured: 1.5e-8 after 5 steps). A lost Adam state moves parameters by ~1e-2.
EXACT = 1e-6


# --- rank side --------------------------------------------------------------------------------------

def fsdp_mlp(ctx, seed: int) -> nn.Module:
    """ref.mlp sharded with FSDP2: each Linear, then the root, over a 1-D mesh of every rank."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    model = ref.mlp(seed).to(ctx.device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int, device) -> None:
    x, y = (t.to(device) for t in ref.regression_batch())  # the whole batch on every rank
    ref.train_steps(model, opt, x, y, steps)


def _full(t):
    t = t.full_tensor() if hasattr(t, "full_tensor") else t  # a collective for DTensors: every rank calls it
    return t.detach().cpu().clone()


def _snapshot(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    out = {"params": [_full(p) for p in model.parameters()], "exp_avg": [], "exp_avg_sq": [], "step": []}
    for p in model.parameters():
        state = opt.state.get(p, {})
        for key in ("exp_avg", "exp_avg_sq", "step"):
            out[key].append(_full(state[key]) if key in state else None)
    return out


def _in_rank_train_and_save(ctx, student, folder: str, save=None):
    model = fsdp_mlp(ctx, seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    train(model, opt, STEPS_BEFORE, ctx.device)
    (save or student.task("save_and_reshard"))(model, opt, folder)
    return ctx.rank


def _in_rank_load_and_continue(ctx, student, folder: str, load=None):
    model = fsdp_mlp(ctx, seed=FRESH_SEED)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    (load or student.task("load_resharded"))(model, opt, folder)
    loaded = _snapshot(model, opt)
    train(model, opt, STEPS_AFTER, ctx.device)
    return {"loaded": loaded, "params": [_full(p) for p in model.parameters()], "backend": ctx.backend}


# --- parent side ------------------------------------------------------------------------------------

@contextlib.contextmanager
def shared_folder():
    """A checkpoint path both runs see (each run's ctx.workdir is its own); removed afterwards."""
    root = tempfile.mkdtemp(prefix="grader-reshard-")
    try:
        yield os.path.join(root, "checkpoint")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_phase(g, fn, folder: str, world_size: int, what: str, *args) -> list:
    """One run (a save or a load) with a short timeout; a failure names the likely mistake."""
    result = g.run_raw(fn, folder, *args, world_size=world_size, timeout=min(g.timeout, RESHARD_TIMEOUT_S))
    if result.ok:
        return [r.value for r in result.ranks]
    where = f"{what} with {world_size} rank(s): "
    stacks = " ".join(r.stack or "" for r in result.ranks if r.status == "hung")
    if "state_dict_saver" in stacks or "state_dict_loader" in stacks:
        raise CheckFailed(where + "deadlocked inside dcp.save/dcp.load: they are collectives, so every rank must "
                          "call them (saving on rank 0 only leaves it waiting for the others' plans). Call "
                          "get_state_dict and dcp.save on every rank: each writes its own shard.\n"
                          + result.failure())
    errors = " ".join(str(r.error) for r in result.ranks if r.error)
    hint = ""
    if ".metadata" in errors and "No such file" in errors:
        hint = ("there is no DCP checkpoint at `path` (no .metadata): the save must be dcp.save(state, "
                "checkpoint_id=path) on every rank; a torch.save of the full state writes one file that "
                "another number of ranks cannot reshard")
    elif re.search(r"Missing key in checkpoint state_dict: optim\.state\.\d+\.[a-z_]+\.", errors):
        hint = ("the optimizer state was not restored: the state you load into is keyed by parameter number "
                "(optimizer.state_dict()), the checkpoint's by parameter names. Load into the state of "
                "get_state_dict(model, optimizer) and put it back with set_state_dict(...)")
    elif "Missing key in checkpoint state_dict: optim" in errors:
        hint = ("the checkpoint holds no optimizer state under the names get_state_dict gives (the save must "
                "write {'model': model_state, 'optim': optim_state} from get_state_dict(model, optimizer))")
    elif "Missing key in checkpoint state_dict" in errors:
        hint = ("the checkpoint's keys are not those of {'model': ..., 'optim': ...} from get_state_dict(model, "
                "optimizer)")
    raise CheckFailed(where + describe_failure(result, hint))


def plain_training(steps: int, seed: int = 0) -> dict:
    """One process, a plain nn.Module and Adam on the whole batch: what resharding must not change."""
    model = ref.mlp(seed)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    ref.train_steps(model, opt, *ref.regression_batch(), steps)
    out = {"params": [p.detach().clone() for p in model.parameters()]}
    for key in ("exp_avg", "exp_avg_sq", "step"):
        out[key] = [opt.state[p][key].clone() for p in model.parameters()] if steps else []
    return out


def _expect(actual, expected, what: str, likely: str, backend: str) -> None:
    # nccl may reorder its sums: its default tolerance; gloo: EXACT
    assert_close(actual, expected, what, likely, backend, tol=None if backend == "nccl" else (EXACT, EXACT))


def verify_continuation(results: list, saved_by: int) -> None:
    """After the load: the saved weights and Adam state, then the uninterrupted run's next steps."""
    names = [name for name, _ in ref.mlp().named_parameters()]
    saved, final = plain_training(STEPS_BEFORE), plain_training(STEPS_BEFORE + STEPS_AFTER)
    fresh = plain_training(0, seed=FRESH_SEED)["params"]
    for rank, got in enumerate(results):
        loaded, backend, who = got["loaded"], got["backend"], f"rank {rank} of {len(results)}"
        if all(torch.equal(p, f) for p, f in zip(loaded["params"], fresh)):
            raise CheckFailed(f"{who}: after loading, the weights are still the fresh model's (built with another "
                              "seed): the checkpoint never reached the model. dcp.load fills the state dict you pass "
                              "in place; then set_state_dict(model, optimizer, ...) puts it into the model (a plain "
                              "model.load_state_dict of something else than what dcp.load filled changes nothing)")
        for i, name in enumerate(names):
            _expect(loaded["params"][i], saved["params"][i], f"{who}: parameter {name} right after loading",
                    f"the weights saved by {saved_by} rank(s) must come back exactly", backend)
        missing = [names[i] for i, m in enumerate(loaded["exp_avg"]) if m is None]
        if missing:
            raise CheckFailed(f"{who}: the optimizer state was not restored: after loading, Adam holds no state "
                              f"(exp_avg, exp_avg_sq, step) for {', '.join(missing)}. Load the optimizer state "
                              "too: get_state_dict(model, optimizer), dcp.load, then set_state_dict(...). A fresh "
                              "optimizer.state_dict() has no state for dcp.load to fill, and a load that restores "
                              "only the model restarts Adam from zero")
        for key in ("exp_avg", "exp_avg_sq", "step"):
            for i, name in enumerate(names):
                _expect(loaded[key][i], saved[key][i], f"{who}: Adam's {key} of {name} right after loading",
                        "the optimizer state was not restored as it was saved", backend)
        for i, name in enumerate(names):
            _expect(got["params"][i], final["params"][i],
                    f"{who}: parameter {name} after {STEPS_AFTER} more steps",
                    "training must continue exactly as if the job had not stopped", backend)


# --- save_and_reshard: the metadata it wrote --------------------------------------------------------

def _covered(meta) -> int:
    return sum(int(torch.Size(c.sizes).numel()) for c in getattr(meta, "chunks", []))


def checkpoint_problems(folder: str, world_size: int) -> list[str]:
    """What a DCP checkpoint of {'model': ..., 'optim': ...} from get_state_dict lacks (from its metadata)."""
    from torch.distributed.checkpoint import FileSystemReader

    if os.path.isfile(folder):
        return [("`path` is one file, not a DCP checkpoint folder: torch.save of the full state cannot be resharded "
                 "(no metadata, one rank writing everything); use dcp.save(state, checkpoint_id=path) on every rank")]
    if not os.path.isfile(os.path.join(folder, ".metadata")):
        return [("no DCP checkpoint at `path` (no .metadata file): use dcp.save(state, checkpoint_id=path) on every "
                 "rank, not torch.save")]
    md = FileSystemReader(folder).read_metadata()
    entries = md.state_dict_metadata
    problems = []
    expected = {name: p.shape for name, p in ref.mlp().named_parameters()}
    if not any(key.startswith("model.") for key in entries):
        problems.append(f"no 'model' entry (found {sorted({k.split('.')[0] for k in entries})}): save "
                        "{'model': model_state, 'optim': optim_state} from get_state_dict(model, optimizer)")
    # optimizer.state_dict() gives "optim.state.<number>.exp_avg"; get_state_dict "optim.state.<name>.exp_avg"
    by_number = [k for k in entries if k.startswith("optim.state.") and k.count(".") == 3
                 and k.split(".")[2].isdigit()]
    if by_number:
        problems.append("the optimizer state is keyed by parameter number (optimizer.state_dict()): save the "
                        "state of get_state_dict(model, optimizer), keyed by parameter names, which another "
                        "number of ranks can load")
    elif not any(key.startswith("optim.state.") for key in entries):
        problems.append("the optimizer state is missing: save get_state_dict's optimizer state under 'optim' too "
                        "(Adam's exp_avg, exp_avg_sq and step), or training cannot resume where it stopped")
    optim_named = not by_number and any(key.startswith("optim.state.") for key in entries)
    for name, shape in expected.items():
        keys = [f"model.{name}"] + ([f"optim.state.{name}.exp_avg", f"optim.state.{name}.exp_avg_sq"]
                                    if optim_named else [])
        for key in keys:
            meta = entries.get(key)
            if meta is None:
                problems.append(f"{key} is missing")
            elif tuple(getattr(meta, "size", ())) != tuple(shape):
                problems.append(f"{key} has shape {tuple(getattr(meta, 'size', ()))}, expected the full "
                                f"{tuple(shape)} (DCP records each tensor's global shape)")
            elif _covered(meta) < shape.numel():
                problems.append(f"only {_covered(meta)} of the {shape.numel()} elements of {key} were saved: "
                                "some ranks' shards are missing (every rank must call dcp.save, without no_dist)")
        if optim_named and f"optim.state.{name}.step" not in entries:
            problems.append(f"optim.state.{name}.step is missing: Adam's step counts belong to its state")
    files = {info.relative_path for info in md.storage_data.values()}
    if not problems and len(files) < world_size:
        problems.append(f"{len(files)} data file(s) for {world_size} ranks: every rank writes its own shard "
                        "with dcp.save")
    return problems


@check("save_and_reshard", points=2)
def checkpoint_has_every_shard_and_adam_state(g):
    """2 ranks save after 3 steps: DCP metadata, the full shape and every element of each parameter and of
    Adam's moments, the step counts, one data file per rank; the save never deadlocks (short timeout)."""
    with shared_folder() as folder:
        run_phase(g, _in_rank_train_and_save, folder, 2, "saving")
        problems = checkpoint_problems(folder, 2)
    if problems:
        raise CheckFailed("the checkpoint is incomplete: " + "; ".join(problems))


# --- load_resharded: the student's own round trip ---------------------------------------------------

def round_trip(g, save_ranks: int, load_ranks: int, save=None, load=None) -> None:
    with shared_folder() as folder:
        run_phase(g, _in_rank_train_and_save, folder, save_ranks, "saving", save)
        results = run_phase(g, _in_rank_load_and_continue, folder, load_ranks, "loading", load)
    verify_continuation(results, save_ranks)


@check("load_resharded", points=1.5)
def saved_by_two_loaded_by_three_continues(g):
    """Saved by 2 ranks with your save_and_reshard, loaded by 3 into a model with other weights: weights and
    Adam state come back, and 2 more steps equal an uninterrupted single-process run."""
    round_trip(g, 2, 3)


@check("load_resharded", points=1)
def saved_by_two_loaded_by_one_continues(g):
    """The same, loaded by a single rank (FSDP2 over a mesh of one)."""
    round_trip(g, 2, 1)
