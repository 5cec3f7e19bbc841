"""Exercise 01_parallelism, task moe_layer (expert parallelism, all-to-all dispatch and combine): the solution
(tests/test_selfcheck.py, from make selfcheck's grading) and a correct answer of another design get full marks; each typical mistake and lazy answer fails with a message naming
it (real multi-process runs). The mistakes are graded on the first public check only (one 2-rank launch each), the
right answers on every check, hidden included; one grading per answer, module-scoped."""

from __future__ import annotations

import pytest

from tests.helpers import graded_answers

EXERCISE, TASK = "01_parallelism", "moe_layer"
TOP1, EMPTY_RANK, HIDDEN = (
    "moe_two_ranks_one_expert_each_matches_one_process",
    "moe_rank_without_tokens",
    "moe_three_ranks_top2_skewed",
)
SOL_HEAD = """
        def moe_layer(x, expert_ids, gates, experts):
            class Exchange(torch.autograd.Function):
                @staticmethod
                def forward(ctx, rows, send_sizes, recv_sizes):
                    ctx.sizes = (send_sizes, recv_sizes)
                    out = rows.new_empty((sum(recv_sizes),) + tuple(rows.shape[1:]))
                    dist.all_to_all_single(out, rows.contiguous(), recv_sizes, send_sizes)
                    return out

                @staticmethod
                def backward(ctx, grad):
                    return Exchange.forward(ctx, grad, *reversed(ctx.sizes)), None, None

            world_size, local = dist.get_world_size(), len(experts)
            n, k = expert_ids.shape
            flat = expert_ids.reshape(-1)
            order = torch.argsort(flat, stable=True)
            token = torch.arange(n).repeat_interleave(k)[order]
            send_per_expert = torch.bincount(flat, minlength=local * world_size)
            recv_per_expert = torch.empty_like(send_per_expert)
            dist.all_to_all_single(recv_per_expert, send_per_expert)
            send_sizes = send_per_expert.view(world_size, local).sum(1).tolist()
            recv_sizes = recv_per_expert.view(world_size, local).sum(1).tolist()"""
SOL_MID = """
            rows = Exchange.apply(x[token], send_sizes, recv_sizes)
            which = torch.arange(local).repeat(world_size).repeat_interleave(recv_per_expert)
            outputs = rows.new_zeros(rows.shape)
            for e, expert in enumerate(experts):
                mine = which == e
                outputs[mine] = expert(rows[mine])
            back = Exchange.apply(outputs, recv_sizes, send_sizes)"""
SOL_TAIL = """
            weighted = back * gates.reshape(-1)[order].unsqueeze(1)
            return torch.zeros_like(x).index_add(0, token, weighted)"""

ANSWERS = {  # the solution's full marks: tests/test_selfcheck.py, from make selfcheck's grading
    # receive sizes taken to be the send sizes (no exchange of counts)
    "symmetric_sizes": SOL_HEAD.replace(
        "dist.all_to_all_single(recv_per_expert, send_per_expert)", "recv_per_expert = send_per_expert.clone()"
    )
    + SOL_MID
    + SOL_TAIL,
    # the outputs combined as if they came back in the tokens' order
    "order_not_restored": SOL_HEAD
    + SOL_MID
    + """
            weighted = back * gates.reshape(-1)[order].unsqueeze(1)
            return torch.zeros_like(x).index_add(0, torch.arange(n).repeat_interleave(k), weighted)""",
    "no_gates": SOL_HEAD
    + SOL_MID
    + """
            return torch.zeros_like(x).index_add(0, token, back)""",
    # every expert's weights gathered on every rank, the tokens computed where they are
    "gathers_experts": """
        def moe_layer(x, expert_ids, gates, experts):
            import copy
            world_size, local = dist.get_world_size(), len(experts)
            everyone = []
            for expert in experts:
                flat = torch.cat([p.detach().reshape(-1) for p in expert.parameters()])
                got = [torch.empty_like(flat) for _ in range(world_size)]
                dist.all_gather(got, flat)
                everyone.append(got)
            models = {}
            for r in range(world_size):
                for e in range(local):
                    m = copy.deepcopy(experts[e])
                    torch.nn.utils.vector_to_parameters(everyone[e][r], m.parameters())
                    models[r * local + e] = m
            for e in range(local):
                models[dist.get_rank() * local + e] = experts[e]
            n, k = expert_ids.shape
            return torch.stack([sum(gates[t, j] * models[int(expert_ids[t, j])](x[t]) for j in range(k)) for t in range(n)])""",
    "zeros": """
        def moe_layer(x, expert_ids, gates, experts):
            return torch.zeros_like(x)""",
}

# correct too, another design: counts gathered as a table, rows grouped per destination by masks, the autograd-aware
# all-to-all of torch.distributed.nn, each received block run by its expert in turn
ANSWERS["another_design"] = """
        def moe_layer(x, expert_ids, gates, experts):
            from torch.distributed.nn.functional import all_to_all_single as exchange
            rank, world_size, E = dist.get_rank(), dist.get_world_size(), len(experts)
            mine = torch.bincount(expert_ids.reshape(-1), minlength=E * world_size)
            table = [torch.empty_like(mine) for _ in range(world_size)]
            dist.all_gather(table, mine)
            table = torch.stack(table)  # (source rank, expert)
            tokens, slots = [], []
            for e in range(E * world_size):
                t, j = (expert_ids == e).nonzero(as_tuple=True)
                tokens.append(t)
                slots.append(j)
            t, j = torch.cat(tokens), torch.cat(slots)
            send = [int(table[rank, r * E:(r + 1) * E].sum()) for r in range(world_size)]
            recv = [int(table[r, rank * E:(rank + 1) * E].sum()) for r in range(world_size)]
            rows = exchange(x.new_empty(sum(recv), x.shape[1]), x[t], recv, send)
            outs, at = [], 0
            for source in range(world_size):
                for e in range(E):
                    m = int(table[source, rank * E + e])
                    outs.append(experts[e](rows[at:at + m]))
                    at += m
            back = exchange(x.new_empty(len(t), x.shape[1]), torch.cat(outs), send, recv)
            return torch.zeros_like(x).index_add(0, t, back * gates[t, j].unsqueeze(1))"""

# every token sent to every rank (its gates and ids packed beside it), each rank adds its experts' share
ANSWERS["every_token_everywhere"] = """
        def moe_layer(x, expert_ids, gates, experts):
            rank, world_size, E = dist.get_rank(), dist.get_world_size(), len(experts)
            n = torch.tensor([x.shape[0]])
            sizes = [torch.empty_like(n) for _ in range(world_size)]
            dist.all_gather(sizes, n)
            sizes = [int(s) for s in sizes]
            packed = torch.cat([x, gates, expert_ids.float()], 1)
            every = packed.new_empty(sum(sizes), packed.shape[1])
            dist.all_to_all_single(every, packed.repeat(world_size, 1), sizes, [x.shape[0]] * world_size)
            d, k = x.shape[1], gates.shape[1]
            xs, gs, ids = every[:, :d], every[:, d:d + k], every[:, d + k:].long()
            out = torch.zeros_like(xs)
            for e in range(E):
                t, j = (ids == rank * E + e).nonzero(as_tuple=True)
                out = out.index_add(0, t, gs[t, j].unsqueeze(1) * experts[e](xs[t]))
            back = out.new_empty(x.shape[0] * world_size, d)
            dist.all_to_all_single(back, out, [x.shape[0]] * world_size, sizes)
            return back.view(world_size, -1, d).sum(0)"""

# rows padded to a capacity (the largest n * k) so that every split is even: zeros travel too
ANSWERS["padded_to_capacity"] = """
        def moe_layer(x, expert_ids, gates, experts):
            from torch.distributed.nn.functional import all_to_all_single as exchange
            W, E = dist.get_world_size(), len(experts)
            n, k = expert_ids.shape
            cap = torch.tensor([n * k])
            dist.all_reduce(cap, op=dist.ReduceOp.MAX)
            C = int(cap)
            flat = expert_ids.reshape(-1)
            order = torch.argsort(flat, stable=True)
            token = torch.arange(n).repeat_interleave(k)[order]
            dest = flat[order] // E
            per_expert = torch.bincount(flat, minlength=E * W)
            got = torch.empty_like(per_expert)
            dist.all_to_all_single(got, per_expert)
            send_n = per_expert.view(W, E).sum(1)
            slot = torch.cat([torch.arange(int(c)) for c in send_n]) + dest * C
            buf = x.new_zeros(W * C, x.shape[1]).index_copy(0, slot, x[token])
            rows = exchange(x.new_empty(W * C, x.shape[1]), buf)
            labels = torch.full((W * C,), -1)
            for s in range(W):
                lab = torch.arange(E).repeat_interleave(got.view(W, E)[s])
                labels[s * C:s * C + len(lab)] = lab
            outputs = rows.new_zeros(rows.shape)
            for e in range(E):
                m = labels == e
                outputs[m] = experts[e](rows[m])
            back = exchange(x.new_empty(W * C, x.shape[1]), outputs)
            weighted = back[slot] * gates.reshape(-1)[order].unsqueeze(1)
            return torch.zeros_like(x).index_add(0, token, weighted)"""

RIGHT = ("another_design",)


@pytest.fixture(scope="module")
def reports():
    return graded_answers(EXERCISE, TASK, ANSWERS, lambda name: None if name in RIGHT else [TOP1])


@pytest.mark.parametrize("answer", RIGHT)
def test_right_answers_get_full_marks(reports, answer):
    report, bad = reports[answer]
    assert bad == {}, bad
    assert report.score == report.max_score == 6
    assert {c.name for c in report.checks} == {TOP1, EMPTY_RANK, HIDDEN}


MISTAKES = {
    "symmetric_sizes": "exchange the per-rank (or per-expert) token counts first",
    "order_not_restored": "the right rows in another order",
    "no_gates": "without the gates",
    "gathers_experts": "moved floating-point data with all_gather",
    "every_token_everywhere": "only routed tokens move",
    "zeros": "never travelled to rank",
    "padded_to_capacity": "not rows padded to a fixed capacity",
}


@pytest.mark.parametrize("answer", sorted(MISTAKES))
def test_each_mistake_scores_nothing_with_a_message_naming_it(reports, answer):
    report, bad = reports[answer]
    assert report.score == 0 and set(bad) == {TOP1}, bad
    assert MISTAKES[answer] in bad[TOP1], bad[TOP1]
