"""How `make test` spreads the suite over the machine's cores (pytest-xdist, `--dist loadgroup`).

Each test file (and each lesson notebook, whose cells share one kernel) runs whole on one worker, so a
module's fixture grades once. The files that start system-wide things (Unix accounts, the hub, PostgreSQL
and Slurm daemons, the browser, sandboxes whose leftovers are looked for by name) run one after the other
in one group, first, because that group is the longest. Without `-n` only that order changes.
"""
import pytest

# Files that share daemons, accounts or the process table with each other: never two of them at once.
SERIAL_SYSTEM = {
    "test_hub.py", "test_exchange.py", "test_browser.py", "test_postgres.py", "test_hostile_class.py",
    "test_sandbox.py", "test_adopted_orphans.py", "test_worker_dies_with_run.py", "test_notebook_warm_start.py",
}
SERIAL_GROUP = "serial-system"


def _group(item: pytest.Item) -> str:
    return SERIAL_GROUP if item.path.name in SERIAL_SYSTEM else str(item.path)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group marks into the node ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    items.sort(key=lambda item: _group(item) != SERIAL_GROUP)  # stable: the longest group starts first
