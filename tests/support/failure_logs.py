"""A pytest plugin (loaded by tests/conftest.py): a test that fails prints the end of the logs
of the processes it started, so a CI run's output shows what a node or gateway said, after
the test's own directory (which holds the logs) is gone."""

from __future__ import annotations

from collections.abc import Generator, Iterable
from pathlib import Path

import pytest

from xnode.devtools.processes import log_tail

FAILED = pytest.StashKey[bool]()
TAIL_LINES = 40


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        item.stash[FAILED] = True
    return report


def print_logs_if_failed(request: pytest.FixtureRequest, logs: Iterable[Path]) -> None:
    """For a fixture's teardown: the last lines of each log, when the test (or its setup)
    failed; pytest shows them under "Captured stdout teardown"."""
    if not request.node.stash.get(FAILED, False):
        return
    for log in logs:
        print(f"----- the end of {log.name} -----")
        print(log_tail(log, TAIL_LINES))
