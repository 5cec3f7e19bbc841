"""Reading a torchrun command line (04_torchrun): what `torchrun_command` must build.

The checks run the student's command too; this static reading comes first so
that a wrong option is named precisely (and a command that would wait for a
second node that never comes is not started at all).
"""

from __future__ import annotations

import os
import sys

from grader.checks import CheckFailed

FLAGS = {"standalone", "no-python", "run-path", "module", "m", "virtual-local-rank"}  # options without a value
RUN_PREFIX = [sys.executable, "-m", "torch.distributed.run"]


def parse_options(cmd: list[str]) -> tuple[dict[str, str | bool], list[str]]:
    """torchrun's options (names normalized: nproc_per_node -> nproc-per-node) and what
    follows them (the script and its arguments)."""
    options: dict[str, str | bool] = {}
    i = len(RUN_PREFIX)
    while i < len(cmd) and cmd[i].startswith("-"):
        token = cmd[i].lstrip("-")
        name, eq, value = token.partition("=")
        name = name.replace("_", "-")
        if eq:
            options[name] = value
        elif name in FLAGS:
            options[name] = True
        else:
            options[name] = cmd[i + 1] if i + 1 < len(cmd) else ""
            i += 1
        i += 1
    return options, cmd[i:]


def same_python(path: str) -> bool:
    try:
        return os.path.realpath(path) == os.path.realpath(sys.executable) or path == sys.executable
    except (TypeError, ValueError):
        return False


def check_static(
    shown: str,
    cmd: list[str],
    script: str,
    nproc: int,
    nnodes: int,
    node_rank: int,
    endpoint: str | None,
    max_restarts: int,
) -> None:
    call = f"torchrun_command({shown})"
    if len(cmd) < 4 or not same_python(cmd[0]) or cmd[1:3] != ["-m", "torch.distributed.run"]:
        raise CheckFailed(
            f"{call} = {cmd!r}: start the list with sys.executable, '-m', 'torch.distributed.run' "
            "(torchrun, run by this very Python, whatever is on PATH)"
        )
    if cmd[-1] != script:
        raise CheckFailed(
            f"{call} = {cmd!r}: the script must be the last element; torchrun's options go "
            "before it (anything after the script is passed to the script, not to torchrun)"
        )
    options, rest = parse_options(cmd)
    if rest != [script]:
        raise CheckFailed(f"{call} = {cmd!r}: after torchrun's options comes only the script; found {rest!r}")

    def expect(name: str, value, default=None):
        got = options.get(name, default)
        if got is None or str(got) != str(value):
            raise CheckFailed(
                f"{call} = {cmd!r}: expected --{name}={value}, got "
                + ("none" if got is None else f"--{name}={got}")
                + (
                    " (are nproc_per_node and nnodes swapped?)"
                    if name in ("nproc-per-node", "nnodes") and str(got) in (str(nproc), str(nnodes))
                    else ""
                )
            )

    expect("nproc-per-node", nproc)
    expect("nnodes", nnodes, default="1")
    expect("max-restarts", max_restarts, default="0")
    if endpoint is None:
        if options.get("standalone") is not True:
            raise CheckFailed(
                f"{call} = {cmd!r}: without an rdzv_endpoint the job is one node: use --standalone "
                "(a private c10d rendezvous on a free local port; without it torchrun expects "
                "port 29500 to be free)"
            )
    else:
        if "standalone" in options:
            raise CheckFailed(
                f"{call} = {cmd!r}: --standalone ignores the rendezvous endpoint; with "
                "rdzv_endpoint use --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT instead"
            )
        expect("rdzv-backend", "c10d")
        expect("rdzv-endpoint", endpoint)
        expect("node-rank", node_rank)
