"""Defect group 13 (issue 14), bench's half: `schedgen bench` without a GPU.

Before: every spec was built and verified, the launches failed, and bench printed the rows as unverified
("NO", rel. error inf) with exit status 1: a FAIL whose reason (no GPU) was nowhere. Now each spec/backend not
run prints `SKIP spec backend: reason`, nothing is built, timed or merged into a record, and the exit status is 0
(as verify's SKIP).
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
    assert cli.main(["bench", *map(str, specs), "--json", str(record)]) == 0
    out = capsys.readouterr().out
    for name in ("add_bf16", "matmul_bf16_4096", "attention_bf16_4096"):
        for backend in ("cuda", "pallas"):
            assert f"SKIP {name} {backend}: {REASON}" in out
    assert "| NO |" not in out and "inf" not in out
    assert not record.exists()            # nothing was run: nothing merged


def test_bench_built_without_a_gpu_builds_nothing(no_gpu, monkeypatch):
    from schedgen import bench
    from schedgen.build import build_spec
    built = build_spec(str(SPECS_DIR / "add_bf16.yaml"))
    monkeypatch.setattr("schedgen.runtime.kernel.load_package", lambda *a: pytest.fail("loaded a kernel"))
    rows = bench.bench_built(built, ["cuda"])
    assert rows == [{"family": "map", "spec": "add_bf16", "backend": "cuda", "shape": dict(built.plan.sizes),
                     "skipped": REASON, "verified": False}]
