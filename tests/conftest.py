"""How `make test` spreads the suite over the machine's cores (pytest-xdist, `-n 2 --dist loadfile`).

Each test file (and each lesson notebook, whose cells share one kernel) runs whole on one worker, so a
module's fixture grades once. The files that start system-wide things (Unix accounts, the hub, PostgreSQL
and Slurm daemons, the browser, sandboxes whose leftovers are looked for by name) form one unit that runs
on one worker, one file after the other, first, because that unit is the longest.

The unit is a scope of xdist's own file scheduler, chosen through xdist's scheduler hook. (xdist's
`xdist_group` marks do not group under pytest 9.2: they rewrite a node id attribute pytest no longer reads.)
Without `-n` only the order changes.

Units are handed out longest first, so that both workers end together: the units the last CI run showed
slow (LONG_UNITS), then the others by their number of tests. xdist's own order (most tests first, its
`--loadscope-reorder`) is turned off: it sent a unit of 2 tests that runs 6 minutes (test_selfcheck.py)
to the end of the queue, where one worker ran it alone while the other had nothing left.

Two tiers: every test is marked `fast` or `slow` here, by file. `make test-fast` runs the fast tier (`-m fast`): the
structural tests of every layer (imports, public APIs, the guard list, cells, hints, tolerances, the hardware plan,
the docs, function length) and one real 2-rank grading of a task per exercise plus the CLI (tests/test_smoke.py).
Everything else, the exercises' whole suites, daemons, browsers, class grading, installs and the lessons, is `slow`;
`make test` runs both.
"""

import os

import pytest

# Files that share daemons, accounts or the process table with each other: never two of them at once.
SERIAL_SYSTEM = {
    "test_hub.py",
    "test_exchange.py",
    "test_browser.py",
    "test_postgres.py",
    "test_hostile_class.py",
    "test_sandbox.py",
    "test_adopted_orphans.py",
    "test_worker_dies_with_run.py",
    "test_notebook_warm_start.py",
}
SERIAL_UNIT = "serial-system"

# The fast tier: under 2 minutes together on a 2-core machine (CONTRIBUTING.md, "Two test tiers").
FAST_FILES = {
    "test_settings.py",
    "test_maps.py",
    "test_dcp_metadata_reader.py",
    "test_parent_jobs.py",
    "test_layers.py",
    "test_public_apis.py",
    "test_guard_list.py",
    "test_cells.py",
    "test_hints.py",
    "test_tolerances.py",
    "test_plan.py",
    "test_docs.py",
    "test_smoke.py",
    "test_gradebook_metadata_check.py",
    "test_independence.py",
    "test_short_functions.py",
    "test_background.py",
    "test_samples.py",
    "test_selfcheck_mistakes.py",
    "test_04_noise.py",
    "test_welcome.py",
}


# Units slow for their number of tests, slowest first: the sum of their tests in the last CI run's
# --durations=30 (seconds, 2 workers on 2 cores; the serial unit's files summed; 2026-12-06, the run of 2909 s),
# less the gradings since read from make selfcheck's run (tests/test_selfcheck.py). Update when it changes.
LONG_UNITS = {
    SERIAL_UNIT: 760,
    "tests/test_selfcheck.py": 582,
    "tests/test_instructor_workflow.py": 220,
    "tests/test_result_channel.py": 165,
    "tests/test_job_limits.py": 162,
    "tests/exercises/test_04_isolation.py": 135,
    "tests/test_student_install.py": 106,
    "tests/exercises/test_04_resume.py": 90,
    "tests/test_teardown_and_gpu.py": 73,
    "tests/exercises/test_04_torchrun.py": 60,
    "tests/test_demo.py": 53,
    "tests/test_scaffold.py": 47,
    "tests/test_gradebook_late.py": 43,
}


def unit_of(nodeid: str) -> str:
    """The scheduling unit of a test: its file, or the one serial unit."""
    path = nodeid.split("::", 1)[0]
    return SERIAL_UNIT if os.path.basename(path) in SERIAL_SYSTEM else path


@pytest.hookimpl(optionalhook=True)  # `-p no:xdist` runs without xdist, whose hook spec is then unknown
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    class FilesAndOneSerialUnit(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:  # xdist's documented way to choose the scope
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # the units go in collection order, which sorts them longest first
    return FilesAndOneSerialUnit(config, log)


def longest_first(items) -> None:
    """Sort the items unit by unit (stable within a unit): LONG_UNITS first, then by number of tests."""
    sizes: dict[str, int] = {}
    for item in items:
        sizes[unit_of(item.nodeid)] = sizes.get(unit_of(item.nodeid), 0) + 1
    slowest = list(LONG_UNITS)
    items.sort(key=lambda item: _rank(unit_of(item.nodeid), slowest, sizes))


def _rank(unit: str, slowest: list[str], sizes: dict[str, int]) -> tuple[int, int, str]:
    if unit in LONG_UNITS:
        return 0, slowest.index(unit), unit
    return 1, -sizes[unit], unit


def pytest_configure(config):
    config.addinivalue_line("markers", "fast: the fast tier (make test-fast), set by file in tests/conftest.py")
    config.addinivalue_line("markers", "slow: only in make test: real daemons, browsers, class grading, installs")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        fast = os.path.basename(item.nodeid.split("::", 1)[0]) in FAST_FILES
        item.add_marker(pytest.mark.fast if fast else pytest.mark.slow)
    longest_first(items)
