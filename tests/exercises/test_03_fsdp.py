"""03_syncbn_sharded, MiniFSDP (FSDP by hand): the solution gets full marks (2 ranks and the hidden 3); each
typical mistake fails its own check with a message that names it; the laziest answers earn nothing."""
import pytest

from tests.helpers import (
    assert_lazy_answer_earns_nothing,
    failed,
    grade_source,
    mutate,
    solution_source,
)

EXERCISE = "03_syncbn_sharded"


@pytest.mark.timeout(240)
def test_solution_gets_full_marks():
    report = grade_source(EXERCISE, solution_source(EXERCISE), task="MiniFSDP", timeout=60)
    assert report.checks and all(c.passed for c in report.checks), "\n".join(report.lines())
    assert report.score == report.max_score
    assert any(c.hidden for c in report.checks), "the hidden 3-rank check did not run"


# (old, new, the check that must fail, a phrase of its message)
MUTANTS = [
    # forgot to divide by world size: the gradient is the sum over ranks
    ("                shard.grad /= self.world\n", "                pass\n",
     "fsdp_matches_unsharded_training", "divide by the world size"),
    # all-reduce the full gradient, then keep this rank's chunk
    ("        dist.reduce_scatter_tensor(mine, grad)  # sum over ranks, this rank's chunk only\n",
     "        dist.all_reduce(grad)\n        mine = grad.chunk(ctx.world)[dist.get_rank()].clone()\n",
     "fsdp_traffic_is_gathers_and_reduce_scatters", "does not all-reduce them"),
    # keeps the full parameters after forward
    ("                setattr(mod, name, torch.empty(0))  # free: only autograd's saved copy survives until backward\n",
     "                pass\n", "fsdp_parameters_are_sharded", "free the full parameters after each forward"),
    # compute_dtype ignored
    ("        self.module, self.compute_dtype = module, compute_dtype\n",
     "        self.module, self.compute_dtype = module, None\n",
     "fsdp_bf16_compute_fp32_masters", "compute_dtype is ignored"),
    # master weights stored in bf16
    ("                self.shards.append(nn.Parameter(flat[self.rank * chunk:(self.rank + 1) * chunk].clone()))\n",
     ("                self.shards.append(nn.Parameter(flat[self.rank * chunk:(self.rank + 1) * chunk].clone()"
      ".to(compute_dtype or torch.float32)))\n"),
     "fsdp_bf16_compute_fp32_masters", "keep them float32"),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("old, new, check, phrase", MUTANTS, ids=[m[2] + str(i) for i, m in enumerate(MUTANTS)])
def test_typical_mistake_fails_its_check(old, new, check, phrase):
    report = grade_source(EXERCISE, mutate(solution_source(EXERCISE), old, new), task="MiniFSDP", checks=[check],
                          timeout=60)
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

DDP = '''
def MiniFSDP(module, compute_dtype=None):
    return torch.nn.parallel.DistributedDataParallel(module)
'''


@pytest.mark.timeout(240)
@pytest.mark.parametrize("code, phrase", [(UNSHARDED, "about 1/2"), (DDP, "DistributedDataParallel")],
                         ids=["unsharded_wrapper", "torch_ddp"])
def test_laziest_answers_earn_nothing(code, phrase):
    assert_lazy_answer_earns_nothing(EXERCISE, "MiniFSDP", code, phrase)
