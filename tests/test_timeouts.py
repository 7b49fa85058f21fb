"""A hung test must not hold CI until CI's own limit (stop 38: CI killed at 5400 s, 92% through the suite, with no
word of which test hung). pytest-timeout fails it after `timeout` seconds with its stack; the conftest hook records
it apart from ordinary failures, so that scripts/test.sh runs only timed-out tests once more."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def test_timed_out_tests_are_recorded_apart_from_other_failures(tmp_path):
    (tmp_path / "test_cases.py").write_text(
        "import threading, pytest\n"
        "@pytest.mark.timeout(2)\n"
        "def test_hangs():\n    threading.Event().wait()\n"
        "def test_fails():\n    assert False\n"
        "def test_passes():\n    pass\n")
    record = tmp_path / "timed_out"
    env = {**os.environ, "SCHEDGEN_TIMED_OUT": str(record), "PYTHONPATH": str(ROOT / "tests")}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "timeouts_plugin", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_cases.py")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Timeout (>2.0s)" in run.stdout
    assert record.read_text().split() == ["test_cases.py::test_hangs"]
    assert (tmp_path / "timed_out.other").read_text().split() == ["test_cases.py::test_fails"]


def test_a_test_stuck_in_c_is_ended_at_the_hard_limit_with_every_stack(tmp_path):
    # a mutex locked twice: no Python signal handler runs, so only the faulthandler's watchdog can end it
    (tmp_path / "test_stuck.py").write_text(
        "import ctypes\n"
        "def test_c_deadlock():\n"
        "    libc = ctypes.CDLL(None)\n"
        "    m = ctypes.create_string_buffer(64)\n"
        "    libc.pthread_mutex_init(m, None)\n"
        "    libc.pthread_mutex_lock(m)\n"
        "    libc.pthread_mutex_lock(m)\n")
    record = tmp_path / "timed_out"
    env = {**os.environ, "SCHEDGEN_TIMED_OUT": str(record), "SCHEDGEN_TEST_HARD_LIMIT": "2",
           "PYTHONPATH": str(ROOT / "tests")}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "timeouts_plugin", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_stuck.py")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert run.returncode != 0
    (stacks,) = tmp_path.glob("timed_out.stacks.*")
    assert "test_stuck.py\", line 7 in test_c_deadlock" in stacks.read_text()


def test_the_suite_has_a_time_limit():
    # pyproject's `timeout` is what turns a hang into a located failure; pytest-timeout must be a test dependency
    text = (ROOT / "pyproject.toml").read_text()
    assert "\ntimeout = " in text and '"pytest-timeout' in text
    assert "SCHEDGEN_TIMED_OUT" in (ROOT / "scripts" / "test.sh").read_text()


def test_a_forking_helper_past_its_time_is_killed_with_its_children():
    # subprocess.run's timeout kills the helper alone, then waits for EOF on its pipes, which a stuck forked child
    # keeps open: forever (the concurrency helpers of test_1_concurrent_builds and cache_fuzz fork 2-8 builds)
    import subprocess

    from conftest import run_process_group
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(3600)\ntime.sleep(3600)\n"
    try:        # the child and its grandchild sleep an hour, past the test's own limit: returning killed them
        run_process_group([sys.executable, "-c", code], timeout=2)
    except subprocess.TimeoutExpired:
        pass
    else:
        raise AssertionError("no timeout")
    done = run_process_group([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
                             timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "out\n", "err\n")
