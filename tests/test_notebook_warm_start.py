"""The notebook's first cell (`check = checker(...)`) starts the engine in the background:
the first check() runs on that same forkserver, and the forkserver ends with the kernel.
Asserted on process identity, never on time (the time is benchmarks/bench_notebook.py's)."""

import ast
import time

import psutil
import pytest
from jupyter_client.manager import start_new_kernel

from grader.submission import read_notebook
from tests.helpers import solution_notebook

EXERCISE = "02_ddp_basics"
FIRST_CELL = f'from grader.notebook import checker\ncheck = checker("{EXERCISE}")'
# what the kernel's engine is now: the forkserver's pid, alive or not, and the kernel's forkservers
STATE = (
    "({'pid': __import__('multiprocessing.forkserver').forkserver._forkserver"
    "._forkserver_pid, 'servers': [p.pid for p in __import__('psutil').Process().children() "
    "if 'forkserver' in ' '.join(p.cmdline())]})"
)


def run(client, code: str) -> dict:
    errors = []
    reply = client.execute_interactive(
        code,
        timeout=600,
        user_expressions={"state": STATE},
        output_hook=lambda m: m["msg_type"] == "error" and errors.append(m["content"]["evalue"]),
    )
    assert not errors and reply["content"]["status"] == "ok", (code, errors, reply["content"])
    return ast.literal_eval(reply["content"]["user_expressions"]["state"]["data"]["text/plain"])


@pytest.fixture
def kernel(tmp_path):
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        yield manager, client
    finally:
        client.stop_channels()
        if manager.is_alive():
            manager.shutdown_kernel(now=True)


def test_the_first_check_runs_on_the_engine_the_first_cell_started(kernel):
    _, client = kernel
    before = run(client, "pass")
    assert before["pid"] is None and before["servers"] == []  # a fresh kernel has no engine
    started = run(client, FIRST_CELL)
    assert started["pid"] is not None and started["servers"] == [started["pid"]]
    for cell in read_notebook(solution_notebook(EXERCISE)).cells:
        run(client, cell.source)
    after = run(client, 'check("pick_backend")\ncheck("wrap_model")')
    assert after == started  # the same forkserver, and no second one


def test_the_engine_the_first_cell_started_ends_with_the_kernel(kernel):
    manager, client = kernel
    pid = run(client, FIRST_CELL)["pid"]
    server = psutil.Process(pid)
    manager.shutdown_kernel(now=True)
    assert not _lives_on(server, bound_s=120), f"the forkserver {pid} outlived its kernel"


def _lives_on(process: psutil.Process, bound_s: float) -> bool:
    """Still running (not ended, not a zombie) after up to bound_s: a forkserver whose kernel died
    mid-preload first finishes its imports, then sees its parent gone."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            return False
        time.sleep(0.2)
    return True
