"""03_syncbn_sharded, FSDP2 in practice: build_fsdp2_model (a tied-embedding model, units chosen from a budget).

The ranks call the student's build on the grader's TiedTransformer (fsdp2_model.py), whose blocks have different
widths and whose output layer shares the embedding's weight; the parent compares with one process running the plain
model. Collectives are recorded at torch's dispatcher (collectives.py), the build's allocations by a dispatch mode of
our own (fsdp2_probe.py). Each rule of the task text and its check:

| build_fsdp2_model(make_model, mesh, budget_bytes)              | verified by                                 |
|----------------------------------------------------------------|---------------------------------------------|
| make_model() under torch.device("meta"): no full parameter     | fsdp2_build_sharded_from_meta (no           |
| ever allocated on a real device                                | allocation of a full weight's shape)        |
| every parameter sharded; the tied weight stays one Parameter   | fsdp2_build_sharded_from_meta (DTensors;    |
| owned by one unit                                              | head.weight is embed.weight)                |
| to_empty(device=mesh.device_type), then model.init_weights()   | fsdp2_build_sharded_from_meta (equal to     |
|                                                                | init_weights in one process)                |
| each unit's full bf16 parameters <= budget_bytes, with as few  | fsdp2_units_and_mixed_precision (each       |
| units (all-gathers per forward) as the budget allows           | forward all-gather's size, their number)    |
| MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)      | fsdp2_units_and_mixed_precision (gathers in |
|                                                                | bf16, reduce-scatters in fp32, gradients    |
|                                                                | within bf16 tolerance of fp32)              |
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.dispatch_mode import SWITCHED_OFF, modes_on
from grader.exercises.syncbn_sharded.checks_fsdp2 import BF16_TOL, full
from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.fsdp2_model import TiedTransformer
from grader.exercises.syncbn_sharded.fsdp2_probe import full_shape_allocations

# Widths, vocabulary and budget: every dim 0 divides by the world size (no padding: a gather's bytes are the
# unit's), and no shard has another weight's full shape (the allocation probe would take it for one).
MODEL = {"widths": (30, 18, 42, 30, 18, 42), "vocab": 50, "seed": 1, "budget": 5200}
ROWS = 6
TIED = "the embedding and the head share one weight"


def plain(model_spec: dict) -> nn.Module:
    model = TiedTransformer(model_spec["widths"], model_spec["vocab"], model_spec["seed"])
    model.init_weights()
    return model


def tokens(rank: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(77 + rank)
    return torch.randint(0, vocab, (ROWS,), generator=g), torch.randint(0, vocab, (ROWS,), generator=g)


def unit_bytes(module_or_list, itemsize: int) -> int:
    modules = module_or_list if isinstance(module_or_list, list) else [module_or_list]
    return sum(p.numel() for m in modules for p in m.parameters()) * itemsize


def fewest_units(model_spec: dict, itemsize: int = 2) -> list[list[int]]:
    """Runs of consecutive blocks, each within the budget, filled in order: as few as any partition has."""
    model = TiedTransformer(model_spec["widths"], model_spec["vocab"])
    runs, size = [], 0
    for i, block in enumerate(model.blocks):
        b = unit_bytes(block, itemsize)
        if runs and size + b <= model_spec["budget"]:
            runs[-1].append(i)
            size += b
        else:
            runs.append([i])
            size = b
    return runs


@lru_cache(maxsize=None)
def _reference_gradients(items: tuple, world: int) -> dict:
    model_spec = dict(items)
    model = plain(model_spec)
    xs, ys = zip(*(tokens(r, model_spec["vocab"]) for r in range(world)))
    nn.functional.cross_entropy(model(torch.cat(xs)), torch.cat(ys)).backward()
    return {k: p.grad.clone() for k, p in model.named_parameters()}


def _in_rank_build(ctx, student, model_spec: dict):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    spec = (model_spec["widths"], model_spec["vocab"], model_spec["seed"])
    full_shapes = [tuple(p.shape) for p in TiedTransformer(*spec).parameters() if p.dim() >= 2]
    made = []  # per make_model() call, outside the probe: (where its parameters lie, the grader's modes on)

    def make_model():
        on = modes_on()
        model = TiedTransformer(*spec)
        made.append((sorted({p.device.type for p in model.parameters()}), on and modes_on()))
        return model

    try:
        with full_shape_allocations(full_shapes) as allocated, record_collectives():
            model = student.task("build_fsdp2_model")(make_model, mesh, model_spec["budget"])
    except ValueError as error:
        if "shared with a parameter already managed by another FSDP group" in str(error):
            return {"tied_split": True}
        raise
    if not isinstance(model, nn.Module):
        return {"not_module": type(model).__name__}
    params = dict(model.named_parameters())
    head, embed = (
        getattr(getattr(model, "head", None), "weight", None),
        getattr(getattr(model, "embed", None), "weight", None),
    )
    out = {
        "allocated": list(allocated),
        "sharded": {k: isinstance(p, DTensor) for k, p in params.items()},
        "devices": sorted({p.device.type for p in params.values()}),
        "made": made,
        "tied": head is not None and head is embed,
        "own_units": [n for n in ("embed", "head") if isinstance(getattr(model, n, None), FSDPModule)],
        "init_calls": getattr(model, "init_weights_calls", 0),
    }
    if out["devices"] != [ctx.device.type] or not all(out["sharded"].values()) or not out["tied"]:
        return out  # meta or elsewhere, not sharded, or untied: the parent names it; a step would only crash
    out["values"] = {k: full(p) for k, p in params.items()}  # our gathers, after the student's code returned
    x, y = (t.to(ctx.device) for t in tokens(ctx.rank, model_spec["vocab"]))
    with record_collectives() as calls:
        logits = model(x)
        forward = [(c.kind, c.dtype, c.nbytes) for c in calls]
        nn.functional.cross_entropy(logits.float(), y).backward()
    out |= {
        "forward_calls": forward,
        "calls": [(c.kind, c.dtype, c.nbytes) for c in calls],
        "grads": {k: None if p.grad is None else full(p.grad) for k, p in params.items()},
    }
    return out


def verify_build(g, results, model_spec: dict) -> None:
    expected = dict(plain(model_spec).named_parameters())
    for rank, got in enumerate(results):
        _verify_sharded(rank, got)
        _verify_built_on_meta(rank, got)
        _verify_tie(rank, got)
        _verify_values(g, rank, got, expected)


def _verify_sharded(rank: int, got: dict) -> None:
    """One unit owns the tied weight, and every parameter is a DTensor."""
    if got.get("tied_split"):
        raise CheckFailed(
            f"rank {rank}: fully_shard refused the model: {TIED}, and your units put it in two "
            "(the embedding's and the head's). One unit must own a tied weight: leave the "
            "embedding and the head out of the block units, so the root's call takes them both"
        )
    if "not_module" in got:
        raise CheckFailed(f"rank {rank}: build_fsdp2_model returned a {got['not_module']}, not the model")
    plain_ones = [k for k, sharded in got["sharded"].items() if not sharded]
    if plain_ones and not any(k.startswith("blocks.") for k in plain_ones):
        raise CheckFailed(
            f"rank {rank}: {', '.join(plain_ones)} are plain tensors: the root is not wrapped. Call "
            "fully_shard(model, mesh=mesh, ...) after the blocks: it shards the parameters outside "
            "them (the tied embedding, the final norm) and runs the whole step"
        )
    if plain_ones:
        raise CheckFailed(
            f"rank {rank}: {len(plain_ones)} parameters (e.g. {plain_ones[0]}) are plain tensors, "
            "not DTensors: fully_shard the block units, then the root (it takes the rest)"
        )


def _verify_built_on_meta(rank: int, got: dict) -> None:
    """make_model() ran under the meta device, and no full weight was allocated."""
    if not got["made"]:
        raise CheckFailed(
            f"rank {rank}: make_model() was never called: build the model with make_model(), "
            "under `with torch.device('meta'):`"
        )
    if not all(on for _, on in got["made"]):
        raise CheckFailed(f"rank {rank}: make_model() ran while " + SWITCHED_OFF)
    real = sorted({d for devices, _ in got["made"] for d in devices if d != "meta"})
    if real or got["allocated"]:
        where = (
            f"built the parameters on {', '.join(real)}"
            if real
            else (
                f"allocated {len(got['allocated'])} tensor(s) of a full weight's shape (e.g. "
                f"{tuple(got['allocated'][0])})"
            )
        )
        raise CheckFailed(
            f"rank {rank}: make_model() {where}: the full model was materialized before "
            "sharding. Call make_model() under `with torch.device('meta'):`, shard, then to_empty"
        )


def _verify_tie(rank: int, got: dict) -> None:
    if not got["tied"]:
        units = " and ".join(f"model.{n}" for n in got["own_units"])
        raise CheckFailed(
            f"rank {rank}: model.head.weight is no longer model.embed.weight: {TIED} (one "
            "Parameter, whose gradient sums both uses), and two trains two weights. "
            + (
                f"{units} became a unit of its own. One unit must own a tied weight: leave the "
                "embedding and the head to the root's call"
                if units
                else "Keep the tie: shard the model as it is, with one unit owning the shared weight"
            )
        )


def _verify_values(g, rank: int, got: dict, expected: dict) -> None:
    """On real memory, initialized by init_weights() last: the values of one process's model."""
    if "values" not in got:
        raise CheckFailed(
            f"rank {rank}: the parameters are on {got['devices']}: move the sharded model to "
            "real memory with model.to_empty(device=mesh.device_type), then init_weights()"
        )
    likely = (
        "model.init_weights() ran, but not last: call it once the model is sharded and on its device "
        "(after to_empty), and change nothing after it"
        if got["init_calls"]
        else "model.init_weights() was never called: after to_empty the memory holds whatever was there, and a "
        "seeded nn.init on the shards would not give one process's numbers (on the CPU every rank's "
        "generator starts its shard with the same first numbers). Once the model is sharded and on its "
        "device, call model.init_weights(): each element is a formula of its position"
    )
    for name, exp in expected.items():
        g.assert_close(got["values"][name], exp.detach(), f"rank {rank}: {name} after the build", likely)


def verify_units_and_precision(g, results, model_spec: dict) -> None:
    budget, runs = model_spec["budget"], fewest_units(model_spec)
    want, fp32_count = len(runs) + 1, len(fewest_units(model_spec, itemsize=4)) + 1
    one_per_block = len(model_spec["widths"]) + 1
    expected = _reference_gradients(tuple(sorted(model_spec.items())), len(results))
    for rank, got in enumerate(results):
        gathers = [
            (dtype, nbytes * len(results)) for kind, dtype, nbytes in got["forward_calls"] if kind == "all_gather"
        ]
        if any(dtype != "bfloat16" for dtype, _ in gathers):
            raise CheckFailed(
                f"rank {rank}: the parameters were all-gathered in {sorted({d for d, _ in gathers})}: "
                "pass mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype="
                "torch.float32) to every fully_shard call"
            )
        over = [size for _, size in gathers if size > budget]
        if over:
            raise CheckFailed(
                f"rank {rank}: forward all-gathered a unit of {max(over)} bytes, over the budget of "
                f"{budget}: a unit's parameters are whole at once, so each unit's bf16 bytes (2 per "
                "element) must fit. Split it into runs of consecutive blocks that fit"
            )
        if len(gathers) > want:
            why = (
                " (one per block, and the root): blocks whose bytes fit the budget together can share a unit, "
                "fully_shard([block_a, block_b, ...]), and every unit fewer is one collective fewer"
                if len(gathers) == one_per_block
                else ": you seem to count 4 bytes per element; the units are gathered in bf16 (2 bytes)"
                if len(gathers) == fp32_count
                else ": fill each unit with consecutive blocks until the next would not fit, then start the next unit"
            )
            raise CheckFailed(
                f"rank {rank}: forward all-gathered {len(gathers)} units; {want} fit the budget of "
                f"{budget} bytes ({len(runs)} runs of blocks, and the root){why}"
            )
        if len(gathers) < want:
            raise CheckFailed(
                f"rank {rank}: forward all-gathered {len(gathers)} time(s), {want} expected: "
                "fully_shard the runs of blocks, then the root"
            )
        scatters = [dtype for kind, dtype, _ in got["calls"] if kind == "reduce_scatter"]
        if not scatters:
            raise CheckFailed(f"rank {rank}: backward reduce-scattered no gradient: gradient sync is off")
        if any(dtype != "float32" for dtype in scatters):
            raise CheckFailed(
                f"rank {rank}: the gradients were reduce-scattered in {sorted(set(scatters))}: "
                "they are reduced in bf16 and lose precision in the sum; set reduce_dtype="
                "torch.float32 in the MixedPrecisionPolicy"
            )
        for name, exp in expected.items():
            grad = got["grads"].get(name)
            if grad is None:
                raise CheckFailed(f"rank {rank}: {name} got no gradient")
            g.assert_close(
                grad,
                exp,
                f"rank {rank}: {name}'s gradient (bf16 compute)",
                "the gradients must match fp32 training within bf16 tolerance",
                tol=BF16_TOL,
            )


def run_build(g, model_spec: dict = MODEL):
    return g.run(_in_rank_build, model_spec)


@EXERCISE.check("build_fsdp2_model", points=2)
def fsdp2_build_sharded_from_meta(g):
    """Every parameter is a DTensor shard equal to init_weights() in one process, the tie kept; no full weight
    was allocated."""
    verify_build(g, run_build(g), MODEL)


@EXERCISE.check("build_fsdp2_model", points=2)
def fsdp2_units_and_mixed_precision(g):
    """As few units as the budget allows, each within it, gathered in bf16; reduce-scatters in fp32; gradients
    near fp32's."""
    results = run_build(g)
    verify_build(g, results, MODEL)
    verify_units_and_precision(g, results, MODEL)
