"""Hints of exercise 03_syncbn_sharded: hint("task") reveals them one by one (grader/notebook/hints.py).

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
        "List what a resumed job needs to take its next step exactly as the stopped one would: which of those are "
        "sharded tensors, which are plain numbers? The lesson's save handles the first kind; DCP also writes the "
        "second kind (an int, a float, a list in a dictionary), once, as small pickled values.",
        "One dictionary holds the whole layout and one collective call writes it, on every rank. The scheduler "
        "gives its state the way an optimizer does; nothing of the model or the optimizer needs gathering first.",
    ],
    "load_resharded": [
        "DCP loads in place: it needs a dictionary of this job's layout to fill. Where does a fresh model, "
        "optimizer and scheduler give you such templates, and which value in it cannot be changed in place?",
        "After the load, ask of each entry: did the object it came from change, or only a copy in the dictionary? "
        "The lesson hands the model's and the optimizer's state back; the scheduler needs the same, and the step "
        "is wherever dcp.load put it.",
        "An object with both `state_dict()` and `load_state_dict()` (DCP's `Stateful`) can stand in the dictionary "
        "itself: DCP then asks it for its state before loading and gives it back after. An LR scheduler is one.",
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
        "`set_requires_gradient_sync`, off for every micro-batch but the last, on for the last. Then the loss: "
        "`mse_loss` is a mean over its micro-batch's rows; what mean must the step follow, and what is a row of a "
        "2-row micro-batch worth next to a row of a 6-row one?",
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
        "The blocks differ: what decides how much one of them keeps, and how much its recomputation saves? If two "
        "plans both fit, one recomputing 3 blocks and one 4, which blocks does the first one pick? Try it on paper "
        "with the sizes of the public check's model before you code it.",
        "The lesson picks the checkpointed blocks inside its own model's forward. Here the model's forward is fixed: "
        "what can take a block's place in `model.blocks` so that calling it runs that block under checkpointing, "
        "with the same parameters? Reread the task text on `use_reentrant`.",
    ],
    "plan_memory": [
        "Make a table: the three strategies as columns; as rows, everything a rank keeps after the step "
        "(parameters, gradients, DDP's buckets, each piece of optimizer state) and the activations. For each cell: "
        "how many bytes per parameter, and is it whole on every rank or split over the ranks?",
        "Bytes depend on the dtype: a meta model still has each parameter's `numel()` and `element_size()`. Which "
        "rows follow the parameters' dtype, and which are fp32 whatever it is? With DDP's defaults, is a gradient "
        "stored once or twice?",
        "ZeRO-1 splits what the optimizer owns, all of it; FSDP2 splits every row but the activations and has no "
        "buckets. Check your table against the lesson's measured run (another optimizer, the same method).",
    ],
    "build_hsdp_model": [
        "Draw the machine as a table: one row per node, one column per position within a node. The ranks of a "
        "row share the fast link; the ranks of a column hold the same shard on different nodes. Which of the two "
        "should all-gather every layer's parameters, and which only needs to average gradients once per step?",
        "init_device_mesh fills its table with ranks 0, 1, 2, ... in order, whatever the nodes are. A "
        "`DeviceMesh` can instead be given the table itself (a tensor or nested list of global ranks) and names "
        "for its dimensions; every rank builds the same table.",
        "Dimension 0 of the mesh is the one fully_shard replicates over, dimension 1 the one it shards over. "
        "Pass the whole 2-D mesh (not a slice of it) to fully_shard, for each block and then the root.",
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

# The hint of the check that failed: hint(task) shows it first, once per failure, then the task's ladder
# (grader/notebook/hints.py). Each public check carries one; it names the mistake's idea, not the code.
CHECK_HINTS = {
    "every_batchnorm_becomes_syncbn": (
        "Every BatchNorm layer, however deeply nested, must become a SyncBatchNorm, and nothing else may change: "
        "let PyTorch walk the module tree rather than replacing layers by hand."
    ),
    "weights_and_running_stats_kept": (
        "The converted model must keep the trained state: weights, biases and running statistics. A freshly "
        "built SyncBatchNorm starts from defaults; the conversion copies them."
    ),
    "sync_bn_trains_under_nccl_with_2_gpus": (
        "Under NCCL the converted model must run real SyncBatchNorm layers on each rank's GPU: return the "
        "converted module, and do not move or rebuild it yourself."
    ),
    "stats_of_the_concatenated_batch": (
        "Shards of different sizes: add up per-channel sums, sums of squares and counts over ranks, then derive "
        "the mean and the biased variance of all samples together, and let the gradient cross ranks too."
    ),
    "training_output_matches_one_batchnorm": (
        "In training, normalize with the statistics of the whole batch over all ranks (not this rank's), then "
        "scale by the weight and shift by the bias, broadcast over every dimension but the channels."
    ),
    "gradients_match_one_batchnorm": (
        "The statistics depend on every rank's samples, so their gradient must flow back across ranks: the "
        "communication in forward needs a matching one in backward."
    ),
    "running_stats_and_eval_match": (
        "Running statistics move by `momentum` with the global batch's mean and its unbiased variance (global "
        "count), without gradients; in eval mode they, not the batch, normalize the input."
    ),
    "every_parameter_owned_once": (
        "Every parameter index belongs to exactly one rank, no rank stays idle while there are enough parameters, "
        "and every rank computes the same answer (no randomness, no rank-dependent order)."
    ),
    "balanced_by_element_count": (
        "Balance the number of elements, not of tensors: place large parameters first, each on the rank that "
        "holds the fewest elements so far."
    ),
    "matches_unsharded_adam": (
        "Each rank steps only the parameters it owns; afterwards every parameter must be sent from its owner to "
        "all ranks, in the same order everywhere, so all replicas agree again."
    ),
    "matches_unsharded_sgd_momentum": (
        "The wrapper must work for any optimizer class and its keyword arguments: pass them through unchanged to "
        "the inner optimizer built over the owned parameters."
    ),
    "optimizer_state_is_sharded": (
        "The inner optimizer must be built over this rank's parameters only: then its state covers about 1/N of "
        "the model, and no state is duplicated on another rank."
    ),
    "zero_grad_clears_every_gradient": (
        "`zero_grad` must clear the gradients of every parameter, also those that another rank owns and steps."
    ),
    "fsdp_matches_unsharded_training": (
        "Sharded training must equal one process on the whole batch: gather full parameters before use, "
        "reduce-scatter the gradients and divide them by the world size, and step only the shards."
    ),
    "fsdp_bf16_compute_fp32_masters": (
        "With a compute dtype, gather and compute in that dtype, but keep the shards and the optimizer's values in "
        "fp32: cast on the way in, and bring the gradient back to fp32 for the shard."
    ),
    "fsdp_parameters_are_sharded": (
        "After a step each rank must hold only its shard (about 1/N of each parameter, with its optimizer state), "
        "and the wrapped module no full parameter of its own."
    ),
    "fsdp_traffic_is_gathers_and_reduce_scatters": (
        "Parameters travel by all-gather and gradients by reduce-scatter, every step; an all-reduce moves N times "
        "more gradient than each rank needs."
    ),
    "fsdp_gather_full_params_keys_and_shapes": (
        "`gather_full_params` returns fp32 tensors with the names and shapes of the original module's "
        "`named_parameters()`: cut the padding off before reshaping."
    ),
    "fsdp_frees_full_parameters": (
        "A gathered parameter must not outlive its layer's forward, and autograd must not keep it for backward: "
        "let it save a small token and gather the parameter again when backward needs it."
    ),
    "checkpoint_complete_and_written_once": (
        "Collectives on every rank, the file write on rank 0 only, and a wait on every rank so that none returns "
        "before the file is complete."
    ),
    "resume_matches_uninterrupted_run": (
        "The checkpoint must hold the model and the full optimizer state (consolidated from every rank), so that a "
        "fresh job continues exactly like an uninterrupted one."
    ),
    "checkpoint_has_every_shard_and_adam_state": (
        "Every rank saves its own shards with the distributed checkpoint API, in the task's layout: the model and "
        "the optimizer keyed so that a job of another size can find them, the scheduler's state and the step too."
    ),
    "saved_by_two_loaded_by_three_continues": (
        "Load into templates of this job's layout, then make sure each object changed, not only the dictionary: "
        "the weights, Adam's state, the scheduler's count, and the step you return."
    ),
    "saved_by_two_loaded_by_one_continues": (
        "A load must work with any world size, one rank included: nothing in it may assume the saving job's "
        "number of ranks."
    ),
    "fsdp2_build_sharded_from_meta": (
        "Build on the meta device, shard, then allocate only the shards and initialize them: no full weight may "
        "exist on any rank, and the tied weight must stay one parameter."
    ),
    "fsdp2_units_and_mixed_precision": (
        "Group blocks into as few units as the memory budget allows (each unit's gathered bf16 bytes within it), "
        "with a mixed-precision policy that gathers in bf16 and reduces in fp32."
    ),
    "fsdp2_accumulation_syncs_once": (
        "Turn gradient synchronization off for every micro-batch but the last one, so that each unit "
        "reduce-scatters once per step."
    ),
    "fsdp2_step_clips_global_norm": (
        "Clip once per step, after the last backward and before the optimizer step, by the norm of the whole "
        "gradient over all ranks, and return that norm."
    ),
    "fsdp2_export_full_state_on_rank0": (
        "Every rank takes part in gathering the full state, but only rank 0 keeps it: full tensors, offloaded to "
        "the CPU; the other ranks return nothing."
    ),
    "checkpointing_keeps_gradients": (
        "Checkpointing must not change the gradients: recompute each checkpointed block exactly once in backward, "
        "and use the non-reentrant variant so that DDP's hooks still run."
    ),
    "checkpointing_frees_activations": (
        "Choose which blocks to checkpoint from the budget: keep the activations that fit, recompute only as many "
        "blocks as needed to stay within it."
    ),
    "memory_estimates_match_measured": (
        "Count bytes per rank for each strategy: parameters, gradients and Adam's two moments. Which of them does "
        "each strategy divide by the world size, and which does every rank keep whole?"
    ),
    "memory_choice_fits_budget": (
        "Among the strategies whose bytes fit the budget, pick the one that communicates least; none when no "
        "strategy fits. Rank them by communication first, memory second."
    ),
    "memory_estimates_mixed_precision": (
        "Count each tensor a rank keeps with its own dtype: what is bf16 here (parameters, gradients, DDP's "
        "buckets), what stays fp32 (the master copy, the two moments), and which of them each strategy shards."
    ),
    "hsdp_groups_follow_the_nodes": (
        "Write down the groups of each mesh dimension for the nodes given: the shard dimension's groups must be "
        "the nodes themselves, the replicate dimension's one rank of each node. Which dimension comes first?"
    ),
    "hsdp_step_matches_one_process": (
        "The groups may be right and the step still wrong: compare the order of ranks within each node with the "
        "order torch numbers a group's members in."
    ),
    "layout_times_follow_the_alpha_beta_model": (
        "Take one layout and one term at a time, as the task states them: the compute with its bubble, then each "
        "axis's collective, its bytes, its k, and which link (inside or across nodes) its groups use."
    ),
    "layout_memory_follows_the_plan": (
        "Memory per device follows task 14's count: which parts are split by which axis, and how many micro-batches "
        "of activations a pipeline stage holds at once."
    ),
    "layout_choice_is_the_fastest_that_fits": (
        "Among the layouts whose memory fits the device, the smallest step time; when none fits, say so."
    ),
}
