"""When the student last submitted an assignment, from nbgrader's own record of it.

`nbgrader submit` (the Assignment List's Submit button) keeps a copy of each submission in its cache:
<cache>/<course_id>/<student>+<assignment>+<timestamp>/. The cache is `make lab`'s NBGRADER_CACHE (this course's
.nbgrader/cache), else nbgrader's per-user default (<jupyter data dir>/nbgrader_cache), where only this course's
folder is read.
"""

from __future__ import annotations

import glob
import os
import re

COURSE_ID = "ddp-course"  # nbgrader_config.py's CourseDirectory.course_id


def cache_dirs(root: str) -> list[str]:
    """Where nbgrader keeps this student's submissions of the course rooted at `root`, most specific first."""
    if os.environ.get("NBGRADER_CACHE"):
        return [os.environ["NBGRADER_CACHE"]]
    try:
        from jupyter_core.paths import jupyter_data_dir

        data = jupyter_data_dir()
    except ImportError:  # a student venv without Jupyter: nbgrader's default place
        data = os.path.join(os.path.expanduser("~"), ".local", "share", "jupyter")
    return [os.path.join(root, ".nbgrader", "cache"), os.path.join(data, "nbgrader_cache")]


def last_submitted(root: str, assignment: str) -> str | None:
    """The time of the latest submission of `assignment` ("2026-12-06 08:01:02 UTC"), or None when none."""
    times = []
    for cache in cache_dirs(root):
        pattern = os.path.join(glob.escape(os.path.join(cache, COURSE_ID)), f"*+{glob.escape(assignment)}+*")
        for folder in glob.glob(pattern):
            stamp = os.path.basename(folder).split("+", 2)[2]
            found = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?\s*(\w+)?", stamp)
            if found and os.path.isdir(folder):
                times.append(found[1] + (f" {found[2]}" if found[2] else ""))
        if times:
            return max(times)
    return None
