"""Defect group 1 of issue 41: steps that plan or compile outside a time limit, and workers that outlive their parent.

Before: `verify --timeout 20` built the spec in the parent first (planning, deriving the backward, compiling) and
started its watchdog only after, so a build that never ended was never stopped; a `tune` compile worker (and a
supervised worker) whose parent was killed kept running its job, at 100% CPU for a compile that spun. Now verify
checks only what needs no planning in the parent (the schema, --tuned's buckets) and builds under the watchdog,
reporting a spec's problems from there as before; every worker exits when its parent ends (supervise.
exit_with_parent).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cli import ROOT, one_located_line, run_cli, write  # noqa: E402
from schedgen import build  # noqa: E402
from schedgen.cli import EXIT_FAIL, EXIT_SPEC  # noqa: E402

SPEC = """name: wd
op:
  kind: map
  sizes: {M: 256, N: 512}
  inputs:
    x: {shape: [M, N], dtype: bf16}
  outputs:
    o: {shape: [M, N], dtype: bf16}
  body: o = gelu(x)
"""

GONE_WITHIN = 30.0      # seconds a worker may take to notice its parent is gone (it looks every 0.5 s)


def _no_planning_here(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("verify planned or built the spec outside its watchdog")
    for name in ("build_spec", "derived_specs", "_backward_graph"):
        monkeypatch.setattr(build, name, refuse)
    monkeypatch.setattr(build.planner, "plan", refuse)


def test_verify_builds_only_under_its_watchdog(tmp_path, capsys, monkeypatch):
    """A time limit too short for anything (the worker cannot even start in it) stops the whole run, build
    included: the parent plans nothing before the watchdog starts."""
    _no_planning_here(monkeypatch)
    path = write(tmp_path, SPEC + "backward: {}\n")
    code, _ = run_cli(capsys, "verify", str(path), "--timeout", "0.001", "--interpret", "--backend", "pallas")
    assert code == EXIT_FAIL


def test_verify_reports_spec_errors_found_under_its_watchdog(tmp_path, capsys, monkeypatch):
    _no_planning_here(monkeypatch)
    path = write(tmp_path, SPEC + "backward: {wrt: [nope]}\n")
    code, lines = run_cli(capsys, "verify", str(path), "--timeout", "120", "--interpret", "--backend", "pallas")
    assert code == EXIT_SPEC
    assert "backward.wrt[0]: 'nope' is not an input" in one_located_line(lines, path, line=10, col=18)


_ORPHAN = """
import sys, time
sys.path.insert(0, {root!r})
if sys.argv[1] == "pool":
    from schedgen.tune.compile import compile_pool
    import os
    pool = compile_pool(1)
    pid = pool.submit(os.getpid).result()
    pool.submit(time.sleep, 3600)
else:
    from schedgen.supervise import Supervisor
    sup = Supervisor()
    assert sup.started().ok
    pid = sup.proc.pid
    sup.conn.send((time.sleep, (3600,), {{}}))
print(pid, flush=True)
time.sleep(3600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")          # a zombie has ended (its new parent reaps it when it will)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("kind", ["pool", "supervisor"])
def test_a_worker_exits_when_its_parent_is_killed(kind):
    """The parent is killed (SIGKILL: nothing of it runs after) while its worker runs an hour-long job."""
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN.format(root=str(ROOT)), kind], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    worker = None
    try:
        worker = int(parent.stdout.readline())
        assert _alive(worker)
        parent.kill()
        parent.wait(GONE_WITHIN)
        deadline = time.monotonic() + GONE_WITHIN
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), f"the {kind} worker {worker} outlived its parent"
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
        if worker is not None and _alive(worker):
            os.kill(worker, signal.SIGKILL)
