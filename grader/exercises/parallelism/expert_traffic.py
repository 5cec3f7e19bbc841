"""moe_layer: what travelled between the ranks, against the routing (parent side).

Expert parallelism moves tokens to the experts, never experts (or whole batches) to the tokens:
- floating-point data moves only by all-to-all (integers, the counts, may move by any collective);
- in the forward, rank r sends rank s exactly the tokens it routed to one of s's experts: each as a row that
  begins or ends with the token (a design may append a gate or an index to the row), none of the others;
- and no more floats than the routed rows and the outputs it returns, each with two numbers to spare, in the
  forward and in the backward (and one count per expert, should a design send its counts as floats): no padding
  to a capacity, no copy of the batch or of the experts' weights.
"""

from __future__ import annotations

import torch

from grader.checks import CheckFailed
from grader.exercises.parallelism.expert_setting import owner

SPARE = 2  # numbers a row may carry besides the token or output (a gate, an index)


def _floating(t: torch.Tensor) -> bool:
    return t.is_floating_point()


def check_collectives(per_rank: list) -> None:
    for rank, got in enumerate(per_rank):
        moved = sorted(
            {kind for kind, dtype in got["calls"] if kind != "all_to_all" and dtype.startswith(("float", "bfloat"))}
        )
        if moved:
            raise CheckFailed(
                f"rank {rank} moved floating-point data with {', '.join(moved)}: in expert parallelism the "
                "tokens travel to their experts' ranks by all-to-all, and the outputs come back the same way; "
                "no rank gathers the tokens, the experts' weights or the outputs of others (computing every "
                "expert on every rank is not expert parallelism)"
            )


def _rows(chunk: torch.Tensor, d: int) -> torch.Tensor:
    if chunk.dim() == 1:
        return chunk.view(-1, d) if chunk.numel() % d == 0 else chunk.new_zeros(0, d)
    return chunk.reshape(-1, chunk.shape[-1]) if chunk.dim() > 2 else chunk


def tokens_sent(g, sent: list, peer: int, x: torch.Tensor) -> set[int]:
    """The tokens (rows of x) among the floating-point rows one rank sent to peer."""
    d, found = x.shape[1], set()
    for call in sent:
        if peer >= len(call) or not _floating(call[peer]):
            continue
        for row in _rows(call[peer].float(), d):
            if row.numel() < d:
                continue
            found |= {t for t in range(len(x)) if g.close(row[:d], x[t]) or g.close(row[-d:], x[t])}
    return found


def check_dispatch(g, per_rank: list, inputs: list, setting: dict) -> None:
    world_size, per = setting["world_size"], setting["per_rank"]
    for rank, got in enumerate(per_rank):
        x, ids = inputs[rank]["x"], inputs[rank]["ids"]
        for peer in range(world_size):
            if peer == rank:
                continue
            routed = {t for t in range(len(x)) if any(owner(int(e), per) == peer for e in ids[t])}
            seen = tokens_sent(g, got["forward_sent"], peer, x)
            missing, extra = sorted(routed - seen), sorted(seen - routed)
            if missing:
                t = missing[0]
                experts = [int(e) for e in ids[t] if owner(int(e), per) == peer]
                raise CheckFailed(
                    f"rank {rank}'s token {t} chose expert {experts[0]}, which lives on rank {peer}, but the token "
                    f"never travelled to rank {peer} in the forward ({len(missing)} of the {len(routed)} tokens "
                    f"routed there did not): each token goes, by all-to-all, to the ranks of the experts that "
                    "chose it, and the expert runs there (not on the token's rank, not on zeros)"
                )
            if extra:
                raise CheckFailed(
                    f"rank {rank} sent its tokens {extra[:5]} to rank {peer}, which holds none of the experts "
                    "they chose: only routed tokens move (a token goes only to the ranks of its experts)"
                )


def _remote_floats(sent: list, rank: int) -> int:
    return sum(c.numel() for call in sent for peer, c in enumerate(call) if peer != rank and _floating(c))


def routed_rows(inputs: list, setting: dict, rank: int) -> int:
    """The routed rows rank sends (its tokens to other ranks' experts) plus those it returns (outputs)."""
    per = setting["per_rank"]
    out = sum(owner(int(e), per) != rank for e in inputs[rank]["ids"].flatten())
    into = sum(
        owner(int(e), per) == rank for other, inp in enumerate(inputs) if other != rank for e in inp["ids"].flatten()
    )
    return out + into


def check_volume(per_rank: list, inputs: list, setting: dict) -> None:
    d = setting["d"]
    for rank, got in enumerate(per_rank):
        counts = setting["world_size"] * setting["per_rank"]  # the counts, should a design send them as floats
        bound = routed_rows(inputs, setting, rank) * (d + SPARE) + counts
        for phase in ("forward", "backward"):
            floats = _remote_floats(got[f"{phase}_sent"], rank)
            if floats > bound:
                raise CheckFailed(
                    f"rank {rank} sent {floats} floating-point numbers to other ranks in the {phase}, where the "
                    f"tokens it routed away and the outputs it returned make {routed_rows(inputs, setting, rank)} rows of {d} "
                    f"(at most {bound} numbers with a gate and an index each, and the counts): only routed tokens move, not the "
                    "whole batch, not rows padded to a fixed capacity (even splits), not the experts' weights"
                )
