"""bench/kernel_time.py: a row timed on events with CUPTI beside it is restated on kernel time, its rate scaled
by the same run's two clocks, its ratios untouched; a row on kernel time already is left as it is."""
from __future__ import annotations

import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
try:
    import kernel_time
finally:
    sys.path.remove(str(ROOT / "bench"))


def test_an_events_row_is_restated_and_a_cupti_row_is_not():
    row = {"spec": "m", "backend": "cuda", "time_ms": 0.2, "timing": "cuda-events", "events_ms": 0.2,
           "cupti_ms": 0.16, "tflops": 600.0, "pct_peak": 60.0, "peer": "cublas",
           "peers": {"cublas": {"time_ms": 0.25, "timing": "cuda-events", "cupti_ms": 0.2, "tflops": 480.0,
                                "ratio": 1.25, "ratio_basis": "cupti"}}}
    got = kernel_time.restate_row(row)
    assert got["time_ms"] == 0.16 and got["timing"] == "cupti" and got["events_ms"] == 0.2
    assert got["tflops"] == pytest.approx(750.0) and got["pct_peak"] == pytest.approx(75.0)
    assert got["peers"]["cublas"]["tflops"] == pytest.approx(600.0) and got["peers"]["cublas"]["ratio"] == 1.25
    assert got["peer_time_ms"] == 0.2
    assert kernel_time.restate_row(got) == got
    assert kernel_time.restate_row({"spec": "p", "time_ms": 0.3, "timing": "wall", "gbps": 9.0}) == {
        "spec": "p", "time_ms": 0.3, "timing": "wall", "gbps": 9.0}
