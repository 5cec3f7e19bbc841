"""Hints of exercise 01_parallelism: hint("task") reveals them one by one (grader/notebook/hints.py).

Each ladder goes from a nudge to the key API, never to the answer's code
(tests/test_hints.py compares every hint with the solution cells).
"""

HINTS = {
    "shard_indices": [
        "Work one small case by hand first: 5 samples over 2 ranks, then 1 sample over 3 ranks. Every rank gets "
        "the same base count, and the samples left over (fewer than `world_size`) go one each to some ranks.",
        "`divmod(n_samples, world_size)` gives the base count and the leftover in one call. With contiguous blocks, "
        "let the first `leftover` ranks take one sample more; rank r's block then starts after r base-sized blocks "
        "plus one extra sample for each earlier rank that took one.",
        "A strided share needs no arithmetic at all: Python's `range` with a step of `world_size`, starting at the "
        "rank. Either way return a `list` of Python ints (`list(...)` of a range), also when it is empty.",
    ],
    "average_gradients": [
        "Every rank must end with the same value in each `param.grad`: the mean over ranks. Which collective "
        "combines one tensor from every rank and leaves the result on all of them?",
        "`dist.all_reduce(t)` sums `t` in place on every rank (gloo has no average op); divide by "
        "`dist.get_world_size()` afterwards. Loop over `model.parameters()`, one collective per gradient.",
        "Skip a parameter whose `.grad` is `None` (`continue`): do not create a gradient for it. Reduce and divide "
        "`param.grad` itself, in place (`/=`), never `param` or `param.data`: the optimizer reads that very tensor.",
    ],
    "ring_all_reduce": [
        "Build the exchange first and test it alone: one helper that, on every rank at once, sends a chunk to "
        "the next rank and receives one from the previous rank. `dist.isend` returns a request at once; "
        "`dist.recv` then blocks until the previous rank's message arrives; then `wait()` on the request.",
        "Keep the chunks as views, `torch.tensor_split(tensor, N)`: adding into a chunk in place (`+=`, "
        "reduce-scatter) or copying into it (`.copy_`, all-gather) writes into `tensor` itself. Receive into a "
        "new buffer of the incoming chunk's shape (`torch.empty_like`), never into the chunk you are sending.",
        "The indices, for step s = 0 .. N-2 on rank r (all mod N): reduce-scatter sends chunk r - s and adds the "
        "received one into chunk r - s - 1; all-gather sends chunk r - s + 1 and overwrites chunk r - s with the "
        "received one. Python's `%` is never negative. With one rank there is nothing to do.",
    ],
    "ColumnParallelLinear": [
        "Get the forward right before the gradients. In `__init__`, compute every rank's row count once (the "
        "lengths of the blocks `torch.tensor_split(torch.arange(out_features), world_size)` returns) and create "
        "`weight` and `bias` as `nn.Parameter`s with this rank's count only. Forward: a local "
        "`nn.functional.linear` with the shard, then gather the columns of every rank.",
        "`dist.all_gather(outputs, t)` needs the same shape on every rank: pad the local output's last dimension "
        "with zeros to the widest shard, gather, trim each rank's part to its true width, then `torch.cat` along "
        "`dim=-1` in rank order. In `_GatherColumns.backward` return this rank's slice of the gradient's last "
        "dimension (store its bounds on `ctx` in forward) and `None` for `sizes`.",
        "Why `_CopyToShards`: a linear layer's input gradient is `grad_out @ W`; with W split by rows each rank's "
        "product covers only its own output columns, so the full `x.grad` is the sum over ranks. Its backward "
        "all-reduces a copy of the incoming gradient (`.clone()`: autograd may share it); its forward returns `x` "
        "unchanged (as a view, `view_as`). The layer's forward chains the three: copy to shards, local linear, "
        "gather columns.",
    ],
    "parallelize_mlp": [
        "Start from the lesson's plan and extend it: which layers split by output features, which by input "
        "features, so that no hidden activation is ever gathered? Then run your plan and count: the check's message "
        "lists every collective of the forward and of the backward.",
        "In the backward, each column-parallel layer hands back only a partial gradient of its input, and the "
        "style that turned the plain input into a replicated DTensor is the one that sums it. Here two layers "
        "read the same `x`. How many such conversions does your plan make, and how many could it make?",
        "The tensor-parallel package has a style for a module's inputs, not only for linear layers: "
        "`PrepareModuleInput` (read its docstring, in particular `use_local_output`). A DTensor that arrives already "
        "replicated is not converted again by a column-wise layer, and autograd adds partial gradients before "
        "anything is summed across ranks.",
    ],
    "pipeline_step": [
        "Write the ranks as two branches on `dist.get_rank()` and list the messages in order on paper: rank 0 "
        "sends ndim, shape, activation, then receives the gradient; rank 1 receives those three, runs its stage "
        "and the loss, then sends the gradient. Every send must meet its receive in the same order on the peer.",
        "On rank 1 the received activation is a leaf without history: call `requires_grad_()` on it after the "
        "receive and before the stage. After the backward of the loss its `.grad` is exactly the gradient rank 0 needs; "
        "send that back to rank 0.",
        "On rank 0 send a detached, contiguous copy (`.detach().contiguous()`) but keep the original activation: "
        "it holds the graph. Receive the gradient into `torch.empty(shape, dtype=..., device=...)` with the "
        "activation's shape, then call `backward` on the original activation with that gradient. Rank 1 builds "
        "its buffers from the header with `torch.empty(size_tensor.tolist(), device=targets.device)`.",
    ],
    "pipeline_schedule": [
        "Draw the pipeline first: with p ranks and 2 stages each, which stage follows stage p - 1, and on which "
        "rank does it run? Number the stages in the order a microbatch visits them, then write down which "
        "numbers land on rank r. Which rank feeds the input, and which one ends with the loss?",
        "A schedule in `torch.distributed.pipelining` that accepts several stages per rank takes a list of "
        "this rank's stages (in increasing stage index), not one stage; each stage still needs its own index "
        "and the total number of stages, which is no longer the world size. Slicing the model keeps its layers.",
        "`step` runs on every rank. Only the rank holding stage 0 passes the input; a list passed as `losses=` "
        "fills where the last stage lives. Keep `n_microbatches` as given: the interleaved order is planned "
        "in rounds of microbatches, and the checks compare every message with that plan.",
    ],
    "moe_layer": [
        "Draw it for 2 ranks and 4 tokens first: which rows leave each rank, for whom, and in which order they "
        "arrive. A rank knows what it sends to each rank from its own `expert_ids`, but not what it will receive: "
        "that depends on the others' routing. One small all-to-all of integers answers it before any token moves.",
        "Put the (token, choice) pairs in the order of their destination: sorting the flattened `expert_ids` "
        "groups them by expert, and so by rank, and the permutation the sort returns is what undoes it at the end. "
        "`dist.all_to_all_single(out, inp, output_split_sizes, input_split_sizes)` takes Python lists of row "
        "counts per rank; the counts you exchanged give both.",
        "`dist.all_to_all_single` has no backward: wrap it in a `torch.autograd.Function` whose backward runs the "
        "reverse all-to-all (the split sizes swapped), or use the autograd-aware one in "
        "`torch.distributed.nn.functional`. Scale each returned row by its gate, then add it at its token's row "
        "(`index_add`, differentiable): a token chose `k` experts, so `k` rows land on it.",
    ],
    "ring_attention": [
        "Solve it on paper for 2 ranks first: which key blocks does rank 0 need, which does rank 1? A block of a "
        "later rank is entirely in the future of every query here, a block of an earlier rank entirely in the past; "
        "only the own block needs a triangle. Global positions (the block's start plus the local index) decide.",
        "Softmax over keys that arrive in pieces: keep per query row a running maximum, a running sum of exponentials "
        "and a running weighted sum of values. When a new block raises the maximum, what must happen to the two sums "
        "gathered so far so that they stay relative to the new maximum? Divide only once, at the end.",
        "The ring: at each of the world_size - 1 steps send the block you hold to (rank + 1) % world_size and receive "
        "the next one from (rank - 1) % world_size; the sender's length is in block_sizes, so the receive buffer "
        "can be allocated. `dist.isend` then `dist.recv` (then wait on the send), or `dist.batch_isend_irecv` with "
        "`dist.P2POp`, do not deadlock; blocking sends on every rank first do.",
    ],
}

# The hint of the check that failed: hint(task) shows it first, once per failure, then the task's ladder
# (grader/notebook/hints.py). Each public check carries one; it names the mistake's idea, not the code.
CHECK_HINTS = {
    "shards_are_disjoint_covering_balanced": (
        "Three properties at once: no sample in two shares, every sample in some share, and share sizes that "
        "differ by at most one. Work the case the message names by hand, for every rank."
    ),
    "averaged_gradients_match_full_batch": (
        "After your function every rank must hold the mean over ranks of each gradient, in `param.grad` itself: "
        "a sum is world_size times too large, and the weights must not change."
    ),
    "ring_sums_in_place": (
        "Only point-to-point messages are allowed, and the result must land in the tensor you were given: work on "
        "views of it, never on a copy, and never call a collective."
    ),
    "ring_passes_chunks_to_neighbours": (
        "A ring sends each rank's messages only to the next rank, and each message is one chunk of about "
        "numel / world_size elements, not the whole tensor: 2 (N - 1) steps in all."
    ),
    "column_parallel_forward": (
        "Each rank keeps only its own block of output rows of the weight and bias (the same split as "
        "`torch.tensor_split` of the output features), and the forward returns the full output on every rank."
    ),
    "column_parallel_shard_gradients": (
        "The gather of the output must be differentiable, and its backward must keep only this rank's columns of "
        "the output gradient, neither dropping the gradient nor summing it over ranks."
    ),
    "column_parallel_input_gradient": (
        "Each rank's input gradient covers only its own output columns: the input needs an autograd step whose "
        "forward changes nothing and whose backward adds the gradients of all ranks."
    ),
    "dtensor_block_matches_one_process": (
        "The sharded block must compute exactly the one-process block: check which weights are split by output "
        "features and which by input features, and that the input is the same on every rank."
    ),
    "dtensor_block_is_column_then_row": (
        "The first projections are split by columns (`ColwiseParallel`) and the last one by rows "
        "(`RowwiseParallel`): then the block needs one all-reduce in forward and one in backward, no more."
    ),
    "pipeline_loss_matches": (
        "Rank 0 runs its stage and sends the activation (its shape first); rank 1 receives it, makes it require a "
        "gradient, computes the loss with the given `loss_fn` and returns it; rank 0 returns None."
    ),
    "pipeline_gradients_match": (
        "The backward crosses ranks too: rank 1 sends the gradient of the activation it received back, and rank "
        "0 runs backward from its own output with that gradient."
    ),
    "interleaved_schedule_matches_one_process": (
        "Count the stages first: the model is cut into twice as many stages as ranks, and each rank holds two of "
        "them, dealt round-robin, not side by side. Which stage indices does rank 0 hold with 2 ranks?"
    ),
    "interleaved_schedule_in_three_rounds": (
        "The same schedule with more micro-batches: the number of micro-batches comes from the argument, not "
        "from the number of ranks or stages."
    ),
    "moe_two_ranks_one_expert_each_matches_one_process": (
        "Follow one token: which rank holds its expert, where does its row sit in what that rank receives, and "
        "how does the result find its way back to the token's own row, scaled by its gate?"
    ),
    "moe_rank_without_tokens": (
        "A rank may receive no token at all: every collective must still be called on every rank, with split "
        "sizes of zero where nothing moves, and the result must keep the input's shape."
    ),
    "ring_two_ranks_matches_causal_attention": (
        "Compare with one process on paper: which key positions may each query see, counted over the whole "
        "sequence? When a new block raises a row's maximum, what must happen to what was summed so far?"
    ),
    "ring_four_ranks_never_holds_every_block": (
        "A ring passes one block at a time: keep running sums, and let each received block go once it is merged "
        "and passed on, rather than collecting the blocks into one tensor."
    ),
}
