"""Hints of exercise 02_ddp_basics: hint("task") reveals them one by one (grader/hints.py).

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
