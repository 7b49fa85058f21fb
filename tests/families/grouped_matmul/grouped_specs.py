"""What the grouped_matmul CPU tests share (imported by name: pytest puts this folder on sys.path): the bundled MoE
specs, a spec's plan under dotted overrides, and the located error lines of a spec the frontend or planner rejects."""
from __future__ import annotations

import pytest

from conftest import ROOT
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan

MIXTRAL = ROOT / "specs" / "grouped_moe_mixtral_bf16_dynamic.yaml"
DEEPSEEK = ROOT / "specs" / "grouped_moe_deepseek_bf16_dynamic.yaml"
TRAIN = ROOT / "specs" / "grouped_moe_mixtral_bf16_train.yaml"


def plan_spec(path, overrides=None):
    """The plan of the spec at `path` with `overrides` ({dotted field: value}) applied."""
    spec, src = load_spec(str(path), overrides or {})
    return plan(spec, src)


def spec_errors(path, overrides) -> list[str]:
    """The error lines (file:line:col: field: what is wrong, what is legal) of a spec that must be rejected."""
    with pytest.raises(SpecErrors) as info:
        plan_spec(path, overrides)
    return info.value.lines()


def error_about(lines: list[str], field: str) -> str:
    """The one line among `lines` located at `field`."""
    got = [ln for ln in lines if f": {field}: " in ln]
    assert len(got) == 1, (field, lines)
    return got[0]
