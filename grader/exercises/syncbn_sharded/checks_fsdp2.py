"""03_syncbn_sharded, FSDP2 in practice: train_step_fsdp2 (build_fsdp2_model: checks_fsdp2_build.py; export_full_state:
checks_fsdp2_state.py).

The ranks run torch's FSDP2 (`fully_shard`) on the grader's TinyTransformer (fsdp2_model.py); the parent compares
with one process running the plain model. Collectives are recorded at torch's dispatcher (collectives.py). Each
rule of the task text and its check:

| train_step_fsdp2(model, optimizer, micro_batches, max_norm)    | verified by                                 |
|----------------------------------------------------------------|---------------------------------------------|
| each micro-batch's loss by its share of the rows, backward     | fsdp2_step_clips_global_norm (parameters    |
|                                                                | equal one big-batch step)                   |
| gradient sync off before the last micro-batch, on for the last | fsdp2_accumulation_syncs_once (one          |
|                                                                | reduce-scatter per unit, after the last     |
|                                                                | forward only)                               |
| clip_grad_norm_ over the sharded gradients; return its norm    | fsdp2_step_clips_global_norm (the norm of   |
| (the global norm before clipping) as a float                   | one process; a local norm named)            |
| optimizer.step(), optimizer.zero_grad()                        | both (two steps in a row)                   |
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.collectives import CollectivesUnseen, issued, record_collectives
from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.fsdp2_model import DIM, OUT, TinyTransformer

BF16_TOL = (5e-2, 2e-2)  # (rtol, atol): bf16 compute against the fp32 reference
SEED, DEPTH = 1, 3
MICRO_ROWS, STEPS, LR = (2, 6, 4), 2, 0.1  # micro-batches of different sizes: a step is the mean over rows
MICRO = len(MICRO_ROWS)
# The one collective the dispatcher cannot see: clip_grad_norm_'s reduction of the norm, which DTensor issues
# inside its own dispatch (measured: one per step on torch 2.13, gloo); a second allows a full_tensor() of the norm.
UNSEEN_PER_STEP = 2
MAX_NORM = 0.05  # below every step's gradient norm here (reference_training asserts it): clipping always acts


# --- inputs and single-process references (parent and ranks) --------------------------------------------------


def batch(step: int, rank: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + 10 * rank + micro)
    rows = MICRO_ROWS[micro]
    return torch.randn(rows, DIM, generator=g), torch.randn(rows, OUT, generator=g)


def plain_model(depth: int, seed: int) -> nn.Module:
    model = TinyTransformer(depth, seed)
    model.init_weights()
    return model


@lru_cache(maxsize=None)
def reference_training(depth: int, seed: int, world: int, by_rows: bool = True) -> tuple[list, dict]:
    """One process, STEPS big-batch steps (every rank's micro-batches), clipped: (norms, parameters). by_rows=False:
    the mistake of weighting each micro-batch's mean loss equally, whatever its size."""
    model = plain_model(depth, seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    norms = []
    for step in range(STEPS):
        pairs = [batch(step, r, m) for r in range(world) for m in range(MICRO)]
        if by_rows:
            xs, ys = zip(*pairs)
            nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
        else:
            sum(nn.functional.mse_loss(model(x), y) for x, y in pairs).div(len(pairs)).backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM).item())
        assert norms[-1] > 2 * MAX_NORM, "the reference must clip, or a missing clip would pass"
        opt.step()
        opt.zero_grad()
    return norms, {k: p.detach().clone() for k, p in model.named_parameters()}


# --- rank side -----------------------------------------------------------------------------------------------


def full(t) -> torch.Tensor:
    """A parameter or gradient as one plain CPU tensor (a collective for DTensors: every rank calls it)."""
    from torch.distributed.tensor import DTensor

    t = t.full_tensor() if isinstance(t, DTensor) else t
    return t.detach().float().cpu().clone()


def sharded_fixture(ctx, depth: int, seed: int) -> nn.Module:
    """The grader's own fp32 FSDP2 model for train_step_fsdp2 and export_full_state: each block, then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    model = plain_model(depth, seed).to(ctx.device)  # a fixture this small may start whole
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _in_rank_train(ctx, student, depth: int, seed: int):
    model = sharded_fixture(ctx, depth, seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    forwards = [0]
    model.register_forward_pre_hook(lambda m, a: forwards.__setitem__(0, forwards[0] + 1))
    step_fn = student.task("train_step_fsdp2")
    steps = []
    for step in range(STEPS):
        micro = [tuple(t.to(ctx.device) for t in batch(step, ctx.rank, m)) for m in range(MICRO)]
        calls = []
        forwards[0] = 0
        before = issued()
        try:
            with record_collectives(on_call=lambda c: calls.append((c.kind, c.dtype, forwards[0]))):
                norm = step_fn(model, opt, micro, MAX_NORM)
        except CollectivesUnseen:  # judged below: the collectives issued against the recorded ones
            pass
        except Exception as error:
            if forwards[0] < MICRO or any(kind == "reduce_scatter" for kind, _, _ in calls):
                raise  # not after every micro-batch ran unsynchronized: the student's own error says more
            raise CheckFailed(  # the likely cause first: the student's own traceback would only show its symptom
                f"rank {ctx.rank}, step {step + 1}: no gradient was reduce-scattered in this step, so gradient sync "
                "stayed off: the gradients are this rank's unsynchronized local tensors (not DTensor shards), and "
                "what comes after fails on them. Call model.set_requires_gradient_sync(True) before the last "
                f"micro-batch. Your code then raised {type(error).__name__}: {error}"
            ) from error
        unseen = (issued() - before - len(calls)) if before is not None else 0
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # a DTensor norm: a collective
        steps.append(
            {
                "norm": float(norm) if isinstance(norm, (int, float, torch.Tensor)) else repr(type(norm)),
                "calls": calls,
                "forwards": forwards[0],
                "unseen": unseen,
                "grads_left": sum(p.grad is not None for p in model.parameters()),
            }
        )
    return {"steps": steps, "params": {k: full(p) for k, p in model.named_parameters()}}


# --- parent side ---------------------------------------------------------------------------------------------


def units(depth: int) -> int:
    return depth + 1  # each block, and the root's own parameters (the head)


def verify_accumulation(results, depth: int) -> None:
    for rank, got in enumerate(results):
        for step, info in enumerate(got["steps"]):
            where = f"rank {rank}, step {step + 1}"
            if info["forwards"] != MICRO:
                raise CheckFailed(
                    f"{where}: the model ran {info['forwards']} forward(s) for {MICRO} micro-batches: "
                    "run each micro-batch once"
                )
            if info["unseen"] > UNSEEN_PER_STEP:
                raise CheckFailed(
                    f"{where}: {info['unseen']} collectives moved data where the grader could not see "
                    f"them (at most {UNSEEN_PER_STEP}: clip_grad_norm_'s reduction of the norm): call "
                    "collectives through torch.distributed, from the thread that runs your code"
                )
            synced = sorted({f for kind, _, f in info["calls"] if kind == "reduce_scatter"})
            if synced and synced[0] < MICRO:
                every = synced == list(range(1, MICRO + 1))
                raise CheckFailed(
                    f"{where}: gradients were reduce-scattered in the backward of micro-batch(es) "
                    f"{', '.join(map(str, synced))} of {MICRO}: "
                    + (
                        "accumulation syncs every micro-batch"
                        if every
                        else "sync is on for the wrong micro-batches, and the last one must sync"
                    )
                    + ". Call "
                    "model.set_requires_gradient_sync(False) before the micro-batches that are not "
                    "the last, and (True) before the last"
                )
            scatters = sum(kind == "reduce_scatter" for kind, _, _ in info["calls"])
            if scatters != units(depth):
                raise CheckFailed(
                    f"{where}: {scatters} reduce-scatter(s) in the step, {units(depth)} expected (one "
                    "per FSDP unit, during the last micro-batch's backward): turn gradient sync back "
                    "on (set_requires_gradient_sync(True)) before the last micro-batch"
                )
            if info["grads_left"]:
                raise CheckFailed(
                    f"{where}: {info['grads_left']} gradients were left after the step: call "
                    "optimizer.zero_grad() after optimizer.step()"
                )


def verify_clipped_training(g, results, depth: int, seed: int) -> None:
    norms, params = reference_training(depth, seed, len(results))
    for rank, got in enumerate(results):
        for step, (info, exp) in enumerate(zip(got["steps"], norms)):
            norm = info["norm"]
            if not isinstance(norm, float):
                raise CheckFailed(
                    f"rank {rank}, step {step + 1}: train_step_fsdp2 returned {norm}; return the "
                    "gradient norm clip_grad_norm_ returns, as a float"
                )
            if abs(norm - exp) > 1e-4 * exp and abs(norm - MAX_NORM) <= 1e-4 * MAX_NORM:
                raise CheckFailed(
                    f"rank {rank}, step {step + 1}: the returned norm is {norm:.6g}, max_norm itself: "
                    "that is the norm after clipping. Return what clip_grad_norm_ returns: the global "
                    f"norm before clipping ({exp:.6g} here)"
                )
            if abs(norm - exp) > 1e-4 * exp and step > 0 and abs(got["steps"][0]["norm"] - norms[0]) <= 1e-4 * norms[0]:
                raise CheckFailed(
                    f"rank {rank}, step {step + 1}: the returned norm is {norm:.6g}, the global gradient "
                    f"norm is {exp:.6g}, while step 1's norm was right: step 1 updated the parameters "
                    "with other gradients than clipped ones. Call clip_grad_norm_ before "
                    "optimizer.step() (it scales the gradients the step then uses)"
                )
            equal = reference_training(depth, seed, len(results), by_rows=False)[0][step]
            if abs(norm - exp) > 1e-4 * exp and abs(norm - equal) <= 1e-4 * equal:
                raise CheckFailed(
                    f"rank {rank}, step {step + 1}: the returned norm is {norm:.6g}, the global gradient norm is "
                    f"{exp:.6g}: you weight every micro-batch's loss the same (/ len(micro_batches)), but they "
                    f"differ in size ({', '.join(map(str, MICRO_ROWS))} rows): the step is the mean over every row"
                )
            if abs(norm - exp) > 1e-4 * exp:
                local = norm < exp * 0.999
                raise CheckFailed(
                    f"rank {rank}, step {step + 1}: the returned norm is {norm:.6g}, the global "
                    f"gradient norm is {exp:.6g}"
                    + (
                        ": that is a local norm (this rank's shards only). Call "
                        "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) on the DTensor "
                        "gradients: it reduces the norm over every shard"
                        if local
                        else ": each micro-batch's loss must count by its share of the rows (the step is the "
                        "mean over every row), and return the norm before clipping"
                    )
                )
        for name, exp in params.items():
            g.assert_close(
                got["params"][name],
                exp,
                f"rank {rank}: {name} after {STEPS} steps",
                "each step must equal one clipped SGD step on the mean loss over every row of the whole batch, "
                "one gradient sync, clip_grad_norm_(model.parameters(), max_norm), optimizer.step()",
            )


def run_train(g, depth: int = DEPTH, seed: int = SEED):
    return g.run(_in_rank_train, depth, seed)


@EXERCISE.check("train_step_fsdp2", points=2)
def fsdp2_accumulation_syncs_once(g):
    """Each step: one reduce-scatter per unit, all after the last micro-batch's forward."""
    verify_accumulation(run_train(g), DEPTH)


@EXERCISE.check("train_step_fsdp2", points=2)
def fsdp2_step_clips_global_norm(g):
    """The returned norms equal one process's global norms; parameters equal clipped big-batch SGD."""
    results = run_train(g)
    verify_accumulation(results, DEPTH)
    verify_clipped_training(g, results, DEPTH, SEED)
