"""Issue 16, section 1: fields that were accepted and changed nothing are located errors now (the systematic probe
is tests/frontend/test_every_field.py; these pin each fix with its message). Each case: the spec, the overrides,
the field the one error is located at, a needle of its message."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan

MAP = SPECS_DIR / "add_bf16.yaml"
MATMUL = SPECS_DIR / "matmul_bf16_4096.yaml"
COLLECTIVE = SPECS_DIR / "collective_matmul_bf16_1024x4096.yaml"
ATTENTION = SPECS_DIR / "attention_bf16_4096.yaml"

UNKNOWN = "unknown key"     # a field the family's schedule model does not have (issue 42): rejected on loading

CASES = [
    # the map family: the matmul's knobs (not fields of the map schedule: unknown keys, issue 42), planar_snake's
    # shape without planar_snake, an output's delay_release
    (MAP, {"schedule.pipeline.memory_registers": 40}, "schedule.pipeline.memory_registers", UNKNOWN),
    (MAP, {"schedule.pipeline.compute_registers": 232}, "schedule.pipeline.compute_registers", UNKNOWN),
    (MAP, {"schedule.pipeline.num_compute_wgs": 2}, "schedule.pipeline.num_compute_wgs", UNKNOWN),
    (MAP, {"schedule.pipeline.wg_axis": "m"}, "schedule.pipeline.wg_axis", UNKNOWN),
    (MAP, {"schedule.epilogue.store": "direct"}, "schedule.epilogue", UNKNOWN),
    (MAP, {"schedule.persistent.tile_width": 4}, "schedule.persistent.tile_width", "tile_order: planar_snake"),
    (MAP, {"schedule.persistent.minor_dim": 1}, "schedule.persistent.minor_dim", "tile_order: planar_snake"),
    (MAP, {"schedule.out_specs.o.delay_release": 1}, "schedule.out_specs.o.delay_release", "written, not released"),
    (MAP, {"schedule.backends": ["cuda"], "schedule.compiler_params.unsafe_no_auto_barriers": True},
     "schedule.compiler_params.unsafe_no_auto_barriers", "the cuda backend does not read"),
    (MAP, {"schedule.backends": ["cuda"], "schedule.compiler_params.lowering_semantics": "lane"},
     "schedule.compiler_params.lowering_semantics", "the cuda backend does not read"),
    (MAP, {"schedule.pipeline.kind": "none"}, "schedule.pipeline.max_concurrent_steps", "(one stage)"),
    (MAP, {"schedule.persistent.loop": "none", "schedule.persistent.num_blocks": 66},
     "schedule.persistent.num_blocks", "one block a tile"),
    (MATMUL, {"schedule.persistent.loop": "none", "schedule.persistent.num_blocks": 66},
     "schedule.persistent.num_blocks", "one block a tile"),
    (MAP, {"schedule.backends": ["cuda"], "schedule.in_specs.x.transforms": {"tiling": [8, 64]}},
     "schedule.in_specs.x.transforms.tiling", "the cuda backend does not read a block's transforms.tiling"),
    (MAP, {"schedule.in_specs.x.delay_release": 1}, "schedule.in_specs.y.delay_release",
     "so it would hold 'y' for 1 step like 'x', not 0: give every input the same delay_release"),
    # the Pallas map kernel's barriers are emit_pipeline's
    (MAP, {"schedule.barriers": {"full": {"num_barriers": 4, "num_arrivals": 2}}},
     "schedule.barriers.full.num_arrivals", "emit_pipeline's own"),
    # the matmul family
    (MATMUL, {"schedule.grid": [256]}, "schedule.grid", "the cuda and pallas matmul kernels do not read grid"),
    (MATMUL, {"schedule.num_warpgroups": 2}, "schedule.num_warpgroups", "pipeline.num_compute_wgs"),
    (MATMUL, {"schedule.out_specs.out.transforms": {"tiling": [8, 64]}}, "schedule.out_specs.out.transforms.tiling",
     "schedule.epilogue"),
    (MATMUL, {"schedule.epilogue": {"store": "direct"}}, "schedule.epilogue.store", "store: direct is the CUDA kernel's"),
    (MATMUL, {"schedule.in_specs.b.delay_release": 0}, "schedule.in_specs.b.delay_release", "the same delay_release"),
    (MATMUL, {"schedule.in_specs.a.out_of_bounds": "zero"}, "schedule.in_specs.b.out_of_bounds",
     "the same out_of_bounds (got zero and reject)"),
    (MATMUL, {"schedule.backends": ["cuda"], "schedule.compiler_params.lowering_semantics": "lane"},
     "schedule.compiler_params.lowering_semantics", "the cuda backend does not read"),
    (SPECS_DIR / "linear_gelu_bf16_dynamic.yaml", {"schedule.epilogue.store": "direct", "schedule.epilogue.buffers": 1,
                                                    "schedule.backends": ["cuda"]},
     "schedule.epilogue.buffers", "stores its accumulator fragment from registers"),
    (SPECS_DIR / "linear_gelu_bf16_dynamic.yaml", {"schedule.epilogue.store": "direct", "schedule.epilogue.tile": [64, 32],
                                                    "schedule.backends": ["cuda"]},
     "schedule.epilogue.tile", "leave tile out, or store: tma"),
    # the collective matmul
    (COLLECTIVE, {"schedule.compiler_params.approx_math": True}, "schedule.compiler_params.approx_math",
     "no transcendental"),
    (COLLECTIVE, {"schedule.in_specs.a.out_of_bounds": "zero"},
     "schedule.in_specs.a.out_of_bounds", "whole row blocks"),
    (COLLECTIVE, {"schedule.grid_names": ["m"]}, "schedule.grid_names", UNKNOWN),
    # any family: a backend twice, a size nothing uses
    (MAP, {"schedule.backends": ["cuda", "pallas", "cuda"]}, "schedule.backends[2]", "cuda is listed twice"),
    (ATTENTION, {"op.sizes.E": 7}, "op.sizes.E", "the size 'E' is in no operand's shape and no expression"),
]


def _errors(path, overrides):
    try:
        spec, src = load_spec(str(path), overrides)
    except SpecErrors as exc:        # a field the family's schedule does not have
        return exc.lines()
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    return info.value.lines()


@pytest.mark.parametrize("path, overrides, field, needle", CASES, ids=[f"{c[0].stem}:{c[2]}" for c in CASES])
def test_a_field_that_changes_nothing_is_a_located_error(path, overrides, field, needle):
    lines = _errors(path, overrides)
    assert len(lines) == 1, lines
    where, _, message = lines[0].partition(f": {field}: ")
    assert message and where.startswith(str(path)) and where.count(":") == 2, lines   # file:line:col: field: ...
    assert needle in message, message


def test_collective_out_of_bounds_nan_is_reported():
    """It used to fail planning with no problem at all (the step's out_of_bounds problems were dropped)."""
    lines = _errors(COLLECTIVE, {"schedule.in_specs.a.out_of_bounds": "nan"})
    assert any(": schedule.in_specs.a.out_of_bounds: out_of_bounds: nan has no effect here" in x for x in lines), lines


def test_collective_output_dtype_problems_are_reported():
    """The step matmul's problems with the output's dtype were dropped with its shape's (planning failed silently)."""
    lines = _errors(COLLECTIVE, {"op.outputs.out.dtype": "f8e4m3"})
    assert lines and all(": op.outputs.out.dtype: " in x for x in lines), lines


def test_a_size_used_only_in_an_expression_is_used(tmp_path):
    """A size named only by an index map or a body is not unused."""
    spec, src = load_spec(str(SPECS_DIR / "add_bf16.yaml"),
                          {"op.sizes.T": 1, "schedule.in_specs.x.index_map": "(i * T, j)"})
    plan(spec, src)


def test_an_explicit_empty_collective_axes_on_the_shared_operand_is_refused():
    """Issue 16: the matmul multicast the operand a 2-CTA cluster shares whatever collective_axes said; an explicit
    `collective_axes: []` on it (not shared) was silently overridden. Now a located error; leaving it out (the
    cluster implies it) or writing [cluster] builds."""
    path = str(SPECS_DIR / "matmul_bf16_4096x8192x4096.yaml")   # cluster [2, 1], rhs collective_axes: [cluster]
    with pytest.raises(SpecErrors) as exc:
        plan(*load_spec(path, {"schedule.in_specs.b.collective_axes": []}))
    (p,) = [q for q in exc.value.problems if q.path[-1] == "collective_axes"]
    assert p.path == ("schedule", "in_specs", "b", "collective_axes") and "multicast" in p.message
    assert plan(*load_spec(path)).cluster.multicast == "rhs"
