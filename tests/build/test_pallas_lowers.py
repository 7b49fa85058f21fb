"""Every Pallas kernel schedgen accepts lowers through Mosaic GPU for CUDA on the CPU (jax's lowering runs Mosaic
GPU's checks: tilings, layouts, SMEM), at the bundled shapes and at the holdout-style shapes a user writes; and what
the planner refuses because jax 0.11.2 cannot lower it still fails to lower (a pin: when a jax upgrade lifts the
limit, this test says so and the planner's check can go).

The interpreter does not run those checks: a ragged Pallas matmul verified in interpret mode while Mosaic GPU
refused it on the H200 (2026-12-04), which this test would have caught on the CPU."""
from __future__ import annotations

import jax
import pytest

from conftest import ROOT, SPECS_DIR, spec_files
from schedgen import families
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.runtime.arrays import DTYPES
from schedgen.runtime.kernel import load_package

COL_ROW_FULL = ROOT / "tests" / "data" / "edge" / "col_row_full.yaml"


def COL_RAGGED_N(rows):   # noqa: N802 (a table entry)
    """col_row_full at M = 1000, N = 600 (not a multiple of the 128 columns of a block) in blocks of `rows` rows."""
    zero = {"block_shape": [rows, 128], "out_of_bounds": "zero"}
    return {"op.sizes": {"M": 1000, "N": 600}, "schedule.out_specs.o": zero, "schedule.out_specs.r": zero,
            "schedule.in_specs": {"x": zero, "w": zero, "b": {"block_shape": [128], "out_of_bounds": "zero"}}}


ZERO = {"schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero",
        "schedule.backends": ["cuda", "pallas"]}
HOLDOUTS = {   # spec, overrides
    "GEMM 3000x5056x1024 (ragged M and N)": ("matmul_bf16_4096.yaml", {"op.sizes": {"M": 3000, "N": 5056, "K": 1024},
                                                                        **ZERO}),
    "batched GEMM": ("matmul_bf16_4096.yaml", {"op.sizes": {"M": 512, "N": 512, "K": 256, "B": 4},
                                               "op.inputs.a.shape": ["B", "M", "K"], "op.inputs.b.shape": ["B", "K", "N"],
                                               "op.outputs.out.shape": ["B", "M", "N"]}),
    # attention: ragged sequences (multiples of 8, of no block) and the persistent grid
    # (the log-sum-exp output takes whole blocks on Pallas: test_lse_with_ragged_blocks_is_refused_on_pallas)
    "attention Sq = Skv = 1000, causal (ragged)": (
        "attention_bf16_4096.yaml", {"S": 1000, "op.causal": True, "schedule.backends": ["cuda", "pallas"]}),
    "attention GQA Sq = Skv = 4000, causal (ragged)": (
        "attention_gqa_causal_bf16_8192.yaml", {"S": 4000, "op.outputs": {"o": {"shape": ["B", "S", "H", "D"],
                                                                               "dtype": "bf16"}}}),
    "attention dynamic S, a multiple of 8 (ragged at the max, 4000)": (
        "attention_bf16_dynamic.yaml", {"op.sizes.S": {"dynamic": True, "min": 8, "max": 4000, "multiple_of": 8}}),
    "attention persistent 16k": ("attention_bf16_16384_persistent.yaml", {"schedule.backends": ["cuda", "pallas"]}),
    "attention persistent causal lpt, ragged 4000": (
        "attention_bf16_16384_persistent.yaml", {"S": 4000, "op.causal": True, "schedule.backends": ["cuda", "pallas"],
                                                 "schedule.persistent.tile_order": "lpt"}),
    # map: a column broadcast ([M, 1]) is read from GMEM into a named register layout (families/map/columns.py)
    "map: [M, 1] column": ("add_bf16.yaml", {"op.inputs.y.shape": ["M", 1],
                                             "schedule.in_specs.y": {"block_shape": [32, 1], "index_map": "(i, 0)"}}),
    "map: column + row + full": ("gelu_bias_bf16.yaml", {"op.inputs.w.shape": ["M", 1],
                                                         "schedule.in_specs.w": {"block_shape": [32, 1],
                                                                                 "index_map": "(i, 0)"}}),
    "map: column, 20-row blocks, ragged N": (COL_ROW_FULL, COL_RAGGED_N(20)),
    "map: batched, [1, M, 1] and [M, 1] columns": (COL_ROW_FULL, {
        "op.sizes": {"B": 4, "M": 200, "N": 640}, "op.inputs.x.shape": ["B", "M", "N"],
        "op.inputs.w.shape": [1, "M", 1], "op.outputs.o.shape": ["B", "M", "N"], "op.outputs.r.shape": ["B", "M", "N"],
        "schedule.out_specs.o.block_shape": [2, 8, 64], "schedule.out_specs.r.block_shape": [2, 8, 64]}),
    "map: [M, 1] column, 4-row blocks of bf16": ("add_bf16.yaml", {"op.inputs.y.shape": ["M", 1],
                                                                  "op.inputs.y.dtype": "f32",
                                                                  "schedule.in_specs": {},
                                                                  "schedule.out_specs.o.block_shape": [4, 128]}),
}


def _lower(built, tmp_path):
    kernel = load_package(package(built, tmp_path / "out"))
    sizes = {r.name: r.max for r in kernel.launch.sizes}
    args = [jax.ShapeDtypeStruct(kernel.shape_of(o, sizes), DTYPES[o.dtype]) for o in kernel.inputs]
    return jax.jit(kernel._pallas.module().make(sizes)).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def _pallas_specs():
    """The bundled one-GPU specs whose plan builds the Pallas backend (a multi-device one lowers under shard_map:
    tests/families/collective_matmul)."""
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    out = []
    for path in spec_files():
        p = plan(*load_spec(str(path)))
        if "pallas" in p.launch.backends and not families.of(p).multi_device:
            out.append(path)
    return out


@pytest.mark.parametrize("path", _pallas_specs(), ids=lambda p: p.stem)
def test_bundled_pallas_kernels_lower_for_cuda(path, tmp_path):
    built = build_spec(str(path), cache=Cache(tmp_path / "c"))
    assert "mosaic_gpu" in _lower(built, tmp_path)




def test_the_refused_ragged_sizes_still_fail_to_lower(tmp_path, monkeypatch):
    """M = 3073 is off Mosaic GPU's 8-row GMEM tiling: the planner refuses it for Pallas; with that check turned
    off, jax 0.11.2 refuses it while lowering (TileTransform cannot round a partial tile up)."""
    from schedgen.plan.gemm import schedule
    monkeypatch.setattr(schedule, "_tiling_quanta", lambda op, dims: {"M": 1, "N": 1, "K": 1})
    built = build_spec(str(SPECS_DIR / "matmul_bf16_4096.yaml"), {"op.sizes": {"M": 3073, "N": 512, "K": 128}, **ZERO},
                       cache=Cache(tmp_path / "c"))
    with pytest.raises(ValueError, match="When no rounding mode is specified, dimension 0 must have size smaller or "
                                         "a multiple of its tiling 8, but got 3073"):
        _lower(built, tmp_path)


def test_the_refused_ragged_attention_lengths_still_fail_to_lower(tmp_path, monkeypatch):
    """Sq = Skv = 1001 is off Mosaic GPU's 8-row GMEM tiling: the planner refuses it for Pallas (PALLAS_SEQ_QUANTUM);
    with that check turned off, jax 0.11.2 refuses it while lowering."""
    from schedgen.families.attention import plan as attention_plan
    monkeypatch.setattr(attention_plan, "PALLAS_SEQ_QUANTUM", 1)
    built = build_spec(str(SPECS_DIR / "attention_bf16_4096.yaml"), {"S": 1001, "schedule.backends": ["pallas"]},
                       cache=Cache(tmp_path / "c"))
    with pytest.raises(ValueError, match="When no rounding mode is specified, dimension 2 must have size smaller or "
                                         "a multiple of its tiling 8, but got 1001"):
        _lower(built, tmp_path)


def test_the_refused_log_sum_exp_rows_still_fail_to_lower(tmp_path, monkeypatch):
    """Sq = 5 is under the 8-row tiling (taken), but the [B, H, Sq] f32 log-sum-exp rows are 20 bytes: the planner
    refuses it for Pallas (PALLAS_LSE_QUANTUM); with that check off, jax 0.11.2 refuses the TMA store's strides."""
    from schedgen.families.attention import plan as attention_plan
    monkeypatch.setattr(attention_plan, "PALLAS_LSE_QUANTUM", 1)
    monkeypatch.setattr(attention_plan, "PALLAS_LSE_WHOLE_BLOCKS", False)
    sizes = {"B": 1, "SQ": 5, "SKV": 1000, "H": 16, "D": 128}
    built = build_spec(str(SPECS_DIR / "attention_bf16_4096.yaml"),
                       {"op.sizes": sizes, "schedule.backends": ["pallas"],
                        "op.inputs.q.shape": ["B", "SQ", "H", "D"], "op.outputs.o.shape": ["B", "SQ", "H", "D"],
                        "op.inputs.k.shape": ["B", "SKV", "H", "D"], "op.inputs.v.shape": ["B", "SKV", "H", "D"],
                        "op.outputs.lse": {"shape": ["B", "H", "SQ"], "dtype": "f32"}}, cache=Cache(tmp_path / "c"))
    with pytest.raises(ValueError, match="async_copy requires all GMEM strides except the last one to be a multiple "
                                         "of 16 bytes"):
        _lower(built, tmp_path)


def test_the_refused_column_tilings_still_fail_to_lower(tmp_path, monkeypatch):
    """40-row blocks at N = 600 with a column: the planner refuses them for Pallas (columns._check_smem_tiling);
    with that check turned off, jax 0.11.2 refuses them while lowering (layout inference tiles the SMEM blocks by
    (8, 64) without looking at the array's 600 columns)."""
    from schedgen.families.map import columns
    monkeypatch.setattr(columns, "_check_smem_tiling", lambda o, space, problems: None)
    built = build_spec(str(COL_ROW_FULL), COL_RAGGED_N(40), cache=Cache(tmp_path / "c"))
    assert "pallas" in built.plan.launch.backends
    with pytest.raises(ValueError, match="When no rounding mode is specified, dimension 1 must have size smaller or "
                                         "a multiple of its tiling (64|32), but got 600"):
        _lower(built, tmp_path)


# Found by lowering test_fuzz_fields' legal field values, alone and together, on the CPU (2026-12-06): each planned,
# rendered and then failed in Mosaic GPU's lowering. The planner now refuses
# them for Pallas (located, with the way out); the pins below keep the refusals honest: with the check off, jax 0.11.2
# still fails to lower them, and the legal neighbour lowers.
MAP_ALL = ("x", "y", "o")


def _map_blocks(rows: int, swizzle: int | None = None, tiling=None) -> dict:
    out = {}
    for n in MAP_ALL:
        group = "out_specs" if n == "o" else "in_specs"
        out[f"schedule.{group}.{n}.block_shape"] = [rows, 128]
        if swizzle is not None:
            out[f"schedule.{group}.{n}.transforms.swizzle"] = swizzle
        if tiling is not None:
            out[f"schedule.{group}.{n}.transforms.tiling"] = tiling
    return out


# the bundled MoE spec, made Pallas-able: T a multiple of 8, 128 x 128 tiles (one warpgroup's accumulators)
GROUPED_PALLAS = {"schedule.backends": ["cuda", "pallas"], "op.sizes.T.multiple_of": 8,
                  "schedule.in_specs.w.block_shape": [128, 64], "schedule.out_specs.out.block_shape": [128, 128]}
REFUSED = {   # spec, overrides, the field the error names, a phrase of it
    "matmul: lhs swizzle 64, rhs 128": ("matmul_bf16_4096.yaml", {"schedule.in_specs.a.transforms.swizzle": 64},
                                        "schedule.in_specs.b.transforms.swizzle", "one swizzle for both operands"),
    "matmul: lhs swizzle 64 where rhs writes none": (
        "matmul_bias_gelu_bf16.yaml", {"schedule.in_specs.x.transforms.swizzle": 64},
        "schedule.in_specs.x.transforms.swizzle", "one swizzle for both operands"),
    "fp8 matmul: rhs swizzle 64": ("matmul_fp8_e4m3_rowwise_4096.yaml", {"schedule.in_specs.b.transforms.swizzle": 64},
                                   "schedule.in_specs.b.transforms.swizzle", "one swizzle for both operands"),
    "grouped matmul: lhs swizzle 64": ("grouped_moe_mixtral_bf16_dynamic.yaml", {**GROUPED_PALLAS,
                                                                                 "schedule.in_specs.x.transforms.swizzle": 64},
                                       "schedule.in_specs.x.transforms.swizzle", "one swizzle for both operands"),
    "map: 32-row swizzled blocks": ("add_bf16.yaml", _map_blocks(32, 64),
                                    "schedule.in_specs.x.transforms.swizzle", "64-row groups"),
    "map: the bundled add's blocks, o swizzled": ("add_bf16.yaml", {"schedule.out_specs.o.transforms.swizzle": 128},
                                                  "schedule.out_specs.o.transforms.swizzle", "64-row groups"),
    "map: an [M, 1] input in blocks 256 wide": ("bias_add_bf16_dynamic.yaml", {
        "op.inputs.x.shape": ["M", 1], "schedule.backends": ["cuda", "pallas"]}, "op.inputs.x.shape",
        "every stride but the last to be a multiple of 16 B"),
    "map: tiling without swizzle": ("add_bf16.yaml", _map_blocks(64, tiling=[8, 64]),
                                    "schedule.in_specs.x.transforms.tiling", "only with a swizzle"),
    "map: lane semantics, an f32 input beside a bf16 one": (
        "add_bf16.yaml", {"schedule.compiler_params.lowering_semantics": "lane", "op.inputs.x.dtype": "f32"},
        "schedule.compiler_params.lowering_semantics", "2 B and 4 B elements"),
    "attention: 3 stages with the log-sum-exp": ("attention_gqa_causal_bf16_8192.yaml",
                                                 {"schedule.pipeline.max_concurrent_steps": 3},
                                                 "schedule.pipeline.max_concurrent_steps", "needs 232568 B of SMEM"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_pallas_cannot_lower_is_refused_at_its_field(case):
    """(With backends not written, a refusal about the op, an [M, 1] input's shape say, makes the planner build the
    CUDA kernel alone and say why: test_unwritten_backends_fall_back_to_cuda; these write both backends or a
    schedule field.)"""
    from conftest import plan_errors
    spec, over, field, phrase = REFUSED[case]
    lines = plan_errors(SPECS_DIR / spec, over)
    hit = [line for line in lines if f": {field}: " in line and phrase in line]
    assert hit, lines
    if field.endswith(("tiling", "lowering_semantics")):   # Mosaic GPU's own fields: the CUDA kernel refuses them
        assert "backends: [cuda]" not in hit[0] and "a Pallas field" in hit[0]
        return
    # the CUDA kernel takes the rest: those refusals are the Pallas backend's alone
    assert "backends: [cuda]" in hit[0]
    from conftest import plan_spec
    assert plan_spec(SPECS_DIR / spec, {**over, "schedule.backends": ["cuda"]}).launch.backends == ("cuda",)


def _unchecked(monkeypatch):
    """The checks of REFUSED off (as before 2026-12-06)."""
    from schedgen.families.attention import plan as attention_plan
    from schedgen.families.map import plan as map_plan
    from schedgen.families.grouped_matmul import plan as grouped_plan
    from schedgen.plan.gemm import schedule
    monkeypatch.setattr(schedule, "pallas_swizzles", lambda *args: None)    # both matmul families' rule
    monkeypatch.setattr(grouped_plan, "pallas_swizzles", lambda *args: None)
    monkeypatch.setattr(map_plan, "_pallas_transforms", lambda o, path, hint, problems: None)
    monkeypatch.setattr(map_plan, "_pallas_gmem_strides", lambda operands, space, problems: None)
    monkeypatch.setattr(attention_plan, "PALLAS_OWN_SMEM", 0)
    monkeypatch.setattr(map_plan, "_pallas_lane_widths", lambda sch, operands, problems: None)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_refused_field_values_still_fail_to_lower(case, tmp_path, monkeypatch):
    _unchecked(monkeypatch)
    spec, over, _, _ = REFUSED[case]
    built = build_spec(str(SPECS_DIR / spec), over, cache=Cache(tmp_path / "c"))
    assert "pallas" in built.plan.launch.backends
    with pytest.raises(ValueError, match="Failed to infer a possible set of layouts|exceeds available shared memory|"
                                         "Incompatible FragmentedArray layouts|"
                                         "async_copy requires all GMEM strides except the last one"):
        _lower(built, tmp_path)


LEGAL_NEIGHBOURS = {
    "matmul: both swizzles 64": ("matmul_bf16_4096.yaml", {"schedule.in_specs.a.transforms.swizzle": 64,
                                                           "schedule.in_specs.b.transforms.swizzle": 64}),
    "grouped matmul: both swizzles 64": ("grouped_moe_mixtral_bf16_dynamic.yaml", {
        **GROUPED_PALLAS, "schedule.in_specs.x.transforms.swizzle": 64, "schedule.in_specs.w.transforms.swizzle": 64}),
    "map: 64-row blocks, swizzle 64": ("add_bf16.yaml", _map_blocks(64, 64)),
    "map: 64-row blocks, x alone swizzled": ("add_bf16.yaml", {**_map_blocks(64),
                                                               "schedule.in_specs.x.transforms.swizzle": 128}),
    "map: lane semantics, f16 and bf16 inputs": ("add_bf16.yaml", {"schedule.compiler_params.lowering_semantics": "lane",
                                                                   "op.inputs.x.dtype": "f16"}),
    "attention: 3 stages without the log-sum-exp": ("attention_bf16_4096.yaml",
                                                    {"schedule.pipeline.max_concurrent_steps": 3}),
}

# every holdout shape, and each refusal's legal neighbour: planned with the Pallas backend, and lowered
LOWERS = {**HOLDOUTS, **{f"legal neighbour: {k}": v for k, v in LEGAL_NEIGHBOURS.items()}}


@pytest.mark.parametrize("case", sorted(LOWERS))
def test_holdout_shapes_lower_for_cuda(case, tmp_path):
    spec, over = LOWERS[case]
    built = build_spec(str(SPECS_DIR / spec), over, cache=Cache(tmp_path / "c"))
    assert "pallas" in built.plan.launch.backends
    assert "mosaic_gpu" in _lower(built, tmp_path)
