"""Schedule fields the attention kernels do not read (schedgen/families/attention/unread.py): set to anything but
their default, each is one located error naming the field, what the kernels do instead and what is legal; left at
its default (or written out as the default) it plans."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan

BASE = SPECS_DIR / "attention_bf16_4096.yaml"
CUDA = {"schedule.backends": ["cuda"]}
BOTH = "the cuda and pallas attention kernels do not read"

# (override, the field's path as printed, a needle of its message, the same field at its default value)
IGNORED_BY_BOTH = [
    ({"schedule.grid": [512]}, "schedule.grid", "one block a (query block, head, batch) tile",
     {"schedule.grid": None}),
    ({"schedule.num_warpgroups": 3}, "schedule.num_warpgroups", "set pipeline.num_compute_wgs",
     {"schedule.num_warpgroups": 1}),
    ({"schedule.out_specs": {"o": {"block_shape": [128, 128]}}}, "schedule.out_specs", "the output's blocks are q's",
     {"schedule.out_specs": {}}),
    ({"schedule.persistent.num_blocks": 66}, "schedule.persistent.num_blocks", "one CTA an SM, counted at launch",
     {"schedule.persistent.num_blocks": "auto"}),
    ({"schedule.in_specs.k.memory_space": "gmem"}, "schedule.in_specs.k.memory_space", "legal: smem",
     {"schedule.in_specs.k.memory_space": "smem"}),
    ({"schedule.in_specs.q.transforms": {"tiling": [8, 64]}}, "schedule.in_specs.q.transforms.tiling",
     "the 128-byte swizzle", {"schedule.in_specs.q.transforms": {}}),
    ({"schedule.in_specs.q.transforms": {"swizzle": 64}}, "schedule.in_specs.q.transforms.swizzle",
     "legal: 128 or auto", {"schedule.in_specs.q.transforms": {"swizzle": 128}}),
    ({"schedule.in_specs.v.transforms": {"transpose": [1, 0]}}, "schedule.in_specs.v.transforms.transpose",
     "V N-major", {"schedule.in_specs.v.transforms": {"swizzle": "auto"}}),
    ({"schedule.in_specs.k.delay_release": 1}, "schedule.in_specs.k.delay_release", "released it",
     {"schedule.in_specs.k.delay_release": 0}),
    ({"schedule.in_specs.q.collective_axes": ["x"]}, "schedule.in_specs.q.collective_axes", "nothing is multicast",
     {"schedule.in_specs.q.collective_axes": []}),
    ({"schedule.in_specs.k.out_of_bounds": "zero"}, "schedule.in_specs.k.out_of_bounds", "legal: reject",
     {"schedule.in_specs.k.out_of_bounds": "reject"}),
    ({"schedule.barriers.schedule.num_barriers": 2}, "schedule.barriers.schedule.num_barriers",
     "one barrier of num_arrivals arrivals", {"schedule.barriers.schedule.num_barriers": 1}),
]

# fields the attention schedule does not have (AttentionSchedule, model.py): unknown keys where they are written,
# whatever the value (issue 42), each naming the families that have it
NOT_ATTENTION_FIELDS = [
    ({"schedule.grid_names": ["t"]}, "schedule.grid_names", "map"),
    ({"schedule.epilogue.tile": [64, 64]}, "schedule.epilogue", "matmul / collective_matmul / grouped_matmul"),
    ({"schedule.epilogue.store": "tma"}, "schedule.epilogue", "matmul / collective_matmul / grouped_matmul"),
    ({"schedule.pipeline.wg_axis": "m"}, "schedule.pipeline.wg_axis", "matmul / collective_matmul / grouped_matmul"),
    ({"schedule.persistent.minor_dim": 0}, "schedule.persistent.minor_dim",
     "map / matmul / collective_matmul / grouped_matmul"),
    ({"schedule.persistent.tile_width": 4}, "schedule.persistent.tile_width",
     "map / matmul / collective_matmul / grouped_matmul"),
]

# Mosaic GPU compiler parameters: read (or rejected) by the Pallas kernel, ignored by the CUDA one
PALLAS_ONLY = [
    ({"schedule.compiler_params.lowering_semantics": "lane"}, "schedule.compiler_params.lowering_semantics",
     "Mosaic GPU's lowering mode", {"schedule.compiler_params.lowering_semantics": "warpgroup"}),
    ({"schedule.compiler_params.unsafe_no_auto_barriers": True}, "schedule.compiler_params.unsafe_no_auto_barriers",
     "places its own", {"schedule.compiler_params.unsafe_no_auto_barriers": False}),
    ({"schedule.compiler_params.profile_space": 64}, "schedule.compiler_params.profile_space",
     "in-kernel profiler", {"schedule.compiler_params.profile_space": 0}),
]


def _errors(ov):
    spec, src = load_spec(str(BASE), ov)
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    return info.value.lines()


def _plans(ov):
    spec, src = load_spec(str(BASE), ov)
    return plan(spec, src)


@pytest.mark.parametrize("ov, field, needle, default", IGNORED_BY_BOTH, ids=[c[1] for c in IGNORED_BY_BOTH])
@pytest.mark.parametrize("backends", [["cuda"], ["cuda", "pallas"]])
def test_fields_no_backend_reads_are_located_errors(ov, field, needle, default, backends):
    lines = _errors({**ov, "schedule.backends": backends})
    assert len(lines) == 1, lines
    where, _, message = lines[0].partition(f": {field}: ")
    assert where.startswith(str(BASE)) and where.count(":") == 2, lines    # file:line:col of the field
    assert message.startswith(BOTH) and needle in message and "; legal: " in message, message
    _plans({**default, "schedule.backends": backends})   # the default, even written out, is fine


@pytest.mark.parametrize("ov, field, needle, default", PALLAS_ONLY, ids=[c[1] for c in PALLAS_ONLY])
def test_pallas_only_compiler_params_are_errors_without_pallas(ov, field, needle, default):
    lines = _errors({**ov, **CUDA})
    assert len(lines) == 1, lines
    where, _, message = lines[0].partition(f": {field}: ")
    assert where.startswith(str(BASE)) and where.count(":") == 2, lines
    assert message.startswith("the cuda backend does not read ") and needle in message and "; legal: " in message
    _plans({**default, **CUDA})


@pytest.mark.parametrize("ov, field, owners", NOT_ATTENTION_FIELDS, ids=[f"{c[1]}={list(c[0].values())[0]}"
                                                                     for c in NOT_ATTENTION_FIELDS])
def test_fields_of_other_families_are_unknown_keys(ov, field, owners):
    with pytest.raises(SpecErrors) as info:
        load_spec(str(BASE), ov)
    lines = info.value.lines()
    assert len(lines) == 1, lines
    where, _, message = lines[0].partition(f": {field}: ")
    assert where.startswith(str(BASE)) and where.count(":") == 2, lines
    assert message.startswith("unknown key") and f"is a {owners} field; the attention family's" in message, message


def test_lane_semantics_is_read_by_the_pallas_kernel():
    """With pallas among the backends, lowering_semantics: lane is what the Pallas kernel is written for."""
    p = _plans({"schedule.compiler_params.lowering_semantics": "lane"})
    assert "pallas" in p.launch.backends


def test_every_unread_field_is_reported_at_once():
    lines = _errors({**CUDA, "schedule.num_warpgroups": 2, "schedule.in_specs.q.delay_release": 1,
                     "schedule.compiler_params.profile_space": 8})
    fields = sorted(line.split(": ")[1] for line in lines)
    assert fields == ["schedule.compiler_params.profile_space", "schedule.in_specs.q.delay_release",
                      "schedule.num_warpgroups"], lines
