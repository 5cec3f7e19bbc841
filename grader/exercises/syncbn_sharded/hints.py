"""Hints of exercise 03_syncbn_sharded: hint("task") reveals them one by one (grader/hints.py).

Each ladder goes from a nudge to the key API, never to the answer's code
(tests/test_hints.py compares every hint with the solution cells).
"""

HINTS = {
    "convert_to_sync_bn": [
        "No loop over modules is needed: PyTorch converts a whole module tree, nested blocks included, and copies "
        "the weights and running statistics.",
        "`nn.SyncBatchNorm.convert_sync_batchnorm` is a class method taking the model. Return what it returns: "
        "when the model is itself a BatchNorm layer, that is a new module, not the one you passed.",
    ],
    "global_batch_stats": [
        "Means of uneven shards do not average, but sums add up: per channel, this rank's sum of values, sum of "
        "squares and number of values, added over the ranks, give everything. The variance is the mean of the "
        "squares minus the square of the mean (biased: divided by N).",
        "`AllReduceSum`: in forward, `clone()` the input and `dist.all_reduce` the clone (SUM) and return it; in "
        "backward, do the same to the incoming gradient (made contiguous). Autograd then sees one function whose "
        "gradient is a sum over ranks too.",
        "Reduce over every dimension but 1 (`x.sum(dim=[...])`, a list of dimensions); the count is "
        "`x.numel() // x.shape[1]` as a 1-element tensor like `x` (`x.new_full`). `torch.cat` the three into "
        "one tensor, one `AllReduceSum.apply`, then slice it apart.",
    ],
    "DistributedBatchNorm": [
        "Build it like `nn.BatchNorm`: `weight` and `bias` as `nn.Parameter`s, `running_mean` and `running_var` "
        "with `self.register_buffer`. In training, normalize with `global_batch_stats(x)` (it already crosses "
        "ranks in backward); in eval, with the running buffers and no communication.",
        "Per-channel values of shape (C,) must broadcast over (N, C, *): reshape them to `[1, -1]` followed by "
        "`x.dim() - 2` ones before subtracting, dividing and scaling.",
        "Update the running statistics under `torch.no_grad()` with the global count N per channel (all-reduce "
        "this rank's count): the unbiased variance is `var * N / (N - 1)`, and each buffer moves in place "
        "(`mul_`, `add_`) by `momentum` towards the new value.",
    ],
    "partition_parameters": [
        "Balance elements, not tensors: think of filling bins. Which parameter should be placed first so that a "
        "large one does not land on an already full rank?",
        "Greedy: visit the indices sorted by `numel()`, largest first (Python's `sorted` is stable: ties keep "
        "index order), and give each to the rank with the fewest elements so far (`min` over ranks with a "
        "`key`, ties to the lowest rank). Keep a running total per rank.",
    ],
    "ShardedOptimizer": [
        "Each rank needs to know the owner of every parameter (from `partition_parameters`), and steps only its "
        "own: the inner optimizer is built over the owned parameters alone, so its state exists only for them.",
        "Read `params` once with `list(...)`; build `self.optim` with `optimizer_cls(mine, **defaults)` or keep "
        "`None` when this rank owns nothing. `zero_grad` clears the gradients of all parameters, not only the "
        "owned ones.",
        "`step()`: step the inner optimizer if there is one, then, under `torch.no_grad()`, `dist.broadcast` every "
        "parameter from its owner (`src=` that rank), in the same order on every rank: each rank must enter "
        "every broadcast.",
    ],
    "MiniFSDP": [
        "In `__init__`, for every leaf module and each of its own parameters, keep a flat fp32 shard: flatten, pad "
        "with zeros to a multiple of the world size, take chunk `rank`, wrap it in `nn.Parameter` (an "
        "`nn.ParameterList` registers them). Remove the full parameter from the module (its `_parameters` "
        "entry) and remember its name, shape and module.",
        "Module hooks bring the full parameter only while needed: `register_forward_pre_hook` sets the module's "
        "attribute to the gathered tensor viewed in its shape; `register_forward_hook` puts an empty tensor back. "
        "That alone frees nothing: the layer's operation saved the full weight for backward. Enter "
        "`torch.autograd.graph.saved_tensors_hooks(pack, unpack)` in the pre-hook and leave it in the post-hook: "
        "`pack` sees every tensor autograd saves and may return a small token instead; `unpack` gets the token "
        "back in backward and must return the tensor.",
        "Recognize a gathered parameter in `pack` by its storage (`untyped_storage().data_ptr()`) and keep its "
        "shard's index with the view's `size()`, `stride()` and `storage_offset()`; `unpack` all-gathers that "
        "shard again (under `torch.no_grad()`) and rebuilds the view with `as_strided`. Gather through a small "
        "`torch.autograd.Function` whose forward all-gathers (`dist.all_gather_single`, in the compute dtype) and "
        "whose backward reduce-scatters the fp32 gradient (`dist.reduce_scatter_single`: a sum over ranks), so "
        "`finish_gradient_synchronization` only divides each shard's `.grad` by the world size.",
    ],
    "save_sharded_checkpoint": [
        "Two different kinds of call here: collectives that every rank must make, and the file write that only "
        "rank 0 makes. Which is which? A collective called on rank 0 alone waits forever.",
        "Every rank first calls the optimizer's `consolidate_state_dict`, with rank 0 as the destination; then rank 0 alone reads "
        "`optimizer.state_dict()` and `torch.save`s the dictionary with both states; then every rank reaches "
        "`dist.barrier`, so none returns before the file exists.",
    ],
    "save_and_reshard": [
        "Do not gather the model onto one rank: with `torch.distributed.checkpoint` each rank writes its own "
        "shards, and the metadata lets a job with another world size find its pieces. Every rank calls the save.",
        "`get_state_dict` (in `torch.distributed.checkpoint.state_dict`) takes the model and the optimizer and "
        "returns both state dicts (shards, optimizer keyed by names); `dcp.save` takes one dictionary holding both "
        'under the keys "model" and "optim", and the folder as `checkpoint_id`.',
    ],
    "load_resharded": [
        "DCP loads in place: it needs state dicts of the right layout for this job's shards to fill. Where do you "
        "get such dictionaries from a fresh model and optimizer?",
        "Take them from `get_state_dict(model, optimizer)`, put them under the same keys as the save, and let "
        "`dcp.load` fill that dictionary (every rank calls it, with the folder as `checkpoint_id`).",
        "Filling the dictionaries does not change the model yet: hand both back with `set_state_dict`, using its "
        "keyword arguments `model_state_dict=` and `optim_state_dict=`, so that Adam's moments and step count are "
        "restored too.",
    ],
    "build_fsdp2_model": [
        "Start from the lesson's `build()`: meta device, shard, `to_empty`, `init_weights()`. Two things change: "
        "which modules become units, and how many. What does a unit cost in memory while it runs, and what does "
        "each extra unit cost in communication?",
        "A unit's cost in memory is its parameters' bytes in the gathered dtype: count `numel()` over a block's "
        "parameters on the meta model (shapes are all you need) and multiply by the element size of bf16. Walk the "
        "blocks in order and keep adding to the current unit while the total stays within the budget.",
        "`fully_shard` takes a list of modules as one unit. The tied weight belongs to the embedding and to the head "
        "at once: leave both to the root's call (after the block units) so that a single unit owns it; `to_empty` "
        "keeps the tie.",
    ],
    "train_step_fsdp2": [
        "Accumulate as in exercise 2, but FSDP2's switch is a method of the model, not a context manager: "
        "`set_requires_gradient_sync`, off for every micro-batch but the last, on for the last. Divide each "
        "micro-batch's loss by their number before its backward.",
        "Clip after the loop and before stepping: `torch.nn.utils.clip_grad_norm_` over `model.parameters()` "
        "understands DTensor gradients and returns the norm of the whole gradient (itself a DTensor). Never clip "
        "`.to_local()` shards: each rank would get its own, smaller norm.",
        "Then step the optimizer and zero its gradients, and return the norm before clipping as a Python float: "
        "`full_tensor()` turns the DTensor into a plain tensor, `.item()` into a float.",
    ],
    "export_full_state": [
        "Task 8's module `torch.distributed.checkpoint.state_dict` can gather too: its getters take options that "
        "ask for full tensors instead of this rank's shards. Every rank must call them (they are collectives).",
        "The options are a `StateDictOptions`: one flag asks for full tensors, another moves them to the CPU and "
        "keeps them on rank 0 alone. The model and the optimizer each have a getter; the optimizer's takes the "
        "model too, which is how it can name each parameter instead of numbering it.",
    ],
    "checkpoint_activations": [
        "Two questions: how many bytes does each block keep for backward when it is not checkpointed, and which "
        "blocks, once checkpointed, bring the total under the budget with the fewest of them?",
        "A block keeps two tensors of `rows x hidden` elements, where `hidden` is its first layer's output size; "
        "multiply by the bytes of one element. Taking the blocks that keep the most first reaches the budget "
        "soonest; stop as soon as what is left fits.",
        "To checkpoint block `i`, assign a wrapper into `model.blocks[i]` that keeps the original block as an "
        "attribute and calls `torch.utils.checkpoint.checkpoint` on it with `use_reentrant=False`.",
    ],
    "plan_memory": [
        "Write the three strategies as columns and parameters, gradients, Adam's state and activations as rows: "
        "which of the four does each strategy keep whole on every rank, and which does it split over the ranks?",
        "Everything here is fp32: a parameter takes 4 bytes, its gradient 4 more, Adam's two moments 8. Count "
        "bytes from the parameters' shapes (`numel()` times `element_size()`), which a meta model has. The "
        "activations belong to this rank's batch: no strategy splits them.",
        "DDP splits nothing; ZeRO-1 splits only the optimizer state; FSDP2 splits all three. Then try the "
        "strategies in the order they communicate, least first, and keep the first that fits the budget.",
    ],
    "plan_layout": [
        "Write the layout's cost as a sum of terms you can check one by one: the compute time with its bubble, "
        "then one term per axis that communicates (data, tensor, pipeline), each a number of collectives times "
        "the cost of one on that axis's link. A layout with an axis of size 1 pays nothing on it.",
        "Which link an axis uses depends only on the ranks of its groups: list each group's ranks from the "
        "numbering (tp fastest, then pp, then dp) and see whether their nodes (rank // gpus_per_node) differ. "
        "Sizes in the model are bytes: 4 per fp32 value.",
        "The choice uses the memory first: keep the indices whose memory fits, then take the one with the "
        "smallest step among them (`min` with a `key`), or None when the list is empty.",
    ],
}
