"""The watchdog: a hung or crashing run ends as a result, quickly, and never takes the caller down."""
from __future__ import annotations

import os
import time

from schedgen.supervise import Supervisor, call_with_timeout


def _add(a, b):
    return a + b


def _hang():
    time.sleep(3600)        # past the test's own limit: a call that returns was stopped


def _raise():
    raise ValueError("bad argument x")


def _die():
    os._exit(7)


def test_result_comes_back():
    out = call_with_timeout(_add, 2, b=3, timeout=60)
    assert out.ok and out.value == 5


def test_hang_is_stopped_and_reported():
    out = call_with_timeout(_hang, timeout=2)
    assert out.status == "timeout" and not out.ok
    assert "did not finish within 2 s" in out.detail and "barrier arrival counts" in out.detail


def test_exception_is_reported_not_raised():
    out = call_with_timeout(_raise, timeout=60)
    assert out.status == "error" and out.detail == "ValueError: bad argument x"


def test_dead_worker_is_reported():
    out = call_with_timeout(_die, timeout=60)
    assert out.status == "crash" and "exit code 7" in out.detail


def _cli(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "schedgen", *args], capture_output=True, text=True)


def test_cli_verify_runs_under_the_watchdog():
    from conftest import SPECS_DIR
    res = _cli("verify", "--backend", "pallas", "--interpret", "--timeout", "300", str(SPECS_DIR / "add_bf16.yaml"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "add_bf16                 pallas  o        bf16   M=64,N=512" in res.stdout


def test_cli_verify_reports_a_run_that_outlives_its_timeout():
    from conftest import SPECS_DIR
    res = _cli("verify", "--backend", "pallas", "--interpret", "--timeout", "0.01", str(SPECS_DIR / "add_bf16.yaml"))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    (row,) = [line for line in res.stdout.splitlines() if line.startswith("add_bf16")]
    assert "FAIL  timeout: did not finish within 0.01 s" in row


def _pid():
    return os.getpid()


def test_supervisor_runs_jobs_in_one_worker_and_replaces_it_after_a_failure():
    with Supervisor(start_timeout=120) as sup:
        first, second = sup.call(_pid, timeout=60), sup.call(_pid, timeout=60)
        assert first.ok and second.ok and first.value == second.value != os.getpid() and sup.starts == 1
        assert sup.call(_raise, timeout=60).status == "error"
        assert sup.call(_hang, timeout=1).status == "timeout"
        assert sup.call(_die, timeout=60).status == "crash"
        after = sup.call(_pid, timeout=60)
        assert after.ok and after.value != first.value and sup.starts == 4
