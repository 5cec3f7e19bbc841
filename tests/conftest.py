"""How `make test` spreads the suite over the machine's cores (pytest-xdist, `-n 2 --dist loadfile`).

Each test file (and each lesson notebook, whose cells share one kernel) runs whole on one worker, so a
module's fixture grades once. The files that start system-wide things (Unix accounts, the hub, PostgreSQL
and Slurm daemons, the browser, sandboxes whose leftovers are looked for by name) form one unit that runs
on one worker, one file after the other, first, because that unit is the longest.

The unit is a scope of xdist's own file scheduler, chosen through xdist's scheduler hook. (xdist's
`xdist_group` marks do not group under pytest 9.2: they rewrite a node id attribute pytest no longer reads.)
Without `-n` only the order changes.

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

    return FilesAndOneSerialUnit(config, log)


def pytest_configure(config):
    config.addinivalue_line("markers", "fast: the fast tier (make test-fast), set by file in tests/conftest.py")
    config.addinivalue_line("markers", "slow: only in make test: real daemons, browsers, class grading, installs")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        fast = os.path.basename(item.nodeid.split("::", 1)[0]) in FAST_FILES
        item.add_marker(pytest.mark.fast if fast else pytest.mark.slow)
    items.sort(key=lambda item: unit_of(item.nodeid) != SERIAL_UNIT)  # stable: the longest unit starts first
