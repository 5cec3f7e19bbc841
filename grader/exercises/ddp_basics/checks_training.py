"""02_ddp_basics: wrap_model, make_dataloader, train_one_epoch."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from grader.checks import CheckFailed
from grader.i18n import _
from grader.exercises.ddp_basics import reference as ref
from grader.exercises.ddp_basics import EXERCISE


# --- wrap_model ---------------------------------------------------------------------


def _in_rank_wrap(ctx, student):
    model = ref.tiny_net(seed=ctx.rank + 1)  # every rank starts different on purpose
    wrapped = student.task("wrap_model")(model, ctx.device)
    if not isinstance(wrapped, DDP):
        raise CheckFailed(_("wrap_model returned a {type}, not a DistributedDataParallel", type=type(wrapped).__name__))
    device = next(wrapped.parameters()).device
    if device != ctx.device:
        raise CheckFailed(
            _(
                "the wrapped model is on {device}, this rank's device is {rank_device}: call "
                "model.to(device) before wrapping",
                device=device,
                rank_device=ctx.device,
            )
        )
    data = ref.RegressionDataset(n=8 * ctx.world_size)
    shard = slice(ctx.rank * 8, (ctx.rank + 1) * 8)  # equal shards: mean of means = full-batch mean
    loss = nn.MSELoss()(wrapped(data.x[shard].to(ctx.device)), data.y[shard].to(ctx.device))
    loss.backward()
    return ref.flat_params(wrapped.module), ref.flat_grads(wrapped.module)


# Its run may share a launch with other tasks' runs (grader/shared_runs.py: it changes no verdict).
EXERCISE.declare_runs("wrap_model", ((_in_rank_wrap, ()),))


@EXERCISE.check("wrap_model", points=1)
def wrap_model_broadcasts_rank0_parameters(g):
    expected = ref.flat_params(ref.tiny_net(seed=1))
    for rank, (params, _unused) in enumerate(g.run(_in_rank_wrap)):
        g.assert_close(
            params,
            expected,
            _("rank {rank}'s parameters after wrap_model", rank=rank),
            _(
                "DDP copies rank 0's parameters to every rank when it is constructed; wrap the model "
                "itself in DistributedDataParallel"
            ),
        )


@EXERCISE.check("wrap_model", points=1, depends_on=("wrap_model_broadcasts_rank0_parameters",))
def wrap_model_gradients_match_full_batch(g):
    model = ref.tiny_net(seed=1)
    data = ref.RegressionDataset(n=8 * g.world_size)
    nn.MSELoss()(model(data.x), data.y).backward()
    expected = ref.flat_grads(model)
    for rank, (_unused, grads) in enumerate(g.run(_in_rank_wrap)):
        g.assert_close(
            grads,
            expected,
            _("rank {rank}'s gradient after backward()", rank=rank),
            _(
                "after backward every rank must hold the average of all ranks' gradients, which "
                "equals the full-batch gradient"
            ),
        )


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


# The public checks' two runs, in one launch (grader/shared_runs.py: it changes no verdict).
EXERCISE.declare_runs("make_dataloader", ((_in_rank_loader, (24, 3, 0)), (_in_rank_loader, (24, 3, 5))))


def _loader_runs(g, n, batch_size=3, seed=0):
    results = g.run(_in_rank_loader, n, batch_size, seed)
    if not all(has_sampler for has_sampler, _ in results):
        raise CheckFailed(
            _(
                "the DataLoader has no DistributedSampler: every rank iterates over the whole "
                "dataset, so the ranks train on the same samples"
            )
        )
    return [epochs for _, epochs in results]


def _shards_disjoint_and_covering(g, n):
    world_size = g.world_size
    per_rank = _loader_runs(g, n)
    owner = {}
    for rank, epochs in enumerate(per_rank):
        batches = epochs[0]
        if any(len(b) != 3 for b in batches[:-1]):
            raise CheckFailed(
                _(
                    "rank {rank}'s batches have sizes {sizes}, expected 3 per rank: batch_size is "
                    "per rank (do not divide it by the world size)",
                    rank=rank,
                    sizes=[len(b) for b in batches],
                )
            )
        for i in (i for b in batches for i in b):
            if i in owner and owner[i] != rank and n % world_size == 0:
                raise CheckFailed(
                    _(
                        "ranks {other} and {rank} both got sample {sample}: give the DistributedSampler "
                        "num_replicas=world_size and rank=rank",
                        other=owner[i],
                        rank=rank,
                        sample=i,
                    )
                )
            owner.setdefault(i, rank)
    missing = sorted(set(range(n)) - set(owner))
    if missing:
        raise CheckFailed(
            _(
                "no rank got samples {missing}: the shards must cover the dataset "
                "(drop_last=False, the sampler pads instead)",
                missing=missing[:10],
            )
        )


@EXERCISE.check("make_dataloader", points=1)
def dataloader_shards_disjoint_and_cover(g):
    _shards_disjoint_and_covering(g, 24)


@EXERCISE.check("make_dataloader", points=0.5, depends_on=("dataloader_shards_disjoint_and_cover",))
def dataloader_shuffles_with_seed(g):
    for seed in (0, 5):
        per_rank = _loader_runs(g, 24, seed=seed)
        for rank, epochs in enumerate(per_rank):
            orders = [[i for b in batches for i in b] for batches in epochs]
            if orders[0] == sorted(orders[0]):
                raise CheckFailed(
                    _("the samples come in dataset order: the DistributedSampler must shuffle (shuffle=True)")
                )
            for epoch, order in enumerate(orders):
                if order != ref.rank_order(24, rank, g.world_size, epoch, seed):
                    raise CheckFailed(
                        _(
                            "with seed={seed}, rank {rank}'s order in epoch {epoch} is not the one "
                            "a DistributedSampler(dataset, num_replicas, rank, shuffle=True, "
                            "seed=seed) gives: pass the seed to the sampler, and batch_size to the "
                            "DataLoader",
                            seed=seed,
                            rank=rank,
                            epoch=epoch,
                        )
                    )


# --- train_one_epoch --------------------------------------------------------------------

EPOCHS, BATCH, LR = 3, 4, 0.05


class _RecordingSampler(DistributedSampler):
    """A DistributedSampler that records its epoch each time the loader iterates over it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.iterated_at: list[int] = []

    def __iter__(self):
        self.iterated_at.append(self.epoch)
        return super().__iter__()


def _in_rank_train(ctx, student):
    model = ref.ddp_fixture(ref.tiny_net(seed=0), ctx.device)
    dataset = ref.RegressionDataset(n=48)
    sampler = _RecordingSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    train = student.task("train_one_epoch")
    losses = [float(train(model, loader, optimizer, nn.MSELoss(), epoch, ctx.device)) for epoch in range(EPOCHS)]
    return ref.flat_params(model.module), losses, sampler.iterated_at


# Its run may share a launch with other tasks' runs (grader/shared_runs.py: it changes no verdict).
EXERCISE.declare_runs("train_one_epoch", ((_in_rank_train, ()),))


def _train(g):
    results = g.run(_in_rank_train)
    expected_params, expected_losses = ref.single_process_training(
        ref.RegressionDataset(n=48), g.world_size, BATCH, EPOCHS, LR
    )
    return results, expected_params, expected_losses


def _require_set_epoch(rank: int, iterated_at: list[int]) -> None:
    if not iterated_at:
        raise CheckFailed(
            _(
                "rank {rank}: train_one_epoch never iterated over the loader: one optimizer step per batch of `loader`",
                rank=rank,
            )
        )
    if iterated_at != list(range(EPOCHS)):
        raise CheckFailed(
            _(
                "rank {rank}: over {calls} calls (epochs {epochs}) the loader was iterated with the "
                "sampler at epochs {iterated_at}: call loader.sampler.set_epoch(epoch) once per "
                "call, before iterating, or every epoch repeats the same order",
                rank=rank,
                calls=EPOCHS,
                epochs=list(range(EPOCHS)),
                iterated_at=iterated_at,
            )
        )


def _check_training(g):
    results, expected_params, _unused = _train(g)
    for rank, (params, _unused, iterated_at) in enumerate(results):
        _require_set_epoch(rank, iterated_at)
        g.assert_close(
            params,
            expected_params,
            _("rank {rank}'s parameters after {epochs} epochs", rank=rank, epochs=EPOCHS),
            _(
                "one optimizer step per batch: zero_grad, forward, loss, backward, step, with the "
                "batches moved to the device"
            ),
        )


@EXERCISE.check("train_one_epoch", points=1)
def train_calls_set_epoch(g):
    """Each call iterates over the loader once, with the sampler's epoch set to `epoch` first."""
    for rank, (_unused, _unused, iterated_at) in enumerate(g.run(_in_rank_train)):
        _require_set_epoch(rank, iterated_at)


@EXERCISE.check("train_one_epoch", points=3, depends_on=("train_calls_set_epoch",))
def training_matches_single_process(g):
    _check_training(g)


@EXERCISE.check("train_one_epoch", points=2, depends_on=("train_calls_set_epoch",))
def loss_is_global_mean(g):
    results, _unused, expected_losses = _train(g)
    losses = [r[1] for r in results]
    if any(other != losses[0] for other in losses[1:]):
        raise CheckFailed(
            _(
                "the ranks returned different losses {losses} in epoch 0: each returned its own mean; "
                "all_reduce the loss sum and the sample count, then divide",
                losses=", ".join(f"rank {r}: {l[0]:.4f}" for r, l in enumerate(losses)),
            )
        )
    g.assert_close(
        torch.tensor(losses[0]),
        torch.tensor(expected_losses),
        _("the returned mean loss per epoch"),
        _(
            "weight each batch's loss by its number of samples, sum over batches and ranks, and "
            "divide by the total number of samples"
        ),
    )
