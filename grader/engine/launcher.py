"""The parent side of a run: start the ranks, bound every wait, collect, clean up.

    from grader.engine import run_distributed

    def hello(ctx):
        import torch, torch.distributed as dist
        t = torch.tensor([ctx.rank + 1.0])
        dist.all_reduce(t)
        return t.item()

    run_distributed(hello, world_size=2).values   # [3.0, 3.0]

Ranks are forked from a forkserver that has torch and DDP's lazy imports
preloaded (a warm 2-rank run costs about 0.1 s). They meet through a FileStore
in a fresh directory, so runs never collide on a port. `fn` may be defined in a
notebook: it is serialized by value with cloudpickle.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import shutil
import signal
import tempfile
import time
from typing import Callable

import cloudpickle

from grader.engine import flight_recorder, machine_faults, stacks, worker
from grader.engine.plan import HardwarePlan, current_plan
from grader.engine.processes import RankProcess, forkserver_context, free_port, kill_tree, read_output, release_port
from grader.i18n import LANGUAGE_VARIABLES
from grader.engine.results import RankReport, RunResult, exit_meaning

RELEASE_GRACE_S = 3.0  # how long a rank may take to exit after reporting
STACK_WAIT_S = 1.0  # how long a hung rank gets to write its stack
WARM_UP_ENV = "GRADER_WARM_UP"  # tests only: "1" warms up gloo runs too (worker._warm_up; GPU plans always do)
STARTUP_TIMEOUT_S = 180.0  # a cold forkserver on a busy 2-core machine
# What a rank says when another program held or joined the port it was handed (not the student's fault;
# a wrong submission that says the same is only run again, with the same verdict).
PORT_CLASH = ("address already in use", "eaddrinuse", "connectfullmesh", "connection closed by peer")
# What gloo raises in a rank whose peer went away (another rank aborted or died): a consequence, never the cause.
PEER_LOST = ("connection reset by peer", "connection closed by peer", "broken pipe")
PEER_WAIT_S = 10.0  # how long a lost peer gets to report or exit (a gloo abort writes its stacks, then dies)


def run_distributed(
    fn: Callable,
    world_size: int = 2,
    args: tuple = (),
    kwargs: dict | None = None,
    *,
    timeout: float = 30.0,
    plan: HardwarePlan | None = None,
    init_group: bool = True,
    port_retries: int = 2,
    trusted: bool = False,
) -> RunResult:
    """Run fn(ctx, *args, **kwargs) on world_size ranks and collect every result.

    Never raises for what happens inside the ranks: a crash, a hang (killed
    after `timeout` seconds, with the hung ranks' stacks) or an early exit is
    described in the returned RunResult. Raises TypeError when fn or its
    arguments cannot be sent to the ranks.

    Untrusted by default: the ranks' results are loaded like
    torch.load(weights_only=True) (tensors, numbers, strings, containers), so a
    rank can send data but never code to run here; and the ranks' code is
    watched (integrity.Guard): a rank whose code replaced part of the grader or
    torch reports a Tampered error instead of its value. trusted=True only for
    the course's own code (a lesson, a benchmark) that must send back other
    objects or patch torch on purpose: then whatever a rank returns is
    unpickled here, so never with a student's code in the ranks.

    plan: the hardware plan (backend, device per rank); by default the one the
    visible GPUs give this world size (grader.engine.plan).
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    try:
        payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
    except Exception as exc:
        raise TypeError(f"cannot send {getattr(fn, '__name__', fn)!r} and its arguments to the ranks: {exc}") from exc
    plan = plan or current_plan(world_size)
    if plan.world_size != world_size:
        raise ValueError(f"the plan is for {plan.world_size} ranks, the run has {world_size}")
    for _ in range(port_retries):  # a port taken by another program meanwhile: try fresh ones
        result = _run_once(payload, plan, timeout, init_group, trusted)
        if not any(
            clue in (str(r.error) + r.output).lower() for r in result.ranks if r.status != "ok" for clue in PORT_CLASH
        ):
            return result
    return _run_once(payload, plan, timeout, init_group, trusted)


def _run_once(payload: bytes, plan: HardwarePlan, timeout: float, init_group: bool, trusted: bool) -> RunResult:
    world_size = plan.world_size
    ctx = forkserver_context()
    rundir = tempfile.mkdtemp(prefix="grader-run-")
    workdir = os.path.join(rundir, "work")
    os.mkdir(workdir)
    port = free_port()
    reports = [RankReport(rank) for rank in range(world_size)]
    procs, conns = [], []
    started = time.monotonic()
    notes: list[str] = []
    try:
        _start_ranks(ctx, plan, payload, rundir, port, timeout, init_group, trusted, procs, conns)
        _collect(reports, procs, conns, timeout, trusted)
        failed = any(r.status != "ok" for r in reports)
        if failed:
            live = (
                [r.rank for r in reports if procs[r.rank].exitcode is None]
                if any(r.status == "hung" or r.exitcode == -signal.SIGABRT for r in reports)
                else []
            )  # a crash says enough
            flight_recorder.request(rundir, live)  # each live rank's collectives, written while its stack is dumped
            _dump_stacks(reports, procs, rundir)
            _read_calls_and_abort_stacks(reports, live, rundir)
        _release_and_reap(reports, procs, conns, notes, failed)
    finally:
        for proc in procs:
            if proc.pid is not None:
                kill_tree(proc.pid)
        for proc in procs:
            proc.join(timeout=5)
        for rank, report in enumerate(reports):
            report.output = read_output(os.path.join(rundir, f"rank{rank}.out"))
        for conn in conns:
            conn.close()
        release_port(port)
        shutil.rmtree(rundir, ignore_errors=True)
    return RunResult(reports, plan, time.monotonic() - started, notes)


def _start_ranks(ctx, plan, payload, rundir, port, timeout, init_group, trusted, procs, conns) -> None:
    """Start one process per rank, each with its end of a pipe; appended to procs and conns as they start,
    so that the caller's cleanup reaches those started before a failure."""
    world_size = plan.world_size
    threads = max(1, (os.cpu_count() or 1) // world_size)
    language = tuple((name, os.environ.get(name)) for name in LANGUAGE_VARIABLES)  # the caller's, now
    for rank in range(world_size):
        parent_end, child_end = ctx.Pipe(duplex=True)
        spec = worker.RankSpec(
            rank=rank,
            world_size=world_size,
            backend=plan.backend,
            device=plan.device(rank),
            hide_gpus=plan.hides_gpus,
            visible=plan.visible,
            guard=not trusted,
            init_group=init_group,
            master_addr="127.0.0.1",
            master_port=port,
            store_path=os.path.join(rundir, "store"),
            workdir=os.path.join(rundir, "work"),
            output_path=os.path.join(rundir, f"rank{rank}.out"),
            stack_path=os.path.join(rundir, f"rank{rank}.stack"),
            payload=payload,
            timeout=timeout,
            launcher_pid=os.getpid(),
            threads=threads,
            language=language,
            warm_up=init_group and (plan.uses_gpus or os.environ.get(WARM_UP_ENV) == "1"),
        )
        proc = RankProcess(target=worker.main, args=(spec, child_end), name=f"rank{rank}")
        proc.start()
        child_end.close()
        procs.append(proc)
        conns.append(parent_end)


def _collect(reports, procs, conns, timeout, trusted) -> None:
    """Wait for every rank's report; stop at the first failure or the deadline.

    The timeout counts from the moment every rank is ready (its device set and its
    process group set up), so a cold forkserver (importing torch on a loaded
    machine) or a busy GPU's NCCL setup never eats into it. A rank that lost its
    peer (gloo's "connection reset by peer") is not a failure of its own: the
    others get PEER_WAIT_S to report or exit, so that whichever arrives first, the
    rank that aborted is the failure and the one that lost it was stopped by it.
    """
    waiting = {i for i in range(len(procs))}
    not_started = set(waiting)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    peers_until = None  # set when a rank lost its peer: the others' bound to say why
    while waiting:
        now = time.monotonic()
        if peers_until is not None and now >= peers_until and peers_until < deadline:
            break  # no peer said why within the bound: the lost connection is the failure
        remaining = min(deadline, peers_until or deadline) - now
        if remaining <= 0:
            _hung_at_deadline(reports, waiting, not_started)
            break
        objs = [conns[i] for i in waiting] + [procs[i].sentinel for i in waiting]
        ready = multiprocessing.connection.wait(objs, timeout=remaining)
        for i in list(waiting):
            message, closed = _receive(i, conns[i], ready, trusted)
            if message is not None:
                kind, body = message
                if kind == "ready":  # its device and process group are set up
                    not_started.discard(i)
                    if not not_started:
                        deadline = time.monotonic() + timeout
                    continue
                _record(reports[i], kind, body, i in not_started)
                if _lost_peer(reports[i]) and peers_until is None:
                    peers_until = time.monotonic() + PEER_WAIT_S
                waiting.discard(i)
            elif closed or (procs[i].sentinel in ready and not conns[i].poll()):
                procs[i].join(timeout=2)
                reports[i].status = "exited"
                reports[i].exitcode = procs[i].exitcode
                waiting.discard(i)
        if any(r.status in ("exited", "unavailable") or (r.status == "error" and not _lost_peer(r)) for r in reports):
            break
    for i in waiting:
        reports[i].status = "stopped"
    _stopped_by_the_cause(reports)


def _hung_at_deadline(reports, waiting: set[int], not_started: set[int]) -> None:
    """The deadline passed. A rank that never said ready is the machine's failure (machine_faults.py), and the
    ranks still waited on were stopped by it; with every rank ready, each one still waited on hung."""
    for i in waiting:
        if i in not_started:
            reports[i].status, reports[i].error = "unavailable", machine_faults.never_ready(STARTUP_TIMEOUT_S)
        else:
            reports[i].status = "stopped" if not_started else "hung"
    waiting.clear()


def _receive(rank: int, conn, ready, trusted: bool) -> tuple[tuple | None, bool]:
    """The rank's message if its pipe is ready, as (kind, body), or None; and whether the pipe closed."""
    if conn not in ready:
        return None, False
    try:
        return worker.decode(conn.recv_bytes(), trusted), False
    except (EOFError, OSError):
        return None, True  # closed without a report: the process is ending
    except Exception as exc:  # refused by the safe loader
        refused = RuntimeError(
            f"rank {rank} sent back something the grader refuses to load: {str(exc).splitlines()[0]}"
        )
        return ("error", stacks.describe_exception(refused)), False


def _record(report, kind: str, body, not_started: bool) -> None:
    """A rank's final message into its report."""
    if kind == "ok":
        report.status = "ok"
        report.value = body
    elif (kind == "unavailable" and not_started) or (kind == "error" and machine_faults.machine_fault(body)):
        report.status = "unavailable"  # the machine failed it: before any student code, or a GPU/NCCL fault
        report.error = body
    elif stacks.collective_timeout(body):  # gloo gave up waiting: a hang, the others go on to the deadline
        report.status = "hung"
        report.error = body
    else:
        report.status = "error"
        report.error = body


def _lost_peer(report) -> bool:
    return report.status == "error" and any(
        clue in str((report.error or {}).get("message", "")).lower() for clue in PEER_LOST
    )


def _stopped_by_the_cause(reports) -> None:
    """A rank that lost its peer, where another rank failed (aborted, crashed, hung): it was stopped by that
    failure, as if the failure had been seen first (its gloo text is noise, not the student's mistake)."""
    if any(r.status not in ("ok", "stopped", "pending") and not _lost_peer(r) for r in reports):
        for r in reports:
            if _lost_peer(r):
                r.status, r.error = "stopped", None


def _dump_stacks(reports, procs, rundir) -> None:
    """Ask each hung rank for its Python stack (faulthandler on SIGUSR1)."""
    hung = [r for r in reports if r.status == "hung" and not r.error]  # not those gloo's timeout already stopped
    for r in hung:
        try:
            os.kill(procs[r.rank].pid, signal.SIGUSR1)
        except OSError:
            pass
    if hung:
        time.sleep(0.2)
        deadline = time.monotonic() + STACK_WAIT_S
        for r in hung:
            path = os.path.join(rundir, f"rank{r.rank}.stack")
            while time.monotonic() < deadline and not _stack_complete(path):
                time.sleep(0.05)
            try:
                with open(path) as f:
                    r.stack = f.read() or r.stack
            except OSError:
                pass


def _read_calls_and_abort_stacks(reports, live, rundir) -> None:
    """The live ranks' collective records (flight_recorder.py), and the stack a rank that died wrote as it died
    (faulthandler on SIGABRT: where a gloo abort found it)."""
    deadline = time.monotonic() + STACK_WAIT_S
    for r in reports:
        if r.rank in live:
            r.calls = flight_recorder.collect(rundir, r.rank, deadline)
        elif r.status == "exited" and not r.stack:
            try:
                with open(os.path.join(rundir, f"rank{r.rank}.stack"), errors="replace") as f:
                    r.stack = f.read(200_000)
            except OSError:
                pass


def _stack_complete(path: str) -> bool:
    try:
        with open(path) as f:
            return "File" in f.read()
    except OSError:
        return False


def _release_and_reap(reports, procs, conns, notes, failed) -> None:
    """Let reporting ranks exit; an abort or a stuck exit after reporting is a note."""
    for conn in conns:
        try:
            conn.send("release")
        except OSError:
            pass
    if failed:
        return  # the finally block kills everything at once
    deadline = time.monotonic() + RELEASE_GRACE_S
    for r, proc in zip(reports, procs):
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
        if proc.exitcode is None:
            notes.append(
                f"rank {r.rank} reported its result but did not exit within "
                f"{RELEASE_GRACE_S:.0f} s; it was killed (teardown noise, not counted)"
            )
        elif proc.exitcode != 0:
            notes.append(
                f"rank {r.rank} reported its result, then ended with {exit_meaning(proc.exitcode)} "
                "(teardown noise, not counted)"
            )
