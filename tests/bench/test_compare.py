"""bench.gpu --part record's comparison: the new times against the committed record (bench/results/), rows that moved by
more than 5% flagged, as the last table (on the CPU, bench_built replaced by the committed rows re-timed)."""
from __future__ import annotations

import json

from conftest import ROOT
from schedgen import bench

RESULTS = ROOT / "bench" / "results"


def test_recorded_rows_are_the_bench_rows_of_the_folder():
    rows = bench.recorded_rows(RESULTS)
    families = {r["family"] for r in rows}
    assert {"map", "matmul", "grouped_matmul", "rowwise"} <= families and "attention" not in families   # an earlier driver's record
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
