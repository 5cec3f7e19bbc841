"""fences.py and happens_before.Collectives.entries: which waits hold a rank until its peers have joined, on
every backend (a barrier; an *_object collective read back by the rank that receives), recorded per call in real
2-rank gloo runs; the rule's verdict on what a rank called after its peer's event."""

import pytest

from grader.engine import run_distributed
from grader.exercises.fences import unfenced


def _calls(ctx):
    import torch
    import torch.distributed as dist

    from grader.exercises import happens_before as hb

    def body():
        t = torch.ones(2)
        dist.all_reduce(t)
        dist.broadcast(t, src=0)
        dist.barrier()
        dist.barrier(async_op=True).wait()
        dist.monitored_barrier()
        dist.broadcast_object_list([ctx.rank], src=0)
        dist.broadcast_object_list([ctx.rank], group_src=1)
        dist.all_gather_object([None] * ctx.world_size, ctx.rank)

    watch = hb.Collectives(ctx)
    with watch.marking(body):
        body()
    return watch.entries, watch.entered


@pytest.mark.timeout(60)
def test_each_call_says_whether_it_holds_the_rank_on_every_backend():
    result = run_distributed(_calls, 2, timeout=30, trusted=False)
    assert result.ok, result.failure()
    for rank, (entries, entered) in enumerate(result.values):
        receives_from_0, receives_from_1 = rank != 0, rank != 1
        assert entries == [
            ("all_reduce", False),
            ("broadcast", False),  # nccl: returned once queued on the GPU
            ("barrier", True),
            ("barrier(async_op=True)", False),  # returns at once: only its wait() holds the rank
            ("monitored_barrier", False),  # gloo only: nccl refuses it
            # the source sends and goes on; a receiving rank reads the sizes, then the objects, back
            ("broadcast_object_list", receives_from_0),
            ("broadcast_object_list", receives_from_0),
            ("broadcast_object_list", receives_from_1),
            ("broadcast_object_list", receives_from_1),
            ("all_gather_object", True),
            ("all_gather_object", True),
        ], (rank, entries)
        assert entered == len(entries)


def test_only_collectives_after_the_peers_event_count():
    entries = [("barrier", True), ("all_reduce", False), ("broadcast", False), ("all_reduce", False)]
    assert unfenced(entries, 1) == ["all_reduce", "broadcast"]  # the barrier came before the peer's event
    assert unfenced(entries, 0) is None  # a barrier after it: the rank waited
    assert unfenced(entries, 4) is None  # nothing after it: judged by what the rank saw (the file, the peer)
    assert unfenced([("all_reduce", False), ("barrier", True)], 0) is None  # a barrier later still holds
