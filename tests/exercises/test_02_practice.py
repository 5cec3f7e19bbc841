"""02_ddp_basics, DDP in practice (train_with_accumulation, train_uneven, BucketedDDP): the solution gets full
marks on these tasks; each typical mistake and the laziest wrong answers fail with a message naming the mistake."""
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


@pytest.mark.parametrize("task", TASKS)
def test_solution_gets_full_marks(task):
    report = grade_source(EXERCISE, solution_source(EXERCISE), task=task)
    assert report.passed, "\n".join(report.lines())
    assert report.score == get_exercise(EXERCISE).points_of(task) > 0


MUTANTS = [  # (task, old, new, check, phrase)
    ("train_with_accumulation", "with contextlib.nullcontext() if last else model.no_sync():",
     "with contextlib.nullcontext():", "accumulation_one_all_reduce_per_bucket_per_step", "no_sync is missing"),
    ("train_with_accumulation", "(loss / accumulation_steps).backward()", "loss.backward()",
     "accumulation_matches_big_batch_step", "not divided by the number of micro-batches"),
    ("train_with_accumulation", "        if last:\n            optimizer.step()", "        if True:\n            optimizer.step()",
     "accumulation_matches_big_batch_step", "the step is taken every micro-batch"),
    ("train_with_accumulation", "            optimizer.zero_grad()\n    dist.all_reduce(totals)\n",
     "            optimizer.zero_grad()\n",
     "accumulation_returns_global_mean_loss", "each returned its own mean"),
    ("BucketedDDP", "torch.cat([g.reshape(-1) for g in grads]).div_(self.world_size)",
     "torch.cat([g.reshape(-1) for g in grads])", "bucketed_gradients_match_ddp", "world_size times DDP's"),
    ("BucketedDDP", "if current and size + nbytes > cap:", "if current:",
     "bucketed_one_all_reduce_per_bucket", "One per parameter"),
    ("BucketedDDP", "            if i not in self._pending:  # holds", "            if True:  # holds",
     "bucketed_one_all_reduce_per_bucket", "all-reduced twice"),
    ("BucketedDDP", "the bucket's last gradient: launch now, during backward\n            self._launch(i)",
     "\n            pass", "bucketed_all_reduce_overlaps_backward", "started after backward returned"),
    ("BucketedDDP", ("        if self._ready[i] == len(self.buckets[i]):  # the bucket's last gradient: launch now, during "
     "backward\n            self._launch(i)"),
     ("        if sum(self._ready) == sum(map(len, self.buckets)):  # all at the end of backward\n"
     "            for j in range(len(self.buckets)):\n                self._launch(j)"),
     "bucketed_all_reduce_overlaps_backward", "not all together at the end of backward"),
    ("BucketedDDP", ("        for i in range(len(self.buckets)):\n"
     "            if i not in self._pending:  # holds a parameter that forward did not use\n"
     "                self._launch(i)\n"), "", "bucketed_gradients_match_ddp", "never becomes ready"),
]


@pytest.mark.parametrize("task, old, new, check_name, phrase", MUTANTS,
                         ids=[f"{m[3]}:{m[4][:24]}" for m in MUTANTS])
def test_typical_mistake_fails_with_a_targeted_message(task, old, new, check_name, phrase):
    report = grade_source(EXERCISE, mutate(solution_source(EXERCISE), old, new), checks=[check_name])
    messages = failed(report)
    assert check_name in messages, f"{check_name} passed; results:\n" + "\n".join(report.lines())
    assert phrase in messages[check_name], messages[check_name]


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
    ("train_with_accumulation", """
def train_with_accumulation(model, loader, optimizer, loss_fn, accumulation_steps):
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss_fn(model(inputs), targets).backward()
        optimizer.step()
""", "the step is taken every micro-batch"),
    ("train_with_accumulation", """
def train_with_accumulation(model, loader, optimizer, loss_fn, accumulation_steps):
    return 0.0
""", "optimizer.step() ran 0 times"),
    ("train_uneven", """
def train_uneven(model, loader, optimizer, loss_fn):
    pass
""", "took 0 optimizer steps"),
    ("BucketedDDP", """
class BucketedDDP(nn.Module):
    def __init__(self, module, bucket_cap_mb):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        pass
""", "BucketedDDP's gradient"),
    ("BucketedDDP", """
class BucketedDDP(DDP):
    def __init__(self, module, bucket_cap_mb):
        super().__init__(module, bucket_cap_mb=bucket_cap_mb)

    def finish_gradient_synchronization(self):
        pass
""", "build it by hand"),
]


@pytest.mark.parametrize("task, code, phrase", LAZY, ids=[f"{t}:{p[:24]}" for t, _, p in LAZY])
def test_laziest_answers_score_zero(task, code, phrase):
    assert_lazy_answer_earns_nothing(EXERCISE, task, code, phrase)
