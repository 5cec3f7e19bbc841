"""The live-bytes probe (grader/exercises/syncbn_sharded/live_bytes.py) around real gloo collectives: a gathered
buffer the program dropped never counts, whenever gloo's worker thread lets go of the finished Work that held it
(it used to count now and then under load: MiniFSDP's 3-rank check once saw 3 layers' worth). The collectives'
results still reach the program's tensors, in place, sync or async."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from grader.exercises.syncbn_sharded.live_bytes import LiveBytes

WORLD, SHARD, ROUNDS = 3, 352, 300


def _rank(rank: int, store_path: str, answers) -> None:
    dist.init_process_group("gloo", store=dist.FileStore(store_path, WORLD), rank=rank, world_size=WORLD)
    try:
        shard = torch.full((SHARD,), float(rank))
        tracker = LiveBytes(above=SHARD * 4)
        backend_refs = set()
        with tracker:
            for _ in range(ROUNDS):
                full = shard.new_empty(SHARD * WORLD)
                dist.all_gather_single(full, shard)
                backend_refs.add(full._use_count() - 1)  # references other than the program's own
                gathered = full.view(WORLD, SHARD)[:, 0].tolist()
                del full
            summed = torch.ones(SHARD * WORLD)
            dist.all_reduce(summed, async_op=True).wait()
            pieces = [torch.zeros(2) for _ in range(WORLD)]
            dist.all_gather(pieces, torch.full((2,), float(rank)))
        answers.put(
            (rank, tracker.peak["forward"], backend_refs, gathered, summed[0].item(), [p[0].item() for p in pieces])
        )
    finally:
        dist.destroy_process_group()


def test_a_gathered_buffer_the_program_dropped_never_counts(tmp_path):
    ctx = mp.get_context("spawn")
    answers = ctx.Queue()
    ranks = [ctx.Process(target=_rank, args=(r, str(tmp_path / "store"), answers)) for r in range(WORLD)]
    for p in ranks:
        p.start()
    try:
        got = sorted(answers.get(timeout=120) for _ in ranks)
    finally:
        for p in ranks:
            p.join(30)
            if p.is_alive():
                p.kill()
    ranks_order = [float(r) for r in range(WORLD)]
    for rank, peak, backend_refs, gathered, summed, pieces in got:
        assert backend_refs == {0}, f"rank {rank}: the backend still held the gathered buffer after the call"
        assert peak == SHARD * WORLD * 4, f"rank {rank}: peak {peak} bytes, one gathered buffer is {SHARD * WORLD * 4}"
        assert gathered == ranks_order and summed == WORLD and pieces == ranks_order
