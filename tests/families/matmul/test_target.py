"""schedule.target (issue 20): the hardware model per target, the families that plan for sm_100a, located errors
both ways, and the target carried by the plan and the launch record (absent there for sm_90a)."""
from __future__ import annotations

import json

import pytest

from conftest import SPECS_DIR
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan, to_dict
from schedgen.plan.hardware import B200, H200, for_target
from schedgen.plan.launch import from_dict, launch_record

BASE = SPECS_DIR.parent / "tests" / "data" / "matmul_base.yaml"


def _errors(path, overrides) -> list[str]:
    spec, src = load_spec(str(path), overrides)
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    return info.value.lines()


def test_each_target_has_its_hardware():
    assert for_target("sm_90a") is H200 and for_target("sm_100a") is B200
    assert (H200.mma, H200.tmem_columns, H200.cc) == ("wgmma", 0, (9, 0))
    assert (B200.mma, B200.tmem_columns, B200.tmem_lanes, B200.cc) == ("tcgen05", 512, 128, (10, 0))
    assert {(g, m) for g, m, *_ in B200.mma_shapes} == {(1, 64), (1, 128), (2, 128), (2, 256)}


def test_the_default_target_is_left_out_of_plan_and_launch_json():
    spec, src = load_spec(str(BASE), {"schedule.backends": ["cuda"]})
    p = plan(spec, src)
    assert p.launch.target == "sm_90a" and "target" not in to_dict(p)
    rec = launch_record(p)
    assert rec.target == "sm_90a" and "target" not in rec.to_dict()
    assert from_dict(json.loads(rec.to_json())).target == "sm_90a"   # absent: sm_90a


def test_a_launch_record_carries_another_target_and_refuses_an_unknown_one():
    spec, src = load_spec(str(BASE), {"schedule.backends": ["cuda"]})
    data = launch_record(plan(spec, src)).to_dict()
    assert from_dict({**data, "target": "sm_100a"}).target == "sm_100a"
    with pytest.raises(ValueError, match=r"target: must be one of|target"):
        from_dict({**data, "target": "sm_80"})


@pytest.mark.parametrize("spec", ["add_bf16.yaml", "attention_backward_bf16_4096.yaml", "rmsnorm_bf16.yaml",
                                  "grouped_moe_mixtral_bf16_dynamic.yaml"])
def test_families_without_sm100a_refuse_it_at_the_field(spec):
    lines = _errors(SPECS_DIR / spec, {"schedule.target": "sm_100a"})
    assert len(lines) == 1
    assert "schedule.target: the " in lines[0] and "family plans for sm_90a only" in lines[0]
    assert "the families that plan for sm_100a: attention, matmul (write" in lines[0]


def test_an_unknown_target_is_a_model_error():
    with pytest.raises(SpecErrors) as info:
        load_spec(str(BASE), {"schedule.target": "sm_80"})
    assert any("schedule.target: Input should be 'sm_90a' or 'sm_100a'" in line for line in info.value.lines())


def test_tmem_on_hopper_names_the_target():
    lines = _errors(BASE, {"schedule.backends": ["cuda"], "schedule.out_specs.out.memory_space": "tmem"})
    assert any("memory_space" in line and "needs schedule.target: sm_100a" in line for line in lines)


def test_tmem_on_blackwell_is_the_output_block_only():
    lines = _errors(BASE, {"schedule.target": "sm_100a", "schedule.backends": ["cuda"],
                           "schedule.in_specs.a.memory_space": "tmem"})
    assert any("in_specs.a.memory_space" in line and "only the output's block may say tmem" in line
               for line in lines)
