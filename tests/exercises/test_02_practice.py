"""02_ddp_basics, DDP in practice (train_with_accumulation, train_uneven, BucketedDDP): each typical mistake and the
laziest wrong answers fail with a message naming the mistake. The solution's full marks on every task's checks:
tests/test_selfcheck.py (test_each_solution_passes_every_check_of_every_task), from make selfcheck's grading."""

import pytest

from grader.exercises import get_exercise
from tests.helpers import (
    assert_lazy_answer_earns_nothing,
    failed,
    grade_source,
    mutate,
    replace_definition,
    solution_source,
)

EXERCISE = "02_ddp_basics"
TASKS = ("train_with_accumulation", "train_uneven", "BucketedDDP")


BUCKETED_BROADCAST = (
    "        self.world_size = dist.get_world_size()\n        with torch.no_grad():\n"
    "            for tensor in list(module.parameters()) + list(module.buffers()):\n"
    "                dist.broadcast(tensor, src=0)\n"
)  # BucketedDDP's (MiniDDP's differs)
MUTANTS = [  # (task, old, new, check, phrase)
    (
        "train_with_accumulation",
        "with contextlib.nullcontext() if last else model.no_sync():",
        "with contextlib.nullcontext():",
        "accumulation_one_all_reduce_per_bucket_per_step",
        "no_sync is missing",
    ),
    (
        "train_with_accumulation",
        "(loss / accumulation_steps).backward()",
        "loss.backward()",
        "accumulation_matches_big_batch_step",
        "not divided by the number of micro-batches",
    ),
    (
        "train_with_accumulation",
        "        if last:\n            optimizer.step()",
        "        if True:\n            optimizer.step()",
        "accumulation_matches_big_batch_step",
        "the step is taken every micro-batch",
    ),
    (
        "train_with_accumulation",
        "            optimizer.zero_grad()\n    dist.all_reduce(totals)\n",
        "            optimizer.zero_grad()\n",
        "accumulation_returns_global_mean_loss",
        "each returned its own mean",
    ),
    (
        "BucketedDDP",
        "torch.cat([g.reshape(-1) for g in grads]).div_(self.world_size)",
        "torch.cat([g.reshape(-1) for g in grads])",
        "bucketed_gradients_match_ddp",
        "world_size times DDP's",
    ),
    (
        "BucketedDDP",
        "if current and size + nbytes > cap:",
        "if current:",
        "bucketed_one_all_reduce_per_bucket",
        "One per parameter",
    ),
    (
        "BucketedDDP",
        "            if i not in self._pending:  # holds",
        "            if True:  # holds",
        "bucketed_one_all_reduce_per_bucket",
        "all-reduced twice",
    ),
    (
        "BucketedDDP",
        "the bucket's last gradient: launch now, during backward\n            self._launch(i)",
        "\n            pass",
        "bucketed_all_reduce_overlaps_backward",
        "started after backward returned",
    ),
    (
        "BucketedDDP",
        (
            "        if self._ready[i] == len(self.buckets[i]):  # the bucket's last gradient: launch now, during "
            "backward\n            self._launch(i)"
        ),
        (
            "        if sum(self._ready) == sum(map(len, self.buckets)):  # all at the end of backward\n"
            "            for j in range(len(self.buckets)):\n                self._launch(j)"
        ),
        "bucketed_all_reduce_overlaps_backward",
        "not all together at the end of backward",
    ),
    (
        "BucketedDDP",
        (
            "        for i in range(len(self.buckets)):\n"
            "            if i not in self._pending:  # holds a parameter that forward did not use\n"
            "                self._launch(i)\n"
        ),
        "",
        "bucketed_gradients_match_ddp",
        "never becomes ready",
    ),
    # each of these names the mistake
    (
        "train_with_accumulation",
        "        last = (i + 1) % accumulation_steps == 0\n",
        "        optimizer.zero_grad()\n        last = (i + 1) % accumulation_steps == 0\n",
        "accumulation_matches_big_batch_step",
        "zero_grad() ran before every micro-batch",
    ),
    (
        "train_with_accumulation",
        "            optimizer.step()\n            optimizer.zero_grad()\n",
        "            optimizer.step()\n",
        "accumulation_matches_big_batch_step",
        "zero_grad() was never called",
    ),
    (
        "train_with_accumulation",
        (
            "        with contextlib.nullcontext() if last else model.no_sync():  # all-reduce "
            "only on the last micro-batch\n            loss = loss_fn(model(inputs), targets)\n"
        ),
        (
            "        loss = loss_fn(model(inputs), targets)\n"
            "        with contextlib.nullcontext() if last else model.no_sync():\n"
        ),
        "accumulation_one_all_reduce_per_bucket_per_step",
        "only backward is inside it",
    ),
    (
        "train_uneven",
        "            optimizer.zero_grad()\n            loss_fn(model(inputs.to(device)),",
        "            loss_fn(model(inputs.to(device)),",
        "uneven_matches_join_semantics",
        "zero_grad() was not called",
    ),
    # the broadcast at construction and the tied weight travelling once
    (
        "BucketedDDP",
        BUCKETED_BROADCAST,
        "        self.world_size = dist.get_world_size()\n",
        "bucketed_gradients_match_ddp",
        "parameters right after BucketedDDP(...) are not rank 0's",
    ),
    (
        "BucketedDDP",
        BUCKETED_BROADCAST,
        BUCKETED_BROADCAST.replace(" + list(module.buffers())", ""),
        "bucketed_gradients_match_ddp",
        "buffers right after BucketedDDP(...) are not rank 0's",
    ),
    (
        "BucketedDDP",
        "for param in reversed([p for p in module.parameters() if p.requires_grad]):",
        "for param in reversed([p for m in module.modules() for p in m.parameters(recurse=False) if p.requires_grad]):",
        "bucketed_one_all_reduce_per_bucket",
        "The tied weight encode.weight (the same Parameter as decode.weight)",
    ),
    (
        "BucketedDDP",
        BUCKETED_BROADCAST,
        BUCKETED_BROADCAST.replace(
            "        self.world_size",
            "        self.module = __import__('copy').deepcopy(module)\n        self.world_size",
        ),
        "bucketed_gradients_match_ddp",
        "`self.module` is not the model it was given",
    ),
    (
        "BucketedDDP",
        "self._pending[i] = (dist.all_reduce(flat, async_op=True), flat)",
        (
            "dist.all_reduce(flat)  # blocking\n        done = torch.futures.Future()\n        done.set_result(None)\n"
            "        self._pending[i] = (done, flat)"
        ),
        "bucketed_all_reduce_overlaps_backward",
        "called without async_op=True",
    ),
    (
        "BucketedDDP",
        "for param in reversed([p for p in module.parameters() if p.requires_grad]):",
        "for param in reversed(list(module.parameters())):",
        "bucketed_gradients_match_ddp",
        "a gradient hook on a frozen parameter",
    ),
    (
        "BucketedDDP",
        "for param in reversed([p for p in module.parameters() if p.requires_grad]):",
        "for param in [p for p in module.parameters() if p.requires_grad]:",
        "bucketed_one_all_reduce_per_bucket",
        "fill them with the gradients in reverse parameter order",
    ),
]


@pytest.mark.parametrize("task, old, new, check_name, phrase", MUTANTS, ids=[f"{m[3]}:{m[4][:24]}" for m in MUTANTS])
def test_typical_mistake_fails_with_a_targeted_message(task, old, new, check_name, phrase):
    report = grade_source(EXERCISE, mutate(solution_source(EXERCISE), old, new), checks=[check_name])
    messages = failed(report)
    assert check_name in messages, f"{check_name} passed; results:\n" + "\n".join(report.lines())
    assert phrase in messages[check_name], messages[check_name]
    from grader.notebook.hints import check_hints

    assert check_name in check_hints(EXERCISE), f"{check_name} carries no hint (CHECK_HINTS in its hints.py)"


def test_forgotten_join_hangs_and_the_message_says_use_join():
    source = mutate(solution_source(EXERCISE), "    with Join([model]):", "    with contextlib.nullcontext():")
    report = grade_source(EXERCISE, source, checks=["uneven_finishes_without_hang"])
    message = failed(report)["uneven_finishes_without_hang"]
    assert "Use Join" in message and "rank 0 hung" in message, message
    assert report.checks[0].hung


STOP_AT_SHORTEST = """
def train_uneven(model, loader, optimizer, loss_fn):
    n = torch.tensor([len(loader)])
    dist.all_reduce(n, op=dist.ReduceOp.MIN)
    for inputs, targets in list(loader)[:int(n)]:
        optimizer.zero_grad()
        loss_fn(model(inputs), targets).backward()
        optimizer.step()
"""


def test_stopping_at_the_shortest_loader_is_named():
    source = replace_definition(solution_source(EXERCISE), "train_uneven", STOP_AT_SHORTEST)
    report = grade_source(EXERCISE, source, task="train_uneven")
    messages = failed(report)
    assert "stopped at the shortest loader" in messages["uneven_finishes_without_hang"]
    assert report.score == 0


LAZY = [  # (task, the whole wrong definition, a phrase of the message)
    (
        "train_with_accumulation",
        """
def train_with_accumulation(model, loader, optimizer, loss_fn, accumulation_steps):
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss_fn(model(inputs), targets).backward()
        optimizer.step()
""",
        "the step is taken every micro-batch",
    ),
    (
        "train_with_accumulation",
        """
def train_with_accumulation(model, loader, optimizer, loss_fn, accumulation_steps):
    return 0.0
""",
        "optimizer.step() ran 0 times",
    ),
    (
        "train_uneven",
        """
def train_uneven(model, loader, optimizer, loss_fn):
    pass
""",
        "took 0 optimizer steps",
    ),
    (
        "BucketedDDP",
        """
class BucketedDDP(nn.Module):
    def __init__(self, module, bucket_cap_mb):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        pass
""",
        "are not rank 0's",
    ),
    (
        "BucketedDDP",
        """
class BucketedDDP(DDP):
    def __init__(self, module, bucket_cap_mb):
        super().__init__(module, bucket_cap_mb=bucket_cap_mb)

    def finish_gradient_synchronization(self):
        pass
""",
        "build it by hand",
    ),
]


@pytest.mark.parametrize("task, code, phrase", LAZY, ids=[f"{t}:{p[:24]}" for t, _, p in LAZY])
def test_laziest_answers_score_zero(task, code, phrase):
    assert_lazy_answer_earns_nothing(EXERCISE, task, code, phrase)


# --- per-step state not reset ----------------------------------------------------


def test_bucketed_state_not_reset_is_named_from_the_second_step():
    reset = "        self._pending.clear()\n        self._ready = [0] * len(self.buckets)\n"
    source = mutate(solution_source(EXERCISE), reset, "        self._pending.clear()\n")
    report = grade_source(EXERCISE, source, task="BucketedDDP")
    message = failed(report)["bucketed_all_reduce_overlaps_backward"]
    assert "from the second step on, no all-reduce was launched" in message, message
    assert "reset the per-step state" in message and "step 1" not in message, message


# --- every spelling of the all-reduce is counted -----------------------------------

LAUNCH = "self._pending[i] = (dist.all_reduce(flat, async_op=True), flat)"
SPELLINGS = {  # a correct BucketedDDP whose all-reduce is written another way: (module-level import, the launch)
    "imported name": (
        "from torch.distributed import all_reduce as launch",
        "self._pending[i] = (launch(flat, async_op=True), flat)",
    ),
    "distributed_c10d, positional async_op": (
        "",
        "self._pending[i] = (torch.distributed.distributed_c10d.all_reduce(flat, dist.ReduceOp.SUM, None, True), flat)",
    ),
    "process group object": ("", "self._pending[i] = (dist.group.WORLD.allreduce([flat]), flat)"),
}


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_bucketed_in_every_spelling_gets_full_marks(spelling):
    imports, launch = SPELLINGS[spelling]
    source = mutate(solution_source(EXERCISE), LAUNCH, launch)
    source = mutate(source, "class BucketedDDP(nn.Module):", f"{imports}\n\n\nclass BucketedDDP(nn.Module):")
    report = grade_source(EXERCISE, source, task="BucketedDDP")
    assert report.passed, "\n".join(report.lines())
    assert report.score == get_exercise(EXERCISE).points_of("BucketedDDP")


PER_PARAMETER = '''
from torch.distributed.distributed_c10d import all_reduce as hidden_all_reduce


class BucketedDDP(nn.Module):
    """One all-reduce per gradient (no buckets){token}."""

    def __init__(self, module, bucket_cap_mb):
        super().__init__()
        self.module = module
        self.world_size = dist.get_world_size()
        with torch.no_grad():
            for tensor in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(tensor, src=0)
        cap = bucket_cap_mb * 1024 * 1024
        self.buckets, current, size = [], [], 0
        for param in reversed([p for p in module.parameters() if p.requires_grad]):
            nbytes = param.numel() * param.element_size()
            if current and size + nbytes > cap:
                self.buckets.append(current)
                current, size = [], 0
            current.append(param)
            size += nbytes
        if current:
            self.buckets.append(current)
        self._bucket_of = {{param: i for i, bucket in enumerate(self.buckets) for param in bucket}}
        self._ready = [0] * len(self.buckets)
        self._works, self._tokens = {{}}, []
        for param in self._bucket_of:
            param.register_post_accumulate_grad_hook(self._on_gradient_ready)

    def _on_gradient_ready(self, param):
        self._works[param] = hidden_all_reduce(param.grad.div_(self.world_size), async_op=True)
        i = self._bucket_of[param]
        self._ready[i] += 1
        if {token_if}self._ready[i] == len(self.buckets[i]):
            self._tokens.append(dist.all_reduce(torch.zeros(1), async_op=True))

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        for param in self._bucket_of:
            if param not in self._works:  # unused by forward
                param.grad = torch.zeros_like(param)
                self._works[param] = hidden_all_reduce(param.grad, async_op=True)
        for work in [*self._works.values(), *self._tokens]:
            work.wait()
        self._works, self._tokens = {{}}, []
        self._ready = [0] * len(self.buckets)
'''


def test_a_count_faked_with_token_calls_earns_no_more_than_its_honest_twin():
    """The disguised twin does its real work with one hidden all-reduce per gradient and adds a token all-reduce
    per bucket, so that a recorder blind to the hidden spelling would count one per bucket."""
    honest = PER_PARAMETER.format(token="", token_if="False and ")
    disguised = PER_PARAMETER.format(token=", disguised as one per bucket by token all-reduces", token_if="")
    scores = {}
    for name, code in (("honest", honest), ("disguised", disguised)):
        report = grade_source(
            EXERCISE, replace_definition(solution_source(EXERCISE), "BucketedDDP", code), task="BucketedDDP"
        )
        assert "bucketed_one_all_reduce_per_bucket" in failed(report), "\n".join(report.lines())
        scores[name] = report.score
    assert scores["disguised"] <= scores["honest"] < get_exercise(EXERCISE).points_of("BucketedDDP"), scores


def test_gloo_timeout_in_train_uneven_is_reported_as_the_missing_join():
    """gloo's own timeout (or a lost peer) can end rank 0's wait before the check's bound: the hint is Join's."""
    from grader.engine.plan import HardwarePlan
    from grader.engine.results import RankReport, RunResult
    from grader.exercises.ddp_basics.checks_uneven import _waited_for_a_finished_rank

    def run(error):
        return RunResult([RankReport(0, "error", error=error), RankReport(1, "ok")], HardwarePlan(2, 0), 1.0)

    timeout = {"type": "DistBackendError", "message": "[gloo] Timed out waiting 15000ms for recv operation"}
    assert _waited_for_a_finished_rank(run(timeout))
    assert not _waited_for_a_finished_rank(run({"type": "NameError", "message": "name 'x' is not defined"}))
