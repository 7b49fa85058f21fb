"""What the matmul planner picks for the schedule fields a spec does not write.

The bundled benchmark specs (specs/matmul_*.yaml, chosen on the H200) are the model: a warp-specialized kernel, a
TMA producer and two consumer warpgroups of 64 x 256 (a 128 x 256 x 64 tile) for large problems, a 4-stage ring,
tiles in planar-snake order 8 tiles wide. A problem too small to give the SMs a wave of such tiles gets a smaller
tile (128 x 128 with a deeper ring, then 64-row tiles with one consumer); a tile that does not divide the problem
pads the edges with zeros (TMA). A field the spec writes is never replaced.
"""
from __future__ import annotations

from ...frontend.model import BlockSpec
from ...plan import dims as D
from ...plan.common import Problems
from ...plan.defaults import Pick, written
from ...plan.hardware import Hardware
from ...plan.legality import stages_that_fit
from .operands import check_names, problem_dims
from .records import REG_OVERHEAD, WGMMA_M
from .schedule import tile_from_block_specs

# (tile_m, tile_n), largest first; a ring depth that suits each (the bundled specs': 4 stages of 128 x 256,
# 6 of 128 x 128)
TILES = ((128, 256), (128, 128), (64, 128), (64, 64))
STAGES = {256: 4, 128: 6, 64: 6}
WAVE = 3 / 4          # a tile is small enough once the tiles fill this share of the SMs
EPI_BUFFERS = 2
MAX_CONSUMER_REGS = 240   # one consumer's setmaxnreg budget (the planner's default with one consumer)


def matmul_defaults(spec, hw: Hardware) -> list[Pick]:
    """Picks for the fields the spec leaves out (plan.defaults applies the ones not written)."""
    sch_written = lambda *path: written(spec, ("schedule", *path))  # noqa: E731
    picks = []
    if not sch_written("pipeline", "kind"):
        picks.append(Pick(("schedule", "pipeline", "kind"), "warp_specialized",
                          "the matmul kernel is warp-specialized (a TMA producer and wgmma consumer warpgroups)"))
    op = spec.op
    problems = Problems()
    out_name, extras = check_names(spec, problems)
    dims = None if problems or op.lhs not in op.inputs or op.rhs not in op.inputs else \
        problem_dims(op, out_name, extras, problems)
    if dims is None or problems:
        return picks                           # the planner reports what is wrong with the op
    tiled = [sch_written("in_specs", op.lhs), sch_written("in_specs", op.rhs), sch_written("out_specs", out_name)]
    nc_written = sch_written("pipeline", "num_compute_wgs")
    if any(tiled):
        tm, tn, tk = tile_from_block_specs(op, spec.schedule, out_name, Problems())
    else:
        (tm, tn, tk), why = _tile(dims, hw, spec.schedule.pipeline.num_compute_wgs if nc_written else None)
        picks += _block_specs(op, out_name, dims, tm, tn, tk, why)
    nc = 2 if tm >= 2 * WGMMA_M and tm % (2 * WGMMA_M) == 0 else 1
    if not nc_written:
        picks.append(Pick(("schedule", "pipeline", "num_compute_wgs"), nc,
                          f"{'two consumers of ' + str(tm // 2) if nc == 2 else 'one consumer of ' + str(tm)} "
                          f"x {tn} (each thread's f32 accumulators fit its registers)"))
    else:
        nc = spec.schedule.pipeline.num_compute_wgs
    if not sch_written("pipeline", "max_concurrent_steps"):
        picks.append(_stages(dims, tm, tn, tk, nc, hw))
    if not sch_written("persistent", "tile_order") and not sch_written("persistent", "tile_width"):
        picks.append(Pick(("schedule", "persistent", "tile_order"), "planar_snake",
                          "bands of tiles that share lhs rows and rhs columns in the L2"))
        picks.append(Pick(("schedule", "persistent", "tile_width"), 8, "the bundled specs' band width"))
    return picks


def _tile(dims, hw: Hardware, nc: int | None) -> tuple[tuple[int, int, int], str]:
    """The largest tile whose tiles give the SMs most of a wave, preferring tiles that divide M and N; with the
    consumers written (`nc`), only tiles whose accumulators fit that many."""
    ranges = dims.ranges
    tiles = [t for t in TILES if nc is None or (t[0] % (WGMMA_M * nc) == 0
                                                and t[0] * t[1] // (128 * nc) + REG_OVERHEAD <= MAX_CONSUMER_REGS)]
    tiles = tiles or list(TILES)
    tk = 128 // dims.isz                       # one 128-byte swizzle row of K
    while tk > 16 and D.upper(dims.k, ranges) < tk:
        tk //= 2
    dividing = [t for t in tiles if D.divisible(dims.m, t[0], ranges) and D.divisible(dims.n, t[1], ranges)]
    pool = dividing or tiles
    batch = D.upper(dims.batch, ranges)
    count = {t: batch * D.upper(D.cdiv(dims.m, t[0]), ranges) * D.upper(D.cdiv(dims.n, t[1]), ranges) for t in pool}
    enough = [t for t in pool if count[t] >= WAVE * hw.sm_count]
    tm, tn = enough[0] if enough else pool[-1]
    size = "M, N = {}, {}".format(*(D.upper(x, ranges) for x in (dims.m, dims.n)))
    return (tm, tn, tk), f"{size}: {count[(tm, tn)]} tiles of {tm} x {tn} for {hw.sm_count} SMs"


def _block_specs(op, out_name: str, dims, tm: int, tn: int, tk: int, why: str) -> list[Pick]:
    """BlockSpecs for lhs, rhs and the output in their stored order; zero padding where the tile does not divide."""
    ranges = dims.ranges
    ragged = not all(D.divisible(x, t, ranges) for x, t in ((dims.m, tm), (dims.n, tn), (dims.k, tk)))
    oob = "zero" if ragged else "reject"
    why += "; the edge tiles are zero-padded (out_of_bounds: zero)" if ragged else ""
    a = [tk, tm] if op.transpose_lhs else [tm, tk]
    b = [tn, tk] if op.transpose_rhs else [tk, tn]
    return [Pick(("schedule", "in_specs", op.lhs), BlockSpec(block_shape=a, delay_release=1, out_of_bounds=oob),
                 f"tile {tm} x {tn} x {tk} ({why})"),
            Pick(("schedule", "in_specs", op.rhs), BlockSpec(block_shape=b, delay_release=1, out_of_bounds=oob),
                 "the same tile"),
            Pick(("schedule", "out_specs", out_name), BlockSpec(block_shape=[tm, tn]), "the same tile")]


def _stages(dims, tm: int, tn: int, tk: int, nc: int, hw: Hardware) -> Pick:
    """The ring depth that suits the tile, as deep as SMEM allows beside the epilogue's staging buffers."""
    stage = (tm + tn) * tk * dims.isz
    epi_cols = min(tn, 128 // dims.osz)        # the consumers split the tile along M: each has all tn columns
    staging = WGMMA_M * epi_cols * dims.osz * EPI_BUFFERS * nc
    want = STAGES.get(tn, 4)
    fit = stages_that_fit(hw, staging + 16 * want, stage)
    stages = max(2, min(want, fit))
    return Pick(("schedule", "pipeline", "max_concurrent_steps"), stages,
                f"{stages} stages of {stage // 1024} KiB" + ("" if stages == want else " (what fits in SMEM)"))
