"""Servers the browser tests start (JupyterLab, JupyterHub): wait until they answer, stop them whole."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

START_BOUND_S = 120  # a safety bound on busy cores, not a verdict: the wait ends when the server answers
POLL_S = 0.5


def wait_until_up(proc: subprocess.Popen, url: str, what: str, log_name: str) -> None:
    """Return once `url` answers 200; fail the test if `proc` exits or the bound passes."""
    deadline = time.monotonic() + START_BOUND_S
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what} did not start (see {log_name})")
        time.sleep(POLL_S)


def stop_tree(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the server (it stops its kernels, proxy or users' servers), then kill whatever it left."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        family = []
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    kill_all(family)


def kill_all(procs: list[psutil.Process]) -> None:
    """SIGKILL each process still alive, and wait (bounded) until they are gone."""
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyter_server(root: str, env: dict, log_path: str):
    """A Jupyter server (nbgrader's server extensions included) in `root`, as the tests' user; yields
    post(path, data) -> the JSON reply of an authenticated POST to that path."""
    port, token = free_port(), secrets.token_hex(16)
    server = os.path.join(os.path.dirname(sys.executable), "jupyter-server")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [server, "--no-browser", "--allow-root", f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1"]
            + [f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until_up(proc, f"{url}/api/status?token={token}", "the Jupyter server", log_path)

            def post(path: str, data: bytes = b"") -> dict:
                request = urllib.request.Request(
                    url + path, data=data, method="POST", headers={"Authorization": f"token {token}"}
                )
                with urllib.request.urlopen(request, timeout=600) as reply:
                    return json.loads(reply.read())

            yield post
        finally:
            stop_tree(proc, grace_s=30)
