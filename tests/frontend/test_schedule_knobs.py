"""Schedule fields that are honoured by one backend and rejected (located) by the other, or by both."""
from __future__ import annotations

import pytest

from conftest import ROOT, without_warpgroups
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.verify import verify_built

ADD = ROOT / "tests" / "data" / "add_bf16.yaml"
SMALL = {"M": 64, "N": 512}


def _build(tmp_path, **defines):
    """The test spec built with -D `defines` (Pallas only: without its num_warpgroups, the CUDA kernel's)."""
    path = without_warpgroups(ADD, tmp_path) if defines.get("schedule.backends") == ["pallas"] else ADD
    return build_spec(str(path), {**SMALL, **defines}, cache=Cache(tmp_path / "cache"))


def test_delay_release_renders_in_both_backends_and_runs_interpreted(tmp_path):
    built = _build(tmp_path, **{"schedule.in_specs.x.delay_release": 2, "schedule.in_specs.y.delay_release": 2})
    assert built.plan.delay_release == 2
    cu = built.files["kernel.cu"].decode()
    assert "issue_loads(k - 2 + kStages, (k - 2) % kStages)" in cu       # the CUDA ring refills two steps late
    assert len(built.files["kernel.cubin"]) > 0
    py = built.files["pallas_kernel.py"].decode()
    assert py.count("delay_release=2") == 2
    (check,) = verify_built(built, ["pallas"], interpret=True, seed=5)
    assert check.ok, check
    # one delay_release per input is the Pallas kernel's (the CUDA one refills a stage of every input at once)
    built = _build(tmp_path, **{"schedule.in_specs.x.delay_release": 1, "schedule.in_specs.y.delay_release": 2,
                                "schedule.backends": ["pallas"]})
    py = built.files["pallas_kernel.py"].decode()
    assert "delay_release=1" in py and "delay_release=2" in py
    with pytest.raises(SpecErrors) as err:
        _build(tmp_path, **{"schedule.in_specs.x.delay_release": 1, "schedule.in_specs.y.delay_release": 2})
    assert "schedule.in_specs.x.delay_release: the CUDA map kernel refills a stage" in err.value.render()


def test_delay_release_must_leave_a_stage_to_fill(tmp_path):
    with pytest.raises(SpecErrors) as err:
        _build(tmp_path, **{"schedule.in_specs.x.delay_release": 4})
    assert "delay_release 4 must be less than the pipeline's max_concurrent_steps (4)" in err.value.render()


def test_tmem_is_blackwell_only(tmp_path):
    with pytest.raises(SpecErrors) as err:
        _build(tmp_path, **{"schedule.in_specs.x.memory_space": "tmem"})
    assert "schedule.in_specs.x.memory_space: tensor memory (TMEM) exists on Blackwell (sm_100a) only" in err.value.render()


def test_profile_space_is_pallas_only(tmp_path):
    with pytest.raises(SpecErrors) as err:
        _build(tmp_path, **{"schedule.compiler_params.profile_space": 4096})
    assert "schedule.compiler_params.profile_space: in-kernel profiling is a Pallas" in err.value.render()
    built = _build(tmp_path, **{"schedule.compiler_params.profile_space": 512, "schedule.backends": ["pallas"],
                                "schedule.compiler_params.profile_dir": "prof"})
    src = built.files["pallas_kernel.py"].decode()
    assert "profile_space=512" in src and "profile_dir=_profile_dir('prof')" in src   # (jax needs both)
    assert "kernel.cubin" not in built.files


def test_unsafe_no_auto_barriers_reaches_pallas(tmp_path):
    built = _build(tmp_path, **{"schedule.compiler_params.unsafe_no_auto_barriers": True})
    assert "unsafe_no_auto_barriers=True" in built.files["pallas_kernel.py"].decode()
