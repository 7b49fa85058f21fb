"""bench/run_gpu.py --compare: the new times against the committed record (bench/results/), rows that moved by
more than 5% flagged, as the last table (on the CPU, bench_built replaced by the committed rows re-timed)."""
from __future__ import annotations

import copy
import importlib.util
import json

from conftest import ROOT
from schedgen import bench

RESULTS = ROOT / "bench" / "results"


def test_recorded_rows_are_the_bench_rows_of_the_folder():
    rows = bench.recorded_rows(RESULTS)
    families = {r["family"] for r in rows}
    assert {"map", "matmul", "grouped_matmul", "rowwise"} <= families and "attention" not in families   # attn_gpu's record
    assert len(rows) == sum(len(json.loads((RESULTS / f"{name}.json").read_text()))
                            for name in ("map", "matmul", "fp8", "grouped", "rowwise"))


def test_compare_flags_what_moved_by_more_than_five_percent():
    old = [{"spec": "a", "backend": "cuda", "shape": {"M": 1}, "time_ms": 1.0, "date": "2026-12-02"},
           {"spec": "a", "backend": "pallas", "shape": {"M": 1}, "time_ms": 2.0},
           {"spec": "a", "backend": "cuda", "shape": {"M": 1}, "variant": "s2", "time_ms": 4.0},
           {"spec": "b", "backend": "cuda", "shape": {"M": 1}, "time_ms": 1.0}]
    new = [{"spec": "a", "backend": "cuda", "shape": {"M": 1}, "time_ms": 1.04},
           {"spec": "a", "backend": "pallas", "shape": {"M": 1}, "time_ms": 1.8},
           {"spec": "a", "backend": "cuda", "shape": {"M": 1}, "variant": "s2", "time_ms": None, "error": "x"},
           {"spec": "a", "backend": "cuda", "shape": {"M": 2}, "time_ms": 1.0}]
    cmp = bench.compare(old, new)
    assert [(c["backend"], c["variant"], c["moved"]) for c in cmp] == [("cuda", "default", False),
                                                                      ("pallas", "default", True), ("cuda", "s2", True)]
    assert cmp[0]["recorded_ms"] == 1.0 and cmp[0]["new_ms"] == 1.04 and abs(cmp[0]["ratio"] - 1.04) < 1e-12
    text = bench.compare_markdown(cmp, unmatched=1)
    lines = text.splitlines()
    assert lines[2].endswith("| 1.0000 | 1.0400 | 1.040 |  |")
    assert lines[3].endswith("| 2.0000 | 1.8000 | 0.900 | MOVED > 5% |")
    assert "| not timed | - | MOVED > 5% |" in lines[4]
    assert lines[-1] == "3 rows compared with the record, 2 moved by more than 5%; 1 new rows have no recorded counterpart."


def test_run_gpu_prints_the_comparison_last(monkeypatch, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("run_gpu", ROOT / "bench" / "run_gpu.py")
    run_gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_gpu)
    recorded = {(r["spec"], json.dumps(r["shape"], sort_keys=True)): r
                for r in json.loads((RESULTS / "map.json").read_text()) if r["backend"] == "cuda"}

    def rerun(built, backends, **kw):        # the recorded cuda row, 10% slower for scale_f32
        key = (built.plan.name, json.dumps(dict(built.plan.sizes), sort_keys=True))
        row = copy.deepcopy(recorded[key]) if key in recorded else None
        if row is None:
            return []
        row["time_ms"] *= 1.10 if built.plan.name == "scale_f32" else 1.01
        return [row]
    monkeypatch.setattr(bench, "bench_built", rerun)
    monkeypatch.setattr(bench, "environment", lambda: {"gpu": None})
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("sys.argv", ["run_gpu.py", "--out", str(tmp_path / "out"), "--skip-tests", "--skip-verify",
                                     "--family", "map", "--main"])
    assert run_gpu.main() == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    assert out[-1] == "4 rows compared with the record, 1 moved by more than 5%."
    table = out[out.index(f"against the record in {RESULTS}:") + 1:-2]
    assert len(table) == 2 + 4
    moved = [line for line in table if "MOVED" in line]
    assert len(moved) == 1 and moved[0].startswith("| scale_f32 | default | cuda |") and "| 1.100 |" in moved[0]
    assert json.loads((tmp_path / "out" / "compare.json").read_text())[0]["spec"] == "add_bf16"
