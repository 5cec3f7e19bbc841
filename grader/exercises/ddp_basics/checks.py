"""Checks of exercise 02_ddp_basics (lesson: lessons/02_ddp_basics.ipynb).

Each check runs the student's task in real ranks (world size 2; the hidden
ones also 3) and compares with a single-process reference from reference.py.
The functions prefixed `_in_rank_` run inside every rank.
"""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from grader.checks import CheckFailed, Exercise, describe_failure
from grader.exercises.ddp_basics import reference as ref
from grader.tolerances import assert_close

EXERCISE = Exercise(
    "02_ddp_basics",
    tasks=["pick_backend", "pick_device", "setup", "cleanup", "wrap_model", "make_dataloader",
           "train_one_epoch", "save_checkpoint", "load_checkpoint", "MiniDDP"],
    title="DDP basics",
)
check = EXERCISE.check


# --- backend and device -------------------------------------------------------

def _in_rank_backend(ctx, student):
    return student.task("pick_backend")()


def _in_rank_device(ctx, student):
    device = student.task("pick_device")(ctx.local_rank)
    current = torch.cuda.current_device() if torch.cuda.is_available() else None
    return str(device), current


@check("pick_backend", points=1)
def backend_matches_hardware(g):
    expected = "nccl" if torch.cuda.is_available() else "gloo"
    for rank, backend in enumerate(g.run(_in_rank_backend)):
        if backend != expected:
            raise CheckFailed(f"rank {rank}: pick_backend() returned {backend!r}, expected {expected!r}: "
                              "nccl when torch.cuda.is_available(), gloo on CPU")


@check("pick_device", points=1)
def device_is_this_ranks(g):
    for rank, (device, current) in enumerate(g.run(_in_rank_device)):
        expected = f"cuda:{rank}" if torch.cuda.is_available() else "cpu"
        if device != expected:
            raise CheckFailed(f"rank {rank}: pick_device({rank}) returned {device}, expected {expected}"
                              + (": use the local rank as the GPU index" if torch.cuda.is_available() else
                                 ": without CUDA every rank runs on the CPU"))
        if torch.cuda.is_available() and current != rank:
            raise CheckFailed(f"rank {rank}: the current CUDA device is {current}: call "
                              "torch.cuda.set_device(local_rank), or every rank piles onto GPU 0")


# --- setup and cleanup ------------------------------------------------------------

def _in_rank_setup(ctx, student):
    student.task("setup")(ctx.rank, ctx.world_size, ctx.master_addr, ctx.master_port)
    if not dist.is_initialized():
        raise CheckFailed("after setup() there is no default process group: call dist.init_process_group")
    seen = (dist.get_rank(), dist.get_world_size(), dist.get_backend())
    total = torch.tensor([1.0])
    dist.all_reduce(total)  # the group really connects every rank
    dist.destroy_process_group()
    return seen + (total.item(),)


@check("setup", points=2)
def process_group_has_right_rank_and_size(g):
    expected_backend = "nccl" if torch.cuda.is_available() else "gloo"
    result = g.run_raw(_in_rank_setup, init_group=False)
    if not result.ok and "EADDRINUSE" in result.failure():
        raise CheckFailed("two processes both tried to host the rendezvous on the master port, as only rank 0 "
                          "does: did every process join as rank 0? pass rank=rank to init_process_group (the port "
                          "was free: the grader retried with fresh ports)")
    if not result.ok:
        raise CheckFailed(describe_failure(result))
    for rank, (got_rank, size, backend, total) in enumerate(r.value for r in result.ranks):
        if (got_rank, size) != (rank, g.world_size):
            raise CheckFailed(f"process {rank} joined as rank {got_rank} of {size}, expected rank {rank} of "
                              f"{g.world_size}: pass rank= and world_size= to init_process_group")
        if backend != expected_backend:
            raise CheckFailed(f"the group uses {backend}, expected {expected_backend}: use pick_backend()")
        if total != g.world_size:
            raise CheckFailed(f"an all_reduce over the group summed {total:g} ones, expected {g.world_size}")


def _in_rank_cleanup(ctx, student):
    if ctx.rank == ctx.world_size - 1:
        time.sleep(0.6)  # the last rank arrives late: cleanup must wait for it
    start = time.monotonic()
    student.task("cleanup")()
    return time.monotonic() - start, dist.is_initialized()


@check("cleanup", points=1)
def cleanup_waits_then_destroys(g):
    results = g.run(_in_rank_cleanup)
    for rank, (_, still_initialized) in enumerate(results):
        if still_initialized:
            raise CheckFailed(f"rank {rank} still has a process group after cleanup(): "
                              "call dist.destroy_process_group()")
    if results[0][0] < 0.3:
        raise CheckFailed("rank 0 left cleanup() before the last rank arrived: call dist.barrier() before "
                          "destroy_process_group(), so no rank tears down while others still communicate")


# --- wrap_model ---------------------------------------------------------------------

def _in_rank_wrap(ctx, student):
    model = ref.tiny_net(seed=ctx.rank + 1)  # every rank starts different on purpose
    wrapped = student.task("wrap_model")(model, ctx.device)
    if not isinstance(wrapped, DDP):
        raise CheckFailed(f"wrap_model returned a {type(wrapped).__name__}, not a DistributedDataParallel")
    device = next(wrapped.parameters()).device
    if device != ctx.device:
        raise CheckFailed(f"the wrapped model is on {device}, this rank's device is {ctx.device}: "
                          "call model.to(device) before wrapping")
    data = ref.RegressionDataset(n=8 * ctx.world_size)
    shard = slice(ctx.rank * 8, (ctx.rank + 1) * 8)  # equal shards: mean of means = full-batch mean
    loss = nn.MSELoss()(wrapped(data.x[shard].to(ctx.device)), data.y[shard].to(ctx.device))
    loss.backward()
    return ref.flat_params(wrapped.module), ref.flat_grads(wrapped.module)


@check("wrap_model", points=2)
def wrap_model_broadcasts_rank0_parameters(g):
    expected = ref.flat_params(ref.tiny_net(seed=1))
    for rank, (params, _) in enumerate(g.run(_in_rank_wrap)):
        assert_close(params, expected, f"rank {rank}'s parameters after wrap_model",
                     "DDP copies rank 0's parameters to every rank when it is constructed; "
                     "wrap the model itself in DistributedDataParallel")


@check("wrap_model", points=2)
def wrap_model_gradients_match_full_batch(g):
    model = ref.tiny_net(seed=1)
    data = ref.RegressionDataset(n=8 * g.world_size)
    nn.MSELoss()(model(data.x), data.y).backward()
    expected = ref.flat_grads(model)
    for rank, (_, grads) in enumerate(g.run(_in_rank_wrap)):
        assert_close(grads, expected, f"rank {rank}'s gradient after backward()",
                     "after backward every rank must hold the average of all ranks' gradients, "
                     "which equals the full-batch gradient")


# --- make_dataloader -------------------------------------------------------------------

def _in_rank_loader(ctx, student, n, batch_size, seed):
    from torch.utils.data.distributed import DistributedSampler

    loader = student.task("make_dataloader")(ref.IndexDataset(n), batch_size, ctx.rank, ctx.world_size, seed)
    sampler = getattr(loader, "sampler", None)
    epochs = []
    for epoch in range(2):
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)
        epochs.append([batch.tolist() for batch in loader])
    return isinstance(sampler, DistributedSampler), epochs


def _loader_runs(g, n, batch_size=3, seed=0):
    results = g.run(_in_rank_loader, n, batch_size, seed)
    if not all(has_sampler for has_sampler, _ in results):
        raise CheckFailed("the DataLoader has no DistributedSampler: every rank iterates over the whole "
                          "dataset, so the ranks train on the same samples")
    return [epochs for _, epochs in results]


def _shards_disjoint_and_covering(g, n):
    world_size = g.world_size
    per_rank = _loader_runs(g, n)
    owner = {}
    for rank, epochs in enumerate(per_rank):
        batches = epochs[0]
        if any(len(b) != 3 for b in batches[:-1]):
            raise CheckFailed(f"rank {rank}'s batches have sizes {[len(b) for b in batches]}, expected 3 per "
                              "rank: batch_size is per rank (do not divide it by the world size)")
        for i in (i for b in batches for i in b):
            if i in owner and owner[i] != rank and n % world_size == 0:
                raise CheckFailed(f"ranks {owner[i]} and {rank} both got sample {i}: give the DistributedSampler "
                                  "num_replicas=world_size and rank=rank")
            owner.setdefault(i, rank)
    missing = sorted(set(range(n)) - set(owner))
    if missing:
        raise CheckFailed(f"no rank got samples {missing[:10]}: the shards must cover the dataset "
                          "(drop_last=False, the sampler pads instead)")


@check("make_dataloader", points=2)
def dataloader_shards_disjoint_and_cover(g):
    _shards_disjoint_and_covering(g, 24)


@check("make_dataloader", points=1)
def dataloader_shuffles_with_seed(g):
    for seed in (0, 5):
        per_rank = _loader_runs(g, 24, seed=seed)
        for rank, epochs in enumerate(per_rank):
            orders = [[i for b in batches for i in b] for batches in epochs]
            if orders[0] == sorted(orders[0]):
                raise CheckFailed("the samples come in dataset order: the DistributedSampler must shuffle "
                                  "(shuffle=True)")
            for epoch, order in enumerate(orders):
                if order != ref.rank_order(24, rank, g.world_size, epoch, seed):
                    raise CheckFailed(f"with seed={seed}, rank {rank}'s order in epoch {epoch} is not the one a "
                                      "DistributedSampler(dataset, num_replicas, rank, shuffle=True, seed=seed) "
                                      "gives: pass the seed to the sampler, and batch_size to the DataLoader")


@check("make_dataloader", points=1, hidden=True, world_size=3)
def dataloader_three_ranks_uneven(g):
    _shards_disjoint_and_covering(g, 20)  # 20 samples over 3 ranks: the sampler pads to 21


# --- train_one_epoch --------------------------------------------------------------------

EPOCHS, BATCH, LR = 3, 4, 0.05


def _in_rank_train(ctx, student):
    model = ref.wrap_model(ref.tiny_net(seed=0), ctx.device)
    loader = ref.make_dataloader(ref.RegressionDataset(n=48), BATCH, ctx.rank, ctx.world_size, seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    train = student.task("train_one_epoch")
    losses = [float(train(model, loader, optimizer, nn.MSELoss(), epoch, ctx.device)) for epoch in range(EPOCHS)]
    return ref.flat_params(model.module), losses, loader.sampler.epoch


def _train(g):
    results = g.run(_in_rank_train)
    expected_params, expected_losses = ref.single_process_training(ref.RegressionDataset(n=48), g.world_size,
                                                                   BATCH, EPOCHS, LR)
    return results, expected_params, expected_losses


def _require_set_epoch(rank: int, sampler_epoch: int) -> None:
    if sampler_epoch != EPOCHS - 1:
        raise CheckFailed(f"rank {rank}: after epoch {EPOCHS - 1} the sampler's epoch is {sampler_epoch}: "
                          "call loader.sampler.set_epoch(epoch), or every epoch repeats the same order")


def _check_training(g):
    results, expected_params, _ = _train(g)
    for rank, (params, _, sampler_epoch) in enumerate(results):
        _require_set_epoch(rank, sampler_epoch)
        assert_close(params, expected_params, f"rank {rank}'s parameters after {EPOCHS} epochs",
                     "one optimizer step per batch: zero_grad, forward, loss, backward, step, with the "
                     "batches moved to the device")


@check("train_one_epoch", points=1)
def train_calls_set_epoch(g):
    for rank, (_, _, sampler_epoch) in enumerate(g.run(_in_rank_train)):
        _require_set_epoch(rank, sampler_epoch)


@check("train_one_epoch", points=3)
def training_matches_single_process(g):
    _check_training(g)


@check("train_one_epoch", points=2)
def loss_is_global_mean(g):
    results, _, expected_losses = _train(g)
    losses = [r[1] for r in results]
    if any(other != losses[0] for other in losses[1:]):
        raise CheckFailed("the ranks returned different losses "
                          + ", ".join(f"rank {r}: {l[0]:.4f}" for r, l in enumerate(losses))
                          + " in epoch 0: each returned its own mean; all_reduce the loss sum and the sample "
                            "count, then divide")
    assert_close(torch.tensor(losses[0]), torch.tensor(expected_losses), "the returned mean loss per epoch",
                 "weight each batch's loss by its number of samples, sum over batches and ranks, and divide by "
                 "the total number of samples")


@check("train_one_epoch", points=1, hidden=True, world_size=3)
def training_matches_single_process_three_ranks(g):
    _check_training(g)


# --- checkpoints ----------------------------------------------------------------------------

def _in_rank_save(ctx, student, delay):
    path = os.path.join(ctx.workdir, "ckpt.pt")
    real_save, writes = torch.save, []

    def counting_save(obj, f, *args, **kwargs):
        writes.append(ctx.rank)
        if delay:
            time.sleep(delay)  # a slow disk: nobody may read before the file is complete
        return real_save(obj, f, *args, **kwargs)

    model = ref.wrap_model(ref.tiny_net(seed=3), ctx.device)
    torch.save = counting_save
    try:
        student.task("save_checkpoint")(model, path)
    finally:
        torch.save = real_save
    complete = os.path.exists(path)
    keys = None
    if complete:
        try:
            keys = list(torch.load(path, map_location="cpu", weights_only=True).keys())
        except Exception:
            complete = False
    dist.barrier()
    return len(writes), complete, keys


@check("save_checkpoint", points=1)
def checkpoint_written_by_rank0_only(g):
    writes = [w for w, _, _ in g.run(_in_rank_save, 0.0)]
    if sum(writes) != 1 or writes[0] != 1:
        writers = [r for r, w in enumerate(writes) if w]
        raise CheckFailed(f"torch.save was called by rank(s) {writers}, {sum(writes)} time(s) in all: every rank "
                          "holds the same model, so only rank 0 (dist.get_rank() == 0) should write")


@check("save_checkpoint", points=1)
def checkpoint_has_unwrapped_keys(g):
    _, complete, keys = g.run(_in_rank_save, 0.0)[0]
    if not complete:
        raise CheckFailed("no readable checkpoint was written at the given path")
    expected = list(ref.tiny_net(seed=0).state_dict().keys())
    if keys != expected:
        hint = ("the keys start with 'module.': save model.module.state_dict(), the unwrapped model's"
                if keys and all(k.startswith("module.") for k in keys) else "save model.module.state_dict()")
        raise CheckFailed(f"the checkpoint's keys are {keys[:4]}..., expected {expected[:4]}...: {hint}")


@check("save_checkpoint", points=2)
def checkpoint_complete_before_return(g):
    for rank, (_, complete, _) in enumerate(g.run(_in_rank_save, 0.5)):
        if not complete:
            raise CheckFailed(f"rank {rank} returned from save_checkpoint before rank 0 had finished writing: "
                              "call dist.barrier() after the save, on every rank")


def _in_rank_load(ctx, student):
    path = os.path.join(ctx.workdir, "ckpt.pt")
    if ctx.rank == 0:
        torch.save(ref.tiny_net(seed=7).state_dict(), path)
    dist.barrier()
    real_load, calls = torch.load, []

    def recording_load(*args, **kwargs):
        calls.append(kwargs.get("map_location", args[1] if len(args) > 1 else None))
        return real_load(*args, **kwargs)

    model = ref.tiny_net(seed=0).to(ctx.device)
    torch.load = recording_load
    try:
        student.task("load_checkpoint")(model, path, ctx.device)
    finally:
        torch.load = real_load
    return ref.flat_params(model), calls, str(next(model.parameters()).device)


@check("load_checkpoint", points=1)
def checkpoint_loads_onto_device(g):
    expected = ref.flat_params(ref.tiny_net(seed=7))
    for rank, (params, calls, device) in enumerate(g.run(_in_rank_load)):
        if not calls:
            raise CheckFailed("load_checkpoint did not call torch.load")
        if calls[0] is None:
            raise CheckFailed("torch.load was called without map_location: a checkpoint saved from cuda:0 would "
                              "load onto GPU 0 on every rank; pass map_location=device")
        assert_close(params, expected, f"rank {rank}'s parameters after load_checkpoint",
                     "load the file's state_dict into the model with model.load_state_dict")


# --- MiniDDP --------------------------------------------------------------------------------

class BufferNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)
        self.norm.running_mean.normal_()  # seeded: differs per rank until broadcast

    def forward(self, x):
        return self.norm(self.linear(x)).sum(dim=1, keepdim=True)


def _in_rank_mini_broadcast(ctx, student):
    model = ref.seeded(BufferNet, seed=ctx.rank + 1).to(ctx.device)
    student.task("MiniDDP")(model)
    state = model.state_dict()
    return {k: v.detach().cpu().clone() for k, v in state.items()}


@check("MiniDDP", points=1)
def mini_ddp_broadcasts_rank0_state(g):
    expected = ref.seeded(BufferNet, seed=1).state_dict()
    for rank, state in enumerate(g.run(_in_rank_mini_broadcast)):
        for name, value in expected.items():
            assert_close(state[name], value, f"rank {rank}'s {name} right after MiniDDP(module)",
                         "broadcast rank 0's parameters and buffers (dist.broadcast(t, src=0)) in __init__")


def _in_rank_mini_vs_ddp(ctx, student, factory_name, steps=5):
    factory = {"tiny": lambda: ref.tiny_net(seed=0), "frozen": ref.FrozenNet, "tied": ref.TiedNet}[factory_name]
    ddp = DDP(ref.seeded(factory, 1).to(ctx.device))
    mini = student.task("MiniDDP")(ref.seeded(factory, ctx.rank + 1).to(ctx.device))
    inner = getattr(mini, "module", None)
    if not isinstance(inner, nn.Module):
        raise CheckFailed("MiniDDP has no `.module` attribute holding the wrapped model")
    opts = [torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1) for m in (ddp.module, inner)]
    history = []
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + ctx.rank)  # each rank its own shard
        x, y = torch.randn(6, 4, generator=g).to(ctx.device), torch.randn(6, 1, generator=g).to(ctx.device)
        for model, opt in zip((ddp, mini), opts):
            opt.zero_grad()
            nn.MSELoss()(model(x), y).backward()
        mini.finish_gradient_synchronization()
        history.append((ref.flat_grads(ddp.module), ref.flat_grads(inner)))
        for opt in opts:
            opt.step()
    return history, ref.flat_params(ddp.module), ref.flat_params(inner)


def _compare_mini_to_ddp(g, factory_name):
    for rank, (history, ddp_params, mini_params) in enumerate(g.run(_in_rank_mini_vs_ddp, factory_name)):
        for step, (ddp_grad, mini_grad) in enumerate(history):
            ws = g.world_size
            likely = "average the gradients: all_reduce them as backward produces them, then divide by the world size"
            if torch.allclose(mini_grad, ddp_grad * ws, rtol=1e-4, atol=1e-6) and ddp_grad.abs().sum() > 0:
                likely = "MiniDDP's gradients are world_size times DDP's: divide the all-reduced sum by the world size"
            assert_close(mini_grad, ddp_grad, f"{factory_name} model, rank {rank}, step {step}: MiniDDP's gradient",
                         likely)
        assert_close(mini_params, ddp_params, f"{factory_name} model, rank {rank}: parameters after 5 steps",
                     "MiniDDP must match DDP step for step")


@check("MiniDDP", points=3)
def mini_ddp_matches_ddp(g):
    _compare_mini_to_ddp(g, "tiny")


@check("MiniDDP", points=2)
def mini_ddp_frozen_and_tied_parameters(g):
    try:
        _compare_mini_to_ddp(g, "frozen")
    except CheckFailed as exc:
        if "doesn't require gradient" in str(exc):
            raise CheckFailed("MiniDDP registered a gradient hook on a frozen parameter: skip parameters with "
                              "requires_grad=False") from None
        raise
    _compare_mini_to_ddp(g, "tied")


@check("MiniDDP", points=1, hidden=True, world_size=3)
def mini_ddp_matches_ddp_three_ranks(g):
    _compare_mini_to_ddp(g, "tiny")
