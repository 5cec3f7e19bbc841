"""A train_script run lost to something outside the script is run again, once; a run the script spoiled is not.

Two kinds of noise: torch's abort at teardown on CPU, and a rendezvous port that another program took between
the grader picking it and the torchrun agent binding it (the agents never meet, so the script never runs); the
hidden checks' two-node probes get a fresh port for the same reason. And the evidence a failed run shows survives
two workers whose tracebacks interleave in the one output.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading

import pytest

from grader.exercises.torchrun import output_evidence, probe_runs, script_runs
from grader.exercises.torchrun.hidden_reference import node_command
from grader.exercises.torchrun.torchrun_process import Torchrun, worker_env

SCRIPT = "print('trained')\n"


@pytest.fixture
def taken_port():
    """A port held by another program: it accepts each connection and closes it at once."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()

    def serve():
        while True:
            try:
                conn, _ = holder.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield holder.getsockname()[1]
    holder.close()


def test_agents_that_cannot_meet_on_a_taken_port_are_told_from_a_teardown_abort(taken_port, tmp_path):
    # A real agent of a 2-node job on the taken port; read_timeout=3 only makes it give up in seconds, not 60.
    args = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1"]
    args += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{taken_port}", "--rdzv-conf=read_timeout=3"]
    proc = Torchrun(args + ["--no-python", "true"], str(tmp_path), timeout=120, env=worker_env())
    with proc:
        proc.wait()
    assert not proc.timed_out, proc.output
    assert proc.lost_rendezvous(), proc.output
    assert not proc.died_at_teardown()


def test_two_node_probe_agents_that_cannot_meet_run_again_on_another_port(taken_port, monkeypatch):
    real = probe_runs.reserved_port
    handed = iter([taken_port])  # the first port the probe is handed is taken; then the grader's own

    @contextlib.contextmanager
    def first_one_taken():
        port = next(handed, None)
        if port is not None:
            yield port
        else:
            with real() as port:
                yield port

    monkeypatch.setattr(probe_runs, "reserved_port", first_one_taken)
    endpoints = []

    def commands_for(endpoint):
        endpoints.append(endpoint)
        commands = [node_command(probe.script, i, endpoint) for i in range(2)]
        at = commands[0].index("--no-python")  # read_timeout=3: the lost agents give up in seconds, not 60
        return [cmd[:at] + ["--rdzv-conf=read_timeout=3"] + cmd[at:] for cmd in commands]

    with probe_runs.ProbeDir() as probe:
        output, timed_out = probe_runs.run_two_node_probe(commands_for, probe)
        records = probe.records()
    assert sorted(records) == [(0, 0), (1, 0)] and not timed_out, output
    assert len(endpoints) == 2 and endpoints[0] == f"127.0.0.1:{taken_port}" != endpoints[1]


def _scenario(*outcomes: script_runs.ScriptRun):
    """A scenario whose runs end as `outcomes` say, one per call; it records the seeds it was given."""
    seeds: list[int] = []

    def scenario(source, job, epochs):
        assert source == SCRIPT and epochs == 3
        seeds.append(job.seed)
        return outcomes[len(seeds) - 1]

    return scenario, seeds


def _complete() -> script_runs.ScriptRun:
    return script_runs.ScriptRun(3, 0, final={"w": 0}, log=[0, 1, 2])


@pytest.mark.parametrize(
    "lost, why",
    [
        (script_runs.ScriptRun(3, 0, lost_rendezvous=True), "rendezvous port"),
        (script_runs.ScriptRun(3, 0, died_at_teardown=True, final={"w": 0}, log=[0]), "aborted at teardown"),
    ],
)
def test_a_run_lost_to_noise_is_run_again_with_a_fresh_seed_and_says_why(lost, why):
    scenario, seeds = _scenario(lost, _complete())
    run = script_runs.with_retry(scenario, SCRIPT, 3)
    assert run.complete() and len(seeds) == 2 and seeds[0] != seeds[1]
    assert why in run.retried


def test_a_run_the_script_spoiled_is_not_run_again():
    spoiled = script_runs.ScriptRun(3, 0, final=None, log=[0])  # no final model, and no sign of noise
    scenario, seeds = _scenario(spoiled, _complete())
    assert script_runs.with_retry(scenario, SCRIPT, 3) is spoiled and len(seeds) == 1


def test_noise_is_run_again_only_once():
    scenario, seeds = _scenario(
        script_runs.ScriptRun(3, 0, lost_rendezvous=True), script_runs.ScriptRun(3, 0, lost_rendezvous=True)
    )
    run = script_runs.with_retry(scenario, SCRIPT, 3)
    assert not run.complete() and len(seeds) == 2


def test_a_complete_run_is_never_noise():
    assert _complete().noise() == ""
    assert (
        script_runs.ScriptRun(3, 0, died_at_teardown=True, lost_rendezvous=True, final={"w": 0}, log=[0, 1, 2]).noise()
        == ""
    )


# Two workers failing at once, as torchrun printed them here (torch 2.13, 2 CPU workers): interleaved by line, and
# within a line. Then the agent's own traceback, which is never the evidence.
_AGENT = """E1204 23:24:41.812000 12719 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1)
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1028, in main
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
"""
BY_LINE = """Traceback (most recent call last):
  File "/tmp/run/train.py", line 1, in <module>
Traceback (most recent call last):
    import grader
  File "/tmp/run/train.py", line 1, in <module>
ModuleNotFoundError: No module named 'grader'
    import grader
ModuleNotFoundError: No module named 'grader'
"""
WITHIN_A_LINE = """Traceback (most recent call last):
Traceback (most recent call last):
  File "/tmp/run/train.py", line 1, in <module>
  File "/tmp/run/train.py", line 1, in <module>
        import graderimport grader

ModuleNotFoundErrorModuleNotFoundError: : No module named 'grader'No module named 'grader'

"""


@pytest.mark.parametrize("workers", [BY_LINE, WITHIN_A_LINE], ids=["by_line", "within_a_line"])
def test_interleaved_tracebacks_of_two_workers_still_show_the_error(workers):
    shown = output_evidence.evidence(workers + _AGENT)
    assert "No module named 'grader'" in shown, shown
    assert shown.count(output_evidence.TRACEBACK_HEAD) == 1 and "ChildFailedError" not in shown, shown


def test_one_workers_traceback_is_shown_whole():
    one = BY_LINE.splitlines()
    alone = "\n".join([one[0], one[1], one[3], one[5]]) + "\n"
    assert output_evidence.worker_traceback(alone + _AGENT) == alone.strip()


# torch 2.13's torchrun prefixes a failed worker's lines with its rank; the cause (rank 1's) came first, the other
# worker's echo of it (gloo's closed connection) after, then torchrun's summary
PREFIXED = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/tmp/torchrun-check-x/run/train.py", line 40, in save_atomically
[rank1]:     os.replace(tmp, path)
[rank0]: Traceback (most recent call last):
[rank1]: FileNotFoundError: [Errno 2] No such file or directory: 'snapshot.pt.tmp' -> 'snapshot.pt'
[rank0]:   File "/tmp/torchrun-check-x/run/train.py", line 83, in main
[rank0]:     problem.loss_fn(ddp_model(x), y).backward()
[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:18306. This is typically caused by a \
remote worker crashing.
E1206 03:49:43.200000 809 api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 869) of binary: python
"""


def test_a_workers_prefixed_traceback_is_shown_not_torchruns_summary():
    shown = output_evidence.evidence(PREFIXED + _AGENT)
    assert "FileNotFoundError: [Errno 2] No such file or directory: 'snapshot.pt.tmp'" in shown, shown
    assert 'File "train.py", line 40, in save_atomically' in shown and "/tmp/" not in shown, shown
    assert "Connection closed by peer" not in shown and "ChildFailedError" not in shown, shown
