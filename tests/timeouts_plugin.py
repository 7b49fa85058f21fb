"""The record of timed-out tests that scripts/test.sh reruns (imported by conftest.py; a plugin of its own so that
tests/test_timeouts.py can load it into a pytest run of its own)."""
from __future__ import annotations

import os


def pytest_runtest_logreport(report):
    """With SCHEDGEN_TIMED_OUT=FILE (scripts/test.sh sets it), the id of every test that failed by passing its
    pytest-timeout limit goes to FILE, and of every other failure to FILE.other: the script runs the timed-out
    ones once more, alone. Written by the controlling process only (xdist workers report to it)."""
    out = os.environ.get("SCHEDGEN_TIMED_OUT")
    if not out or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    timed_out = "Timeout (>" in str(report.longrepr)
    with open(out if timed_out else out + ".other", "a") as f:
        f.write(report.nodeid + "\n")
