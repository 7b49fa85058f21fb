"""A static M below the tile (decode: 16 tokens in a 64-row wgmma block) loads only M rows of the lhs (rounded up to 8)
into each stage, the stage's other rows zeroed once at kernel start: TMA fills no rows past the edge. Regression
(H200, 2026-12-04): decode 16x8192x8192 ran at 0.68x cuBLAS with 48 of 64 lhs rows zero-filled by TMA, while
64x8192x8192 ran at 1.04x with the same kernel and the same weight bytes. On the CPU: the box, the expect_tx bytes,
the zeroing in the rendered CUDA, and that M at or above the tile, an M-major lhs and a multicast lhs keep whole-tile
boxes. On the GPU (marked gpu): short boxes against float64, M a multiple of 8 and not."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from conftest import ROOT
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan
from schedgen.render import render

DECODE = ROOT / "bench" / "user_shapes" / "decode_16x8192x8192.yaml"   # the planner's 64 x 64 x 128 tiles
BASE = ROOT / "tests" / "data" / "matmul_base.yaml"                    # 4096^3, 128x256x64, cluster 2x1
CUDA = {"schedule.backends": ["cuda"]}


def _plan(path, overrides=None):
    spec, src = load_spec(str(path), overrides or {})
    return plan(spec, src)


def _lhs_box(p):
    return p.launch.kernel_args[0].box


def test_decode_loads_m_rows_of_the_lhs():
    p = _plan(DECODE)
    assert (p.tiles.tile_m, p.tiles.tile_k, p.layout.a_box_rows) == (64, 128, 16)
    assert _lhs_box(p) == (16, 64)
    # the full barrier counts what TMA writes: 16 rows x 128 K of the lhs, the whole rhs block
    assert p.pipeline.stage_tx_bytes == 16 * 128 * 2 + p.layout.b_stage_bytes
    # M = 20 rounds up to 24 rows (whole 8-row swizzle atoms); 4 are filled past the edge
    p20 = _plan(DECODE, {"op.sizes.M": 20})
    assert p20.layout.a_box_rows == 24 and _lhs_box(p20) == (24, 64)


def test_a_one_block_tile_packs_the_loaded_rows():
    """64-row tile: the boxes' 16 rows follow each other 2048 B apart; a box's 64-row wgmma window runs on over the
    next boxes (rows past M: never stored) and past the last into a zeroed 6144 B tail."""
    p = _plan(DECODE, CUDA)
    assert p.layout.a_compact and (p.layout.a_sub_bytes, p.layout.a_stage_bytes) == (2048, 4096)
    assert [off for off, _ in p.layout.a_boxes] == [0, 2048]
    bufs = {b.name: b for b in p.pipeline.smem_buffers}
    assert bufs["a"].bytes * bufs["a"].count == 6 * 4096
    assert bufs["a_tail"].offset == bufs["a"].offset + 6 * 4096 and bufs["a_tail"].bytes == 48 * 128
    cu = render(p, "cuda")
    assert "for (uint32_t o = threadIdx.x * 16u; o < 6144u; o += 4096u)" in cu and "S_a_tail + o" in cu
    assert "sg_mbar_expect_tx(full, 20480u);" in cu
    zero = cu.index("zero the tail")
    assert zero < cu.index("sg_fence_proxy_async();", zero) < cu.index("__syncthreads();", zero)


def test_a_two_block_tile_zeroes_the_rows_it_never_loads():
    """128-row tile (two wgmma M blocks) at M = 16: the ring keeps whole stages, rows past M zeroed once."""
    p = _plan(DECODE, {**CUDA, "schedule.in_specs.a.block_shape": [128, 64], "schedule.in_specs.b.block_shape": [64, 64],
                       "schedule.out_specs.out.block_shape": [128, 64], "schedule.in_specs.a.out_of_bounds": "zero",
                       "schedule.in_specs.b.out_of_bounds": "zero", "schedule.pipeline.num_compute_wgs": 1})
    assert (p.layout.a_box_rows, p.layout.a_compact, p.layout.a_stage_bytes) == (16, False, 128 * 64 * 2)
    cu = render(p, "cuda")
    stages = p.pipeline.stages
    assert f"o < {stages}u * {112 * 128}u; o += 4096u" in cu and "S_a + box * 16384u + 2048u + off" in cu
    assert f"sg_mbar_expect_tx(full, {16 * 64 * 2 + p.layout.b_stage_bytes}u);" in cu


@pytest.mark.parametrize("overrides", [
    {},                                                                  # M = 4096: whole tiles
    {"op.sizes.M": 64, "schedule.cluster": [1, 1], "schedule.in_specs.b.collective_axes": [],
     "schedule.in_specs.a.block_shape": [64, 64], "schedule.out_specs.out.block_shape": [64, 256],
     "schedule.pipeline.num_compute_wgs": 1, "schedule.pipeline.wg_axis": None,
     "schedule.pipeline.compute_registers": 240, "schedule.pipeline.memory_registers": 56},   # M = the tile
])
def test_m_at_or_above_the_tile_loads_whole_tiles(overrides):
    p = _plan(BASE, {**CUDA, **overrides})
    assert p.layout.a_box_rows == p.tiles.tile_m and "zero the rest" not in render(p, "cuda")
    assert p.pipeline.stage_tx_bytes == p.layout.a_stage_bytes + p.layout.b_stage_bytes


def test_m_major_and_multicast_lhs_keep_their_boxes():
    # an M-major lhs ([K, M]) is boxed along K: its box rows are tile_k whatever M is
    p = _plan(DECODE, {**CUDA, "op.transpose_lhs": True, "op.inputs.a.shape": ["K", "M"]})
    assert p.layout.a_box_rows == p.tiles.tile_m and _lhs_box(p)[-2] == p.tiles.tile_k
    # a 1x2 cluster multicasts the lhs in halves: half the tile a CTA
    p = _plan(BASE, {**CUDA, "schedule.cluster": [1, 2], "schedule.in_specs.b.collective_axes": [],
                     "schedule.in_specs.a.collective_axes": ["cluster"]})
    assert p.cluster.multicast == "lhs" and _lhs_box(p)[-2] == p.tiles.tile_m // 2 and p.layout.a_box_rows == p.tiles.tile_m
    # both halves land in every CTA of the pair: each stage's full barrier counts the whole lhs block
    assert p.pipeline.stage_tx_bytes == p.layout.a_stage_bytes + p.layout.b_stage_bytes and not p.layout.a_compact


def _verify(path, overrides=None):
    from schedgen.verify import verify_built
    b = build_spec(str(path), overrides or {}, cache=Cache(Path(tempfile.mkdtemp(prefix="schedgen-short-"))))
    checks = verify_built(b, ["cuda"])
    assert checks and all(c.ok for c in checks), checks
    return b.plan


@pytest.mark.gpu
@pytest.mark.parametrize("m", [16, 20, 40, 8])
def test_short_lhs_matches_float64_on_gpu(m):
    p = _verify(DECODE, {**CUDA, "op.sizes": {"M": m, "N": 2048, "K": 4096}})
    assert p.layout.a_box_rows < p.tiles.tile_m
