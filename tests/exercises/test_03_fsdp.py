"""03_syncbn_sharded, MiniFSDP (FSDP by hand): each typical mistake fails its own check with a message that names it;
the laziest answers earn nothing. The solution's full marks (2 ranks and the hidden 3): tests/test_selfcheck.py
(test_each_solution_passes_every_check_of_every_task), from make selfcheck's grading."""

import pytest

from grader.exercises import get_exercise
from tests.helpers import (
    assert_lazy_answer_earns_nothing,
    assert_one_reason,
    failed,
    grade_source,
    mutate,
    replace_definition,
    solution_source,
)

EXERCISE = "03_syncbn_sharded"


# (old, new, the check that must fail, a phrase of its message)
MUTANTS = [
    # forgot to divide by world size: the gradient is the sum over ranks
    (
        "                shard.grad /= self.world\n",
        "                pass\n",
        "fsdp_matches_unsharded_training",
        "divide by the world size",
    ),
    # all-reduce the full gradient, then keep this rank's chunk
    (
        "        dist.reduce_scatter_single(mine, grad)  # sum over ranks, this rank's chunk only\n",
        "        dist.all_reduce(grad)\n        mine = grad.chunk(ctx.world)[dist.get_rank()].clone()\n",
        "fsdp_traffic_is_gathers_and_reduce_scatters",
        "does not all-reduce them",
    ),
    # keeps the full parameters after forward
    (
        "                setattr(mod, name, torch.empty(0))  # the last reference: autograd saved only tokens\n",
        "                pass\n",
        "fsdp_parameters_are_sharded",
        "free the full parameters after each forward",
    ),
    # the old task text's answer: an empty tensor in the module, but F.linear's saved weight keeps each layer's
    # full parameters alive until backward
    (
        "            return t if i is None else (i, t.size(), t.stride(), t.storage_offset())\n",
        "            return t\n",
        "fsdp_frees_full_parameters",
        "Putting an empty tensor in their place is not enough",
    ),
    # compute_dtype ignored
    (
        "        self.module, self.compute_dtype = module, compute_dtype\n",
        "        self.module, self.compute_dtype = module, None\n",
        "fsdp_bf16_compute_fp32_masters",
        "compute_dtype is ignored",
    ),
    # master weights stored in bf16
    (
        "                self.shards.append(nn.Parameter(flat[self.rank * chunk:(self.rank + 1) * chunk].clone()))\n",
        (
            "                self.shards.append(nn.Parameter(flat[self.rank * chunk:(self.rank + 1) * chunk].clone()"
            ".to(compute_dtype or torch.float32)))\n"
        ),
        "fsdp_bf16_compute_fp32_masters",
        "keep them float32",
    ),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("old, new, check, phrase", MUTANTS, ids=[m[2] + str(i) for i, m in enumerate(MUTANTS)])
def test_typical_mistake_fails_its_check(old, new, check, phrase):
    report = grade_source(
        EXERCISE, mutate(solution_source(EXERCISE), old, new), task="MiniFSDP", checks=[check], timeout=60
    )
    messages = failed(report)
    assert check in messages, "\n".join(report.lines())
    assert phrase in messages[check], messages[check]


UNSHARDED = '''
class MiniFSDP(torch.nn.Module):
    """No sharding: a DDP-like wrapper that all-reduces full gradients."""

    def __init__(self, module, compute_dtype=None):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        for p in self.module.parameters():
            if p.grad is not None:
                torch.distributed.all_reduce(p.grad)
                p.grad /= torch.distributed.get_world_size()

    def gather_full_params(self):
        return {k: v.detach().clone() for k, v in self.module.named_parameters()}
'''

DDP = """
def MiniFSDP(module, compute_dtype=None):
    return torch.nn.parallel.DistributedDataParallel(module)
"""


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "code, phrase", [(UNSHARDED, "about 1/2"), (DDP, "DistributedDataParallel")], ids=["unsharded_wrapper", "torch_ddp"]
)
def test_laziest_answers_earn_nothing(code, phrase):
    assert_lazy_answer_earns_nothing(EXERCISE, "MiniFSDP", code, phrase)


# --- collectives in any spelling: the dispatcher sees them all --------------------------------------
GATHER = "    dist.all_gather_single(out, local.contiguous())\n"
SCATTER = "        dist.reduce_scatter_single(mine, grad)  # sum over ranks, this rank's chunk only\n"
FULL = "            dist.all_gather_single(out, shard.detach())\n"
HOOK = "                full = _Gather.apply(self.shards[i], self.compute_dtype, self.world)\n"
SPELLINGS = {
    "deprecated names": {
        GATHER: "    dist.all_gather_into_tensor(out, local.contiguous())\n",
        SCATTER: "        dist.reduce_scatter_tensor(mine, grad)\n",
        FULL: "            dist.all_gather_into_tensor(out, shard.detach())\n",
    },
    "imported before the grader runs": {
        GATHER: "    all_gather_into_tensor(out, local.contiguous())\n",
        SCATTER: "        reduce_scatter_tensor(mine, grad)\n",
        "import torch\n": "import torch\nfrom torch.distributed import all_gather_into_tensor, reduce_scatter_tensor\n",
    },
    "distributed_c10d": {
        GATHER: "    torch.distributed.distributed_c10d.all_gather_single(out, local.contiguous())\n",
        SCATTER: "        torch.distributed.distributed_c10d.reduce_scatter_single(mine, grad)\n",
    },
    "async_op": {
        GATHER: "    dist.all_gather_single(out, local.contiguous(), async_op=True).wait()\n",
        SCATTER: "        dist.reduce_scatter_single(mine, grad, async_op=True).wait()\n",
    },
    "list forms": {
        GATHER: "    dist.all_gather(list(out.chunk(world)), local.contiguous())\n",
        SCATTER: "        dist.reduce_scatter(mine, list(grad.chunk(ctx.world)))\n",
    },
    "autograd-aware nn.functional.all_gather": {
        HOOK: (
            "                local = self.shards[i] if self.compute_dtype is None else "
            "self.shards[i].to(self.compute_dtype)\n"
            "                full = torch.cat(torch.distributed.nn.functional.all_gather(local))\n"
        ),
        "import torch\n": "import torch\nimport torch.distributed.nn.functional\n",
    },
}


def _spelled(name: str) -> str:
    source = solution_source(EXERCISE)
    for old, new in SPELLINGS[name].items():
        source = mutate(source, old, new)
    return source


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(SPELLINGS))
def test_correct_answer_in_any_spelling_gets_full_marks(name):
    report = grade_source(EXERCISE, _spelled(name), task="MiniFSDP", timeout=60)
    assert failed(report) == {}, "\n".join(report.lines())
    assert report.score == get_exercise(EXERCISE).points_of("MiniFSDP")


# The honest mistake: gradients all-reduced in full, then this rank's chunk kept.
HONEST = "        dist.all_reduce(grad)\n        mine = grad.chunk(ctx.world)[dist.get_rank()].clone()\n"
DISGUISED = {
    # the same all-reduce under a name imported before the grader runs, and a token reduce-scatter to show
    "hidden all_reduce": (
        "        _all_reduce(grad)\n        mine = grad.chunk(ctx.world)[dist.get_rank()].clone()\n"
        "        dist.reduce_scatter_single(torch.empty(1), torch.ones(ctx.world))\n"
    ),
    # the gradients all-gathered and summed locally, and a token reduce-scatter
    "gradients all-gathered": (
        "        every = grad.new_empty(grad.numel() * ctx.world)\n        dist.all_gather_single(every, grad)\n"
        "        mine = every.view(ctx.world, -1).sum(0).chunk(ctx.world)[dist.get_rank()].clone()\n"
        "        dist.reduce_scatter_single(torch.empty(1), torch.ones(ctx.world))\n"
    ),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(DISGUISED))
def test_disguised_all_reduce_earns_no_more_than_the_honest_mistake(name):
    source = solution_source(EXERCISE)
    honest = grade_source(EXERCISE, mutate(source, SCATTER, HONEST), task="MiniFSDP", timeout=60)
    disguised_source = mutate(source, SCATTER, DISGUISED[name])
    disguised_source = mutate(
        disguised_source,
        "import torch\n",
        "import torch\nfrom torch.distributed.distributed_c10d import all_reduce as _all_reduce\n",
    )
    disguised = grade_source(EXERCISE, disguised_source, task="MiniFSDP", timeout=60)
    assert honest.score < honest.max_score
    assert disguised.score <= honest.score, "\n".join(disguised.lines())
    assert "fsdp_traffic_is_gathers_and_reduce_scatters" in failed(disguised)


# --- messages that name the rule ---------------------------------------------------------------------
PAD = "                flat = torch.cat([flat, flat.new_zeros(chunk * self.world - flat.numel())])\n"


@pytest.mark.timeout(180)
def test_padding_by_the_remainder_names_the_padding_rule():
    # numel % world_size zeros instead of up to a multiple: on 3 ranks a 55-element weight gets 56, the last rank's
    # chunk is short, and gloo would only say "tensors of different sizes"
    source = mutate(
        solution_source(EXERCISE),
        PAD,
        "                flat = torch.cat([flat, flat.new_zeros(flat.numel() % self.world)])\n",
    )
    report = grade_source(EXERCISE, source, task="MiniFSDP", checks=["fsdp_with_three_ranks"], timeout=60)
    message = failed(report)["fsdp_with_three_ranks"]
    assert "Pad each flattened parameter with zeros to a multiple of the world size" in message, message
    assert "not by the remainder numel % world_size" in message and "different sizes" not in message


@pytest.mark.timeout(180)
def test_bf16_gathered_in_fp32_then_cast_names_the_rule():
    source = mutate(
        solution_source(EXERCISE),
        "    local = shard.detach().to(dtype) if dtype is not None else shard.detach()\n",
        "    local = shard.detach()\n",
    )
    source = mutate(
        source,
        "    return out\n    ### END SOLUTION\n\n\nclass _Gather",
        "    return out.to(dtype) if dtype is not None else out\n    ### END SOLUTION\n\n\nclass _Gather",
    )
    report = grade_source(EXERCISE, source, task="MiniFSDP", checks=["fsdp_bf16_compute_fp32_masters"], timeout=60)
    assert "cast the shards to compute_dtype before the all-gather" in failed(report)["fsdp_bf16_compute_fp32_masters"]


# --- alternatives the task text allows, and what the live-bytes probe must not count -------------------------------
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["FLAT", "FUNCTION"])
def test_correct_alternatives_get_full_marks(name):
    """One flat shard per layer (each 2112 bytes on 2 ranks, more than half a weight: the probe must not count the
    shards the wrapper keeps, seen through shard.detach()); an autograd.Function that computes in bf16 with 0-element
    placeholders in the layers' weight attributes (the dtype is read from what the layer computed)."""
    from tests.exercises import minifsdp_variants

    source = replace_definition(solution_source(EXERCISE), "MiniFSDP", getattr(minifsdp_variants, name))
    report = grade_source(EXERCISE, source, task="MiniFSDP", timeout=60)
    assert failed(report) == {}, "\n".join(report.lines())
    assert report.score == report.max_score and any(c.hidden for c in report.checks)


UNPACK = "                return _all_gather(self.shards[i], self.compute_dtype, self.world).as_strided(size, stride, offset)\n"


@pytest.mark.timeout(180)
def test_backward_with_the_local_shard_is_named():
    # unpack hands back this rank's shard (repeated to the full size) instead of all-gathering: wrong gradients
    source = mutate(
        solution_source(EXERCISE),
        UNPACK,
        "                local = self.shards[i].detach().to(self.compute_dtype or torch.float32)\n"
        "                return torch.cat([local] * self.world).as_strided(size, stride, offset)\n",
    )
    report = grade_source(
        EXERCISE, source, checks=["fsdp_matches_unsharded_training", "fsdp_bf16_compute_fp32_masters"], timeout=60
    )
    message = failed(report)["fsdp_matches_unsharded_training"]
    assert "backward all-gathered nothing" in message and "divide by the world size" not in message, message
    assert_one_reason(report, "fsdp_matches_unsharded_training")  # the bf16 check points to it
