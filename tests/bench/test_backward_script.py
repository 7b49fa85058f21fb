"""bench/backward_gpu.py --dry on the CPU: the script builds, references and verifies its torch peers before the
H200 run that cannot be repeated cheaply."""
from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import ROOT

pytest.importorskip("torch")


def _script():
    spec = importlib.util.spec_from_file_location("backward_gpu", ROOT / "bench" / "backward_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_linear_gelu_references_the_backward_from_a_full_forward(tmp_path, monkeypatch):
    # past the matmul reference's sampling threshold the forward's saved `pre` was a Sampled reference that the gelu
    # step's map reference could not read (TypeError, 2026-12-05). The dry run's sizes (M = 256, N = 512, K = 256:
    # small, so that torch's CPU matmuls and the float64 references take seconds) are put past a lowered threshold
    from schedgen import reference
    monkeypatch.setattr(reference, "SAMPLE_ABOVE", 1 << 20)
    assert _script().main(["--dry", "--only", "linear_gelu", "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "backward.json").read_text())
    assert "error" not in row, row.get("trace", row.get("error"))
    assert row["sizes"] == {"M": 256, "N": 512, "K": 256} and 256 * 512 * 256 > reference.SAMPLE_ABOVE
    # torch's autograd of the same function is verified against those references (an f32 bias's gradient, through the
    # bf16 matmul output, within bf16's tolerance, not f32's)
    checks = row["errors"]
    assert set(checks) >= {"torch", "compile"} and all(c["verified"] for c in checks.values()), checks
    assert set(checks["torch"]["rel_error"]) == {"x", "w", "b"}


def test_grouped_case_builds_references_and_verifies_torch(tmp_path):
    # the grouped matmul's case: its group operand goes to every kernel and torch function that takes it, the float64
    # references are whole (the steps' gradients are summed), torch's loop over the groups, torch.compile of it and
    # torch._grouped_mm are verified against them
    assert _script().main(["--dry", "--only", "grouped_moe_silu", "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "backward.json").read_text())
    assert "error" not in row, row.get("trace", row.get("error"))
    assert row["steps"] == ["dacc", "dx", "dw"]
    checks = row["errors"]
    assert {"torch", "compile"} <= set(checks) and checks["torch"]["verified"] and checks["compile"]["verified"]
    assert set(checks["torch"]["rel_error"]) == {"x", "w"}
