"""Exercise 01_parallelism, task ring_attention (context parallelism, causal ring attention): the solution (tests/test_selfcheck.py,
from make selfcheck's grading) and a correct variant written with batch_isend_irecv get full marks; each typical mistake (the causal mask by local
positions, no rescaling of the running sums, an all-gather, a step too many, a block never merged, every block
collected) fails the check that catches it with a message naming it; a lazy answer and the untouched release earn
nothing (real multi-process runs, one grading per answer, each on the checks it needs)."""

from __future__ import annotations

import pytest

from tests.helpers import graded_answers

EXERCISE, TASK = "01_parallelism", "ring_attention"
TWO, FOUR, HIDDEN = (
    "ring_two_ranks_matches_causal_attention",
    "ring_four_ranks_never_holds_every_block",
    "ring_three_ranks_uneven_blocks",
)
ALL = [TWO, FOUR, HIDDEN]

# a correct answer unlike the solution's: k and v packed in one message, merged before the exchange,
# one batch_isend_irecv per step
PACKED = """
        def ring_attention(q, k, v, block_sizes):
            rank, world = dist.get_rank(), dist.get_world_size()
            start = [sum(block_sizes[:i]) for i in range(world)]
            qpos = start[rank] + torch.arange(len(q))
            m = torch.full((len(q), 1), -math.inf)
            num, den = torch.zeros(len(q), v.shape[1]), torch.zeros(len(q), 1)
            kv, src = torch.cat([k, v], dim=1), rank
            for step in range(world):
                if src <= rank:
                    kb, vb = kv[:, :k.shape[1]], kv[:, k.shape[1]:]
                    kpos = start[src] + torch.arange(len(kb))
                    s = (q @ kb.T / math.sqrt(q.shape[1])).masked_fill(kpos[None] > qpos[:, None], -math.inf)
                    new = torch.maximum(m, s.amax(1, keepdim=True))
                    p, c = torch.exp(s - new), torch.exp(m - new)
                    num = num * c + p @ vb
                    den = den * c + p.sum(1, keepdim=True)
                    m = new
                if step == world - 1:
                    break
                nxt = (src - 1) % world
                buf = torch.empty(block_sizes[nxt], kv.shape[1])
                ops = [dist.P2POp(dist.isend, kv, (rank + 1) % world), dist.P2POp(dist.irecv, buf, (rank - 1) % world)]
                for request in dist.batch_isend_irecv(ops):
                    request.wait()
                kv, src = buf, nxt
            return num / den"""


def mutant(old: str, new: str) -> str:
    assert old in PACKED, old
    return PACKED.replace(old, new)


ANSWERS = {  # the solution's full marks: tests/test_selfcheck.py, from make selfcheck's grading
    "packed_batch_isend_irecv": PACKED,
    # the triangle by local positions on every block, later ranks' blocks included
    "local_mask": mutant("if src <= rank:", "if True:").replace("kpos = start[src] +", "kpos = start[rank] +"),
    "no_rescale": mutant("num = num * c + p @ vb", "num = num + p @ vb").replace(
        "den = den * c + p.sum", "den = den + p.sum"
    ),
    # one exchange too many: every block comes back to its owner
    "one_step_too_many": mutant("                if step == world - 1:\n                    break\n", ""),
    # world_size - 1 iterations of merge-then-exchange: the last block received is never merged
    "last_block_never_merged": mutant("for step in range(world):", "for step in range(world - 1):"),
    "all_gather": """
        def ring_attention(q, k, v, block_sizes):
            world, rank = dist.get_world_size(), dist.get_rank()
            keys = [torch.empty(n, k.shape[1]) for n in block_sizes]
            values = [torch.empty(n, v.shape[1]) for n in block_sizes]
            dist.all_gather(keys, k)
            dist.all_gather(values, v)
            keys, values = torch.cat(keys), torch.cat(values)
            qpos = sum(block_sizes[:rank]) + torch.arange(len(q))
            s = (q @ keys.T / math.sqrt(q.shape[1])).masked_fill(torch.arange(len(keys))[None] > qpos[:, None],
                                                                 -math.inf)
            return torch.softmax(s, 1) @ values""",
    # the right messages, but every block kept and concatenated before one softmax
    "collects_every_block": """
        def ring_attention(q, k, v, block_sizes):
            rank, world = dist.get_rank(), dist.get_world_size()
            kv, src = torch.cat([k, v], 1), rank
            seen = {rank: kv}
            for step in range(world - 1):
                nxt = (src - 1) % world
                buf = torch.empty(block_sizes[nxt], kv.shape[1])
                ops = [dist.P2POp(dist.isend, kv, (rank + 1) % world), dist.P2POp(dist.irecv, buf, (rank - 1) % world)]
                for request in dist.batch_isend_irecv(ops):
                    request.wait()
                kv, src = buf, nxt
                seen[src] = kv
            full = torch.cat([seen[j] for j in range(world)])
            keys, values = full[:, :k.shape[1]], full[:, k.shape[1]:]
            qpos = sum(block_sizes[:rank]) + torch.arange(len(q))
            s = (q @ keys.T / math.sqrt(q.shape[1])).masked_fill(torch.arange(len(keys))[None] > qpos[:, None],
                                                                 -math.inf)
            return torch.softmax(s, 1) @ values""",
    # the laziest: each rank attends within its own block, nothing sent
    "own_block_only": """
        def ring_attention(q, k, v, block_sizes):
            s = (q @ k.T / math.sqrt(q.shape[1])).masked_fill(torch.ones(len(q), len(k), dtype=torch.bool).triu(1),
                                                              -math.inf)
            return torch.softmax(s, 1) @ v""",
    "release": """
        def ring_attention(q, k, v, block_sizes):
            raise NotImplementedError()""",
}
CHECKS = {"collects_every_block": [FOUR], "packed_batch_isend_irecv": ALL, "own_block_only": ALL}
CHECKS["release"] = ALL


@pytest.fixture(scope="module")
def reports():
    return graded_answers(EXERCISE, TASK, ANSWERS, checks_of=lambda name: CHECKS.get(name, [TWO]))


@pytest.mark.parametrize("answer", ["packed_batch_isend_irecv"])
def test_correct_answers_get_full_marks(reports, answer):
    report, bad = reports[answer]
    assert bad == {}, bad
    assert report.score == report.max_score == 6
    assert {c.name for c in report.checks} == set(ALL)


@pytest.mark.parametrize(
    "answer, phrase",
    [
        ("local_mask", "the causal triangle applied inside every block by local positions"),
        ("no_rescale", "a merge that does not rescale"),
        ("one_step_too_many", "off by one in the number of steps"),
        ("last_block_never_merged", "every visible block but rank 0's (one block never merged"),
        ("all_gather", "called dist.all_gather: an all-gather puts every rank's keys and values on every rank"),
    ],
)
def test_each_typical_mistake_is_named(reports, answer, phrase):
    report, bad = reports[answer]
    assert report.score == 0 and set(bad) == {TWO}, bad
    assert phrase in bad[TWO], bad[TWO]


def test_collecting_every_block_fails_the_memory_check(reports):
    report, bad = reports["collects_every_block"]
    assert report.score == 0 and set(bad) == {FOUR}, bad
    assert "collected several blocks into one tensor" in bad[FOUR], bad[FOUR]


@pytest.mark.parametrize("answer, phrase", [("own_block_only", "sent nothing"), ("release", "NotImplementedError")])
def test_lazy_answers_earn_nothing(reports, answer, phrase):
    report, bad = reports[answer]
    assert report.score == 0 and set(bad) == set(ALL), bad
    assert phrase in bad[TWO], bad[TWO]
