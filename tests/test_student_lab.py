"""`make lab` for a student: the answers are not in the file browser, the browser opens where the exercise is
fetched, and a failing check cell's error (what nbgrader's Validate shows alone) says which checks failed and why."""

from __future__ import annotations

import os
import re

from jupyter_server.services.contents.filemanager import FileContentsManager
from traitlets.config import Config

from grader.checks import CheckResult
from grader.notebook import _reason, _reasons

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "deploy", "lab", "jupyter_server_config.py")


def lab_contents() -> FileContentsManager:
    config = Config()
    with open(CONFIG) as f:
        exec(compile(f.read(), CONFIG, "exec"), {"get_config": lambda: config})
    return FileContentsManager(config=config, root_dir=ROOT)


def listed(contents: FileContentsManager, path: str) -> set[str]:
    return {entry["name"] for entry in contents.get(path, content=True)["content"]}


def test_the_file_browser_lists_no_answers_but_the_formgrader_still_opens_them():
    contents = lab_contents()
    top = listed(contents, "")
    assert "solutions" not in top and {"exercises", "lessons", "grader"} <= top
    hidden_tests = [
        n for n in os.listdir(os.path.join(ROOT, "grader", "exercises", "ddp_basics")) if n.startswith("hidden_")
    ]
    assert hidden_tests  # the test looks at real hidden files
    assert not set(hidden_tests) & listed(contents, "grader/exercises/ddp_basics")
    assert "checks_state.py" in listed(contents, "grader/exercises/ddp_basics")  # public checks stay
    # the instructor's formgrader opens the source notebook by its path: not refused
    model = contents.get("solutions/02_ddp_basics/02_ddp_basics.ipynb", content=False)
    assert model["type"] == "notebook"


def test_make_lab_uses_that_config_and_opens_on_the_welcome_page():
    with open(os.path.join(ROOT, "Makefile")) as f:
        makefile = f.read()
    lab = re.search(r"^lab:.*?(?=^\S)", makefile, re.S | re.M)[0]
    assert "--config=deploy/lab/jupyter_server_config.py" in lab
    assert "--LabApp.default_url=/lab/tree/$(WELCOME)" in lab and "mkdir -p ddp-course" in lab  # tests/test_welcome.py
    with open(os.path.join(ROOT, "nbgrader_config.py")) as f:
        assert 'course_id = "ddp-course"' in f.read()  # where nbgrader's Assignment List fetches to


def test_a_failed_check_cells_error_says_why_in_full_without_pointing_above():
    hung = CheckResult(
        "checkpoint_written_by_rank0_only",
        "save_checkpoint",
        False,
        0,
        1,
        "the run did not finish in time\nrank 0 called barrier (your save_checkpoint, cell 25, line 5) "
        "that rank 1 never called in your code\n\nrank 0 hung: waiting in barrier\n  frames ...",
    )
    reason = _reason(hung)
    assert reason.startswith("\n- checkpoint_written_by_rank0_only: the run did not finish in time")
    assert "cell 25, line 5" in reason and "frames" not in reason  # the summary, not the stacks
    wrong = CheckResult("c", "t", False, 0, 1, "\n".join(f"line {i}" for i in range(20)))
    assert _reason(wrong).count("line ") == 8 and _reason(wrong).endswith("...")
    again = CheckResult(
        "checkpoint_has_unwrapped_keys",
        "save_checkpoint",
        False,
        0,
        1,
        hung.message.split("\n\n")[0] + "\n`save_checkpoint` already hung in checkpoint_written_by_rank0_only",
    )
    first, second = _reasons([hung, again])
    assert "cell 25, line 5" in first and second == (
        "\n- checkpoint_has_unwrapped_keys: the run did not finish in time"
        "\n  `save_checkpoint` already hung in checkpoint_written_by_rank0_only"
    )  # its full first line, then only what the first did not say
    with open(os.path.join(ROOT, "grader", "notebook", "__init__.py")) as f:
        assert "shown above" not in f.read()


def test_make_lab_gives_the_course_an_nbgrader_cache_of_its_own(tmp_path):
    """nbgrader's default cache is per user: another clone's or course's submission in it showed in this course's
    Assignment List. With `make lab`'s NBGRADER_CACHE, nbgrader (reading this course's nbgrader_config.py) lists
    only the course's own."""
    import subprocess
    import sys

    with open(os.path.join(ROOT, "Makefile")) as f:
        lab = re.search(r"^lab:.*?(?=^\S)", f.read(), re.S | re.M)[0]
    assert "NBGRADER_CACHE=$(or $(NBGRADER_CACHE),$(CURDIR)/.nbgrader/cache)" in lab
    exchange, home = tmp_path / "exchange", tmp_path / "home"
    exchange.mkdir(mode=0o777)
    exchange.chmod(0o777)
    other = home / ".local/share/jupyter/nbgrader_cache/ddp-course/alice+05_other+2026-01-01 00:00:00.000000 UTC"
    other.mkdir(parents=True)
    (other / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
    nbgrader = os.path.join(os.path.dirname(sys.executable), "nbgrader")
    env = {**os.environ, "HOME": str(home), "NBGRADER_EXCHANGE": str(exchange)}
    env.pop("JUPYTER_DATA_DIR", None)

    def listed(**more) -> str:
        run = subprocess.run(
            [nbgrader, "list", "--cached"], cwd=ROOT, env={**env, **more}, capture_output=True, text=True, timeout=120
        )
        return run.stdout + run.stderr

    assert "05_other" in listed()  # nbgrader's per-user default: the other course's submission shows
    own = listed(NBGRADER_CACHE=str(tmp_path / "course-cache"))
    assert "05_other" not in own and "Submitted assignments" in own, own
