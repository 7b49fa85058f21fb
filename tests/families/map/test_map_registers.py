"""The CUDA map kernel's register path (schedule.pipeline.data_path: registers; families/map/registers.py,
templates/map/cuda_regs.cu.j2): NVRTC builds for sm_90a whose SASS moves every operand with 16-byte global loads and
stores and nothing through TMA, SMEM or local memory; the refusals, each located at its field; the default (tma)
rendering untouched; and on a GPU, the bundled specs at ragged sizes against the float64 reference."""
from __future__ import annotations

import re

import pytest

from conftest import ROOT, SPECS_DIR, opcodes
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.explain import explain
from schedgen.frontend.validate import load_spec, parse_overrides
from schedgen.plan import plan
from schedgen.plan.launch import launch_record
from schedgen.render import render
from schedgen.toolchain.nvrtc import resource_usage, sass
from schedgen.verify import verify_built

REGS = ["schedule.pipeline.data_path=registers", "schedule.backends=[cuda]"]
RING = ["schedule.pipeline.max_concurrent_steps=2"]           # the bundled specs write a ring depth: back to the default
SPECS = {"add_bf16": "add_bf16.yaml", "gelu_bias_bf16": "gelu_bias_bf16.yaml",
         "bias_add_bf16_dynamic": "bias_add_bf16_dynamic.yaml", "scale_f32": "scale_f32.toml"}

# Three inputs of three dtypes (an f32 block of 32-byte chunks, a bf16 column [M, 1] splatted along each row, an f16
# row [N]), two outputs of two dtypes, a 3-D iteration space whose last two dimensions end in partial blocks, and
# blocks of 24 rows: 768 chunks a tile, so the last batch of 256 threads x 2 chunks is half empty.
MIXED = """
name: mixed_regs
op:
  kind: map
  sizes: {B: 3, M: 100, N: 200}
  constants: {k: 0.5}
  inputs:
    x: {shape: [B, M, N], dtype: f32}
    c: {shape: [M, 1], dtype: bf16}
    r: {shape: [N], dtype: f16}
  outputs:
    o: {shape: [B, M, N], dtype: bf16}
    p: {shape: [B, M, N], dtype: f32}
  body: |
    o = x * c + r
    p = x - c * k
schedule:
  backends: [cuda]
  pipeline: {data_path: registers}
  num_warpgroups: 2
  in_specs:
    x: {block_shape: [1, 24, 256], out_of_bounds: zero}
    c: {block_shape: [24, 1], out_of_bounds: zero}
    r: {block_shape: [256], out_of_bounds: zero}
  out_specs:
    o: {block_shape: [1, 24, 256], out_of_bounds: zero}
    p: {block_shape: [1, 24, 256], out_of_bounds: zero}
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return Cache(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixed") / "mixed_regs.yaml"
    path.write_text(MIXED)
    return path


def _build(name, cache, extra=()):
    return build_spec(SPECS_DIR / SPECS[name], parse_overrides(REGS + RING + list(extra)), cache=cache)


def _check_register_sass(built):
    text = sass(built.files["kernel.cubin"])
    ops = opcodes(text)
    assert "LDG.E.128.CONSTANT" in ops or "LDG.E.128" in ops, sorted(set(ops))
    assert "STG.E.128" in ops, sorted(set(ops))
    assert not re.search(r"\bUTMA(LDG|STG)\b", text), "the register path issued a TMA copy"
    assert not [op for op in ops if op.split(".")[0] in ("LDL", "STL", "LDS", "STS", "LD", "ST")], sorted(set(ops))
    # no narrow global stores: every output leaves in 16-byte vectors
    assert not [op for op in ops if op.startswith("STG") and op != "STG.E.128"], sorted(set(ops))
    usage = resource_usage(built.files["kernel.cubin"])[built.plan.launch.kernel_name]
    assert usage["LOCAL"] == 0 and usage["STACK"] == 0 and usage["SHARED"] == 0
    # __launch_bounds__(threads, min_blocks) held the registers to the budget that fits min_blocks blocks an SM
    assert 0 < usage["REG"] <= 65536 // (built.plan.launch.threads * built.plan.regs.min_blocks)
    return ops


@pytest.mark.parametrize("name", sorted(SPECS))
def test_register_path_compiles_to_16_byte_global_accesses(name, cache):
    built = _build(name, cache)
    p = built.plan
    assert p.data_path == "registers" and p.regs is not None and "_regs_u" in p.launch.kernel_name
    _check_register_sass(built)
    ptx = built.files["kernel.ptx"].decode()
    assert re.search(r"^\.target sm_90a\b", ptx, re.M)
    assert "cp.async.bulk" not in ptx and "mbarrier" not in ptx
    # the launch: device pointers, no tensor maps, no dynamic SMEM
    rec = launch_record(p)
    assert rec.smem_bytes == 0
    assert [a.kind for a in rec.kernel_args] == ["ptr"] * len(p.operands) + ["i32"] * len(p.launch.dynamic_sizes)


@pytest.mark.parametrize("dtype, unroll", [("f16", 4), ("f8e4m3", 2)])
def test_other_element_types(dtype, unroll, tmp_path, cache):
    """add_bf16 in f16 (8 elements a chunk) and fp8 (16: a 32 x 256 tile is 512 chunks, 2 a thread)."""
    path = tmp_path / f"add_{dtype}.yaml"
    path.write_text((SPECS_DIR / "add_bf16.yaml").read_text().replace("bf16", dtype))
    built = build_spec(path, parse_overrides(REGS + RING), cache=cache)
    assert built.plan.vec == 16 // {"f16": 2, "f8e4m3": 1}[dtype] and built.plan.regs.unroll == unroll
    _check_register_sass(built)


def test_mixed_dtypes_column_row_and_two_outputs(mixed, cache):
    built = build_spec(mixed, cache=cache)
    ops = _check_register_sass(built)
    assert "LDG.E.U16.CONSTANT" in ops or "LDG.E.U16" in ops      # the column: one bf16 a row, splatted
    p = built.plan
    assert p.vec == 8 and p.regs.ragged == (False, True, True)
    # 52 bytes of loads a chunk (x 32, c 4, r 16): 4 chunks would pass the 128-byte budget, so a thread keeps 2
    assert p.regs.unroll == 2 and p.regs.chunks == 768 and p.regs.batches == 2 and p.regs.partial_batch
    cu = built.files["kernel.cu"].decode()
    assert "ok[ch] = g < kChunks && g_j * 24 + x1 < 100 && g_l * 256 + c < 200;" in cu


def test_plan_records_the_batch_and_occupancy(cache):
    p = _build("add_bf16", cache).plan
    assert (p.regs.unroll, p.regs.chunks, p.regs.batches, p.regs.min_blocks) == (4, 1024, 1, 4)
    assert p.launch.blocks_per_sm == 4 and p.launch.num_blocks == 132 * 4 and p.smem_buffers == ()
    assert p.regs.ragged == (False, False) and not p.regs.partial_batch
    text = explain(p)
    assert "data_path registers: 16-byte global loads and stores, 4 chunks of 8 elements a thread" in text
    assert "SMEM map" not in text and "TMA box" not in text
    dyn = _build("bias_add_bf16_dynamic", cache).plan
    assert dyn.regs.ragged == (True, False) and "bounds-checked" in explain(dyn)


def test_the_default_rendering_is_the_tma_kernel_and_a_written_tma_changes_nothing():
    spec, src = load_spec(str(SPECS_DIR / "add_bf16.yaml"))
    default = plan(spec, src)
    spec, src = load_spec(str(SPECS_DIR / "add_bf16.yaml"), parse_overrides(["schedule.pipeline.data_path=tma"]))
    written = plan(spec, src)
    assert default.data_path == "tma" and default.regs is None
    assert render(default, "cuda") == render(written, "cuda")
    assert render(default, "cuda") == (ROOT / "tests" / "golden" / "add_bf16.cu").read_text()


def _errors(path, ov) -> list[str]:
    spec, src = load_spec(str(path), parse_overrides(ov))
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    return [line[line.index(":", line.index(path.suffix)) + 1:] for line in info.value.lines()]


@pytest.mark.parametrize("ov, want", [
    (["schedule.pipeline.data_path=registers"] + RING,
     "26:13: schedule.pipeline.data_path: the Pallas map kernel streams tiles through emit_pipeline's TMA ring; "
     "data_path: registers is the CUDA kernel's: set schedule.backends: [cuda], or use data_path: tma (the default)"),
    (REGS, "26:57: schedule.pipeline.max_concurrent_steps: with data_path: registers there is no SMEM ring (each "
           "thread keeps 4 chunks of loads in flight instead); legal: leave it out (2, the default)"),
    (REGS + RING + ["schedule.pipeline.kind=none"],
     "26:20: schedule.pipeline.kind: with data_path: registers there is no SMEM ring for kind none to shape; legal: "
     "emit_pipeline (the default)"),
    (REGS + RING + ["schedule.barriers.full.num_barriers=2"],
     "schedule.barriers.full: with data_path: registers there is no SMEM ring and no mbarrier; legal: leave barriers "
     "out"),
    (REGS + RING + ["schedule.in_specs.x.transforms.swizzle=128"],
     "schedule.in_specs.x.transforms.swizzle: with data_path: registers no block is staged in SMEM; legal: auto "
     "(the default)"),
    (REGS + RING + ["schedule.in_specs.w.delay_release=1"],
     "schedule.in_specs.w.delay_release: with data_path: registers there are no pipeline stages to keep; legal: 0 "
     "(the default)"),
    (REGS + RING + ["schedule.in_specs.x.out_of_bounds=nan"],
     "20:8: schedule.in_specs.x.out_of_bounds: with data_path: registers a chunk past the array's edge is neither "
     "loaded nor stored, so no padding is read; legal: zero or reject"),
])
def test_refusals_are_located(ov, want):
    got = _errors(SPECS_DIR / "gelu_bias_bf16.yaml", ov)
    assert any(line == want or line.endswith(" " + want) for line in got), got


def test_a_row_that_is_no_whole_vector_is_refused(tmp_path):
    path = tmp_path / "odd.yaml"
    path.write_text((SPECS_DIR / "bias_add_bf16_dynamic.yaml").read_text()
                    .replace("min: 256, max: 16384, multiple_of: 256", "min: 8, max: 16384, multiple_of: 4")
                    .replace('index_map: "(j,)"}', 'index_map: "(j,)", out_of_bounds: zero}'))
    got = _errors(path, REGS + RING)
    assert any("schedule.pipeline.data_path: with data_path: registers each thread moves 8 elements (16 B of the "
               "narrowest dtype) at once, and the output's rows are the dynamic N (declare multiple_of: 8) elements, "
               "not always a multiple of 8; legal: rows of a multiple of 8 elements, or use data_path: tma" in line
               for line in got), got


def test_another_family_refuses_the_field():
    """data_path is the map schedule's field (issue 42): on another op an unknown key naming the map family."""
    with pytest.raises(SpecErrors) as info:
        load_spec(str(SPECS_DIR / "matmul_bf16_4096.yaml"), parse_overrides(["schedule.pipeline.data_path=registers"]))
    got = info.value.lines()
    assert any("schedule.pipeline.data_path: unknown key 'data_path': schedule.pipeline.data_path is a map field; "
               "the matmul family's schedule.pipeline has: " in line for line in got), got


# ------------------------------------------------------------------------------------------------------------ GPU

# Sizes whose last blocks are partial (the bundled blocks are 32 x 256, 1 x 32 x 128): every edge chunk is skipped
# or kept by the bounds checks, and the operands' out_of_bounds become zero so that the planner takes the sizes.
RAGGED = {
    "add_bf16": ["op.sizes.M=1000", "op.sizes.N=1000"] + [f"schedule.{g}.{n}.out_of_bounds=zero"
                                                          for g, n in (("in_specs", "x"), ("in_specs", "y"),
                                                                       ("out_specs", "o"))],
    "gelu_bias_bf16": ["op.sizes.M=999", "op.sizes.N=776"] + [f"schedule.{g}.{n}.out_of_bounds=zero"
                                                             for g, n in (("in_specs", "x"), ("in_specs", "w"),
                                                                          ("in_specs", "b"), ("out_specs", "y"))],
    "bias_add_bf16_dynamic": [],
    "scale_f32": ["op.sizes.B=3", "op.sizes.M=1001", "op.sizes.N=1004"] + [
        f"schedule.{g}.{n}.out_of_bounds=zero" for g, n in (("in_specs", "x"), ("out_specs", "o"))],
}
AT = {"bias_add_bf16_dynamic": [{"M": 1001, "N": 768}, {"M": 7, "N": 256}, {"M": 4096, "N": 4096}]}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_ragged_register_path_compiles_without_spills(name, cache):
    """The bounds-checked form the GPU test runs (more live registers: the chunks' masks and addresses)."""
    built = _build(name, cache, RAGGED[name])
    assert any(built.plan.regs.ragged)
    _check_register_sass(built)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(SPECS))
def test_register_path_matches_float64_on_gpu(name, cache):
    built = _build(name, cache, RAGGED[name])
    assert built.plan.data_path == "registers"
    checks = verify_built(built, ["cuda"], seed=None, at=AT.get(name))
    assert checks and all(c.ok for c in checks), checks


@pytest.mark.gpu
def test_mixed_register_path_matches_float64_on_gpu(mixed, cache):
    checks = verify_built(build_spec(mixed, cache=cache), ["cuda"], seed=None)
    assert checks and all(c.ok for c in checks), checks
