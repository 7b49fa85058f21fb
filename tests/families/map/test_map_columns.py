"""The Pallas map kernel's column path (schedgen/families/map/columns.py): an input broadcast along the minor
dimension ([M, 1], [B, M, 1]) builds on both backends; the register layout the planner names is jax's canonical form;
each block it cannot take is a located error naming the jax 0.11.2 limit; and the limits themselves are pinned
(lowering what the kernel does not do still fails), so a jax upgrade that lifts one shows here."""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.mosaic.gpu import fragmented_array as fa
from jax.experimental.pallas import mosaic_gpu as plgpu

from conftest import ROOT
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.families.map import columns
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan
from schedgen.verify import verify_built

EDGE = ROOT / "tests" / "data" / "edge"
MIXED = EDGE / "col_row_full.yaml"     # a column, a row and full inputs in one body, two outputs


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return Cache(tmp_path_factory.mktemp("cache"))


def _ragged_n(rows):
    """col_row_full at M = 1000, N = 600 (not a multiple of the 128 columns of a block) in blocks of `rows` rows."""
    zero = {"block_shape": [rows, 128], "out_of_bounds": "zero"}
    return {"op.sizes": {"M": 1000, "N": 600}, "schedule.out_specs.o": zero, "schedule.out_specs.r": zero,
            "schedule.in_specs": {"x": zero, "w": zero, "b": {"block_shape": [128], "out_of_bounds": "zero"}}}


def _plan(path, ov=None):
    return plan(*load_spec(str(path), ov or {}))


def _lines(path, ov):
    spec, src = load_spec(str(path), ov)
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    return [line[line.index(".yaml:") + 6:] for line in info.value.lines()]


# ------------------------------------------------------------------------------------------------ the layout

@pytest.mark.parametrize("rank, lc, v", list(itertools.product((2, 3), (1, 2, 4, 8, 16, 32), (1, 2, 4, 8, 16))))
def test_layout_is_jaxs_canonical_form(rank, lc, v):
    """What the planner prints is what jax's TiledLayout.canonicalize makes of the plain tiling (4 warps over the
    rows, lanes lane_rows x lane_cols, vectors of v): TiledLayout accepts only a canonical form."""
    reg = columns._layout(rank, lc, v, ())
    lr = 32 // lc
    lead = (1,) * (rank - 2)
    plain = fa.TiledLayout(fa.Tiling((lead + (4 * lr, lc * v), (lr, lc * v), (1, v))),
                           warp_dims=(-6,), lane_dims=(-4, -3), vector_dim=-1, _check_canonical=False)
    ours = fa.TiledLayout(fa.Tiling(reg.tiles), warp_dims=reg.warp_dims, lane_dims=reg.lane_dims,
                          vector_dim=reg.vector_dim)
    assert ours == plain.canonicalize()
    assert (reg.rows, reg.cols) == (4 * lr, lc * v) and reg.tiles[0][-2:] == (reg.rows, reg.cols)


def test_pick_layout_prefers_wide_vectors_then_halves_them():
    assert columns.pick_layout(32, 128, 8, 2) == (16, 8)      # bf16 at 128 columns: 16 lanes x 8, 8 rows a tile
    assert columns.pick_layout(4, 128, 8, 2) == (32, 4)       # 4 rows: 32 lanes x 4 elements, 4 rows a tile
    assert columns.pick_layout(2, 128, 8, 2) is None          # never fewer than 4 rows (one a warp)
    assert columns.pick_layout(8, 8, 4, 4) is None            # f32 at 8 columns: 16 rows at the least
    assert columns.pick_layout(16, 8, 4, 4) == (8, 1)


# ------------------------------------------------------------------------------------------------ the plan

def test_mixed_plan_views():
    p = _plan(MIXED)
    reg = p.registers
    assert p.launch.backends == ("cuda", "pallas")
    # 4 f32 a lane, not 8 bf16: w's f32 stage is 128 B-swizzled (test_a_swizzled_stage_caps_the_vector)
    assert (reg.rows, reg.cols, reg.lane_rows, reg.lane_cols, reg.vec) == (4, 128, 1, 32, 4)
    views = {v.name: v for v in reg.views}
    assert [v.name for v in reg.views] == ["x", "s", "b", "w"]
    assert views["s"].gmem and views["s"].squeezed == (1,) and views["s"].kept == (0,) and views["s"].reduced == (1,)
    assert not views["b"].gmem and views["b"].kept == (1,) and views["b"].reduced == (0,)
    assert not views["x"].gmem and views["x"].kept == (0, 1) and views["x"].reduced == ()


def test_a_swizzled_stage_caps_the_vector():
    """jax 0.11.2 moves at most 16 B a lane through a swizzled SMEM block right (columns.widest_vector): the H200 read
    col_row_full's f32 'w' (40 x 128, 128 B swizzle) 8 elements a lane wrong in 7 rows of every 8 (2026-12-04)."""
    ops = {o.name: o for o in _plan(MIXED).operands}
    assert columns.swizzle_of(ops["w"]) == 128 and columns.swizzle_of(ops["r"]) == 128  # r: an output, not capped
    assert _plan(MIXED).registers.vec == 4                                  # f32 swizzled: 16 B = 4 elements
    bf16 = {"op.inputs.w.dtype": "bf16", "op.outputs.r.dtype": "bf16"}
    assert _plan(MIXED, bf16).registers.vec == 8                            # every swizzled stage bf16: 8
    assert _plan(MIXED, {"op.outputs.r.dtype": "bf16"}).registers.vec == 4  # w alone still caps it
    untiled = {"schedule.out_specs.o.block_shape": [20, 128], "schedule.out_specs.r.block_shape": [20, 128]}
    assert columns.swizzle_of({o.name: o for o in _plan(MIXED, untiled).operands}["w"]) == 0  # 20 rows: unswizzled


def test_rank3_views_broadcast_over_the_batch():
    """[M, 1] in a [B, M, N] body is a column broadcast over the batch too; [1, M, 1] a column of the one batch."""
    ov = {"op.sizes": {"B": 2, "M": 200, "N": 640}, "op.inputs.x.shape": ["B", "M", "N"],
          "op.inputs.w.shape": [1, "M", 1], "op.outputs.o.shape": ["B", "M", "N"], "op.outputs.r.shape": ["B", "M", "N"],
          "schedule.out_specs.o.block_shape": [1, 40, 128], "schedule.out_specs.r.block_shape": [1, 40, 128]}
    reg = _plan(MIXED, ov).registers
    views = {v.name: v for v in reg.views}
    assert reg.tiles[0] == (1, 8, 128)   # w is a column here: the swizzled inputs (x) are bf16, 8 a lane
    assert views["s"].gmem and views["s"].kept == (1,) and views["s"].reduced == (0, 2)
    assert views["w"].gmem and views["w"].squeezed == (2,) and views["w"].kept == (0, 1)
    assert views["b"].kept == (2,) and views["x"].kept == (0, 1, 2)


def test_no_broadcast_no_layout():
    """Without a broadcast input Mosaic GPU infers the layouts; a row alone takes the named layout (its view reduced
    along the rows), or the strided one where the arrays are not whole SMEM tiles (a dynamic M of any multiple)."""
    assert _plan(ROOT / "specs" / "add_bf16.yaml").registers is None
    assert _plan(MIXED, {"schedule.backends": ["cuda"]}).registers is None
    reg = _plan(ROOT / "specs" / "gelu_bias_bf16.yaml").registers
    assert not reg.strided and (reg.rows, reg.cols, reg.vec) == (4, 256, 8)
    assert [(v.name, v.gmem, v.kept, v.reduced) for v in reg.views] == [
        ("x", False, (0, 1), ()), ("w", False, (0, 1), ()), ("b", False, (1,), (0,))]
    reg = _plan(ROOT / "specs" / "gelu_bias_bf16_dynamic.yaml").registers
    assert reg.strided and reg.vec == 2          # 256 bias elements over 128 threads


def test_rendered_kernel_reads_the_column_from_gmem(cache):
    src = build_spec(str(MIXED), cache=cache).files["pallas_kernel.py"].decode()
    assert "_LAYOUT = plgpu.Layout.TILED(plgpu.Tiling(((4, 128), (4,))), warp_dims=(-3,), lane_dims=(-2,)," in src
    assert "            return plgpu.load(in_s_gmem.at[pl.ds(c[0] * 40, 40), 0],\n" \
           "                              layout=_LAYOUT.reduce((1,)), optimized=False)" in src
    assert "v_b = plgpu.layout_cast(lax.broadcast_in_dim(v_b, (40, 128), (1,)), _LAYOUT)" in src
    # no SMEM stage for the column: its block comes in the carry, loaded a step ahead
    assert "def step(indices, in_x_s, in_b_s, in_w_s, columns):" in src
    assert "nxt = (_col_in_s(jnp.minimum(k + 1, my_tiles - 1)), )" in src and "return nxt" in src
    assert "v_s = columns[0].astype(jnp.float32)" in src and "init_carry=(_col_in_s(0), )," in src
    assert "plgpu.BlockSpec([40, 1]" not in src


def test_explain_names_the_layout_and_the_columns():
    from schedgen.families.map.explain import explain_map
    text = explain_map(_plan(MIXED))
    assert ("  pallas     every value in one register layout of 4 x 128 tiles (4 warps x 1 row, 32 lanes x 4 "
            "elements); columns read from GMEM into registers: s (Mosaic GPU infers no layout for a column, nor can "
            "its TMA load one); rows broadcast in registers: b (Mosaic GPU's layout inference lays a row out only by "
            "a search that can run out)") in text.splitlines()
    strided = explain_map(_plan(ROOT / "specs" / "gelu_bias_bf16_dynamic.yaml"))
    assert ("  pallas     every value in one strided layout (2-element vectors over the block; the SMEM blocks "
            "untiled); rows broadcast in registers: b (Mosaic GPU's layout inference lays a row out only by a search "
            "that can run out)") in strided.splitlines()
    assert "  pallas " not in explain_map(_plan(MIXED, {"schedule.backends": ["cuda"]}))


# ------------------------------------------------------------------------------------------------ interpreted

@pytest.mark.parametrize("path, ov", [   # (col_scale and col_row_full as they are: test_map_edge_shapes.py)
    (MIXED, {"op.sizes": {"B": 2, "M": 80, "N": 256}, "op.inputs.x.shape": ["B", "M", "N"],
             "op.inputs.w.shape": [1, "M", 1], "op.outputs.o.shape": ["B", "M", "N"],
             "op.outputs.r.shape": ["B", "M", "N"], "schedule.out_specs.o.block_shape": [2, 8, 64],
             "schedule.out_specs.r.block_shape": [2, 8, 64]}),
    (EDGE / "col_scale.yaml", {"op.sizes.M": {"dynamic": True, "max": 1024, "multiple_of": 32}}),
    (MIXED, {"schedule.persistent.num_blocks": 3}),    # 25 tiles on 3 blocks: the carried columns, tile after tile
], ids=["mixed_rank3", "dynamic_m", "three_blocks"])
def test_interpreted_against_float64(path, ov, cache):
    built = build_spec(str(path), ov, cache=cache)
    assert "pallas" in built.plan.launch.backends and built.plan.registers is not None
    checks = verify_built(built, ["pallas"], interpret=True, seed=5)
    assert checks and all(c.ok and c.note == "interpreted, no races" for c in checks), checks


def test_package_call_with_a_column(cache, tmp_path):
    """The package function called with numpy arrays: the [M, 1] argument as the user has it."""
    from schedgen.build import package
    from schedgen.runtime.kernel import load_package
    import ml_dtypes
    kernel = load_package(package(build_spec(str(EDGE / "col_scale.yaml"), cache=cache), tmp_path / "pkg"))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 512)).astype(ml_dtypes.bfloat16)
    s = rng.standard_normal((256, 1)).astype(np.float32)
    out = kernel(x, s, interpret=True)
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) * s, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------------------ located errors

def test_block_rows_the_layout_cannot_take():
    """bf16 at 8 columns: 1 lane x 8, 2 x 4, 4 x 2 need 128, 64, 32 rows; 4 rows take none."""
    lines = _lines(EDGE / "col_scale.yaml", {"schedule.out_specs.o.block_shape": [4, 8]})
    assert lines == [
        "15:23: schedule.out_specs.o.block_shape[0]: 's' broadcasts along the minor dimension (a column), which jax "
        "0.11.2's Mosaic GPU cannot lay out by itself; the Pallas kernel names a register layout whose 4 warps split "
        "the block's rows, each warp 8 rows of 8 columns at a time (4 lanes x 2 elements), so the block's rows (4) "
        "must be a multiple of 32: use 32 rows or set schedule.backends: [cuda]"]
    assert _plan(EDGE / "col_scale.yaml", {"schedule.out_specs.o.block_shape": [4, 8],
                                           "schedule.backends": ["cuda"]}).launch.backends == ("cuda",)


def test_block_rows_few_columns():
    """f32 at 16 columns: 4 lanes x 4, 8 x 2, 16 x 1 need 32, 16, 8 rows; 20 rows take none (8 the fewest)."""
    lines = _lines(EDGE / "col_scale.yaml", {"schedule.out_specs.o.block_shape": [20, 16], "op.inputs.x.dtype": "f32",
                                             "op.sizes.M": 240})
    assert lines == [
        "15:23: schedule.out_specs.o.block_shape[0]: 's' broadcasts along the minor dimension (a column), which jax "
        "0.11.2's Mosaic GPU cannot lay out by itself; the Pallas kernel names a register layout whose 4 warps split "
        "the block's rows, each warp 2 rows of 16 columns at a time (16 lanes x 1 elements), so the block's rows (20) "
        "must be a multiple of 8: use 16 or 24 rows or set schedule.backends: [cuda]"]
    assert _plan(EDGE / "col_scale.yaml", {"schedule.out_specs.o.block_shape": [24, 16], "op.inputs.x.dtype": "f32",
                                           "op.sizes.M": 240}).registers.vec == 1


def test_a_column_spans_whole_blocks():
    ov = {"op.sizes.M": 250, "schedule.out_specs.o": {"block_shape": [32, 128], "out_of_bounds": "zero"},
          "schedule.in_specs": {"x": {"block_shape": [32, 128], "out_of_bounds": "zero"},
                                "s": {"block_shape": [32, 1], "out_of_bounds": "zero"}}}
    lines = _lines(EDGE / "col_scale.yaml", ov)
    assert lines[0] == (
        "14:3: schedule.in_specs.s.block_shape[0]: jax 0.11.2's TMA cannot load a column (Mosaic GPU: 'async_copy "
        "requires all GMEM strides except the last one to be a multiple of 16 bytes'), so the Pallas kernel reads 's' "
        "straight from GMEM into registers, with no bounds handling: its dimension 0 (250) must be a whole number of "
        "blocks of 32; use a block that divides it or set schedule.backends: [cuda]")
    # and x's and o's SMEM blocks, which Mosaic GPU would tile by 8 rows (test_smem_tilings_mosaic_infers_...)
    assert [line.split(": with a broadcast input")[0] for line in lines[1:]] == [
        "14:3: schedule.in_specs.x.block_shape[0]", "15:23: schedule.out_specs.o.block_shape[0]"]
    assert all("dimension 0 (250) is not a multiple of 8" in line for line in lines[1:])
    assert _plan(EDGE / "col_scale.yaml", {**ov, "schedule.backends": ["cuda"]}).launch.backends == ("cuda",)


def test_a_dynamic_column_spans_whole_blocks():
    ov = {"op.sizes.M": {"dynamic": True, "max": 4096, "multiple_of": 8},
          "schedule.out_specs.o": {"block_shape": [32, 128], "out_of_bounds": "zero"},
          "schedule.in_specs": {"x": {"block_shape": [32, 128], "out_of_bounds": "zero"},
                                "s": {"block_shape": [32, 1], "out_of_bounds": "zero"}}}
    (line,) = _lines(EDGE / "col_scale.yaml", ov)
    assert line.endswith("its dimension 0 (the dynamic M, multiple_of 8) must be a whole number of blocks of 32; use "
                         "a block that divides it (or declare multiple_of: 32) or set schedule.backends: [cuda]")


def test_smem_tilings_mosaic_infers_past_the_arrays_edge():
    """40-row blocks at N = 600: Mosaic GPU would tile x's and o's SMEM by (8, 64), w's and r's by (8, 32); 600 is
    neither (test_pallas_lowers pins the lowering failure). 20-row blocks stay untiled and build."""
    lines = _lines(MIXED, _ragged_n(40))
    assert [line.split(": with a broadcast input")[0] for line in lines] == [
        "21:3: schedule.in_specs.x.block_shape[0]", "21:3: schedule.in_specs.w.block_shape[0]",
        "22:23: schedule.out_specs.o.block_shape[0]", "23:23: schedule.out_specs.r.block_shape[0]"]
    assert lines[0] == (
        "21:3: schedule.in_specs.x.block_shape[0]: with a broadcast input in the body the Pallas kernel reads and writes "
        "blocks in a named register layout, and jax 0.11.2's Mosaic GPU then tiles the SMEM block of 'x' (40 rows, "
        "a multiple of 8) by (8, 64) with a 128 B swizzle without looking at the array, whose dimension 1 (600) is "
        "not a multiple of 64: lowering fails ('When no rounding mode is specified, dimension ... must have size "
        "smaller or a multiple of its tiling 64'); use block rows that are not a multiple of 8 (Mosaic GPU leaves "
        "such a block untiled), or a dimension that is a multiple of 64, or set schedule.backends: [cuda]")
    assert "(8, 32)" in lines[1] and "multiple of 32" in lines[1]
    assert _plan(MIXED, _ragged_n(20)).registers.rows == 4


def test_column_blockspec_fields_the_pallas_kernel_does_not_read():
    """No SMEM stage for a column on Pallas: delay_release and transforms would change the CUDA kernel only."""
    lines = _lines(EDGE / "col_scale.yaml", {"schedule.in_specs": {
        "x": {"block_shape": [32, 128], "delay_release": 1}, "s": {"block_shape": [32, 1], "delay_release": 1}}})
    assert lines == [
        "14:3: schedule.in_specs.s.delay_release: jax 0.11.2's TMA cannot load a column (Mosaic GPU: 'async_copy "
        "requires all GMEM strides except the last one to be a multiple of 16 bytes'), so the Pallas kernel reads 's' "
        "straight from GMEM (no SMEM stage to hold): delay_release changes the CUDA kernel only; leave it at 0 or set "
        "schedule.backends: [cuda]"]


def test_lane_semantics_takes_a_column_and_a_row(cache):
    """Lane semantics infers no layouts: the named one makes both broadcasts lower (tests/families/map/
    test_map_lowers.py lowers them), each broadcast cast to it."""
    built = build_spec(str(MIXED), {"schedule.compiler_params.lowering_semantics": "lane"}, cache=cache)
    src = built.files["pallas_kernel.py"].decode()
    assert "lowering_semantics=plgpu.LoweringSemantics.Lane" in src
    assert "v_b = plgpu.layout_cast(lax.broadcast_in_dim(v_b, (40, 128), (1,)), _LAYOUT)" in src
    assert "v_s = plgpu.layout_cast(lax.broadcast_in_dim(v_s, (40, 128), (0,)), _LAYOUT)" in src


def test_unwritten_backends_fall_back_to_cuda(tmp_path):
    """A spec that writes neither backends nor blocks gets the Pallas kernel where the picked blocks fit, and only
    CUDA (not an error) where the sizes rule Pallas out: M = 250 is ragged for the picked 32-row blocks."""
    import yaml
    spec = {"name": "cs", "op": {"kind": "map", "sizes": {"M": 250, "N": 512},
                                 "inputs": {"x": {"shape": ["M", "N"], "dtype": "bf16"},
                                            "s": {"shape": ["M", 1], "dtype": "f32"}},
                                 "outputs": {"o": {"shape": ["M", "N"], "dtype": "f32"}}, "body": "o = x * s"}}
    path = tmp_path / "cs.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert _plan(path).launch.backends == ("cuda",)
    path.write_text(yaml.safe_dump({**spec, "op": {**spec["op"], "sizes": {"M": 256, "N": 512}}}))
    p = _plan(path)
    assert p.launch.backends == ("cuda", "pallas") and p.registers is not None


# ------------------------------------------------------------------------------------------------ jax's limits, pinned

M, N, BM, BN = 64, 256, 16, 128


def _lower(body, in_shapes, scratch):
    kern = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((M, N), jnp.float32), scratch_types=scratch,
                        grid=(1,), grid_names=("cta",),
                        compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Warpgroup))
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in in_shapes]
    return jax.jit(kern).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def _named_layout(lc, v):
    reg = columns._layout(2, lc, v, ())
    return plgpu.Layout.TILED(plgpu.Tiling(reg.tiles), warp_dims=reg.warp_dims, lane_dims=reg.lane_dims,
                              vector_dim=reg.vector_dim)


def test_pin_tma_cannot_load_a_column():
    """The first road: the column as a TMA block of its own ([bm, 1] of the [M, 1] array, read in the named layout
    reduced, so that layouts are not what fails). jax 0.11.2 refuses the tensor map: the row stride is 4 B."""
    layout = _named_layout(16, 8)

    def body(x_g, s_g, o_g, o_smem):
        def step(idx, x_s, s_s):
            col = plgpu.load(s_s.at[:, 0], layout=layout.reduce((1,)), optimized=False)
            o_smem[...] = plgpu.load(x_s, layout=layout, optimized=False) * lax.broadcast_in_dim(col, (BM, BN), (0,))
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(o_smem, o_g.at[pl.ds(0, BM), pl.ds(0, BN)])
            plgpu.wait_smem_to_gmem(0)
        plgpu.emit_pipeline(step, grid=(M // BM,), in_specs=[
            plgpu.BlockSpec([BM, BN], lambda k: (k, 0)), plgpu.BlockSpec([BM, 1], lambda k: (k, 0))],
            max_concurrent_steps=2)(x_g, s_g)
    with pytest.raises(ValueError, match="async_copy requires all GMEM strides except the last one to be a multiple "
                                         "of 16 bytes"):
        _lower(body, [(M, N), (M, 1)], [plgpu.SMEM((BM, BN), jnp.float32)])


def test_pin_layout_inference_finds_no_column_broadcast():
    """The second road: a [bm] column (a 1-D TMA block, legal) broadcast along the minor dimension, layouts left to
    Mosaic GPU's inference. jax 0.11.2 finds none, so the kernel names its layout."""
    def body(x_g, s_g, o_g, o_smem):
        def step(idx, x_s, s_s):
            o_smem[...] = x_s[...] * lax.broadcast_in_dim(s_s[...], (BM, BN), (0,))
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(o_smem, o_g.at[pl.ds(0, BM), pl.ds(0, BN)])
            plgpu.wait_smem_to_gmem(0)
        plgpu.emit_pipeline(step, grid=(M // BM,), in_specs=[
            plgpu.BlockSpec([BM, BN], lambda k: (k, 0)), plgpu.BlockSpec([BM], lambda k: (k,))],
            max_concurrent_steps=2)(x_g, s_g)
    with pytest.raises(ValueError, match="Layout inference failed to find a solution|Failed to infer a possible set "
                                         "of layouts"):
        _lower(body, [(M, N), (M,)], [plgpu.SMEM((BM, BN), jnp.float32)])


def test_pin_layout_rows_the_planner_refuses():
    """Block rows off the layout's base tile (the planner's located error) fail to lower: 8 rows against the 16 that
    8 lanes along 8 columns of f32 need."""
    assert columns._layout(2, 8, 1, ()).rows == 16
    layout = _named_layout(8, 1)

    def body(x_g, o_g, x_s):
        o_g[...] = plgpu.load(x_s, layout=layout, optimized=False)
    kern = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((8, 8), jnp.float32),
                        scratch_types=[plgpu.SMEM((8, 8), jnp.float32)], grid=(1,), grid_names=("cta",),
                        compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Warpgroup))
    with pytest.raises(ValueError, match="Cannot cast to layout .* the layout is not ?compatible with the operand "
                                         "shape \\(8, 8\\)"):
        jax.jit(kern).trace(jax.ShapeDtypeStruct((8, 8), jnp.float32)).lower(lowering_platforms=("cuda",))


# ------------------------------------------------------------------------------------------------ on the H200

@pytest.mark.gpu
@pytest.mark.parametrize("path, ov", [
    (EDGE / "col_scale.yaml", {}),
    (MIXED, {}),
    (MIXED, _ragged_n(20)),
    (MIXED, {"op.sizes": {"B": 3, "M": 200, "N": 640}, "op.inputs.x.shape": ["B", "M", "N"],
             "op.inputs.w.shape": [1, "M", 1], "op.outputs.o.shape": ["B", "M", "N"],
             "op.outputs.r.shape": ["B", "M", "N"], "schedule.out_specs.o.block_shape": [1, 40, 128],
             "schedule.out_specs.r.block_shape": [1, 40, 128]}),
], ids=["col_scale", "mixed_200x640", "mixed_1000x600_ragged_n_20_rows", "mixed_rank3"])
def test_column_broadcast_verifies_on_both_backends_on_gpu(path, ov, cache):
    """What the H200 says of the column path (the CPU lowers it, the interpreter runs it; only the GPU runs it)."""
    built = build_spec(str(path), ov, cache=cache)
    assert set(built.plan.launch.backends) == {"cuda", "pallas"} and built.plan.registers is not None
    checks = verify_built(built, ["cuda", "pallas"])
    assert {c.backend for c in checks} == {"cuda", "pallas"}
    # which backend / output / size failed, in full (the H200 failed one of 200x640's on 2026-12-04 and the
    # truncated Check list did not say which)
    assert all(c.ok for c in checks), [(c.backend, c.output, c.shape, c.rel_error, c.tolerance, c.note)
                                       for c in checks if not c.ok]
