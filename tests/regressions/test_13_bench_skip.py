"""Defect group 13 (issue 14), bench's half: `schedgen bench` without a GPU.

Before: every spec was built and verified, the launches failed, and bench printed the rows as unverified
("NO", rel. error inf) with exit status 1: a FAIL whose reason (no GPU) was nowhere. Now each spec/backend not
run prints `SKIP spec backend: reason`, nothing is built, timed or merged into a record. Issue 21: when every row
is skipped (nothing timed) the exit status is 4, as verify's, with a line on stderr giving each reason and the rows
it skipped; `--allow-skip` makes that 0 (a CPU-only machine, CI).
"""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen import cli
from schedgen.runtime import driver

REASON = "CUDA unavailable: no CUDA device found"


@pytest.fixture
def no_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(driver, "available", lambda target="sm_90a": (False, REASON))


def test_bench_without_a_gpu_says_skip_and_why(no_gpu, tmp_path, capsys):
    specs = [SPECS_DIR / "add_bf16.yaml", SPECS_DIR / "matmul_bf16_4096.yaml", SPECS_DIR / "attention_bf16_4096.yaml"]
    record = tmp_path / "rec.json"
    assert cli.main(["bench", *map(str, specs), "--json", str(record)]) == 4
    cap = capsys.readouterr()
    out = cap.out
    for name in ("add_bf16", "matmul_bf16_4096", "attention_bf16_4096"):
        for backend in ("cuda", "pallas"):
            assert f"SKIP {name} {backend}: {REASON}" in out
    assert "| NO |" not in out and "inf" not in out
    assert not record.exists()            # nothing was run: nothing merged
    rows = ", ".join(f"{n} {b}" for n in ("add_bf16", "matmul_bf16_4096", "attention_bf16_4096")
                     for b in ("cuda", "pallas"))
    assert cap.err == (f"schedgen: nothing was timed: 6 of 6 rows skipped ({rows}: {REASON}); exit status 4 "
                       f"(--allow-skip exits 0 when every row is skipped)\n")


def test_bench_allow_skip_exits_0_when_nothing_ran(no_gpu, capsys):
    assert cli.main(["bench", str(SPECS_DIR / "add_bf16.yaml"), "--allow-skip"]) == 0
    cap = capsys.readouterr()
    assert f"SKIP add_bf16 cuda: {REASON}" in cap.out and f"SKIP add_bf16 pallas: {REASON}" in cap.out
    assert cap.err == "schedgen: nothing was timed (2 rows skipped; --allow-skip)\n"


def test_bench_through_the_command_line_exits_4_when_every_row_skips(tmp_path):
    """The installed command on this machine (the GPU rows skip without one; on a GPU machine the rows run)."""
    import subprocess
    import sys
    from schedgen.runtime.driver import available
    if available()[0]:
        pytest.skip("a GPU is here: the rows run")
    env = {**__import__("os").environ, "SCHEDGEN_CACHE": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-m", "schedgen", "bench", str(SPECS_DIR / "add_bf16.yaml"),
                          "--backend", "cuda"], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 4, run.stderr
    assert "SKIP add_bf16 cuda: " in run.stdout
    assert run.stderr.startswith("schedgen: nothing was timed: 1 of 1 rows skipped (add_bf16 cuda: ")
    run = subprocess.run([sys.executable, "-m", "schedgen", "bench", str(SPECS_DIR / "add_bf16.yaml"),
                          "--backend", "cuda", "--allow-skip"], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr


def test_bench_built_without_a_gpu_builds_nothing(no_gpu, monkeypatch):
    from schedgen import bench
    from schedgen.build import build_spec
    built = build_spec(str(SPECS_DIR / "add_bf16.yaml"))
    monkeypatch.setattr("schedgen.runtime.kernel.load_package", lambda *a: pytest.fail("loaded a kernel"))
    rows = bench.bench_built(built, ["cuda"])
    assert rows == [{"family": "map", "spec": "add_bf16", "backend": "cuda", "shape": dict(built.plan.sizes),
                     "skipped": REASON, "verified": False}]
