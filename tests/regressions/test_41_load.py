"""Issue 41, the test suite on a loaded machine: hang detection that counted a slow machine's work as a hang.

A supervised job's time limit ran from the moment the job was sent, so it covered the worker's unpickling of the job,
which imports the function's module: a fresh worker importing a test module (pytest, schedgen: seconds on a loaded
machine) went past the tuner tests' 3-4 s limits and a healthy candidate was recorded as `hang` (and its worker
killed, so the next one imported again: 10 of 11 "hung"). The worker now says "started" once it has the job, and the
limit counts from there; getting there is bounded by the start-up limit, as the worker's own start is. An import that
fails in the worker is the job's error, not a dead worker. And a measurement queued for a tuner's thread when the
time budget ran out started anyway if the thread took it before the main thread cancelled it (on a loaded machine
it did): now it measures nothing.

These simulate the slow machine with imports that take a set time (or never end): nothing here depends on the
machine's own speed.
"""
from __future__ import annotations

import importlib

import pytest

from schedgen.supervise import Supervisor
from schedgen.tune import driver
from schedgen.tune.measure import Result

MODULE = '''import os, threading, time
how = os.environ.get("SCHEDGEN_TEST_IMPORT")
if how == "slow":
    time.sleep(4)                   # a fresh worker's imports on a loaded machine
elif how == "never":
    threading.Event().wait()
elif how == "broken":
    raise ImportError("this module cannot be imported in the worker")


def pid():
    return os.getpid()


def hang():
    threading.Event().wait()
'''


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """A module of job functions whose import in a worker takes what SCHEDGEN_TEST_IMPORT says (at once here)."""
    folder = tmp_path_factory.mktemp("jobs")
    (folder / "_jobs_41_load.py").write_text(MODULE)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))          # spawned workers get this process's sys.path
        yield importlib.import_module("_jobs_41_load")


def test_a_slow_import_of_the_jobs_module_is_not_part_of_the_jobs_time_limit(jobs):
    with Supervisor(start_timeout=300, env={"SCHEDGEN_TEST_IMPORT": "slow"}) as sup:
        got = sup.call(jobs.pid, timeout=2)      # the old code: timeout (the 4 s import inside the 2 s limit)
        assert got.ok and got.value != jobs.pid() and sup.starts == 1, got
        hung = sup.call(jobs.hang, timeout=1)    # a job that never ends still times out at its own limit
        assert hung.status == "timeout" and "did not finish within 1 s" in hung.detail, hung


def test_getting_the_job_started_is_bounded_by_the_start_limit(jobs):
    with Supervisor(start_timeout=1, env={"SCHEDGEN_TEST_IMPORT": "never"}) as sup:
        assert sup.started(timeout=300).ok       # the worker itself: as long as it takes
        got = sup.call(jobs.pid, timeout=300)
        assert got.status == "timeout" and sup.proc is None, got
        assert "did not start the job within 1 s (unpickling it and importing its modules)" in got.detail


def test_a_job_that_cannot_be_unpickled_is_an_error_with_its_reason(jobs):
    with Supervisor(start_timeout=300, env={"SCHEDGEN_TEST_IMPORT": "broken"}) as sup:
        got = sup.call(jobs.pid, timeout=300)    # the old code: the worker died of it (crash, exit code 1)
        assert got.status == "error" and got.detail == "ImportError: this module cannot be imported in the worker"


class _Runner:
    env = {"gpu": "Fake H200", "driver": "999.1"}

    def __init__(self):
        self.measured = []

    def measure(self, built, backend):
        self.measured.append(built)
        return Result("ok", 1.0)


def test_a_measurement_that_starts_after_the_deadline_measures_nothing(monkeypatch):
    class Clock:
        now = 100.0

        def monotonic(self):
            return self.now
    clock = Clock()
    monkeypatch.setattr(driver, "time", clock)
    runner = _Runner()
    trials = driver._LocalTrials(None, runner, "spec.yaml", None, "cuda", None, deadline=150.0)
    try:
        assert trials._measure("built")["status"] == "ok" and runner.measured == ["built"]
        clock.now = 150.0                        # the budget ran out while this one waited for the thread
        assert trials._measure("late") is None and runner.measured == ["built"]
    finally:
        trials.close()
