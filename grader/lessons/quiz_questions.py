"""The lessons' Quick Check questions: per lesson, each question's salted key and its one-line explanation.

The questions themselves are in each lesson's "Quick Check" cell; quiz.py checks the answers against these keys.
The key is not stored in plain text: each question keeps a random salt and the truncated SHA-256 of salt and right
letter (tests/test_quiz.py holds the plain key). The explanations are shown after any answer, translated by _().
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.i18n import N_


@dataclass(frozen=True)
class Question:
    salt: str
    digest: str  # sha256(f"{salt}:{letter}")[:16] of the right letter
    why: str  # one line, shown after any answer (English; _() translates it when shown)


Q = Question
QUIZZES: dict[str, dict[str, Question]] = {
    "01_data_vs_model_parallelism": {
        "q1": Q(
            "c75964c6e2ba",
            "56bfd24c91b23245",
            N_(
                "The model fits on one GPU: copy it to all 8 and split the batch (data parallelism); splitting "
                "the model only pays when it does not fit (§1, §7)."
            ),
        ),
        "q2": Q(
            "ccc5b34e6af9",
            "e413c071dd0817ab",
            N_(
                "The mean of four equal-sized shard means is the mean over all 128 samples, and the gradient is "
                "linear in the loss (§3)."
            ),
        ),
        "q3": Q(
            "b67ebf81573a",
            "57e294847da691cc",
            N_(
                "Reduce-scatter then all-gather, N-1 steps each, 1/N of the tensor per step: 2·7/8·64 MB = 112 MB"
                " per rank, almost twice the tensor whatever the number of ranks (§5)."
            ),
        ),
        "q4": Q(
            "a5a16a486daa",
            "62b88e0b5eb8ebb5",
            N_("GPipe's bubble is (p-1)/(m+p-1) with p stages and m micro-batches: 3/7, about 43% (§4.3)."),
        ),
        "q5": Q(
            "e9a0a789f800",
            "d8713477b56c80f9",
            N_(
                "The element-wise sum is [11, 22, 33, 44]; reduce_scatter leaves rank r only the r-th slice, so "
                "rank 1 gets [33, 44] (§2)."
            ),
        ),
        "q6": Q(
            "032077b41378",
            "cc5f5a979c7f457d",
            N_(
                "Tensor parallelism communicates inside every layer, forward and backward, on the critical path: "
                "it needs the fastest links, such as NVLink (§4.1)."
            ),
        ),
        "q7": Q(
            "75aa89aede7e",
            "57e9ced93b3a9f68",
            N_(
                "Shard(0) to Replicate() is an all-gather: each rank sends its block and receives the other; "
                "a reduction happens only from Partial() (§4.2)."
            ),
        ),
        "q8": Q(
            "57798a3dac25",
            "39513cde7cf935f6",
            N_(
                "1F1B reorders the same work, so the bubble stays (p-1)/(m+p-1); starting a backward after every "
                "forward caps the micro-batches in flight at p, hence the activation memory (§4.3)."
            ),
        ),
        "q9": Q(
            "3b41eb107ab1",
            "41955b2422c9384d",
            N_(
                "Only the tokens routed to other ranks' experts leave a rank: 3/4 of 1000 tokens of 4 KB = 3000 KB; "
                "gathering every token everywhere would send 3 × 4000 KB (§4.4)."
            ),
        ),
        "q10": Q(
            "4cab156ca376",
            "bc7c328ca2601e98",
            N_(
                "Rank r's queries see r whole blocks and half of their own, (r + 1/2) block² pairs: 7.5 against 0.5, "
                "15 times; a zig-zag or striped layout evens it out (§6b)."
            ),
        ),
    },
    "02_ddp_basics": {
        "q1": Q(
            "bb82bcefddf1",
            "57047bb7da5a9713",
            N_(
                "DDP all-reduces (sums) the gradients inside backward() and divides by the world size: every rank"
                " holds the same average (§7)."
            ),
        ),
        "q2": Q(
            "6d4f0576cafe",
            "35657b1bc0d5ef77",
            N_(
                "Ranks are numbered machine by machine: 1·4 + 2 = 6; the local rank 2 picks that machine's "
                "cuda:2; the world size is 2·4 = 8 (§3)."
            ),
        ),
        "q3": Q(
            "661977361617",
            "544a9999273a857b",
            N_(
                "The DDP constructor broadcasts rank 0's parameters and buffers, so the copies start identical "
                "whatever each rank drew (§6)."
            ),
        ),
        "q4": Q(
            "93bde0a536bd",
            "55e9726b8805348b",
            N_(
                "The permutation is seeded with seed + epoch; without set_epoch the epoch stays 0, so every epoch"
                " repeats epoch 0's order (§8)."
            ),
        ),
        "q5": Q(
            "d6b897f9b5a8",
            "5dc64630092ac7df",
            N_(
                "Under no_sync the micro-batch gradients add up in .grad; the last backward all-reduces that sum "
                "and DDP divides by the world size only: 4 times the mean, so divide each loss by k (§14)."
            ),
        ),
        "q6": Q(
            "fd808329ac9c",
            "1b6b0e2d4e138239",
            N_(
                "Join shadows only DDP's collectives: rank 0's fifth logging all_reduce meets Join's one-number "
                "count instead, returns a wrong value, and the next sizes differ, so the run fails (§14)."
            ),
        ),
        "q7": Q(
            "f313c833d89b",
            "7f3e93ae5b3ab623",
            N_(
                "One writer with unwrapped keys (.module), a barrier so the file is complete before anyone reads "
                "it, then map_location onto each rank's device (§10)."
            ),
        ),
        "q8": Q(
            "1afccfd6e433",
            "e3f01aa769b49a52",
            N_(
                "Every rank must call every collective: rank 0 waits for a partner that never comes, until the "
                "group's timeout (§13, mistake 2)."
            ),
        ),
        "q9": Q(
            "69056de454e6",
            "80f720258e55914e",
            N_(
                "DDPOptimizer splits Dynamo's graph at DDP's bucket boundaries, so each bucket's all-reduce "
                "still overlaps the backward of the pieces before it (§14.7)."
            ),
        ),
        "q10": Q(
            "90998ec8abd7",
            "2608e7c8b8e585dc",
            N_(
                "Overlap is NCCL kernels running under compute kernels; gaps on the compute stream mean backward"
                " waited for communication, and CPU records only launch the kernels (§14.8)."
            ),
        ),
    },
    "03_syncbn_and_sharded_state": {
        "q1": Q(
            "2bd9e939ed98",
            "290ab94dcbdd4e21",
            N_(
                "DDP synchronizes gradients, not activations: each BatchNorm copy normalizes with its own GPU's "
                "samples in training mode (§1)."
            ),
        ),
        "q2": Q(
            "206b820c6cdc",
            "0c8025029fa3b874",
            N_(
                "A handful of large, strongly correlated images per GPU makes per-GPU statistics noisy; LayerNorm"
                " and eval mode never use batch statistics (§1, §2)."
            ),
        ),
        "q3": Q(
            "2e5a3ba466e0",
            "ef3fdc5d94f7b8e6",
            N_(
                "Backward all-reduces two per-channel sums; the input gradient is computed locally from them, γ "
                "and β gradients are left to DDP (§3)."
            ),
        ),
        "q4": Q(
            "871a2eda5c51",
            "cae2c2f3e51a990c",
            N_(
                "4 + 4 + 8 bytes per parameter (weight, gradient, Adam's two moments), replicated on every GPU by"
                " DDP: 16 GB each (§4)."
            ),
        ),
        "q5": Q(
            "cbdcd0e11415",
            "47551f560b3ba800",
            N_(
                "Stage 2 keeps the 4 GB of weights whole and shards the gradients and Adam's moments: 4 + (4 + "
                "8)/8 = 5.5 GB; stage 1 would be 9 GB (§5)."
            ),
        ),
        "q6": Q(
            "5ec928258235",
            "d984f9f4a1cbcfc1",
            N_(
                "consolidate_state_dict is a collective: rank 0 waits for shards that the other ranks, waiting in"
                " the barrier, never send (§8)."
            ),
        ),
        "q7": Q(
            "d0579fe08b82",
            "91c5cceb95a52d8f",
            N_(
                "DCP is a collective in which every rank writes its own shard plus metadata, so it can be loaded "
                "by another number of ranks (§9)."
            ),
        ),
        "q8": Q(
            "d35596865f02",
            "af77e2b695364bb5",
            N_(
                "Each layer is all-gathered before its forward and again before its backward (6), and its "
                "gradient is reduce-scattered (3): three transfers of its size against DDP's two, about 1.5 "
                "times the bytes (§6)."
            ),
        ),
        "q9": Q(
            "346e089eb3a6",
            "db6b782915ade7ba",
            N_(
                "Each block reshards after its forward (the default for every unit but the root), so it is "
                "gathered again for its backward: two all-gathers per step (§6, §6c)."
            ),
        ),
        "q10": Q(
            "299a0510a265",
            "a3cef7623a2e41bf",
            N_(
                "Checkpointing each block keeps only its input and recomputes the block in backward, one at a "
                "time: about one block at the peak, 8 extra forwards (§6b)."
            ),
        ),
        "q11": Q(
            "161c8c11035f",
            "4fb3a13e1769bb69",
            N_(
                "DDP needs 64 + 20 = 84 GB, over 80; ZeRO-1 needs 32 + 4 + 20 = 56 GB and communicates less than "
                "FSDP2 (8 + 20 GB): the first that fits in the order DDP, ZeRO-1, FSDP2 (§6d)."
            ),
        ),
        "q12": Q(
            "46bc41df85ba",
            "ade0f8422d67fcfd",
            N_(
                "The all-gathers and reduce-scatters stay inside each node; across nodes runs only the all-reduce "
                "of each GPU's gradient shard, among the 4 GPUs (one per node) that hold the same shard (§6c, HSDP)."
            ),
        ),
        "q13": Q(
            "dec6fd8f5819",
            "c3ed0298c79e37dd",
            N_(
                "A ring all-reduce is a reduce-scatter and then an all-gather: each rank sends 2(k−1)/k·B = 1.75 GB, "
                "at 5 ps per byte 8.75 ms, and about the same on 16 or 64 GPUs (§6e)."
            ),
        ),
    },
    "04_torchrun": {
        "q1": Q(
            "bbee4c7ae6d0",
            "24e5131b566a2d55",
            N_(
                "Node 1, local rank 1: RANK = 1·4 + 1 = 5, LOCAL_RANK = 1, WORLD_SIZE = 8, LOCAL_WORLD_SIZE = 4 "
                "(§1, §4)."
            ),
        ),
        "q2": Q(
            "c492e01614d7",
            "bac0305b664047b1",
            N_(
                "torchrun restarts the whole worker group after a new rendezvous; the script resumes from its "
                "last snapshot (§2)."
            ),
        ),
        "q3": Q(
            "dd36a35fe520",
            "036e8c132d9ec177",
            N_(
                "Written in place, a kill mid-write leaves a truncated file instead of epoch 4's snapshot; "
                "os.replace is atomic, so the old snapshot stays until the new one is complete (§2)."
            ),
        ),
        "q4": Q(
            "140cda0917dc",
            "a1baca7f966e5ea8",
            N_(
                "Momentum buffers are optimizer state: without them the run goes on, but not as the uninterrupted"
                " run would (§2)."
            ),
        ),
        "q5": Q(
            "8dbe3e92d3b3",
            "d1a44477875bdc93",
            N_("The c10d rendezvous store is hosted at that endpoint; every agent must reach it to join (§3)."),
        ),
        "q6": Q(
            "b553503ceb53",
            "0b423570891e7c9f",
            N_(
                "An elastic job: it starts with 2 nodes, accepts up to 4, and restarts all workers with the new "
                "WORLD_SIZE when membership changes (§3)."
            ),
        ),
        "q7": Q(
            "baf72a6fb3a5",
            "a372f59b4bb824bc",
            N_(
                "Collectives are numbered alike on every rank: rank 2 never called collective 212, in which the "
                "others wait; its stack says why (§5)."
            ),
        ),
        "q8": Q(
            "9335d6e7ede3",
            "93f9dfdbd207ae14",
            N_(
                "LOCAL_RANK 0 exists once per node: with 2 nodes two writers race on the same shared file; guard "
                "with RANK 0 (§4)."
            ),
        ),
        "q9": Q(
            "482b492ba040",
            "85b7cf2e4567600f",
            N_(
                "By default async_save copies the state into pageable CPU memory before it returns, then writes it"
                " from a background thread: the next step waits only for that copy (§2)."
            ),
        ),
    },
}
