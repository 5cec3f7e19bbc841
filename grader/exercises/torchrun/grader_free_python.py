"""A Python for the student's torchrun job in which no grader module can be imported (04_torchrun).

The training script must not reach the grader's references (`reference_state` would be its
answer), so its torchrun job runs:

- with `python -S` (no site-packages, no .pth file, so no editable-install hook) for the agent
  and, through `--no-python`, for every worker;
- with PYTHONPATH = one folder of links to the entries of this Python's site-packages, minus
  the grader's own (its package, its dist-info, editable-install hooks, .pth files): torch and
  the course's other dependencies import, `grader` does not, in the instructor's editable
  install as in a student build's regular one;
- with an environment built from a short allow-list (no PYTHONPATH, PYTHONHOME, ... of ours),
  in a fresh directory holding only train.py and the problem module it imports.

`verify()` proves it before each run: `import grader` must fail there. This keeps the grader
out of reach of `import`; it does not sandbox the file system (a script that goes looking for
the grader's files by path is the README's "not defended in-process" case).
"""

from __future__ import annotations

import os
import site
import subprocess
import sys

from grader.engine.plan import current_plan
from grader.exercises.torchrun import problem
from grader.exercises.torchrun.torchrun_process import RUN_MODULE, worker_command

SITE = "python-site"  # the links folder, next to the run's working directory (never inside it)
PROBLEM_FILE = "problem.py"  # what the script imports: `import problem`
ENV_KEEP = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR"}
ENV_KEEP_PREFIXES = ("LC_", "GLOO_", "OMP_", "MKL_", "CUDA_")
_GRADER_DISTS = ("ddp_course_grader",)  # the instructor's and the student build's distributions


def _leaks_grader(name: str) -> bool:
    return (
        name == "grader"
        or name.endswith(".pth")
        or name.startswith("__editable__")
        or name.lower().replace("-", "_").startswith(_GRADER_DISTS)
    )


def _site_dirs() -> list[str]:
    """Where this Python finds its packages: its sys.path minus the standard library (there under
    -S too), the current directory and any source checkout of the grader (a folder holding
    `grader` that is not a site-packages folder: its solutions and tests stay off the path)."""
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    sites = set(site.getsitepackages()) | ({site.getusersitepackages()} if site.ENABLE_USER_SITE else set())
    sites = {os.path.realpath(p) for p in sites}
    found = []
    for entry in sys.path:
        real = os.path.realpath(entry or os.getcwd())
        if not os.path.isdir(real) or real in found or real == os.path.realpath(os.getcwd()):
            continue
        if real not in sites and (
            real == stdlib
            or real.startswith(stdlib + os.sep)  # lib-dynload
            or os.path.isdir(os.path.join(real, "grader"))
        ):
            continue
        found.append(real)
    return found


def build_site(root: str) -> str:
    """Fill root/SITE with links to every site-packages entry but the grader's; return its path."""
    target = os.path.join(root, SITE)
    os.mkdir(target)
    for folder in _site_dirs():
        for name in sorted(os.listdir(folder)):
            link = os.path.join(target, name)
            if not _leaks_grader(name) and not os.path.lexists(link):  # the first folder wins, as on sys.path
                os.symlink(os.path.join(folder, name), link)
    return target


def node_gpus(node: int, nodes: int, per_node: int) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES of one torchrun agent: its own GPUs under the plan for all the job's workers (each
    worker's LOCAL_RANK then picks a GPU no other worker has: NCCL refuses two ranks on one GPU, and two agents
    of one worker each would both pick cuda:0), or none when there are fewer GPUs than workers (gloo)."""
    plan = current_plan(nodes * per_node)
    if not plan.uses_gpus:
        return {"CUDA_VISIBLE_DEVICES": ""}
    names = (
        plan.visible.split(",")
        if plan.visible
        else [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    )
    names = names if len(names) >= plan.gpus else [str(i) for i in range(plan.gpus)]
    return {"CUDA_VISIBLE_DEVICES": ",".join(names[node * per_node : (node + 1) * per_node])}


def isolated_env(site_dir: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The torchrun job's whole environment: allow-listed variables, the links folder, our settings."""
    env = {k: v for k, v in os.environ.items() if k in ENV_KEEP or k.startswith(ENV_KEEP_PREFIXES)}
    env.update(
        PYTHONPATH=site_dir,
        PYTHONNOUSERSITE="1",
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
        OMP_NUM_THREADS="1",
        PYTHONFAULTHANDLER="1",  # a worker gloo aborts, or one killed hung, prints its stack (output_evidence.py)
        # each restarted attempt gets a fresh rendezvous store (launch.worker_env says why)
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
    )
    env.update(extra or {})
    return env


def isolated_command(cmd: list[str]) -> list[str]:
    """A grader-built torchrun command (RUN_MODULE + options + worker_command(script)) with
    `python -S` for the agent and for its workers."""
    script = cmd[-1]
    if cmd[: len(RUN_MODULE)] != RUN_MODULE or cmd[-len(worker_command(script)) :] != worker_command(script):
        raise ValueError(f"not a grader-built torchrun command: {cmd!r}")
    options = cmd[len(RUN_MODULE) : -len(worker_command(script))]
    return [
        sys.executable,
        "-S",
        "-m",
        "torch.distributed.run",
        *options,
        "--no-python",
        sys.executable,
        "-S",
        "-u",
        script,
    ]


def write_job(directory: str, source: str) -> None:
    """The student's script as train.py, and the problem module it imports, in `directory`."""
    with open(os.path.join(directory, "train.py"), "w") as f:
        f.write(source)
    with open(problem.__file__) as src, open(os.path.join(directory, PROBLEM_FILE), "w") as dst:
        dst.write(src.read())


def verify(directory: str, env: dict[str, str]) -> None:
    """Raise RuntimeError unless `import grader` fails in this job's Python (a grader set-up bug)."""
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('grader') is None else 3)"
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        cwd=directory,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(
            "the training script's Python can import the grader (isolation broken, exit "
            f"{done.returncode}: {done.stderr.strip()[-300:]})"
        )
