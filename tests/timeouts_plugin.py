"""A test that hangs fails instead of holding the suite (stop 38: CI killed at 5400 s, 92% through, with no word of
which test hung), and scripts/test.sh runs the tests that hung once more, alone.

Two limits: pytest-timeout's (`timeout` in pyproject.toml) raises in the test when the time is up, with its stack; a
test stuck where Python's signal handler never runs (a lock inside a C library) passes that limit, and at
HARD_LIMIT seconds faulthandler prints every thread's stack and ends the worker process (xdist reports the test as
crashed and starts a new worker). Imported by conftest.py; a module of its own so that tests/test_timeouts.py can load
it into a pytest run of its own."""
from __future__ import annotations

import faulthandler
import os
import sys

import pytest

HARD_LIMIT = float(os.environ.get("SCHEDGEN_TEST_HARD_LIMIT", "900"))
# what a test's failure says when it hung: pytest-timeout's failure, or xdist's report of the ended worker
HUNG = ("Timeout (>", "crashed while running")
_STACKS: list = []      # the file the hard limit's stacks go to (kept open: faulthandler writes to its descriptor)


def _stacks_file():
    """sys.__stderr__, or with SCHEDGEN_TIMED_OUT=FILE, FILE.stacks.<pid> (an xdist worker's stderr is not shown;
    scripts/test.sh prints these files)."""
    out = os.environ.get("SCHEDGEN_TIMED_OUT")
    if not out:
        return sys.__stderr__
    if not _STACKS:
        _STACKS.append(open(f"{out}.stacks.{os.getpid()}", "a"))  # noqa: SIM115 (open for the process's life)
    return _STACKS[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """The hard limit around one test, fixtures included."""
    if HARD_LIMIT > 0:
        faulthandler.dump_traceback_later(HARD_LIMIT, exit=True, file=_stacks_file())
    try:
        yield
    finally:
        if HARD_LIMIT > 0:
            faulthandler.cancel_dump_traceback_later()


def pytest_runtest_logreport(report):
    """With SCHEDGEN_TIMED_OUT=FILE (scripts/test.sh sets it), the id of every test that failed by hanging goes to
    FILE, and of every other failure to FILE.other. Written by the controlling process only (xdist workers report
    to it)."""
    out = os.environ.get("SCHEDGEN_TIMED_OUT")
    if not out or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    hung = any(h in str(report.longrepr) for h in HUNG)
    with open(out if hung else out + ".other", "a") as f:
        f.write(report.nodeid + "\n")
