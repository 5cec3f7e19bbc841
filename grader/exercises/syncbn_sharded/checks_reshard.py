"""03_syncbn_sharded: save_and_reshard, load_resharded (torch.distributed.checkpoint with an FSDP2 model).

A checkpoint saved by W ranks is loaded by another number of ranks, so every check makes two runs that share
a folder the parent creates (and removes); the checks that start from the student's save by W ranks share that
save (one launch, g.folder(shared_as=...)), and a failure after it is confirmed with a save of the check's own.
The public checks hold no answer: the save is judged from the DCP metadata it wrote, the load by the student's
own round trip; training then continues and is compared with one process training a plain nn.Module with Adam
on the whole batch. hidden_reshard.py crosses each function with the grader's own counterpart. When the
student's save is under test and a load fails, what the save wrote is named first (reshard_metadata.py), never
what the load then trips on.

Each rule of the task texts, and the check that verifies it (S: checkpoint_has_every_shard_and_adam_state;
H: the hidden your_save_by_* and reference_save_by_* crossings; L: saved_by_two_loaded_by_{three,one}):

| save_and_reshard                                                          | verified by                        |
|---------------------------------------------------------------------------|------------------------------------|
| save model and Adam so that another number of ranks can load them         | H (2 -> 3, 3 -> 2), L              |
| get_state_dict: this rank's shards, nothing gathered                      | S, H: each parameter saved as N    |
|                                                                           | pieces, not one full tensor        |
| the optimizer state keyed by parameter names, not numbers                 | S, H ("keyed by parameter number") |
| dcp.save({"model": ..., "optim": ...}, checkpoint_id=path), path a folder | S: a .metadata, 'model' entries    |
| every rank writes its own shards; the metadata has each full shape        | S: one data file per rank, full    |
|                                                                           | shapes, every element covered      |
| a collective: on rank 0 alone it waits forever                            | S, L: run_phase's 15 s timeout and |
|                                                                           | its dcp deadlock message           |
| not torch.save                                                            | S: a file, or no .metadata         |
| save the optimizer too (exp_avg, exp_avg_sq, step)                        | S, H: "the optimizer state is      |
|                                                                           | missing", "...step is missing"     |

| load_resharded                                                            | verified by                        |
|---------------------------------------------------------------------------|------------------------------------|
| load in place, saved by 2 ranks, loaded by 3 or by 1                      | L (2 -> 3, 2 -> 1), H (2 -> 3,     |
|                                                                           | 3 -> 2 from the grader's save)     |
| the model is fresh (other weights): the checkpoint must overwrite them    | verify_continuation ("still the    |
|                                                                           | fresh model's")                    |
| get_state_dict of this job's shards, {"model", "optim"}, dcp.load fills   | L, H: weights and Adam state right |
| them in place (a collective)                                              | after loading; run_phase's hints   |
|                                                                           | and dcp deadlock message           |
| set_state_dict puts them into model and optimizer                         | verify_continuation                |
| restore the optimizer state too; a fresh optimizer.state_dict() restores  | verify_continuation ("the optimizer|
| nothing                                                                   | state was not restored")           |
| 2 more steps equal an uninterrupted run, within 1e-6                      | verify_continuation (EXACT)        |
"""

from __future__ import annotations

import re
from functools import lru_cache

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.grading import describe_failure
from grader.exercises import happens_before as hb
from grader.exercises.syncbn_sharded import reference as ref
from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.reshard_metadata import checkpoint_problems

RESHARD_TIMEOUT_S = 15.0  # a correct save or load takes about a second; a deadlock should not cost 30
STEPS_BEFORE, STEPS_AFTER = 3, 2
LR = 0.01
# Adam's foreach form, in the ranks and in the reference alike (the same arithmetic per element): over DTensors a
# fresh rank propagates the sharding of each distinct operation once, about 40 in the per-tensor form's first step,
# one per operation for all parameters in the foreach form (measured at load 7: that step 0.85 s -> 0.45 s; a
# 3-rank load's CPU 0.38 -> 0.31 s per rank).
ADAM = {"lr": LR, "foreach": True}
FRESH_SEED = 123  # the loading model starts from other weights: the checkpoint must overwrite them
# Every rank trains on the whole batch, so the ranks average W identical gradients: exact for W = 1, 2 and
# within an ulp for W = 3 (measured: 1.5e-8 after 5 steps). A lost Adam state moves parameters by ~1e-2.
EXACT = 1e-6
LOADED_BOUND_S = 2 * RESHARD_TIMEOUT_S  # past the run's own timeout: a rank stuck in its load is reported hung


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
    from torch.distributed.tensor import DTensor  # FSDP2's parameters and Adam state (imported: the guard watches it)

    t = t.full_tensor() if isinstance(t, DTensor) else t  # a collective for DTensors: every rank calls it
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
    opt = torch.optim.Adam(model.parameters(), **ADAM)
    train(model, opt, STEPS_BEFORE, ctx.device)
    (save or student.task("save_and_reshard"))(model, opt, folder)
    return ctx.rank


def _in_rank_load_and_continue(ctx, student, folder: str, load=None):
    model = fsdp_mlp(ctx, seed=FRESH_SEED)
    opt = torch.optim.Adam(model.parameters(), **ADAM)
    (load or student.task("load_resharded"))(model, opt, folder)
    # Our full_tensor gathers come next, only once every rank has returned from its load: a load that some
    # ranks skip then shows as the hang it is (stacks inside dcp.load), not as gloo's abort on mismatched calls.
    hb.mark(ctx, "loaded")
    hb.wait_until(lambda: all(hb.marked(ctx, "loaded", r) for r in range(ctx.world_size)), LOADED_BOUND_S)
    loaded = _snapshot(model, opt)
    train(model, opt, STEPS_AFTER, ctx.device)
    return {"loaded": loaded, "params": [_full(p) for p in model.parameters()], "backend": ctx.backend}


# --- parent side ------------------------------------------------------------------------------------


def run_phase(g, fn, folder: str, world_size: int, what: str, *args) -> list:
    """One run (a save or a load) with a short timeout; a failure names the likely mistake."""
    result = g.run_raw(fn, folder, *args, world_size=world_size, timeout=min(g.timeout, RESHARD_TIMEOUT_S))
    if result.ok:
        return [r.value for r in result.ranks]
    where = f"{what} with {world_size} rank(s): "
    stacks = " ".join(r.stack or "" for r in result.ranks if r.status == "hung")
    if "state_dict_saver" in stacks or "state_dict_loader" in stacks:
        raise CheckFailed(
            where + "deadlocked inside dcp.save/dcp.load: they are collectives, so every rank must "
            "call them (saving or loading on rank 0 only leaves it waiting for the others' plans). "
            "Call get_state_dict and dcp.save (or dcp.load) on every rank: each writes (or reads) "
            "its own shard.\n" + result.failure()
        )
    errors = " ".join(str(r.error) for r in result.ranks if r.error)
    hint = ""
    if ".metadata" in errors and "No such file" in errors:
        hint = (
            "there is no DCP checkpoint at `path` (no .metadata): the save must be dcp.save(state, "
            "checkpoint_id=path) on every rank; a torch.save of the full state writes one file that "
            "another number of ranks cannot reshard"
        )
    elif re.search(r"Missing key in checkpoint state_dict: optim\.state\.\d+\.(exp_avg|exp_avg_sq|step)\.", errors):
        # by number: "optim.state.0.exp_avg"; by name (this model's are "0.weight"): "optim.state.0.weight.exp_avg"
        hint = (
            "the optimizer state was not restored: the state you load into is keyed by parameter number "
            "(optimizer.state_dict()), the checkpoint's by parameter names. Load into the state of "
            "get_state_dict(model, optimizer) and put it back with set_state_dict(...)"
        )
    elif "Missing key in checkpoint state_dict: optim" in errors:
        hint = (
            "the checkpoint holds no optimizer state under the names get_state_dict gives (the save must "
            "write {'model': model_state, 'optim': optim_state} from get_state_dict(model, optimizer))"
        )
    elif "Missing key in checkpoint state_dict" in errors:
        hint = (
            "the checkpoint's keys are not those of {'model': ..., 'optim': ...} from get_state_dict(model, optimizer)"
        )
    raise CheckFailed(where + describe_failure(result, hint))


def plain_training(steps: int, seed: int = 0) -> dict:
    """One process, a plain nn.Module and Adam on the whole batch: what resharding must not change (a copy)."""
    return {key: [t.clone() for t in tensors] for key, tensors in _plain_training(steps, seed).items()}


@lru_cache(maxsize=None)  # the grader's own computation from constants: the same for every check and submission
def _plain_training(steps: int, seed: int) -> dict:
    model = ref.mlp(seed)
    opt = torch.optim.Adam(model.parameters(), **ADAM)
    ref.train_steps(model, opt, *ref.regression_batch(), steps)
    out = {"params": [p.detach().clone() for p in model.parameters()]}
    for key in ("exp_avg", "exp_avg_sq", "step"):
        out[key] = [opt.state[p][key].clone() for p in model.parameters()] if steps else []
    return out


def _expect(g, actual, expected, what: str, likely: str) -> None:
    # nccl may reorder its sums: its default tolerance; gloo: EXACT
    g.assert_close(actual, expected, what, likely, tol=None if g.backend == "nccl" else (EXACT, EXACT))


def verify_continuation(g, results: list, saved_by: int) -> None:
    """After the load: the saved weights and Adam state, then the uninterrupted run's next steps."""
    names = [name for name, _ in ref.mlp().named_parameters()]
    saved, final = plain_training(STEPS_BEFORE), plain_training(STEPS_BEFORE + STEPS_AFTER)
    fresh = plain_training(0, seed=FRESH_SEED)["params"]
    for rank, got in enumerate(results):
        loaded, who = got["loaded"], f"rank {rank} of {len(results)}"
        if all(torch.equal(p, f) for p, f in zip(loaded["params"], fresh)):
            raise CheckFailed(
                f"{who}: after loading, the weights are still the fresh model's (built with another "
                "seed): the checkpoint never reached the model. dcp.load fills the state dict you pass "
                "in place; then set_state_dict(model, optimizer, ...) puts it into the model (a plain "
                "model.load_state_dict of something else than what dcp.load filled changes nothing)"
            )
        for i, name in enumerate(names):
            _expect(
                g,
                loaded["params"][i],
                saved["params"][i],
                f"{who}: parameter {name} right after loading",
                f"the weights saved by {saved_by} rank(s) must come back exactly",
            )
        missing = [names[i] for i, m in enumerate(loaded["exp_avg"]) if m is None]
        if missing:
            raise CheckFailed(
                f"{who}: the optimizer state was not restored: after loading, Adam holds no state "
                f"(exp_avg, exp_avg_sq, step) for {', '.join(missing)}. Load the optimizer state "
                "too: get_state_dict(model, optimizer), dcp.load, then set_state_dict(...). A fresh "
                "optimizer.state_dict() has no state for dcp.load to fill, and a load that restores "
                "only the model restarts Adam from zero"
            )
        for key in ("exp_avg", "exp_avg_sq", "step"):
            for i, name in enumerate(names):
                _expect(
                    g,
                    loaded[key][i],
                    saved[key][i],
                    f"{who}: Adam's {key} of {name} right after loading",
                    "the optimizer state was not restored as it was saved",
                )
        for i, name in enumerate(names):
            _expect(
                g,
                got["params"][i],
                final["params"][i],
                f"{who}: parameter {name} after {STEPS_AFTER} more steps",
                "training must continue exactly as if the job had not stopped",
            )


# --- save_and_reshard -------------------------------------------------------------------------------


@EXERCISE.check("save_and_reshard", points=2)
def checkpoint_has_every_shard_and_adam_state(g):
    """2 ranks save after 3 steps: DCP metadata, the full shape and every element of each parameter and of
    Adam's moments, the step counts, one data file per rank; the save never deadlocks (short timeout)."""
    with g.folder() as folder:  # both runs see it (each run's ctx.workdir is its own)
        run_phase(g, _in_rank_train_and_save, folder, 2, "saving")
        problems = checkpoint_problems(folder, 2)
    if problems:
        raise CheckFailed("the checkpoint does not hold what the task asks: " + "; ".join(problems))


# --- load_resharded: the student's own round trip ---------------------------------------------------


def _refuse_incomplete(folder: str, save_ranks: int) -> None:
    problems = checkpoint_problems(folder, save_ranks)
    if problems:  # the student's save is at fault: say so, rather than what a load then trips on
        raise CheckFailed(
            f"the checkpoint your save_and_reshard wrote on {save_ranks} ranks does not hold what the "
            "task asks: " + "; ".join(problems)
        )


def round_trip(g, save_ranks: int, load_ranks: int, save=None, load=None) -> None:
    """save, load: the grader's own (hidden checks), else the student's. The student's save by N ranks is the
    same run in every check that makes it: one launch, its checkpoint loaded by each (g.folder)."""
    shared = f"student_save_by_{save_ranks}" if save is None else None
    with g.folder(shared_as=shared) as folder:
        run_phase(g, _in_rank_train_and_save, folder, save_ranks, "saving", save)
        # the other checks' loads read this folder too (and a load may change it): a failure from here on is
        # confirmed by this check's own save and load. A failed save is never shared (its own launch): not so.
        g.read_shared_launch |= bool(shared)
        if save is None and load is not None:  # the check judges the student's save: what it wrote comes first
            _refuse_incomplete(folder, save_ranks)
        try:
            verify_continuation(
                g, run_phase(g, _in_rank_load_and_continue, folder, load_ranks, "loading", load), save_ranks
            )
        except CheckFailed:
            if save is None:  # the student's own round trip: a save that lost something explains the failure
                _refuse_incomplete(folder, save_ranks)
            raise


@EXERCISE.check("load_resharded", points=1.5)
def saved_by_two_loaded_by_three_continues(g):
    """Saved by 2 ranks with your save_and_reshard, loaded by 3 into a model with other weights: weights and
    Adam state come back, and 2 more steps equal an uninterrupted single-process run."""
    round_trip(g, 2, 3)


@EXERCISE.check("load_resharded", points=1, depends_on=("saved_by_two_loaded_by_three_continues",))
def saved_by_two_loaded_by_one_continues(g):
    """The same, loaded by a single rank (FSDP2 over a mesh of one)."""
    round_trip(g, 2, 1)
