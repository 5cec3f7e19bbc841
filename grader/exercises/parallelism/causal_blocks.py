"""ring_attention's reference, computed in the parent: one process's causal attention over the whole sequence,
and the outputs a few typical mistakes produce instead (to name the mistake when a rank's output differs).

The sequence is cut into contiguous blocks, one per rank in rank order (`sizes`: every block's length). Query i
(a position in the whole sequence) sees key j iff j <= i; the scores are q . k / sqrt(d).
"""

from __future__ import annotations

import math

import torch


def blocks(
    seed: int, sizes: list[int], d: int, d_v: int, device="cpu"
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(q, k, v) of each rank's block, on `device` (drawn on the CPU: the same numbers on every machine); scores
    spread wide enough that the running maximum moves between blocks."""
    g = torch.Generator().manual_seed(seed)
    drawn = [
        (2 * torch.randn(n, d, generator=g), 2 * torch.randn(n, d, generator=g), torch.randn(n, d_v, generator=g))
        for n in sizes
    ]
    return [tuple(t.to(device) for t in block) for block in drawn]


def _starts(sizes: list[int]) -> list[int]:
    return [sum(sizes[:i]) for i in range(len(sizes))]


def _attend(q, keys, values, visible) -> torch.Tensor:
    scores = (q @ keys.T / math.sqrt(q.shape[-1])).masked_fill(~visible, -math.inf)
    return torch.softmax(scores, dim=-1) @ values


def attention(data, rank: int, visible_of) -> torch.Tensor:
    """Rank `rank`'s output when its queries see the keys that visible_of(q_pos, k_pos, block) allows."""
    sizes = [len(q) for q, _, _ in data]
    starts = _starts(sizes)
    q = data[rank][0]
    q_pos = starts[rank] + torch.arange(sizes[rank])
    keys = torch.cat([k for _, k, _ in data])
    values = torch.cat([v for _, _, v in data])
    k_pos = torch.arange(sum(sizes))
    owner = torch.cat([torch.full((n,), j) for j, n in enumerate(sizes)])
    start_of = torch.tensor(starts)[owner]
    return _attend(q, keys, values, visible_of(q_pos[:, None], k_pos[None, :], owner[None, :], start_of[None, :]))


def causal(data, rank: int) -> torch.Tensor:
    """The expected output: full causal attention."""
    return attention(data, rank, lambda i, j, owner, start: j <= i)


def variants(data, rank: int) -> dict[str, torch.Tensor]:
    """What typical mistakes return on `rank`, by what the mistake is (the message's words)."""
    sizes, q_start = [len(q) for q, _, _ in data], _starts([len(q) for q, _, _ in data])[rank]
    out = {
        "no causal mask at all (every query sees every key)": attention(data, rank, lambda i, j, o, s: j == j),
        "the causal triangle applied inside every block by local positions (a query at local row a sees local key b "
        "<= a of every rank's block, later ranks' included)": attention(
            data, rank, lambda i, j, o, s: (j - s) <= (i - q_start)
        ),
        "the triangle only on its own block and every other block fully visible (later ranks' too)": attention(
            data, rank, lambda i, j, o, s: (o != rank) | (j <= i)
        ),
    }
    for skipped in range(rank + 1):
        if len(sizes) > 1:
            out[f"every visible block but rank {skipped}'s (one block never merged: an off-by-one in the steps)"] = (
                attention(data, rank, lambda i, j, o, s, b=skipped: (j <= i) & (o != b))
            )
    out[
        "a merge that does not rescale: when a block raises the running maximum, the numerator and denominator "
        "gathered so far were not multiplied by exp(old max - new max)"
    ] = unrescaled(data, rank)
    return out


def unrescaled(data, rank: int) -> torch.Tensor:
    """The online softmax without its correction, blocks met in ring order (own, rank - 1, ...): each key's weight is
    taken against the largest score seen up to its block (in that order), never against the final one."""
    sizes = [len(q) for q, _, _ in data]
    starts = _starts(sizes)
    q = data[rank][0]
    q_pos = starts[rank] + torch.arange(sizes[rank])
    keys = torch.cat([k for _, k, _ in data[: rank + 1]])
    values = torch.cat([v for _, _, v in data[: rank + 1]])
    owner = torch.cat([torch.full((n,), j) for j, n in enumerate(sizes[: rank + 1])])
    scores = (q @ keys.T / math.sqrt(q.shape[-1])).masked_fill(
        torch.arange(len(keys))[None, :] > q_pos[:, None], -math.inf
    )
    block_max = torch.stack([scores[:, owner == b].amax(-1) for b in range(rank + 1)], dim=-1)
    seen_max = block_max.flip(-1).cummax(-1).values.flip(-1)  # blocks rank..b have been met when b arrives
    weights = torch.exp(scores - seen_max[:, owner])
    return weights @ values / weights.sum(-1, keepdim=True)


def forwarded(rank: int, world_size: int, steps: int) -> list[int]:
    """The blocks rank sends in `steps` ring steps: its own, then each one it received from rank - 1."""
    return [(rank - i) % world_size for i in range(steps)]
