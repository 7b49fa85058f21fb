"""bench/multi_gpu.py on the CPU: it imports without torch or a GPU, answers --help, keeps NVLink multicast off in its
own environment and its children's, and its pure parts (slowest-rank iteration times, medians, checks merged over
devices, the sampled-row check itself, the final table and its verdict) compute what they say; without the GPUs it
builds the spec and says `blocked` (exit 3)."""
from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

BENCH = ROOT / "bench" / "multi_gpu.py"


@pytest.fixture(scope="module")
def mg():
    spec = importlib.util.spec_from_file_location("multi_gpu_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_imports_without_torch_and_sets_the_env(mg):
    # in a fresh interpreter: other tests of this process may have imported torch already
    probe = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('m', sys.argv[1]); "
             "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", probe, str(BENCH)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
    for k, v in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}.items():
        assert os.environ[k] == v
    os.environ["NCCL_NVLS_ENABLE"] = "1"          # even if someone turns it back on, children get it off
    try:
        assert mg.child_env()["NCCL_NVLS_ENABLE"] == "0"
    finally:
        os.environ["NCCL_NVLS_ENABLE"] = "0"


def test_help_runs_on_a_cpu():
    r = subprocess.run([sys.executable, str(BENCH), "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--phase" in r.stdout and "NCCL" in r.stdout


def test_bad_arguments_are_usage_errors(mg):
    with pytest.raises(SystemExit) as info:
        mg.parse_args(["--iters", "0"])
    assert info.value.code == 2


def test_slowest_rank_per_iteration_and_medians(mg):
    assert mg.per_iteration_max([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]]) == [3.0, 5.0, 2.5]
    with pytest.raises(ValueError, match="different numbers"):
        mg.per_iteration_max([[1.0], [1.0, 2.0]])
    s = mg.summarize([0.3, 0.1, 0.2, float("nan"), 0.4])
    assert s["n"] == 4 and s["median_ms"] == pytest.approx(0.25) and s["min_ms"] == 0.1
    assert mg.summarize([])["median_ms"] is None
    assert mg.speedup(0.135, 0.1) == pytest.approx(1.35) and mg.speedup(None, 0.1) is None


def test_check_rows_finds_wrong_rows_and_leftover_poison(mg):
    rng = np.random.default_rng(0)
    g = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((32, 16)).astype(np.float32)
    good = (g.astype(np.float64) @ b).astype(np.float32)
    rows = mg.sample_rows(64, 8, 0)
    assert len(rows) == 8 and rows[0] == 0 and rows[-1] == 63
    c = mg.check_rows(good, g, b, rows, 1e-2)
    assert c["ok"] and c["rel_error"] < 1e-6
    shifted = np.roll(good, 1, axis=0)
    assert not mg.check_rows(shifted, g, b, rows, 1e-2)["ok"]
    poisoned = good.copy()
    poisoned[5, 3] = np.nan                        # outside the sampled rows still counts
    bad = mg.check_rows(poisoned, g, b, [0, 1], 1e-2)
    assert not bad["ok"] and not bad["finite"] and bad["rel_error"] == math.inf


def test_rank_results_merge_into_rows(mg):
    ok = {"ok": True, "rel_error": 1e-3, "finite": True}
    ranks = [{"rank": 0, "checks": {"nccl_cublas": ok, "ours_cuda": ok, "ours_cuda_again": ok},
              "times": {"nccl_cublas": [0.14, 0.13], "ours_cuda": [0.10, 0.11], "nccl_all_gather": [0.03, 0.03],
                        "cublas_matmul": [0.1, 0.1]}, "errors": {}},
             {"rank": 1, "checks": {"nccl_cublas": ok, "ours_cuda": {**ok, "rel_error": 2e-3},
                                    "ours_cuda_again": {"ok": False, "rel_error": math.inf, "finite": False}},
              "times": {"nccl_cublas": [0.15, 0.12], "ours_cuda": [0.09, 0.12], "nccl_all_gather": [0.03, 0.03],
                        "cublas_matmul": [0.1, 0.1]}, "errors": {}}]
    rows = mg.cuda_variants(ranks)
    assert rows["nccl_cublas"]["median_ms"] == pytest.approx(0.14) and rows["nccl_cublas"]["verified"]
    assert rows["ours_cuda"]["median_ms"] == pytest.approx(0.11)               # slowest of each: 0.10, 0.12
    assert rows["ours_cuda"]["verified"] is False            # the re-check after the timed launches failed on rank 1
    broken = mg.cuda_variants([{"rank": 0, "errors": {"rank": "RuntimeError: boom"}}])
    assert broken["ours_cuda"]["median_ms"] is None and "boom" in broken["ours_cuda"]["error"]


def test_table_reports_ratio_and_target(mg):
    result = {"spec": "s", "m": 1024, "n": 4096, "k": 4096, "dtype": "bf16", "devices": 2, "gpu": "H200",
              "flops_per_device": 2 * 2048 * 4096 * 4096,
              "variants": {"nccl_cublas": {"median_ms": 0.135, "verified": True, "rel_error": 1e-3},
                           "ours_cuda": {"median_ms": 0.1, "verified": True, "rel_error": 2e-3},
                           "ours_pallas": {"median_ms": None, "error": "RuntimeError: no"}}}
    text = mg.table(result)
    lines = text.splitlines()
    assert lines[0].startswith("collective matmul s: M=1024/device") and "2 x H200" in lines[0]
    ours = next(l for l in lines if l.startswith("schedgen CUDA"))
    assert "100.0" in ours and "1.35x" in ours and "687" in ours           # us, ratio, TFLOP/s per device
    assert "1.35x, met" in text and "ours_pallas: RuntimeError: no" in text
    result["variants"]["ours_cuda"]["median_ms"] = 0.125
    assert "1.08x, NOT met" in mg.table(result)


def test_without_gpus_it_builds_and_says_blocked(mg, tmp_path, capsys, monkeypatch):
    from schedgen.runtime.driver import available
    from schedgen.runtime.multidevice import gpu_count
    if available()[0] and gpu_count() >= 2:
        pytest.skip("GPUs present")
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    assert mg.main(["--out", str(tmp_path / "out")]) == 3
    out = capsys.readouterr().out
    assert "blocked: collective_matmul_bf16_1024x4096 needs 2 GPUs" in out
    assert (tmp_path / "out" / "pkgs" / "collective_matmul_bf16_1024x4096" / "kernel.cubin").exists()
