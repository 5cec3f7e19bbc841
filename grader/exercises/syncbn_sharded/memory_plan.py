"""plan_memory's measurement: the bytes a rank really holds under DDP, ZeRO-1 and FSDP2, and what they should be.

In the ranks (the grader's code, never the student's): the same model is built, wrapped and trained for one optimizer
step three times, each inside a probe of live storages (live_bytes.py) entered before the model exists. Once the step is
done and its outputs dropped, what is still alive is the state the strategy keeps: parameters, gradients, Adam's two
moments (and its step counters), DDP's gradient buckets. DTensors are opened to their local shards: a wrapper's own
"storage" is only metadata of the full size. The activations are measured alone: what one forward of this rank's
batch leaves alive for backward (the batch itself, made before, not counted).

Two precisions (`spec["precision"]`): "fp32" (fp32 parameters, torch.optim.Adam) and "bf16" (bf16 parameters,
gradients and buckets; MasterWeightAdam keeps an fp32 master copy and two fp32 moments per parameter,
master_weights.py). DDP runs with its default gradient_as_bucket_view=False: the buckets are a copy of the gradients
beside them. Measured here (torch 2.13 CPU, gloo, 2 and 3 ranks, Ψ parameters), with P bytes per parameter in the
parameters' dtype and S bytes of optimizer state per parameter (fp32: P = 4, S = 8; bf16: P = 2, S = 12): DDP
3PΨ + SΨ (fp32 20Ψ, bf16 18Ψ); ZeRO-1 (ZeroRedundancyOptimizer over that DDP) 3PΨ + SΨ/N (fp32 12Ψ + 8Ψ/N, bf16
6Ψ + 12Ψ/N); FSDP2 (2P + S)Ψ/N (16Ψ/N in both); each plus 4 bytes per Adam step counter. With
gradient_as_bucket_view=True DDP would keep 2PΨ + SΨ (the gradients are views of the buckets). They run in a gloo
group on the CPU whatever the launch's plan (`measuring_group`): the bytes do not depend on the device, and this
way the code that judges a class on GPUs is the code the CPU-only test machines run.

In the parent: the same numbers from the formulas (`expected_state`), so that a measurement the answers disturbed (a
patched optimizer, a wrapper changed at import) is told apart from a wrong estimate.
"""

from __future__ import annotations

import gc

import torch
from torch import nn

from grader.exercises.syncbn_sharded.fsdp2_probe import _plain
from grader.exercises.syncbn_sharded.live_bytes import LiveBytes, StorageWeakRef

STRATEGIES = ("ddp", "zero1", "fsdp2")  # cheapest in communication first
NAMES = {"ddp": "DDP", "zero1": "ZeRO-1", "fsdp2": "FSDP2"}
FP32 = 4
PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def dtype_of(spec: dict) -> torch.dtype:
    """The parameters' dtype: fp32 unless the spec says "bf16" (mixed precision with fp32 master copies)."""
    return PRECISIONS[spec.get("precision", "fp32")]


def mixed_precision(spec: dict) -> dict:
    """The same model and batch with bf16 parameters, trained with fp32 master copies and moments."""
    return {**spec, "precision": "bf16"}


def bytes_per_parameter(spec: dict) -> tuple[int, int]:
    """(P, S): bytes of a parameter (and of its gradient, and of its place in DDP's buckets), bytes of optimizer
    state: Adam's two fp32 moments, and an fp32 master copy when the parameters are lower precision."""
    p = torch.empty((), dtype=dtype_of(spec)).element_size()
    return p, 2 * FP32 + (FP32 if p < FP32 else 0)


def planning_net(spec: dict) -> nn.Module:
    """`layers` blocks of Linear(width, width) and Tanh. Equal layers: ZeRO-1's whole-parameter split and FSDP2's
    row split are then exact for the world sizes drawn (width and layers divisible by them)."""
    layers = []
    for _ in range(spec["layers"]):
        layers += [nn.Linear(spec["width"], spec["width"], dtype=dtype_of(spec)), nn.Tanh()]
    return nn.Sequential(*layers)


def parameter_count(spec: dict) -> int:
    return spec["layers"] * (spec["width"] * spec["width"] + spec["width"])


def expected_state(spec: dict, world: int) -> dict[str, int]:
    """Per-rank bytes of parameters, gradients, DDP's default buckets and optimizer state after a step, Adam's step
    counters included."""
    psi, tensors = parameter_count(spec), 2 * spec["layers"]
    p, s = bytes_per_parameter(spec)
    return {
        "ddp": 3 * p * psi + s * psi + FP32 * tensors,
        "zero1": 3 * p * psi + s * psi // world + FP32 * tensors // world,
        "fsdp2": (2 * p + s) * psi // world + FP32 * tensors,
    }


def expected_activations(spec: dict) -> int:
    """Each Tanh keeps its output for backward; each Linear keeps its input (the previous Tanh's output)."""
    return spec["layers"] * spec["rows"] * spec["width"] * bytes_per_parameter(spec)[0]


def batch(spec: dict, rank: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(spec["seed"] + rank)
    return torch.randn(spec["rows"], spec["width"], generator=g).to(dtype_of(spec))


def optimizer_class(spec: dict) -> type:
    """Adam on fp32 parameters; on bf16 ones, Adam on fp32 master copies."""
    from grader.exercises.syncbn_sharded.master_weights import MasterWeightAdam

    return torch.optim.Adam if dtype_of(spec) == torch.float32 else MasterWeightAdam


class StateBytes(LiveBytes):
    """LiveBytes that opens DTensors to their local tensors, and counts storages of every size."""

    def __init__(self, persistent=lambda: ()):
        super().__init__(above=0, persistent=persistent)

    def dispatch(self, func, types, args, kwargs):
        out = func(*args, **kwargs)
        for t in _plain(out):
            if not t.is_sparse:
                weak = StorageWeakRef(t.untyped_storage())
                known = self.refs.get(weak.cdata)
                if known is None or known.expired():
                    self.refs[weak.cdata] = weak
        return out


def measuring_group():
    """A gloo group of every rank, on the CPU, made by every rank before its measurements.

    The bytes a strategy keeps do not depend on the device, and gloo runs on the CPU of every machine: a launch
    planned on GPUs (nccl) measures here the same bytes, with the same code, as the CPU-only machines that test it.
    """
    import torch.distributed as dist

    return dist.new_group(backend="gloo")


def _wrapped(kind: str, model: nn.Module, group, optimizer=torch.optim.Adam):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    if kind == "fsdp2":
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard

        mesh = DeviceMesh.from_group(group, "cpu")
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, optimizer(model.parameters())
    model = DDP(model, process_group=group)  # the default gradient_as_bucket_view=False: buckets beside the gradients
    if kind == "zero1":
        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer, process_group=group)
    return model, optimizer(model.parameters())


def measure_state(ctx, spec: dict, kind: str, group) -> int:
    """The bytes still alive after one optimizer step under `kind`, of everything made since the model was built."""
    x = batch(spec, ctx.rank)  # on the CPU: bytes are measured in a gloo group of their own, whatever the plan
    probe = StateBytes()
    gc.freeze()  # what existed before cannot be garbage made here: the collection below walks only the new objects
    try:
        with probe:
            torch.manual_seed(spec["seed"])
            # on the CPU: in the measuring group, as the batch
            model, optimizer = _wrapped(kind, planning_net(spec), group, optimizer_class(spec))
            model(x).pow(2).mean().backward()
            optimizer.step()
        gc.collect()  # what only a reference cycle holds is garbage, not state: the count must not hang on gc's timing
        live = probe.live()
    finally:
        gc.unfreeze()
    del model, optimizer
    return live


def measure_activations(ctx, spec: dict) -> int:
    """What one forward of this rank's batch leaves alive for backward (the parameters, made before, not counted)."""
    torch.manual_seed(spec["seed"])
    model = planning_net(spec)  # on the CPU: as measure_state's, the same bytes on every machine
    x = batch(spec, ctx.rank)  # on the CPU: as the model
    probe = StateBytes(persistent=lambda: list(model.parameters()))  # the weights' views that forward makes
    with probe:
        out = model(x)
    live = probe.live()
    del out
    return live
