"""03_syncbn_sharded: MiniFSDP (fully sharded data parallel by hand).

The ranks train the student's MiniFSDP on their own micro-batches; the parent compares with one process
training the plain model with AdamW on the whole batch (every rank's micro-batch). Measured on torch 2.13
CPU: gloo has all_gather_single and reduce_scatter_single (all_gather_into_tensor and reduce_scatter_tensor
are their deprecated wrappers), in float32 and bfloat16, so the rule is strict: parameters travel by
all-gathers, gradients by reduce-scatters, never by an all-reduce. The collectives are recorded at torch's
dispatcher (grader/exercises/collectives.py), so every spelling of a call is seen.

Each rule of the task text, and the check that verifies it (every check also runs verify_memory and
verify_equal_shards first, so correct numbers from unsharded training earn nothing):

| rule of the text                                                        | verified by                          |
|-------------------------------------------------------------------------|--------------------------------------|
| an nn.Module; fsdp(x) runs module on this rank's micro-batch            | fsdp_matches_unsharded_training      |
| each rank keeps only its shard of every parameter between steps         | verify_memory (parameters() held)    |
| flattened, padded with zeros to a multiple of the world size           | verify_equal_shards (same sizes on   |
|                                                                         | every rank), training on odd sizes   |
| chunk number `rank`                                                     | fsdp_matches_unsharded_training      |
| before each leaf's forward, all-gather its full parameters              | fsdp_traffic_...: all-gathers carry  |
|                                                                         | every parameter element each step    |
| after a leaf's forward its full parameters are released (not saved by  | fsdp_frees_full_parameters: peak     |
| autograd); backward all-gathers them again before that leaf's gradients | full-parameter bytes in forward and  |
|                                                                         | backward (fsdp_memory.py), backward  |
|                                                                         | all-gathers; verify_memory (nothing  |
|                                                                         | left in the inner module after a step)|
| backward reduce-scatters each full gradient                             | fsdp_traffic_...: reduce-scatters    |
|                                                                         | carry every gradient element; no     |
|                                                                         | all-reduce, nothing else moves       |
| each shard's .grad becomes the world average                            | fsdp_matches_unsharded_training (SGD)|
| parameters() are the local fp32 shards; AdamW keeps state for them only | verify_memory (dtype, size, AdamW    |
|                                                                         | state), fsdp_parameters_are_sharded  |
| finish_gradient_synchronization: outstanding work done, grads averaged  | every training run calls it before   |
|                                                                         | the step; fsdp_matches_unsharded_... |
| gather_full_params(): a collective, full fp32, keyed like               | fsdp_gather_full_params_keys_and_... |
| module.named_parameters()                                               | verify_training (keys, shapes)       |
| compute_dtype: shards cast to it for the all-gather and the compute     | fsdp_bf16_compute_fp32_masters (the  |
|                                                                         | layers' outputs, the dtype their     |
|                                                                         | operation ran in, and the all-gathers|
|                                                                         | are bf16)                            |
| master shards stay fp32 and sharded; the optimizer updates them         | fsdp_bf16_compute_fp32_masters,      |
|                                                                         | verify_memory                        |
| 2 ranks and 3 (hidden), sizes no world size divides                     | every check (odd=True), hidden_fsdp  |
"""

from __future__ import annotations


import torch
import torch.distributed as dist
from torch import nn

from grader.checks import CheckFailed
from grader.exercises.collectives import record_collectives
from grader.exercises.syncbn_sharded import reference as ref
from grader.exercises.syncbn_sharded import EXERCISE
from grader.exercises.syncbn_sharded.fsdp_reference import (
    FSDP_STEPS,
    in_out_features,
    fsdp_net,
    make_optimizer,
    micro_batch,
    numels,
    unsharded_training,
)
from grader.exercises.syncbn_sharded.fsdp_memory import _in_rank_memory, run_memory, verify_freed
from grader.exercises.syncbn_sharded.fsdp_traffic import verify_equal_shards, verify_gathers_in, verify_traffic

BF16_TOL = (5e-2, 2e-2)  # (rtol, atol) of bf16 compute against the fp32 reference


def _in_rank_fsdp(ctx, student, seed: int, odd: bool, dtype_name: str | None, opt_name: str):
    compute_dtype = getattr(torch, dtype_name) if dtype_name else None
    module = fsdp_net(seed, odd).to(ctx.device)  # built on the CPU with its seed, as the reference is
    layers = [m for m in module if isinstance(m, nn.Linear)]
    seen = []  # (dtype the layer computed in, input dtype) at each inner Linear's forward
    for layer in layers:  # the output's dtype is the operation's: F.linear refuses mixed bf16 and fp32 inputs
        layer.register_forward_hook(lambda m, a, o: seen.append((str(getattr(o, "dtype", None)), str(a[0].dtype))))
    cls = student.task("MiniFSDP")
    with record_collectives():  # construction may communicate; only its unseen collectives matter here
        fsdp = cls(module, compute_dtype) if compute_dtype else cls(module)
    if isinstance(fsdp, nn.parallel.DistributedDataParallel):
        raise CheckFailed(
            "MiniFSDP returned torch's DistributedDataParallel: nothing is sharded; keep 1/N of "
            "each parameter per rank and all-gather the full ones around each layer's forward"
        )
    shards = list(fsdp.parameters())
    sizes = [p.numel() for p in shards]
    every = [None] * ctx.world_size
    dist.all_gather_object(every, sizes)  # ours, before any all-gather of the student's: unequal shards hang gloo
    if any(s != sizes for s in every):
        return {"shard_sizes": every}
    opt = make_optimizer(shards, opt_name)
    x, y = (t.to(ctx.device) for t in micro_batch(ctx.rank, *in_out_features(module)))
    per_step, backward_gathers = [], []
    with record_collectives() as calls:
        for _ in range(FSDP_STEPS):
            opt.zero_grad()
            start = len(calls)
            loss = nn.functional.mse_loss(fsdp(x).float(), y)
            forward_end = len(calls)
            loss.backward()
            backward_gathers.append(sum(c.kind == "all_gather" for c in calls[forward_end:]))
            fsdp.finish_gradient_synchronization()
            opt.step()
            per_step.append([(c.kind, c.dtype, c.numel) for c in calls[start:]])
        leftover = sum(
            t.numel()
            for m in module.modules()
            for t in list(m._parameters.values()) + [getattr(m, n, None) for n in ("weight", "bias")]
            if isinstance(t, torch.Tensor)
        )
        full = fsdp.gather_full_params()
    return {
        "shards": [(str(p.dtype).replace("torch.", ""), p.numel()) for p in shards],
        "state": ref.state_elements(opt),
        "leftover": leftover,
        "seen": seen,
        "calls": per_step,
        "backward_gathers": backward_gathers,
        "backend": ctx.backend,
        "shard_sizes": every,
        "full": {str(k): v.detach().float().cpu().clone() for k, v in dict(full).items()},
        "full_dtypes": {str(k): str(v.dtype) for k, v in dict(full).items()},
    }


def run_fsdp(g, seed: int, odd: bool, dtype_name: str | None = None, opt_name: str = "sgd"):
    return run_fsdp_scenarios(g, [(seed, odd, dtype_name, opt_name)])[0]


# --- the public checks' runs in one launch -------------------------------------------------------------------
# A launch costs more than a training run in it, so the six public checks' runs are declared: the engine makes
# them all in one launch (the memory probe first, in a process nothing else has run in yet, as in a run of its
# own). When that launch fails (a crash, a hang, tampering, a result of the wrong shape), every check makes its own
# runs (grader/shared_runs.py): a mistake in one run fails only its own check, with its own message.
PUBLIC_SCENARIOS = (
    (1, False, None, "sgd"),
    (1, True, None, "sgd"),
    (2, True, "bfloat16", "sgd"),
    (1, True, None, "adamw"),
)
PUBLIC_MEMORY_SEED = 4


def run_fsdp_scenarios(g, scenarios: list) -> list:
    """Per (seed, odd, dtype_name, opt_name): every rank's result of its training run."""
    out = []
    for seed, odd, dtype_name, opt_name in scenarios:
        results = g.run(_in_rank_fsdp, seed, odd, dtype_name, opt_name)
        if any(not isinstance(got, dict) for got in results):
            raise CheckFailed(
                "the ranks did not send back their training run's result: the grader's code in the ranks "
                "was changed or cut short"
            )
        verify_equal_shards(results, numels(seed, odd))
        out.append(results)
    return out


def verify_training(g, results, seed: int, odd: bool, bf16: bool = False) -> None:
    expected = unsharded_training(seed, odd, len(results))
    for rank, got in enumerate(results):
        missing = set(expected) - set(got["full"])
        if missing:
            raise CheckFailed(
                f"rank {rank}: gather_full_params() lacks {sorted(missing)}; key it like module.named_parameters()"
            )
        for name, exp in expected.items():
            actual = got["full"][name]
            if actual.shape != exp.shape:
                raise CheckFailed(
                    f"rank {rank}: gather_full_params()[{name!r}] has shape {tuple(actual.shape)}, "
                    f"expected {tuple(exp.shape)}: drop the padding and view the flat data as the "
                    "parameter's shape"
                )
            likely = (
                "the result must equal one process training on the whole batch: reduce-scatter the gradients "
                "and divide by the world size (the average), once, in finish_gradient_synchronization "
                "or in backward; the optimizer steps the fp32 shards"
            )
            if not all(got.get("backward_gathers", [1])):  # correct numbers need no gather only when kept whole
                likely = (
                    "backward all-gathered nothing, so the gradients were computed with something other than "
                    "the full parameters (the local shard?): in backward, all-gather each layer's full "
                    "parameters again before its gradients are computed (unpack must return the gathered "
                    "full parameter, shaped as it was saved)"
                )
            g.assert_close(
                actual,
                exp,
                f"rank {rank}: {name} after {FSDP_STEPS}{' bf16' if bf16 else ''} steps",
                likely,
                tol=BF16_TOL if bf16 else None,
            )


def verify_memory(results, seed: int, odd: bool) -> None:
    total = sum(p.numel() for p in fsdp_net(seed, odd).parameters())
    n = len(results)
    bound = total / n + n * len(list(fsdp_net(seed, odd).parameters()))  # one padding element per parameter and rank
    for rank, got in enumerate(results):
        held = sum(numel for _, numel in got["shards"])
        if any(dtype != "float32" for dtype, _ in got["shards"]):
            raise CheckFailed(
                f"rank {rank}: the wrapper's parameters are {sorted({d for d, _ in got['shards']})}: "
                "the master shards must stay float32 (cast only the gathered copies to compute_dtype)"
            )
        if held > bound:
            raise CheckFailed(
                f"rank {rank}: MiniFSDP.parameters() hold {held} elements of a {total}-element model; "
                f"about 1/{n} (at most {bound:.0f}) is expected: keep only this rank's chunk of each "
                "parameter, or the optimizer is built on full parameters"
            )
        if got["state"] > 2 * bound:
            raise CheckFailed(
                f"rank {rank}: AdamW holds {got['state']} state elements; 2 x {bound:.0f} at most "
                "expected: the optimizer must be built on the shards only"
            )
        if got["leftover"]:
            raise CheckFailed(
                f"rank {rank}: after a step the wrapped module still references {got['leftover']} "
                "parameter elements: free the full parameters after each forward (e.g. an empty "
                "tensor in their place); only the shards persist"
            )


@EXERCISE.check("MiniFSDP", points=3)
def fsdp_matches_unsharded_training(g):
    """3 steps of sharded MiniFSDP + SGD equal one process on the whole batch (fp32), on two models, one with odd
    sizes."""
    both = run_fsdp_scenarios(g, [(1, False, None, "sgd"), (1, True, None, "sgd")])
    for odd, results in zip((False, True), both):
        verify_memory(results, 1, odd)  # equal results from unsharded training earn nothing
        verify_training(g, results, 1, odd)


@EXERCISE.check("MiniFSDP", points=2, depends_on=("fsdp_matches_unsharded_training",))
def fsdp_bf16_compute_fp32_masters(g):
    """compute_dtype=bfloat16: the inner layers compute in bf16 (their outputs); the shards stay fp32; the result is
    within bf16 tolerance of the fp32 reference."""
    results = run_fsdp(g, 2, True, "bfloat16")
    for rank, got in enumerate(results):
        if not got["seen"]:
            raise CheckFailed(
                f"rank {rank}: the inner Linear layers never ran: fsdp(x) must run the module's layers "
                "(the grader's hooks on them count)"
            )
        if any(w != "torch.bfloat16" for w, _ in got["seen"]):
            raise CheckFailed(
                f"rank {rank}: the inner Linear layers computed in {sorted({w for w, _ in got['seen']})}"
                ": compute_dtype is ignored; all-gather the parameters cast to compute_dtype"
            )
        if any(d != "float32" for d, _ in got["shards"]):
            raise CheckFailed(
                f"rank {rank}: the master shards are {sorted({d for d, _ in got['shards']})}: keep them "
                "float32 (the optimizer updates fp32 masters), cast only the gathered copies"
            )
    verify_gathers_in(results, "bfloat16")
    verify_training(g, results, 2, True, bf16=True)


@EXERCISE.check("MiniFSDP", points=2)
def fsdp_parameters_are_sharded(g):
    """After a step each rank holds about 1/N of the parameters (shards and AdamW state); the inner module none."""
    verify_memory(run_fsdp(g, 1, True, None, "adamw"), 1, True)


@EXERCISE.check("MiniFSDP", points=2)
def fsdp_traffic_is_gathers_and_reduce_scatters(g):
    """Every step all-gathers parameters and reduce-scatters gradients; no all-reduce."""
    results = run_fsdp(g, 1, False)
    verify_memory(results, 1, False)
    verify_traffic(results, numels(1, False))


@EXERCISE.check("MiniFSDP", points=1)
def fsdp_gather_full_params_keys_and_shapes(g):
    """gather_full_params() returns fp32 tensors keyed and shaped like module.named_parameters()."""
    results = run_fsdp(g, 1, True)  # the odd-sized training run of fsdp_matches_unsharded_training
    verify_memory(results, 1, True)
    expected = {k: tuple(v.shape) for k, v in fsdp_net(1, True).named_parameters()}
    for rank, got in enumerate(results):
        shapes = {k: tuple(v.shape) for k, v in got["full"].items()}
        if shapes != expected:
            raise CheckFailed(
                f"rank {rank}: gather_full_params() returned {shapes}; expected {expected}, "
                "keyed like module.named_parameters(), padding dropped"
            )
        if any(d != "torch.float32" for d in got["full_dtypes"].values()):
            raise CheckFailed(f"rank {rank}: gather_full_params() returned {got['full_dtypes']}: return fp32")


@EXERCISE.check("MiniFSDP", points=2)
def fsdp_frees_full_parameters(g):
    """On an 8-layer model, at most about one layer's full parameters are alive in forward (~3 in backward), and
    backward all-gathers every layer's weight again."""
    verify_freed(run_memory(g, PUBLIC_MEMORY_SEED), g.world_size)


EXERCISE.declare_runs(
    "MiniFSDP",
    ((_in_rank_memory, (PUBLIC_MEMORY_SEED,)), *((_in_rank_fsdp, scenario) for scenario in PUBLIC_SCENARIOS)),
)
