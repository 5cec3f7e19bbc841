"""Staged hangs for the diagnose_hang task: what each rank of a hung NCCL job would show, built from a scenario.

Each rank's dump has the shape of a Flight Recorder dump (torch.distributed.flight_recorder reads the same keys:
"version", "pg_config", "pg_status", "entries" with "collective_seq_id", "profiling_name", "state", "frames", ...),
plus "stack": the rank's Python stack when the dump was taken, as `py-spy dump` prints it (outermost first).

The story of every scenario: all ranks call the same collectives in the same order. One rank (`behind`) stopped
before collective `missing_seq` (it is reading a file, saving, stuck in a loop) and never called it. With NCCL a
rank's CPU only enqueues work for its GPU, so the other ranks did call `missing_seq` ("started": waiting for the
rank behind) and may have enqueued a few more after it ("scheduled"), each its own number (`ahead`). A barrier is
the exception: NCCL's `barrier()` blocks the host until it completes, so a rank enqueues nothing after one that has
not completed, and waits in it. The states are those of a dump taken with TORCH_NCCL_ENABLE_TIMING=1 (without it, a
started collective stays "scheduled"). Every rank keeps only its newest `buffer` entries (TORCH_FR_BUFFER_SIZE). The
answer follows from the construction.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

VERSION = "2.10"
TIMEOUT_MS = 600_000  # NCCL's default process-group timeout, 10 minutes
CALL_SITES = {  # where a training script calls each collective (the entry's "frames")
    "nccl:all_reduce": ("train.py", 57, "sync_gradients"),
    "nccl:broadcast": ("train.py", 33, "load_snapshot"),
    "nccl:_allgather_base": ("train.py", 71, "gather_metrics"),
    "nccl:_reduce_scatter_base": ("train.py", 64, "shard_gradients"),
    "nccl:all_reduce_barrier": ("train.py", 90, "save_snapshot"),
}
WAITING_STACK = [
    "train.py:102 in main",
    "train.py:80 in train_epoch",
    "train.py:74 in log_loss",
    "torch/_tensor.py:1046 in item",
]  # a rank ahead: blocked when it reads a value from its GPU
BARRIER_STACK = [
    "train.py:102 in main",
    "train.py:90 in save_snapshot",
    "torch/distributed/distributed_c10d.py:5356 in barrier",
]  # blocked in an NCCL barrier it enqueued
BARRIER = "nccl:all_reduce_barrier"
BEHIND_STACKS = (  # where a rank behind can be stuck
    ["train.py:102 in main", "train.py:78 in train_epoch", "data.py:41 in next_batch", "data.py:19 in read_shard"],
    ["train.py:102 in main", "train.py:88 in save_snapshot", "torch/serialization.py:965 in save"],
    ["train.py:102 in main", "train.py:81 in train_epoch", "train.py:49 in skip_bad_batch"],
)


@dataclass(frozen=True)
class Hang:
    world_size: int
    behind: int  # the rank that never called collective `missing_seq`
    missing_seq: int  # collective sequence numbers count from 1, per rank, in call order
    ops: tuple[str, ...]  # ops[i]: the profiling name of collective i + 1, the same on every rank
    ahead: tuple[int, ...]  # per rank: how many collectives it enqueued after missing_seq (0 for `behind`)
    buffer: int = 2000  # entries kept per rank, the newest
    stack: int = 0  # which of BEHIND_STACKS the rank behind shows

    def answer(self) -> tuple[int, int, str]:
        return self.behind, self.missing_seq, self.ops[self.missing_seq - 1]

    def last_completed(self) -> tuple[int, str] | None:
        """The last collective every rank completed (None when the rank behind never called one)."""
        return (self.missing_seq - 1, self.ops[self.missing_seq - 2]) if self.missing_seq > 1 else None

    def newest(self, rank: int) -> int:
        """The sequence number of the newest collective `rank` called."""
        return self.missing_seq - 1 if rank == self.behind else self.missing_seq + self.ahead[rank]


def _entry(seq: int, op: str, state: str, t0: int) -> dict:
    filename, line, function = CALL_SITES[op]
    size = [[1 << 20]] if op != "nccl:all_reduce_barrier" else [[1]]
    return {
        "record_id": seq - 1,
        "pg_id": 0,
        "process_group": ["0", "default_pg"],
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": op,
        "time_created_ns": t0 + seq * 1_000_000,
        "input_sizes": size,
        "input_dtypes": ["Float"],
        "output_sizes": size,
        "output_dtypes": ["Float"],
        "state": state,
        "is_p2p": False,
        "retired": state == "completed",
        "timeout_ms": TIMEOUT_MS,
        "frames": [
            {"name": function, "filename": filename, "line": line},
            {"name": "train_epoch", "filename": "train.py", "line": 80},
        ],
    }


def stage(hang: Hang) -> dict[int, dict]:
    """{rank: dump} for every rank of the hung job."""
    t0 = 1_796_000_000_000_000_000
    dumps = {}
    for rank in range(hang.world_size):
        newest = hang.newest(rank)
        entries = []
        for seq in range(max(1, newest - hang.buffer + 1), newest + 1):
            state = "completed" if seq < hang.missing_seq else "started" if seq == hang.missing_seq else "scheduled"
            entries.append(_entry(seq, hang.ops[seq - 1], state, t0))
        started = min(newest, hang.missing_seq)
        dumps[rank] = {
            "version": VERSION,
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(hang.world_size)))}},
            "pg_status": {
                "0": {
                    "last_enqueued_collective": newest,
                    "last_started_collective": started,
                    "last_completed_collective": hang.missing_seq - 1,
                }
            },
            "entries": entries,
            "stack": list(
                BEHIND_STACKS[hang.stack]
                if rank == hang.behind
                else BARRIER_STACK
                if hang.ops[newest - 1] == BARRIER
                else WAITING_STACK
            ),
        }
    return dumps


def _host_blocking(ops: tuple[str, ...], missing: int, ahead: int) -> int:
    """`ahead`, cut at the first barrier after collective `missing`: the host waits in that barrier."""
    barriers = [k for k in range(1, ahead + 1) if ops[missing + k - 1] == BARRIER]
    return barriers[0] if barriers else ahead


def training_ops(n: int, rng: random.Random) -> tuple[str, ...]:
    """n collectives as a training loop calls them: per step some gradient buckets (reduce-scatter or
    all-reduce), now and then a metrics all-gather or a snapshot barrier."""
    ops: list[str] = ["nccl:broadcast"]  # the parameters from rank 0 at start-up
    sync = rng.choice(["nccl:all_reduce", "nccl:_reduce_scatter_base"])
    while len(ops) < n:
        ops += [sync] * rng.randint(1, 3)
        ops.append(rng.choice(["nccl:_allgather_base", "nccl:all_reduce_barrier"]))
    return tuple(ops[:n])


def random_hang(seed: int, world_size: int, behind: int | None = None, buffer: int = 2000) -> Hang:
    """A scenario drawn from `seed`: the missing collective differs from the last completed one, the ranks ahead
    enqueued different numbers of collectives after it (the newest of all is not the missing one), and a buffer
    smaller than the job's collectives is full on every rank (all hold the same number of entries)."""
    rng = random.Random(seed)
    while True:
        total = rng.randint(12, 60)
        ops = training_ops(total + 4, rng)
        missing = rng.randint(max(3, buffer + 1) if buffer < total else 3, total)  # a small buffer: all full
        if ops[missing - 1] not in (ops[missing - 2], BARRIER):  # nobody gets past a barrier that hangs
            break
    behind = rng.randrange(world_size) if behind is None else behind
    ahead = tuple(0 if r == behind else rng.randint(0, 3) for r in range(world_size))
    if max(ahead) == 0:  # at least one rank ran ahead past the missing collective
        ahead = tuple(0 if r == behind else 2 for r in range(world_size))
    ahead = tuple(_host_blocking(ops, missing, a) for a in ahead)
    return Hang(world_size, behind, missing, ops, ahead, buffer, rng.randrange(len(BEHIND_STACKS)))


def stuck_at_start(seed: int, world_size: int) -> Hang:
    """A rank that never called a collective (stuck loading data before the first broadcast): empty entries."""
    rng = random.Random(seed)
    behind = rng.randrange(world_size)
    ops = training_ops(8, rng)
    ahead = tuple(0 if r == behind else _host_blocking(ops, 1, rng.randint(1, 3)) for r in range(world_size))
    return Hang(world_size, behind, 1, ops, ahead, stack=0)


def disguised(hang: Hang, rng: random.Random) -> Hang:
    """The same hang with its ranks relabeled and 1 to 40 more collectives before it (sequence numbers shifted):
    a list of the notebook's answers fails, every reading of the dumps keeps its verdict. The rank behind stays
    rank 0 exactly when it was (assuming rank 0 stays wrong) and moves when the job has more than two ranks."""
    n, behind = hang.world_size, hang.behind
    labels = list(range(n))
    while n > 2:  # two ranks: relabeling would move the rank behind to or from rank 0
        rng.shuffle(labels)
        if (labels[behind] == 0) == (behind == 0) and (behind == 0 or labels[behind] != behind):
            break
    ahead = [0] * n
    for rank, label in enumerate(labels):
        ahead[label] = hang.ahead[rank]
    shift = rng.randint(1, 40) if hang.missing_seq > 2 else 0  # the collectives just before the hang stay as built
    earlier = tuple(rng.choice(["nccl:all_reduce", "nccl:_allgather_base"]) for _ in range(shift))
    return Hang(
        n,
        labels[behind],
        hang.missing_seq + shift,
        hang.ops[:1] + earlier + hang.ops[1:],
        tuple(ahead),
        hang.buffer,
        hang.stack,
    )


# The examples the exercise notebook shows and the public check grades (the hidden check draws others).
EXAMPLES = (
    Hang(
        4,
        2,
        7,
        (
            "nccl:broadcast",
            "nccl:all_reduce",
            "nccl:all_reduce",
            "nccl:all_reduce",
            "nccl:all_reduce",
            "nccl:_allgather_base",
            "nccl:all_reduce",
            "nccl:all_reduce",
            "nccl:all_reduce",
        ),
        (2, 1, 0, 1),
        stack=1,
    ),
    random_hang(11, 2, behind=1, buffer=8),
    random_hang(12, 8, behind=5, buffer=20),
)
