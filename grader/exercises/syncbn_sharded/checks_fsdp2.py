"""03_syncbn_sharded, FSDP2 in practice: build_fsdp2_model and train_step_fsdp2 (export_full_state: checks_fsdp2_state.py).

The ranks run torch's FSDP2 (`fully_shard`) on the grader's TinyTransformer (fsdp2_model.py); the parent compares
with one process running the plain model. Collectives are recorded at torch's dispatcher (collectives.py), the
build's allocations by a dispatch mode of our own (fsdp2_probe.py). Each rule of the task texts and its check:

| build_fsdp2_model(make_model, mesh)                            | verified by                                 |
|----------------------------------------------------------------|---------------------------------------------|
| make_model() under torch.device("meta"): no full parameter     | fsdp2_build_sharded_from_meta (no           |
| ever allocated on a real device                                | allocation of a full weight's shape)        |
| fully_shard each block, then the root, on `mesh`               | fsdp2_build_sharded_from_meta (every        |
|                                                                | parameter a DTensor), fsdp2_units_and_...   |
|                                                                | (one all-gather per unit in forward)        |
| to_empty(device=mesh.device_type), then model.init_weights()   | fsdp2_build_sharded_from_meta (equal to     |
|                                                                | init_weights in one process)                |
| MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)      | fsdp2_units_and_mixed_precision (gathers in |
|                                                                | bf16, reduce-scatters in fp32, gradients    |
|                                                                | within bf16 tolerance of fp32)              |

| train_step_fsdp2(model, optimizer, micro_batches, max_norm)    | verified by                                 |
|----------------------------------------------------------------|---------------------------------------------|
| loss of each micro-batch / len(micro_batches), backward        | fsdp2_step_clips_global_norm (parameters    |
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
from grader.exercises.dispatch_mode import SWITCHED_OFF, modes_on
from grader.exercises.syncbn_sharded.exercise import check
from grader.exercises.syncbn_sharded.fsdp2_model import DIM, OUT, TinyTransformer
from grader.exercises.syncbn_sharded.fsdp2_probe import full_shape_allocations

BF16_TOL = (5e-2, 2e-2)  # (rtol, atol): bf16 compute against the fp32 reference
SEED, DEPTH = 1, 3
MICRO, ROWS, STEPS, LR = 3, 4, 2, 0.1
# The one collective the dispatcher cannot see: clip_grad_norm_'s reduction of the norm, which DTensor issues
# inside its own dispatch (measured: one per step on torch 2.13, gloo); a second allows a full_tensor() of the norm.
UNSEEN_PER_STEP = 2
MAX_NORM = 0.05  # below every step's gradient norm here (reference_training asserts it): clipping always acts


# --- inputs and single-process references (parent and ranks) --------------------------------------------------

def batch(step: int, rank: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + 10 * rank + micro)
    return torch.randn(ROWS, DIM, generator=g), torch.randn(ROWS, OUT, generator=g)


def plain_model(depth: int, seed: int) -> nn.Module:
    model = TinyTransformer(depth, seed)
    model.init_weights()
    return model


@lru_cache(maxsize=None)
def reference_gradients(depth: int, seed: int, world: int) -> dict:
    """fp32 gradients of one forward and backward over every rank's first micro-batch, in one process."""
    model = plain_model(depth, seed)
    xs, ys = zip(*(batch(0, r, 0) for r in range(world)))
    nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
    return {k: p.grad.clone() for k, p in model.named_parameters()}


@lru_cache(maxsize=None)
def reference_training(depth: int, seed: int, world: int) -> tuple[list, dict]:
    """One process, STEPS big-batch steps (every rank's micro-batches), clipped: (norms, parameters)."""
    model = plain_model(depth, seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    norms = []
    for step in range(STEPS):
        xs, ys = zip(*(batch(step, r, m) for r in range(world) for m in range(MICRO)))
        nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
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


def _in_rank_build(ctx, student, depth: int, seed: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    full_shapes = [tuple(p.shape) for p in TinyTransformer(depth, seed).parameters() if p.dim() >= 2]
    made = []  # per make_model() call, outside the probe: (where its parameters lie, the grader's modes on)

    def make_model():
        on = modes_on()
        model = TinyTransformer(depth, seed)
        made.append((sorted({p.device.type for p in model.parameters()}), on and modes_on()))
        return model

    with full_shape_allocations(full_shapes) as allocated, record_collectives():
        model = student.task("build_fsdp2_model")(make_model, mesh)
    if not isinstance(model, nn.Module):
        return {"not_module": type(model).__name__}
    params = dict(model.named_parameters())
    out = {"allocated": list(allocated), "sharded": {k: isinstance(p, DTensor) for k, p in params.items()},
           "devices": sorted({p.device.type for p in params.values()}), "made": made,
           "init_calls": getattr(model, "init_weights_calls", 0)}
    if out["devices"] != [ctx.device.type] or not all(out["sharded"].values()):
        return out  # meta or elsewhere, or not sharded: the parent names it; a step would only crash
    out["values"] = {k: full(p) for k, p in params.items()}  # our gathers, after the student's code returned
    calls, forwards = [], [0]
    model.register_forward_pre_hook(lambda m, a: forwards.__setitem__(0, forwards[0] + 1))
    x, y = (t.to(ctx.device) for t in batch(0, ctx.rank, 0))
    with record_collectives(on_call=lambda c: calls.append((c.kind, c.dtype, forwards[0]))) as _:
        out_y = model(x)
        in_forward = list(calls)
        nn.functional.mse_loss(out_y.float(), y).backward()
    out |= {"forward_calls": in_forward, "calls": calls, "output_dtype": str(out_y.dtype).removeprefix("torch."),
            "grads": {k: None if p.grad is None else full(p.grad) for k, p in params.items()}}
    return out


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
        except CollectivesUnseen:  # clip_grad_norm_'s reduction runs inside DTensor's dispatch: counted below
            pass
        except Exception as error:
            if forwards[0] < MICRO or any(kind == "reduce_scatter" for kind, _, _ in calls):
                raise  # not after every micro-batch ran unsynchronized: the student's own error says more
            raise CheckFailed(  # the likely cause first: the student's own traceback would only show its symptom
                f"rank {ctx.rank}, step {step + 1}: no gradient was reduce-scattered in this step, so gradient sync "
                "stayed off: the gradients are this rank's unsynchronized local tensors (not DTensor shards), and "
                "what comes after fails on them. Call model.set_requires_gradient_sync(True) before the last "
                f"micro-batch. Your code then raised {type(error).__name__}: {error}") from error
        unseen = (issued() - before - len(calls)) if before is not None else 0
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # a DTensor norm: a collective
        steps.append({"norm": float(norm) if isinstance(norm, (int, float, torch.Tensor)) else repr(type(norm)),
                      "calls": calls, "forwards": forwards[0], "unseen": unseen,
                      "grads_left": sum(p.grad is not None for p in model.parameters())})
    return {"steps": steps, "params": {k: full(p) for k, p in model.named_parameters()}}


# --- parent side ---------------------------------------------------------------------------------------------

def units(depth: int) -> int:
    return depth + 1  # each block, and the root's own parameters (the head)


def verify_build(g, results, depth: int, seed: int) -> None:
    expected = dict(plain_model(depth, seed).named_parameters())
    for rank, got in enumerate(results):
        if "not_module" in got:
            raise CheckFailed(f"rank {rank}: build_fsdp2_model returned a {got['not_module']}, not the nn.Module")
        plain = sorted(k for k, s in got["sharded"].items() if not s)
        if plain and all(not k.startswith("blocks.") for k in plain):
            raise CheckFailed(f"rank {rank}: {', '.join(plain)} are plain tensors: the root is not wrapped. Call "
                              "fully_shard(model, mesh=mesh) after the blocks: it shards the parameters outside "
                              "them (the head) and runs the whole step")
        if plain:
            raise CheckFailed(f"rank {rank}: {len(plain)} parameters (e.g. {plain[0]}) are plain tensors, not "
                              "DTensors: fully_shard each block, then the root")
        if not got["made"]:
            raise CheckFailed(f"rank {rank}: make_model() was never called: build the model with make_model(), "
                              "under `with torch.device('meta'):`")
        if not all(on for _, on in got["made"]):
            raise CheckFailed(f"rank {rank}: make_model() ran while " + SWITCHED_OFF)
        real = sorted({d for devices, _ in got["made"] for d in devices if d != "meta"})
        if real:
            raise CheckFailed(f"rank {rank}: make_model() built the parameters on {', '.join(real)}, not the meta "
                              "device: the full model was materialized before sharding. Call make_model() under "
                              "`with torch.device('meta'):`, shard, then to_empty")
        if got["allocated"]:
            shape, count = got["allocated"][0], len(got["allocated"])
            raise CheckFailed(f"rank {rank}: while building, {count} tensor(s) of a full weight's shape (e.g. "
                              f"{tuple(shape)}) were allocated: the full model was materialized before sharding. "
                              "Call make_model() under `with torch.device('meta'):`, shard, then to_empty")
        if "values" not in got:
            raise CheckFailed(f"rank {rank}: the parameters are on {got['devices']}: move the sharded model to "
                              "real memory with model.to_empty(device=mesh.device_type), then init_weights()")
        likely = ("model.init_weights() ran, but not last: call it once the model is sharded and on its device "
                  "(after to_empty), and change nothing after it" if got.get("init_calls") else
                  "model.init_weights() was never called: after to_empty the memory holds whatever was there, and a "
                  "seeded nn.init on the shards would not give one process's numbers (on the CPU every rank's "
                  "generator starts its shard with the same first numbers). Once the model is sharded and on its "
                  "device, call model.init_weights(): each element is a formula of its position")
        for name, exp in expected.items():
            g.assert_close(got["values"][name], exp.detach(), f"rank {rank}: {name} after the build", likely)


def verify_units_and_precision(g, results, depth: int, seed: int) -> None:
    expected = reference_gradients(depth, seed, len(results))
    for rank, got in enumerate(results):
        gathers = [(kind, dtype) for kind, dtype, _ in got["forward_calls"] if kind == "all_gather"]
        if len(gathers) < units(depth):
            raise CheckFailed(f"rank {rank}: forward all-gathered {len(gathers)} time(s) for a model of {depth} "
                              f"blocks and a head ({units(depth)} expected, one per FSDP unit): fully_shard each "
                              "block, then the root, so each block's parameters are gathered just before it runs "
                              "and freed after (one unit for the whole model holds every full parameter at once)")
        if any(dtype != "bfloat16" for _, dtype in gathers):
            raise CheckFailed(f"rank {rank}: the parameters were all-gathered in {sorted({d for _, d in gathers})}: "
                              "pass mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype="
                              "torch.float32) to every fully_shard call")
        scatters = [dtype for kind, dtype, _ in got["calls"] if kind == "reduce_scatter"]
        if not scatters:
            raise CheckFailed(f"rank {rank}: backward reduce-scattered no gradient: gradient sync is off")
        if any(dtype != "float32" for dtype in scatters):
            raise CheckFailed(f"rank {rank}: the gradients were reduce-scattered in {sorted(set(scatters))}: "
                              "they are reduced in bf16 and lose precision in the sum; set reduce_dtype="
                              "torch.float32 in the MixedPrecisionPolicy")
        for name, exp in expected.items():
            grad = got["grads"].get(name)
            if grad is None:
                raise CheckFailed(f"rank {rank}: {name} got no gradient")
            g.assert_close(grad, exp, f"rank {rank}: {name}'s gradient (bf16 compute)",
                           "the gradients must match fp32 training within bf16 tolerance", tol=BF16_TOL)


def verify_accumulation(results, depth: int) -> None:
    for rank, got in enumerate(results):
        for step, info in enumerate(got["steps"]):
            where = f"rank {rank}, step {step + 1}"
            if info["forwards"] != MICRO:
                raise CheckFailed(f"{where}: the model ran {info['forwards']} forward(s) for {MICRO} micro-batches: "
                                  "run each micro-batch once")
            if info["unseen"] > UNSEEN_PER_STEP:
                raise CheckFailed(f"{where}: {info['unseen']} collectives moved data where the grader could not see "
                                  f"them (at most {UNSEEN_PER_STEP}: clip_grad_norm_'s reduction of the norm): call "
                                  "collectives through torch.distributed, from the thread that runs your code")
            synced = sorted({f for kind, _, f in info["calls"] if kind == "reduce_scatter"})
            if synced and synced[0] < MICRO:
                every = synced == list(range(1, MICRO + 1))
                raise CheckFailed(f"{where}: gradients were reduce-scattered in the backward of micro-batch(es) "
                                  f"{', '.join(map(str, synced))} of {MICRO}: " + (
                                      "accumulation syncs every micro-batch" if every else
                                      "sync is on for the wrong micro-batches, and the last one must sync") + ". Call "
                                  "model.set_requires_gradient_sync(False) before the micro-batches that are not "
                                  "the last, and (True) before the last")
            scatters = sum(kind == "reduce_scatter" for kind, _, _ in info["calls"])
            if scatters != units(depth):
                raise CheckFailed(f"{where}: {scatters} reduce-scatter(s) in the step, {units(depth)} expected (one "
                                  "per FSDP unit, during the last micro-batch's backward): turn gradient sync back "
                                  "on (set_requires_gradient_sync(True)) before the last micro-batch")
            if info["grads_left"]:
                raise CheckFailed(f"{where}: {info['grads_left']} gradients were left after the step: call "
                                  "optimizer.zero_grad() after optimizer.step()")


def verify_clipped_training(g, results, depth: int, seed: int) -> None:
    norms, params = reference_training(depth, seed, len(results))
    for rank, got in enumerate(results):
        for step, (info, exp) in enumerate(zip(got["steps"], norms)):
            norm = info["norm"]
            if not isinstance(norm, float):
                raise CheckFailed(f"rank {rank}, step {step + 1}: train_step_fsdp2 returned {norm}; return the "
                                  "gradient norm clip_grad_norm_ returns, as a float")
            if abs(norm - exp) > 1e-4 * exp and abs(norm - MAX_NORM) <= 1e-4 * MAX_NORM:
                raise CheckFailed(f"rank {rank}, step {step + 1}: the returned norm is {norm:.6g}, max_norm itself: "
                                  "that is the norm after clipping. Return what clip_grad_norm_ returns: the global "
                                  f"norm before clipping ({exp:.6g} here)")
            if abs(norm - exp) > 1e-4 * exp and step > 0 and abs(got["steps"][0]["norm"] - norms[0]) <= 1e-4 * norms[0]:
                raise CheckFailed(f"rank {rank}, step {step + 1}: the returned norm is {norm:.6g}, the global gradient "
                                  f"norm is {exp:.6g}, while step 1's norm was right: step 1 updated the parameters "
                                  "with other gradients than clipped ones. Call clip_grad_norm_ before "
                                  "optimizer.step() (it scales the gradients the step then uses)")
            if abs(norm - exp) > 1e-4 * exp:
                local = norm < exp * 0.999
                raise CheckFailed(f"rank {rank}, step {step + 1}: the returned norm is {norm:.6g}, the global "
                                  f"gradient norm is {exp:.6g}" + (
                                      ": that is a local norm (this rank's shards only). Call "
                                      "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) on the DTensor "
                                      "gradients: it reduces the norm over every shard" if local else
                                      ": scale each micro-batch's loss by 1/len(micro_batches), and return the norm "
                                      "before clipping"))
        for name, exp in params.items():
            g.assert_close(got["params"][name], exp, f"rank {rank}: {name} after {STEPS} steps",
                           "each step must equal one clipped SGD step on the whole batch: loss / len(micro_batches),"
                           " one gradient sync, clip_grad_norm_(model.parameters(), max_norm), optimizer.step()")


def run_build(g, depth: int = DEPTH, seed: int = SEED):
    return g.run(_in_rank_build, depth, seed)


def run_train(g, depth: int = DEPTH, seed: int = SEED):
    return g.run(_in_rank_train, depth, seed)


@check("build_fsdp2_model", points=2)
def fsdp2_build_sharded_from_meta(g):
    """Every parameter is a DTensor shard equal to init_weights() in one process; no full weight was allocated."""
    verify_build(g, run_build(g), DEPTH, SEED)


@check("build_fsdp2_model", points=2)
def fsdp2_units_and_mixed_precision(g):
    """One all-gather per block and root in forward, in bf16; reduce-scatters in fp32; gradients near fp32's."""
    results = run_build(g)
    verify_build(g, results, DEPTH, SEED)
    verify_units_and_precision(g, results, DEPTH, SEED)


@check("train_step_fsdp2", points=2)
def fsdp2_accumulation_syncs_once(g):
    """Each step: one reduce-scatter per unit, all after the last micro-batch's forward."""
    verify_accumulation(run_train(g), DEPTH)


@check("train_step_fsdp2", points=2)
def fsdp2_step_clips_global_norm(g):
    """The returned norms equal one process's global norms; parameters equal clipped big-batch SGD."""
    results = run_train(g)
    verify_accumulation(results, DEPTH)
    verify_clipped_training(g, results, DEPTH, SEED)
