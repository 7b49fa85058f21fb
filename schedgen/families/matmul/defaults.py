"""What the matmul planner picks for the schedule fields a spec does not write.

The bundled benchmark specs (specs/matmul_*.yaml, chosen on the H200) are the model: a warp-specialized kernel, a
TMA producer and two consumer warpgroups of 64 x 256 (a 128 x 256 x 64 tile) for large problems, a 4-stage ring,
tiles in planar-snake order 8 tiles wide. Among the tiles that give the SMs most of a wave, the planner takes the
one with the least estimated time: whole waves of tiles (the last wave costs as much as a full one) times a tile's
time at its measured throughput (TILE_RATE), so a 1536 x 3072 problem gets 128 x 192 tiles (192 tiles in 2 waves)
rather than 144 of 128 x 256 (1.09 waves). A problem too small for a wave of large tiles gets a smaller one (128 x
128 with a deeper ring, then 64-row tiles with one consumer); a skinny one (64-row tiles: decode) loads 128 K
columns a stage, so the ring holds more weight bytes in flight. A tile that does not divide the problem pads the
edges with zeros (TMA). A large problem with an even number of tile rows runs in 2-CTA clusters along M that
share the rhs tile by multicast (each CTA loads half): measured on the H200 (2026-12-04, bench.sweep), a
3000 x 5000 x 1000 GEMM went from 0.84x to 1.09x cuBLAS and 4000 x 6000 x 3000 (f32 out) from 0.91x to 1.02x.
A field the spec writes is never replaced.
"""
from __future__ import annotations

from ...frontend.model import BlockSpec
from ...plan import dims as D
from ...plan.common import Problems
from ...plan.defaults import Pick, written
from ...plan.hardware import Hardware, for_target
from ...plan.legality import stages_that_fit
from ...plan.gemm import (REG_OVERHEAD, WGMMA_M, sm100_acc_buffers, sm100_epilogue_cols, sm100_ring_depth,
                         sm100_staging_bytes, tile_from_block_specs, vector_slots)
from .operands import check_names, problem_dims

# (tile_m, tile_n), largest first; a ring depth that suits each (the bundled specs': 4 stages of 128 x 256,
# 6 of 128 x 128)
TILES = ((128, 256), (128, 192), (128, 128), (64, 128), (64, 64))
# a tile's throughput relative to 128 x 256, the estimate that picks among the tiles (H200, 2026-12-04: 128 x 128
# ran at 0.72-0.79 of 128 x 256 at the same wave quantization, 128 x 192 at 0.93-0.97 per tile at 1536 x 3072 x 1536
# and 2777 x 11008 x 4096; the 64-row ones are estimates below them)
TILE_RATE = {(128, 256): 1.0, (128, 192): 0.96, (128, 128): 0.75, (64, 128): 0.55, (64, 64): 0.4}
CLUSTER_GAIN = 0.9    # a tile's time in a 2-CTA cluster (H200: 0.77-0.9 at ragged, short-K and f32-out shapes, ~1.0
                      # at 4096^3): so a tile that loses its cluster must win by more than that
SWITCH = 0.98         # a tile other than the largest that makes a wave is taken only when estimated 2% faster
SKINNY_TK_BYTES = 256     # K bytes per stage of a 64-row (skinny) tile: 128 bf16 columns
STAGES = {256: 4, 128: 6, 64: 6}
WAVE = 3 / 4          # a tile is small enough once the tiles fill this share of the SMs
EPI_BUFFERS = 2
MAX_CONSUMER_REGS = 240
# fp8 with 128 x 128 block scales (op.block_scales): a stage is one 128-K scale block, each consumer's 64 x 128 lies in
# one 128-column scale block of rhs, and its K block's partial sum (64 more f32) fits beside the accumulators; the
# stage is released as soon as its wgmmas are waited for (the promotion waits for them anyway)
BLOCK_SCALED_TILE = (128, 128, 128)
BLOCK_SCALED_WHY = ("block scales: one 128-K scale block a stage, two consumers of 64 x 128 (each in one 128-column "
                    "scale block of rhs, a K block's partial sum beside the accumulators), released at once")   # one consumer's setmaxnreg budget (the planner's default with one consumer)


def _sm100_picks(spec, op, out_name, dims, hw: Hardware, sch_written) -> list[Pick]:
    """sm_100a: a 128-row tile (one tcgen05.mma M), 256 columns where N allows (else 128), 128 bytes of K (64 bf16,
    128 fp8); the deepest ring that fits beside the epilogue's staging tiles and the barriers (at most 6); tiles in
    planar-snake order. No consumer count or cluster: the Hopper fields the sm_100a kernel does not read are not
    picked."""
    picks = []
    tiled = any([sch_written("in_specs", op.lhs), sch_written("in_specs", op.rhs), sch_written("out_specs", out_name)])
    if tiled:
        tm, tn, tk = tile_from_block_specs(op, spec.schedule, out_name, Problems())
    else:
        tm, tk = 128, 128 // dims.isz         # 128 bytes of K a stage: 64 bf16 / f16, 128 e4m3 / e5m2
        tn = 256 if D.divisible(dims.n, 256, dims.ranges) else 128
        picks += _block_specs(op, out_name, dims, tm, tn, tk, f"one tcgen05.mma of M 128, N {tn} a tile (sm_100a), "
                              f"128 bytes of K a stage", False, delay=0)
    if not sch_written("pipeline", "max_concurrent_steps"):
        pair = 2 if tm == 256 else 1          # a CTA pair's 256-row tile (cta_group::2): each CTA holds half
        stage = (tm + tn) // pair * tk * dims.isz
        epi = spec.schedule.epilogue
        staging = sm100_staging_bytes(sm100_epilogue_cols(epi, tn, dims.osz), dims.osz, epi.buffers)
        stages = max(2, min(6, sm100_ring_depth(hw, stage, staging, sm100_acc_buffers(tn, hw))))
        picks.append(Pick(("schedule", "pipeline", "max_concurrent_steps"), stages,
                          f"the deepest ring of {stage}-byte stages that fits the SMEM beside the epilogue's "
                          f"{staging} B of staging tiles (at most 6)"))
    if not sch_written("persistent", "tile_order") and not sch_written("persistent", "tile_width"):
        picks.append(Pick(("schedule", "persistent", "tile_order"), "planar_snake",
                          "bands of tiles that share lhs rows and rhs columns in the L2"))
        picks.append(Pick(("schedule", "persistent", "tile_width"), 8, "the bundled specs' band width"))
    return picks


def _tcgen05(spec) -> bool:
    """The spec's target runs tcgen05 (Blackwell: sm_100a), the hardware table says."""
    return for_target(spec.schedule.target).mma == "tcgen05"


def matmul_defaults(spec, hw: Hardware) -> list[Pick]:
    """Picks for the fields the spec leaves out (plan.defaults applies the ones not written)."""
    sch_written = lambda *path: written(spec, ("schedule", *path))  # noqa: E731
    picks = []
    if not sch_written("pipeline", "kind"):
        picks.append(Pick(("schedule", "pipeline", "kind"), "warp_specialized",
                          "the matmul kernel is warp-specialized (a TMA producer and wgmma consumer warpgroups)"
                          if not _tcgen05(spec) else "the matmul kernel is warp-specialized (a TMA "
                          "producer warp, a tcgen05 MMA thread, an epilogue warpgroup)"))
    op = spec.op
    problems = Problems()
    out_name, extras = check_names(spec, problems)
    dims = None if problems or op.lhs not in op.inputs or op.rhs not in op.inputs else \
        problem_dims(op, out_name, extras, problems)
    if dims is None or problems:
        return picks                           # the planner reports what is wrong with the op
    if _tcgen05(spec):
        return picks + _sm100_picks(spec, op, out_name, dims, hw, sch_written)
    tiled = [sch_written("in_specs", op.lhs), sch_written("in_specs", op.rhs), sch_written("out_specs", out_name)]
    nc_written = sch_written("pipeline", "num_compute_wgs")
    # ping-pong: two consumers, each on a whole tile of its own (its accumulators in one warpgroup's registers)
    pingpong = spec.schedule.pipeline.consumer_schedule != "cooperative"
    shared = False                            # 2-CTA clusters sharing the rhs (picked with the tile)
    # stream-K runs on 1-CTA launches (stream_k.py): no cluster is picked for it
    clusters_ok = not sch_written("cluster") and spec.schedule.persistent.decomposition != "stream_k"
    if any(tiled):
        tm, tn, tk = tile_from_block_specs(op, spec.schedule, out_name, Problems())
    else:
        nc_fit = 1 if pingpong else spec.schedule.pipeline.num_compute_wgs if nc_written else None
        if getattr(op, "block_scales", None) is not None:
            (tm, tn, tk), why = BLOCK_SCALED_TILE, BLOCK_SCALED_WHY
        else:
            (tm, tn, tk), why = _tile(op, dims, hw, nc_fit, clusters=clusters_ok,
                                      cluster=tuple(spec.schedule.cluster) if sch_written("cluster") else None)
        shared = clusters_ok and _clusters(op, dims, tm, tn, hw)
        picks += _block_specs(op, out_name, dims, tm, tn, tk, why, shared,
                              delay=0 if getattr(op, "block_scales", None) is not None else 1)
    nc = 2 if pingpong or (tm >= 2 * WGMMA_M and tm % (2 * WGMMA_M) == 0) else 1
    if not nc_written:
        picks.append(Pick(("schedule", "pipeline", "num_compute_wgs"), nc,
                          f"two consumers on alternate tiles of {tm} x {tn} (ping-pong)" if pingpong else
                          f"{'two consumers of ' + str(tm // 2) if nc == 2 else 'one consumer of ' + str(tm)} "
                          f"x {tn} (each thread's f32 accumulators fit its registers)"))
    else:
        nc = spec.schedule.pipeline.num_compute_wgs
    if not sch_written("pipeline", "max_concurrent_steps"):
        # epilogue.operands: smem: the operand slots take SMEM beside the ring too
        vecs = vector_slots(spec.schedule, dims.extra_ops, tm, tn, nc, pingpong, Problems()).nbytes
        picks.append(_stages(dims, tm, tn, tk, nc, hw, vecs))
    if shared:
        rows = D.upper(D.cdiv(dims.m, tm), dims.ranges)
        picks.append(Pick(("schedule", "cluster"), [2, 1],
                          f"{rows} even tile rows: pairs of CTAs along M share the rhs tile, each loading half and "
                          "multicasting it (half the rhs traffic from L2)"))
    if not sch_written("persistent", "tile_order") and not sch_written("persistent", "tile_width"):
        picks.append(Pick(("schedule", "persistent", "tile_order"), "planar_snake",
                          "bands of tiles that share lhs rows and rhs columns in the L2"))
        picks.append(Pick(("schedule", "persistent", "tile_width"), 8, "the bundled specs' band width"))
    return picks


def _tile(op, dims, hw: Hardware, nc: int | None, clusters: bool, cluster: tuple | None = None
          ) -> tuple[tuple[int, int, int], str]:
    """Among the tiles whose tiles give the SMs most of a wave (preferring tiles that divide M and N; with the
    consumers written (`nc`), only tiles whose accumulators fit that many; with a 2-CTA `cluster` written, only
    tiles it can split), the fastest by the estimate of _fastest (with `clusters`: counting the 2-CTA cluster a
    tile would get)."""
    ranges = dims.ranges
    tiles = [t for t in TILES if nc is None or (t[0] % (WGMMA_M * nc) == 0
                                                and t[0] * t[1] // (128 * nc) + REG_OVERHEAD <= MAX_CONSUMER_REGS)]
    tiles = [t for t in tiles if _splits(op, dims, *t, cluster)] or tiles or list(TILES)
    dividing = [t for t in tiles if D.divisible(dims.m, t[0], ranges) and D.divisible(dims.n, t[1], ranges)]
    pool = dividing or tiles
    batch = D.upper(dims.batch, ranges)
    count = {t: batch * D.upper(D.cdiv(dims.m, t[0]), ranges) * D.upper(D.cdiv(dims.n, t[1]), ranges) for t in pool}
    enough = [t for t in pool if count[t] >= WAVE * hw.sm_count]
    tm, tn = _fastest(enough, count, hw, lambda t: clusters and _clusters(op, dims, *t, hw)) if enough else pool[-1]
    tk = (SKINNY_TK_BYTES if tm < 2 * WGMMA_M else 128) // dims.isz   # K per stage: 128 (skinny: 256) bytes
    while tk > 16 and D.upper(dims.k, ranges) < tk:
        tk //= 2
    size = "M, N = {}, {}".format(*(D.upper(x, ranges) for x in (dims.m, dims.n)))
    waves = count[(tm, tn)] / hw.sm_count
    return (tm, tn, tk), f"{size}: {count[(tm, tn)]} tiles of {tm} x {tn} for {hw.sm_count} SMs ({waves:.2f} waves)"


def _fastest(enough: list[tuple[int, int]], count: dict, hw: Hardware, clustered) -> tuple[int, int]:
    """Among tiles that make most of a wave (largest first), the one with the least estimated time: whole waves
    times a tile's time at its throughput (CLUSTER_GAIN faster where it runs in 2-CTA clusters); another than the
    first only when it is SWITCH faster."""
    def cost(t: tuple[int, int]) -> float:
        gain = CLUSTER_GAIN if clustered(t) else 1.0
        return -(-count[t] // hw.sm_count) * t[0] * t[1] / TILE_RATE.get(t, 0.4) * gain
    best = min(enough, key=cost)
    return best if cost(best) < SWITCH * cost(enough[0]) else enough[0]


def _splits(op, dims, tm: int, tn: int, cluster: tuple | None) -> bool:
    """Whether a written 2x1 / 1x2 cluster can share a tm x tn tile: an even tile grid along it (a static size)
    and each CTA's half of the shared tile whole swizzle rows where that operand is MN-major (the planner's rule,
    schedule.cluster_shape); any tile without a 2-CTA cluster."""
    cm, cn = (tuple(cluster or ()) + (1, 1))[:2]
    rows, cols = D.cdiv(dims.m, tm), D.cdiv(dims.n, tn)
    atom = 128 // dims.isz
    if cm == 2:
        return (not D.is_static(rows) or rows % 2 == 0) and (op.transpose_rhs or (tn // 2) % atom == 0)
    if cn == 2:
        return (not D.is_static(cols) or cols % 2 == 0) and (tm // 2) % (atom if op.transpose_lhs else 8) == 0
    return True


def _clusters(op, dims, tm: int, tn: int, hw: Hardware) -> bool:
    """Whether a tm x tn tile runs in 2-CTA clusters along M: a problem of at least a wave of two-consumer tiles
    with an even number of tile rows at every size (a dynamic M: its multiple_of a multiple of 2 x tile_m), and
    each CTA's half of the rhs tile whole swizzle rows (N-major rhs)."""
    ranges = dims.ranges
    rows = D.cdiv(dims.m, tm)
    even = D.divisible(rows, 2, ranges) if D.is_static(rows) else D.divisible(dims.m, 2 * tm, ranges)
    count = D.upper(dims.batch, ranges) * D.upper(rows, ranges) * D.upper(D.cdiv(dims.n, tn), ranges)
    return tm >= 2 * WGMMA_M and even and count >= hw.sm_count and _splits(op, dims, tm, tn, (2, 1))


def _block_specs(op, out_name: str, dims, tm: int, tn: int, tk: int, why: str, shared: bool,
                 delay: int = 1) -> list[Pick]:
    """BlockSpecs for lhs, rhs and the output in their stored order; zero padding where the tile does not divide;
    `shared`: the rhs is the tile a 2-CTA cluster multicasts (collective_axes: [cluster])."""
    ranges = dims.ranges
    ragged = not all(D.divisible(x, t, ranges) for x, t in ((dims.m, tm), (dims.n, tn), (dims.k, tk)))
    oob = "zero" if ragged else "reject"
    why += "; the edge tiles are zero-padded (out_of_bounds: zero)" if ragged else ""
    a = [tk, tm] if op.transpose_lhs else [tm, tk]
    b = [tn, tk] if op.transpose_rhs else [tk, tn]
    return [Pick(("schedule", "in_specs", op.lhs), BlockSpec(block_shape=a, delay_release=delay, out_of_bounds=oob),
                 f"tile {tm} x {tn} x {tk} ({why})"),
            Pick(("schedule", "in_specs", op.rhs),
                 BlockSpec(block_shape=b, delay_release=delay, out_of_bounds=oob,
                           **({"collective_axes": ["cluster"]} if shared else {})),
                 "the same tile" + (", the one the cluster's CTAs share" if shared else "")),
            Pick(("schedule", "out_specs", out_name), BlockSpec(block_shape=[tm, tn]), "the same tile")]


def _stages(dims, tm: int, tn: int, tk: int, nc: int, hw: Hardware, vecs: int = 0) -> Pick:
    """The ring depth that suits the tile, as deep as SMEM allows beside the epilogue's staging buffers (and `vecs`
    bytes of its operand slots)."""
    stage = (tm + tn) * tk * dims.isz
    epi_cols = min(tn, 128 // dims.osz)        # the consumers split the tile along M: each has all tn columns
    staging = WGMMA_M * epi_cols * dims.osz * EPI_BUFFERS * nc
    want = STAGES.get(tn, 4)
    fit = stages_that_fit(hw, staging + 16 * want + vecs, stage)
    stages = max(2, min(want, fit))
    return Pick(("schedule", "pipeline", "max_concurrent_steps"), stages,
                f"{stages} stages of {stage // 1024} KiB" + ("" if stages == want else " (what fits in SMEM)"))
