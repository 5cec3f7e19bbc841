"""Hints of exercise 02_ddp_basics: hint("task") reveals them one by one (grader/notebook/hints.py).

Each ladder goes from a nudge to the key API, never to the answer's code
(tests/test_hints.py compares every hint with the solution cells).
"""

from grader.i18n import N_  # marked for the grader's catalog; hints.py shows them with _()

HINTS = {
    "pick_backend": [
        N_("The backend depends on one question: can this process use a GPU? NCCL moves GPU tensors, gloo CPU ones."),
        N_(
            "Ask torch, not the machine: `torch.cuda.is_available()` is what the rank sees (the grader hides the GPUs "
            "from ranks that get none). A one-line conditional expression returning one of two strings is enough."
        ),
    ],
    "pick_device": [
        N_(
            "Two branches, on the same question as `pick_backend` (so the two never disagree): a GPU of this rank's "
            "own, or the CPU."
        ),
        N_(
            "With CUDA, first make `local_rank` the current device with `torch.cuda.set_device`, then return a "
            '`torch.device` built from the type `"cuda"` and that index; the local rank, not the global one (a second node has no cuda:2). '
            'Without CUDA, `torch.device("cpu")`.'
        ),
    ],
    "setup": [
        N_(
            "Every process calls `dist.init_process_group` once with its own rank; they meet at rank 0's address and "
            'port. How does the default `init_method="env://"` learn that address?'
        ),
        N_(
            "`env://` reads `MASTER_ADDR` and `MASTER_PORT` from `os.environ` (strings: convert the port with `str`). "
            "Then pass `pick_backend()`, `rank=` and `world_size=` to `dist.init_process_group`."
        ),
    ],
    "cleanup": [
        N_("Tearing down while a slower rank still communicates breaks it: first make every rank wait for the others."),
        N_("`dist.barrier` (every rank waits there until all have arrived), then `dist.destroy_process_group`."),
    ],
    "wrap_model": [
        N_(
            "Order matters: DDP records where the parameters live when it is built, so move the model first, then "
            "wrap it, and return the wrapper."
        ),
        N_(
            '`model.to(device)`, then `DistributedDataParallel(model)`; only when `device.type` is `"cuda"` add '
            "`device_ids=[device.index]` (DDP refuses `device_ids` for a CPU module). The constructor broadcasts "
            "rank 0's parameters for you."
        ),
    ],
    "make_dataloader": [
        N_("The `DataLoader` itself knows nothing about ranks: give it a sampler that picks this rank's indices."),
        N_(
            "`DistributedSampler(dataset, num_replicas=..., rank=..., shuffle=True, seed=...)` with your arguments, "
            "passed as `sampler=` with the per-rank `batch_size` (unchanged). No `shuffle=` on the `DataLoader`: the "
            "sampler shuffles."
        ),
    ],
    "train_one_epoch": [
        N_(
            "Three parts: tell the sampler which epoch it is (`set_epoch`), the usual loop (to device, `zero_grad`, "
            "forward, loss, `backward`, `step`), and a mean loss that every rank agrees on."
        ),
        N_(
            "A mean over samples, not over batches: add `loss.item() * len(inputs)` (or a detached tensor) to a running "
            "sum and `len(inputs)` to a count, both in one float64 tensor on `device`."
        ),
        N_(
            "After the loop, one `dist.all_reduce` of that 2-element tensor sums the ranks' totals; divide the sum by "
            "the count and return it as a Python float (`.item()`)."
        ),
    ],
    "save_checkpoint": [
        N_(
            "Every rank holds the same weights, so one file written by one rank is enough; the others must still wait "
            "until it is complete."
        ),
        N_(
            "Only rank 0 (`dist.get_rank()`) calls `torch.save` of `model.module.state_dict()` (the unwrapped model: no "
            "`module.` prefix); then every rank, rank 0 included, calls `dist.barrier`."
        ),
    ],
    "load_checkpoint": [
        N_("A file saved on `cuda:0` loads back onto `cuda:0` unless you tell `torch.load` where to put it."),
        N_(
            "`torch.load(path, map_location=device)` gives a state dict on this rank's device; pass it to "
            "`model.load_state_dict`."
        ),
    ],
    "MiniDDP": [
        N_(
            "Three jobs: equal replicas at the start (broadcast from rank 0), gradients averaged as soon as each is "
            "ready (a hook per parameter), and a way to wait for the communication before the optimizer step."
        ),
        N_(
            "In `__init__`: `dist.broadcast(t, src=0)` every parameter and every buffer (under `torch.no_grad()`), then "
            "`p.register_post_accumulate_grad_hook(hook)` for each parameter with `requires_grad`; the hook receives "
            "the parameter, its `.grad` already complete."
        ),
        N_(
            "The hook divides `param.grad` in place by the world size and launches `dist.all_reduce(..., "
            "async_op=True)`; keep the returned work objects in a list. `finish_gradient_synchronization` calls "
            "`wait()` on each and empties the list; `forward` just calls the wrapped module."
        ),
    ],
    "train_with_accumulation": [
        N_(
            "Count micro-batches with `enumerate`: each one whose 1-based number is a multiple of `accumulation_steps` "
            "closes a step (all-reduce, optimizer step, `zero_grad`); the others only accumulate into `.grad`."
        ),
        N_(
            "DDP decides whether to synchronize during forward: run forward and backward of the accumulating "
            "micro-batches inside `with model.no_sync():`, the last one outside it (`contextlib.nullcontext()` lets "
            "one `with` line choose either)."
        ),
        N_(
            "Backward the loss divided by `accumulation_steps`, but report undivided losses: keep a float64 [sum of "
            "loss x samples, samples] tensor, `dist.all_reduce` it once after the loop and return sum / count."
        ),
    ],
    "train_uneven": [
        N_(
            "The rank with more batches hangs in an all-reduce the finished rank never joins. torch has a context "
            "manager that makes a finished rank keep answering those collectives."
        ),
        N_(
            "`Join` from `torch.distributed.algorithms.join`, built with a list holding the DDP model; put the whole "
            "ordinary loop (`zero_grad`, forward, loss, backward, `step`) inside one `with` block of it."
        ),
    ],
    "BucketedDDP": [
        N_(
            "Plan the buckets once in `__init__`: walk the parameters that require a gradient in reverse order, add "
            "each one's bytes (`numel() * element_size()`), and close a bucket when the next one would pass the cap "
            "(a non-empty bucket only). Remember for each parameter which bucket holds it."
        ),
        N_(
            "A bucket is ready when every one of its gradients has arrived, not when its last-listed parameter's hook "
            "runs: count hook calls per bucket. When the count reaches the bucket's size, `torch.cat` the reshaped "
            "(`reshape(-1)`) gradients, divide by the world size and launch `dist.all_reduce(flat, async_op=True)`; "
            "keep the handle and the flat tensor."
        ),
        N_(
            "`finish_gradient_synchronization`: launch each bucket not launched yet, with `torch.zeros_like(p)` for a "
            "gradient that is `None` (an unused parameter); `wait()` each handle; copy slices of each flat tensor back "
            "with `view_as(param)` (assign a clone where `.grad` is `None`); reset the counts and handles for the next "
            "step. A tied weight is one `Parameter`: `module.parameters()` already lists it once."
        ),
    ],
}

# The hint of the check that failed: hint(task) shows it first, once per failure, then the task's ladder
# (grader/notebook/hints.py). Each check of a typical mistake carries one; it names the mistake's idea, not the code.
CHECK_HINTS = {
    "backend_matches_hardware": N_(
        "The backend must follow what this rank can use: NCCL only when a GPU is available to it, gloo otherwise. "
        "Returning one backend whatever the machine fails on the other kind."
    ),
    "device_is_this_ranks": N_(
        "Each rank needs its own device: on GPUs the one numbered by its local rank, on a CPU machine the CPU. Ask "
        "the same question as `pick_backend`, so that the backend and the device never disagree."
    ),
    "process_group_has_right_rank_and_size": N_(
        "Each process must join with its own rank and the world size it was given: the same rank on every process "
        "makes them all wait for peers that never come."
    ),
    "cleanup_waits_then_destroys": N_(
        "Two steps in this order: a wait that holds every rank until all have arrived (on GPUs only a barrier does "
        "that), then destroying the process group."
    ),
    "wrap_model_broadcasts_rank0_parameters": N_(
        "Return the DDP wrapper itself, built around the model already on this rank's device: building it is what "
        "copies rank 0's parameters to every rank."
    ),
    "wrap_model_gradients_match_full_batch": N_(
        "The gradients are averaged over ranks only when backward runs through the DDP wrapper; on a CPU module do "
        "not give it `device_ids`."
    ),
    "dataloader_shards_disjoint_and_cover": N_(
        "A `DistributedSampler` gives each rank its own share of the indices; `batch_size` stays the per-rank size, "
        "and the sampler needs the number of replicas and this rank."
    ),
    "dataloader_shuffles_with_seed": N_(
        "The order must be the one the sampler derives from its seed and epoch: give the seed to the sampler and let "
        "it shuffle (no `shuffle=` on the `DataLoader`)."
    ),
    "train_calls_set_epoch": N_(
        "Without telling the sampler the epoch, it shuffles the same way every epoch. Tell it at the start of each "
        "call, before the loop over the loader."
    ),
    "training_matches_single_process": N_(
        "Each batch: move it to the device, clear the old gradients, forward, loss, backward, one optimizer step. A "
        "missing or repeated step makes the parameters differ from one big-batch training."
    ),
    "loss_is_global_mean": N_(
        "Every rank must return the same number: the mean over all samples of all ranks. Sum the losses weighted by "
        "batch size and the sample counts on each rank, add them up over ranks with one collective, then divide."
    ),
    "checkpoint_written_by_rank0_only": N_("Every rank holds the same weights: let only rank 0 write the file."),
    "checkpoint_has_unwrapped_keys": N_(
        "Save the state of the model inside the DDP wrapper (its `.module`), so its keys have no `module.` prefix and "
        "load into a plain model."
    ),
    "checkpoint_complete_before_return": N_(
        "The other ranks must not return before rank 0 has finished writing: after the save, every rank (rank 0 "
        "too) waits in a barrier; on GPUs other collectives return before the others arrive."
    ),
    "checkpoint_loads_onto_device": N_(
        "Tell `torch.load` where the tensors go (`map_location`): a file saved from one GPU otherwise loads onto that "
        "GPU on every rank."
    ),
    "mini_ddp_broadcasts_rank0_state": N_(
        "At construction every rank must end with rank 0's parameters and buffers: broadcast each from rank 0."
    ),
    "mini_ddp_matches_ddp": N_(
        "DDP averages the gradients: after summing them over ranks, divide by the world size (or divide first, then "
        "sum)."
    ),
    "mini_ddp_frozen_and_tied_parameters": N_(
        "Only parameters that require a gradient get a hook (a frozen one raises), and a tied weight is one "
        "parameter: synchronize its gradient once."
    ),
    "accumulation_matches_big_batch_step": N_(
        "Accumulating k micro-batches must equal one step on the big batch: divide each loss by k before backward, "
        "step and clear the gradients only after the k-th."
    ),
    "accumulation_one_all_reduce_per_bucket_per_step": N_(
        "Only the last micro-batch of a step should synchronize: run forward and backward of the others inside "
        "`model.no_sync()`; forward decides, so it must be inside too."
    ),
    "accumulation_returns_global_mean_loss": N_(
        "Every rank must return the same mean loss over all ranks' samples: sum and count on each rank, then one "
        "collective over ranks before dividing."
    ),
    "uneven_finishes_without_hang": N_(
        "A rank that runs out of batches must keep answering the others' gradient all-reduces: wrap the loop in the "
        "join context manager, built with the DDP model."
    ),
    "uneven_matches_join_semantics": N_(
        "Inside the join context the loop stays the ordinary one: clear the gradients, forward, loss, backward and "
        "step for every batch of this rank."
    ),
    "bucketed_gradients_match_ddp": N_(
        "Compare with DDP: parameters and buffers broadcast from rank 0 at construction, every bucket launched (an "
        "unused parameter's too), the flat gradients divided by the world size and copied back."
    ),
    "bucketed_one_all_reduce_per_bucket": N_(
        "One all-reduce per bucket per step: fill buckets in reverse parameter order up to the size cap, launch a "
        "bucket once when all its gradients have arrived, and count a tied weight once."
    ),
    "bucketed_all_reduce_overlaps_backward": N_(
        "Launch each bucket's all-reduce during backward, as soon as its last gradient arrives, with "
        "`async_op=True`; wait for the handles only in `finish_gradient_synchronization`."
    ),
}
