"""grader/settings.py lists every setting: each GRADER_*, COURSE_* or NBGRADER_* variable the code names is in the
table, each entry is named where the table says it is read, the Makefile's `?=` knobs are there too, and
`python -m grader config` prints them with their help."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from grader.settings import MAKE, SETTINGS
from tests.helpers import ROOT

VARIABLE = re.compile(r"\b((?:GRADER|COURSE|NBGRADER)_[A-Z][A-Z_]+)\b")
NOT_VARIABLES = {"GRADER_DIR", "COURSE_FOLDERS", "COURSE_ID"}  # module constants whose names only look like variables


def names_in_code() -> set[str]:
    found = set()
    for folder, _, files in os.walk(os.path.join(ROOT, "grader")):
        for name in files:
            if name.endswith(".py") and name != "settings.py":
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    found |= set(VARIABLE.findall(f.read()))
    return found - NOT_VARIABLES


def test_every_variable_the_code_names_is_in_the_table_and_none_is_stale():
    declared = {s.name for s in SETTINGS if s.who != MAKE}
    in_code = names_in_code()
    assert not in_code - declared, f"add to grader/settings.py: {sorted(in_code - declared)}"
    assert not declared - in_code, (
        f"no longer read anywhere, remove from grader/settings.py: {sorted(declared - in_code)}"
    )


def test_each_entry_is_read_where_the_table_says():
    for s in SETTINGS:
        with open(os.path.join(ROOT, s.where), encoding="utf-8") as f:
            assert s.name in f.read(), f"{s.name} is not named in {s.where}"


def test_every_makefile_knob_is_in_the_table():
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        knobs = set(re.findall(r"^([A-Z_]+) \?=", f.read(), flags=re.M)) - {"PYTHON"}
    declared = {s.name for s in SETTINGS if s.who == MAKE}
    assert knobs <= declared, f"add to grader/settings.py: {sorted(knobs - declared)}"


def test_config_prints_every_setting_with_its_help():
    out = subprocess.run(
        [sys.executable, "-m", "grader", "config", "--all"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    for s in SETTINGS:
        assert s.name in out.stdout and s.help in out.stdout
