"""grader/exercises/collectives.py: every spelling of a collective is recorded once, in order, with its payload,
in real 2-rank gloo runs; what passes around the dispatcher is reported, not taken for no collective at all."""

import pytest

from grader.engine import run_distributed

# name -> code run in a rank (t: 4 float32 ones, o: 8 float32, rank: this rank)
SPELLINGS = {
    "dist.all_reduce": ("dist.all_reduce(t)", ["all_reduce"]),
    "imported all_gather_into_tensor": (
        "from torch.distributed import all_gather_into_tensor\n"
        "import warnings\nwarnings.simplefilter('ignore')\nall_gather_into_tensor(o, t)",
        ["all_gather"],
    ),
    "all_gather_single": ("dist.all_gather_single(o, t)", ["all_gather"]),
    "reduce_scatter_single": ("dist.reduce_scatter_single(t[:2].clone(), t)", ["reduce_scatter"]),
    "reduce_scatter_tensor": ("dist.reduce_scatter_tensor(t[:2].clone(), t)", ["reduce_scatter"]),
    "distributed_c10d.all_reduce": (
        "from torch.distributed import distributed_c10d\ndistributed_c10d.all_reduce(t)",
        ["all_reduce"],
    ),
    "async_op": ("dist.all_reduce(t, async_op=True).wait()", ["all_reduce"]),
    "list all_gather": ("dist.all_gather([torch.empty(4), torch.empty(4)], t)", ["all_gather"]),
    "nn.functional all_reduce": (
        "import warnings\nwarnings.simplefilter('ignore')\n"
        "import torch.distributed.nn.functional as F\nF.all_reduce(t)",
        ["all_reduce"],
    ),
    "nn.functional all_gather with backward": (
        "import torch.distributed.nn.functional as F\nx = t.clone().requires_grad_()\n"
        "sum(p.sum() for p in F.all_gather(x)).backward()",
        ["all_gather", "scatter", "scatter"],
    ),
    "functional collectives": (
        "from torch.distributed import _functional_collectives as funcol\n"
        "funcol.all_reduce(t, 'sum', dist.group.WORLD).wait()",
        ["all_reduce"],
    ),
    "hook in backward": (
        "x = t.clone().requires_grad_()\nx.register_hook(lambda g: dist.all_reduce(g) and None)\n"
        "(2 * x).sum().backward()",
        ["all_reduce"],
    ),
    "broadcast, barrier": ("dist.broadcast(t, 0)\ndist.barrier()", ["broadcast", "barrier"]),
    "isend/irecv": ("(dist.isend(t, 1) if rank == 0 else dist.irecv(t, 0)).wait()", ["send|recv"]),
    "batch_isend_irecv": (
        "ops = [dist.P2POp(dist.isend, t, 1 - rank), dist.P2POp(dist.irecv, o[:4], 1 - rank)]\n"
        "[w.wait() for w in dist.batch_isend_irecv(ops)]",
        ["send", "recv"],
    ),
    "all_to_all_single": ("dist.all_to_all_single(o.clone(), o)", ["all_to_all"]),
    "all_gather_object": ("dist.all_gather_object([None, None], {'a': 1})", ["all_gather", "all_gather"]),
    "list reduce_scatter, monitored_barrier": (
        "dist.reduce_scatter(torch.empty(4), [torch.ones(4), torch.ones(4)])\ndist.monitored_barrier()",
        ["reduce_scatter", "barrier"],
    ),
    "reduce, gather, scatter, list all_to_all, coalesced": (
        "dist.reduce(t, 0)\ndist.gather(t, [torch.empty(4), torch.empty(4)] if rank == 0 else None, dst=0)\n"
        "dist.scatter(t, [t.clone(), t.clone()] if rank == 0 else None, src=0)\n"
        "dist.all_to_all([torch.empty(4), torch.empty(4)], [t.clone(), t.clone()])\ndist.all_reduce_coalesced([t, o])",
        ["reduce", "gather", "scatter", "all_to_all", "all_reduce"],
    ),
    # an operator on DTensors whose placements disagree: DTensor's dispatch gathers one of them by itself
    "DTensor's own redistribution": (
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "from torch.distributed.tensor import DTensor, Shard\nmesh = init_device_mesh('cpu', (2,))\n"
        "a = DTensor.from_local(torch.ones(4, 2), mesh, [Shard(1)], run_check=False)\n"
        "(a + DTensor.from_local(torch.ones(2, 4), mesh, [Shard(0)], run_check=False)).to_local()",
        ["all_gather"],
    ),
    "DDP": (
        "m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))\nm(t[None]).sum().backward()",
        None,
    ),  # DDP's own collectives (shape checks, broadcast, bucket all-reduce): all seen, none escapes
    "new group": ("g = dist.new_group([0, 1])\ndist.all_reduce(t, group=g)", None),
}


def _in_rank(ctx, code):
    import torch
    import torch.distributed as dist

    from grader.exercises.collectives import record_collectives

    t, o = torch.ones(4), torch.zeros(8)
    with record_collectives() as calls:
        exec(code, {"torch": torch, "dist": dist, "t": t, "o": o, "rank": ctx.rank})
    return [(c.kind, c.nbytes, c.dtype, c.op, c.index, c.peer) for c in calls]


@pytest.mark.timeout(120)
def test_every_spelling_is_recorded_once_in_order():
    for name, (code, expected) in SPELLINGS.items():
        # untrusted, as for a student: the integrity guard watches torch's modules and finds nothing replaced
        result = run_distributed(_in_rank, 2, args=(code,), timeout=60, trusted=False)
        assert result.ok, f"{name}: {result.failure()}"
        for rank, calls in enumerate(result.values):
            kinds = [c[0] for c in calls]
            assert [c[4] for c in calls] == list(range(len(calls))), (name, calls)
            if expected is None:
                assert kinds, (name, "nothing recorded")
                continue
            wanted = [e.split("|")[rank] if "|" in e else e for e in expected]
            assert kinds == wanted, (name, rank, calls)


@pytest.mark.timeout(60)
def test_three_ranks_operators_that_gloo_runs_as_several():
    # gloo runs a list reduce_scatter as world_size reduces and monitored_barrier as 2 (N - 1) messages:
    # still one recorded call each, and nothing reported as unseen
    code = (
        "dist.reduce_scatter(torch.empty(4), [torch.ones(4)] * 3)\ndist.monitored_barrier()\n"
        "dist.all_gather([torch.empty(4)] * 3, t)"
    )
    result = run_distributed(_in_rank, 3, args=(code,), timeout=60, trusted=False)
    assert result.ok, result.failure()
    assert all([c[0] for c in calls] == ["reduce_scatter", "barrier", "all_gather"] for calls in result.values)


def _payloads(ctx):
    import torch
    import torch.distributed as dist

    from grader.exercises.collectives import record_collectives

    shard, full = torch.ones(3, dtype=torch.bfloat16), torch.empty(6, dtype=torch.bfloat16)
    with record_collectives() as calls:
        dist.all_gather_into_tensor(full, shard)
        dist.reduce_scatter_tensor(shard, full)
        dist.all_reduce(torch.ones(5))
        if ctx.rank == 0:
            dist.send(torch.ones(2, 2), 1)
        else:
            dist.recv(torch.empty(2, 2), 0)
    return [(c.kind, c.nbytes, c.numel, c.dtype, c.peer) for c in calls]


@pytest.mark.timeout(60)
def test_payload_is_what_this_rank_puts_in():
    result = run_distributed(_payloads, 2, timeout=60)
    assert result.ok, result.failure()
    for rank, calls in enumerate(result.values):
        p2p = ("send", 16, 4, "float32", 1) if rank == 0 else ("recv", 16, 4, "float32", 0)
        assert calls == [
            ("all_gather", 6, 3, "bfloat16", None),
            ("reduce_scatter", 12, 6, "bfloat16", None),
            ("all_reduce", 20, 5, "float32", None),
            p2p,
        ]


def _around(ctx, how):
    import torch
    import torch.distributed as dist
    from torch.utils._python_dispatch import _disable_current_modes, _pop_mode, _push_mode

    from grader.exercises.collectives import CollectivesUnseen, record_collectives

    t = torch.ones(4)
    try:
        with record_collectives() as calls:
            dist.all_reduce(t)  # seen
            if how == "backend":
                dist.group.WORLD._get_backend(torch.device("cpu")).allreduce([t]).wait()
            elif how == "popped mode":
                mode = _pop_mode()
                dist.all_reduce(t)
                _push_mode(mode)
            elif how == "thread":
                import threading

                worker = threading.Thread(target=dist.all_reduce, args=(t,))
                worker.start()
                worker.join()
            elif how == "modes disabled":
                from torch.utils._python_dispatch import _disable_current_modes

                with _disable_current_modes():
                    dist.all_reduce(t)
            elif how == "dispatch key excluded":
                with torch._C._DisableTorchDispatch():
                    dist.all_reduce(t)
            elif how == "counter raised":  # the recorder's own count moved to cover a hidden call
                from torch.utils._python_dispatch import _get_current_dispatch_mode

                recorder = _get_current_dispatch_mode()
                with _disable_current_modes():
                    dist.all_reduce(t)
                recorder.sequence += 1
            elif how == "call deleted":  # a recorded call taken out of the list
                dist.all_reduce(t)
                del calls[-1]
    except CollectivesUnseen as exc:
        return str(exc)
    return f"not reported: {[c.kind for c in calls]}"


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "how",
    ["backend", "popped mode", "thread", "modes disabled", "dispatch key excluded", "counter raised", "call deleted"],
)
def test_a_collective_around_the_dispatcher_is_reported(how):
    result = run_distributed(_around, 2, args=(how,), timeout=60)
    assert result.ok, result.failure()
    for message in result.values:
        assert message.startswith("1 collective call(s) moved data where the grader could not see them"), message


def _switched_off(ctx, how):
    import torch
    import torch.distributed as dist
    from torch.utils._python_dispatch import _disable_current_modes, _pop_mode

    from grader.exercises.collectives import RecorderOff, record_collectives

    t, kept = torch.ones(4), []
    try:
        with record_collectives() as calls:
            if how == "popped for good":
                _pop_mode()
            elif how == "modes disabled for good":
                kept.append(_disable_current_modes())  # kept: collected, the generator would push the modes back
                kept[-1].__enter__()
            elif how == "dispatch key excluded for good":
                kept.append(torch._C._DisableTorchDispatch())
                kept[-1].__enter__()
            dist.all_reduce(t)
    except RecorderOff as exc:
        return str(exc)
    return f"not reported: {[c.kind for c in calls]}"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["popped for good", "modes disabled for good", "dispatch key excluded for good"])
def test_a_recorder_switched_off_for_good_fails_and_says_so(how):
    """Popped or disabled and never restored: nothing of the grader's is left on the stack to count with."""
    result = run_distributed(_switched_off, 2, args=(how,), timeout=60)
    assert result.ok, result.failure()
    for message in result.values:
        assert message.startswith("your code turned off the grader's collective recorder"), message


def _with_on_call(ctx):
    import torch
    import torch.distributed as dist

    from grader.exercises.collectives import record_collectives

    def refuse(call):
        if call.kind == "all_reduce":
            raise RuntimeError("refused")

    t = torch.ones(4)
    with record_collectives(on_call=refuse) as calls:
        try:
            dist.all_reduce(t)
            return "ran"
        except RuntimeError as exc:
            return f"{exc} {[c.kind for c in calls]} {t.tolist()}"


@pytest.mark.timeout(60)
def test_on_call_runs_before_the_data_moves_and_can_refuse():
    result = run_distributed(_with_on_call, 2, timeout=60)
    assert result.ok, result.failure()
    assert all(v.startswith("refused ['all_reduce'] [1.0, 1.0, 1.0, 1.0]") for v in result.values), result.values
