"""bench/sweep.py's variant syntax (the GPU part, building and timing, runs on the H200 only)."""
from __future__ import annotations

import importlib.util

from conftest import ROOT


def _sweep():
    spec = importlib.util.spec_from_file_location("sweep", ROOT / "bench" / "sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_variant_is_a_name_and_its_overrides():
    sweep = _sweep()
    assert sweep.parse_variant("c2:schedule.cluster=[2,1]; schedule.in_specs.b.collective_axes=[cluster]") == (
        "c2", ["schedule.cluster=[2,1]", "schedule.in_specs.b.collective_axes=[cluster]"])
    assert sweep.parse_variant("plain") == ("plain", [])


def test_a_variant_that_does_not_build_is_reported_not_raised():
    sweep = _sweep()
    why = sweep._build(str(ROOT / "specs" / "add_bf16.yaml"), ["schedule.in_specs.x.block_shape=[32,512]"])
    assert why.startswith("SpecErrors:") and "schedule.in_specs.x.block_shape" in why and "\n" not in why
