"""bench/record17.py (issue 17's record, one process per family) on the CPU: which specs it runs at which sizes, its
tables and Markdown from rows, the plots' readers of its rows, and a whole run without a GPU (nothing timed, the
files still written)."""
from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT, spec_files

sys.path.insert(0, str(ROOT / "bench"))
try:
    import plot_attention
    import plot_matmul
    import record17
finally:
    sys.path.remove(str(ROOT / "bench"))


def _state(mhz, watts=700.0):
    return {"sm_clock_mhz": mhz, "power_limit_w": watts, "power_draw_w": 500.0, "temperature_c": 50.0}


MM_ROW = {"family": "matmul", "spec": "matmul_bias_gelu_bf16", "backend": "cuda", "kernel": "k",
          "shape": {"M": 4096, "N": 4096, "K": 4096}, "dtype": "bf16", "time_ms": 0.2, "tflops": 687.0,
          "pct_peak": 69.5, "verified": True, "rel_error": 2e-3, "variant": "default", "source": "bundled",
          "gpu_before": _state(1980.0), "gpu_after": _state(1755.0),
          "peers": {"cublas": {"ratio": 1.02, "tflops": 700.0, "verified": True},
                    "jax_pallas": {"skipped": "JAX's kernel takes lhs [M, K] and rhs [K, N]"},
                    "torch_eager": {"ratio": 1.4, "tflops": 490.0, "verified": True},
                    "torch_compile": {"ratio": 1.1, "tflops": 620.0, "verified": False}}}
ATTN_ROW = {"family": "attention", "spec": "attention_bf16_4096", "backend": "cuda", "kernel": "a",
            "shape": {"B": 2, "S": 4096, "H": 16, "D": 128}, "dtype": "bf16", "causal": False,
            "causal_alignment": None, "time_ms": 1.0, "tflops": 700.0, "verified": True, "rel_error": 3e-3,
            "variant": "default", "gpu_before": {"error": "nvml: ModuleNotFoundError"}, "gpu_after": _state(1700.0),
            "peers": {"sdpa_cudnn": {"ratio": 1.05, "tflops": 666.0, "verified": True},
                      "sdpa_flash": {"ratio": 2.3, "tflops": 300.0, "verified": True},
                      "jax_pallas": {"ratio": 1.3, "tflops": 540.0, "verified": True}}}


def test_each_family_runs_its_bundled_specs_and_matmul_the_users_shapes():
    for family in record17.FAMILIES:
        runs = record17.planned_runs(family)
        bundled = [r["spec"] for r in runs if r["source"] == "bundled"]
        assert bundled == [str(p.relative_to(ROOT)) for p in spec_files(family)], family
        user = [r for r in runs if r["source"] == "user"]
        if family == "matmul":
            assert {r["spec"] for r in user} == {str(p.relative_to(ROOT)) for p in
                                                 (ROOT / "bench" / "user_shapes").glob("*.yaml")}
            assert all(r["define"] == [] for r in user)          # the shapes users bring: as written
        else:
            assert not user
    add = next(r for r in record17.planned_runs("map") if r["spec"].endswith("add_bf16.yaml"))
    assert add["define"] == ["M=32768", "N=16384"]                # the suite's 1 GiB per operand
    assert add["at"] == {}
    dyn = next(r for r in record17.planned_runs("attention") if r["spec"].endswith("attention_bf16_dynamic.yaml"))
    assert dyn["define"] == [] and dyn["at"] == {"B": 2, "S": 8192}   # a call's sizes, not the range's max
    assert [r["source"] for r in record17.planned_runs("matmul", "user")] == ["user"] * len(
        list((ROOT / "bench" / "user_shapes").glob("*.yaml")))
    assert [r["spec"] for r in record17.planned_runs("attention", only=["d64"])] == [
        "specs/attention_bf16_d64_4096.yaml"]


def test_the_short_table_shows_every_peer_and_the_clocks():
    text = record17.short_table([MM_ROW, ATTN_ROW])
    head, mm, attn = text.splitlines()
    for name in ("cublas", "jax_pallas", "torch_eager", "torch_compile", "sdpa_cudnn", "sdpa_flash"):
        assert name in head
    assert "1.020" in mm and "skip" in mm and "1.400" in mm and "1.100!" in mm      # '!': not verified
    assert "1980 MHz/700 W -> 1755 MHz/700 W" in mm and "? -> 1700 MHz/700 W" in attn


def test_geomeans_take_verified_ratios_only():
    means = record17.geomeans([MM_ROW, {**MM_ROW, "peers": {"cublas": {"ratio": 1.08, "verified": True}}}])
    assert means["cuda"]["cublas"] == pytest.approx((1.02 * 1.08) ** 0.5)
    assert "torch_compile" not in means["cuda"] and means["cuda"]["torch_eager"] == pytest.approx(1.4)


def test_the_markdown_has_the_method_the_table_and_the_gpu_state():
    class Args:
        iters, warmup = 30, 5
    text = record17.record_markdown("matmul", [MM_ROW], {"gpu": "NVIDIA H200", "driver": "580"}, Args)
    assert "every contender verified against float64 first, then timed interleaved (30 launches" in text
    assert "NVIDIA H200, driver 580" in text and "| vs torch eager | vs torch.compile |" in text
    assert "- cuda: vs cublas 1.020, vs torch_eager 1.400" in text
    assert "| matmul_bias_gelu_bf16 | cuda | 1980 | 1755 | 700 | 700 | 500 | 50 |" in text


def test_the_plots_read_the_new_rows():
    data = plot_attention.table([ATTN_ROW, {**ATTN_ROW, "backend": "pallas", "tflops": 650.0}])
    (label, cell), = data.items()
    assert label.startswith("attention_bf16_4096\n") and cell == {
        "cuda": 700.0, "pallas": 650.0, "sdpa_cudnn": 666.0, "sdpa_flash": 300.0, "jax_pallas": 540.0}
    old = {"rows": [{"label": "p-x", "B": 1, "Hq": 16, "Hkv": 16, "Sq": 16384, "D": 128, "causal": False,
                     "cuda_tflops": 700.0, "sdpa_tflops": 650.0, "jax_tflops": 600.0, "pallas_tflops": 640.0}]}
    assert plot_attention.table(old) == {"1x16x16384x128": {"cuda": 700.0, "pallas": 640.0, "sdpa": 650.0,
                                                            "jax_pallas": 600.0}}
    mm = plot_matmul.table([MM_ROW])
    assert mm == {"4096x4096x4096 bf16 (matmul_bias_gelu_bf16)": {"cuda": 687.0, "cublas": 700.0,
                                                                  "torch_eager": 490.0}}   # unverified: not drawn
    plain = {**MM_ROW, "spec": "matmul_bf16_4096", "peers": {}}
    both = plot_matmul.table([plain, {**plain, "spec": "matmul_bf16_4096_tune", "tflops": 700.0}])
    assert both == {"4096x4096x4096 bf16": {"cuda": 687.0},                  # two specs of one shape: two bars
                    "4096x4096x4096 bf16 (matmul_bf16_4096_tune)": {"cuda": 700.0}}


def test_a_run_without_a_gpu_writes_the_files_and_times_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    assert record17.main(["--family", "map", "--out", str(tmp_path), "--only", "add_bf16_swizzled",
                          "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert "1 specs of map: add_bf16_swizzled" in out and "[1/1] add_bf16_swizzled M=32768 N=16384 ..." in out
    assert "SKIP add_bf16_swizzled cuda:" in out
    assert json.loads((tmp_path / "map.json").read_text()) == []
    assert (tmp_path / "map.md").read_text().startswith("# map: the issue 17 record")


def test_append_merges_into_a_record_carried_in_the_tree(tmp_path, capsys, monkeypatch):
    """A family split over two device calls: the second merges into the first call's rows (read from the path it is
    given, since the device's OUT starts empty); a file that is not a record stops the run before anything is timed."""
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    first = tmp_path / "first.json"
    first.write_text(json.dumps([{**MM_ROW, "family": "map", "spec": "gelu_bias_bf16", "shape": {"M": 1}}]))
    out = tmp_path / "out"
    assert record17.main(["--family", "map", "--out", str(out), "--only", "add_bf16_swizzled", "--no-plot",
                          "--append", str(first)]) == 0
    assert [r["spec"] for r in json.loads((out / "map.json").read_text())] == ["gelu_bias_bf16"]
    capsys.readouterr()
    first.write_text("{not json")
    from schedgen.bench import RecordError
    with pytest.raises(RecordError, match="not a benchmark record"):
        record17.main(["--family", "map", "--out", str(out), "--append", str(first)])
    assert capsys.readouterr().out == ""                                     # nothing planned, built or timed


def test_every_call_size_the_suite_gives_is_legal_for_its_package():
    from schedgen.bench.run import check_at
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    runs = [r for f in record17.FAMILIES for r in record17.planned_runs(f, "bundled") if r["at"]]
    assert len(runs) >= 6
    for r in runs:
        assert check_at(plan(*load_spec(str(ROOT / r["spec"]), {})), r["at"]) == [], r
