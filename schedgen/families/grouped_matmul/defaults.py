"""What the grouped_matmul planner picks for the schedule fields a spec does not write.

A group's rows are known only at the call, so the tile cannot be fitted to waves of one problem as the matmul
family's is; MoE layers have large N and K (Mixtral: N = 14336, K = 4096; DeepSeek-like: N = 2048-4096, K = 7168)
and a few hundred to a few thousand tokens per expert, the regime of the matmul family's large-problem kernel:
128 x 256 x 64 tiles (128 x 128 where N has no multiple of 256: fewer wasted columns), two consumer warpgroups of
64 rows each (a group's last partial 64-row block is skipped by one of them), a ring as deep as SMEM allows beside
the staging buffers and the group tables (4 stages of 128 x 256), tiles in planar-snake bands 8 tile rows wide
inside each group (its x rows and weight columns shared in the L2). A field the spec writes is never replaced.
"""
from __future__ import annotations

from ...frontend.model import BlockSpec
from ...frontend.model import ITEMSIZE
from ...plan.defaults import Pick, written
from ...plan.hardware import Hardware
from ...plan.legality import stages_that_fit
from .plan import STATIC_SMEM_EXTRA, TABLE_WORDS_PER_GROUP

TILE_M, TILE_K = 128, 64
TILE_NS = (256, 128)
STAGES = {256: 4, 128: 6}
EPI_BUFFERS = 2


def _n_of(op) -> int | None:
    w = op.inputs.get(op.rhs)
    if w is None or len(w.shape) != (2 if op.ragged == "k" else 3):
        return None
    dim = w.shape[-1] if op.ragged == "k" else w.shape[1] if op.transpose_rhs else w.shape[2]
    return dim if isinstance(dim, int) else op.sizes.get(dim) if isinstance(op.sizes.get(dim), int) else None


def grouped_defaults(spec, hw: Hardware) -> list[Pick]:
    op = spec.op
    sch_written = lambda *path: written(spec, ("schedule", *path))  # noqa: E731
    picks = []
    if not sch_written("pipeline", "kind"):
        picks.append(Pick(("schedule", "pipeline", "kind"), "warp_specialized",
                          "the grouped kernel is warp-specialized (a TMA producer and wgmma consumer warpgroups)"))
    if not sch_written("backends"):
        picks.append(Pick(("schedule", "backends"), ["cuda"],
                          "the CUDA kernel, warp-specialized (the Pallas rendering runs one warpgroup a tile: "
                          "backends: [cuda, pallas] for jax)"))
    n = _n_of(op)
    out_name = next(iter(op.outputs), None)
    if n is None or out_name is None or op.lhs not in op.inputs:
        return picks                            # the planner reports what is wrong with the op
    tiled = [sch_written("in_specs", op.lhs), sch_written("in_specs", op.rhs), sch_written("out_specs", out_name)]
    if any(tiled):
        return picks + _rest(spec, None, hw, sch_written)
    tn = next((t for t in TILE_NS if n % t == 0), TILE_NS[-1] if n < TILE_NS[0] else TILE_NS[0])
    if sch_written("backends") and "pallas" in spec.schedule.backends:
        tn = TILE_NS[-1]        # the Pallas kernel's one warpgroup holds a 128 x 128 tile's accumulators
    why = (f"tile {TILE_M} x {tn} x {TILE_K}: the matmul family's large-problem tile; N = {n}"
           + (f" is a multiple of {tn}" if n % tn == 0 else f" is not a multiple of {tn}: the edge is zero-padded"))
    if op.ragged == "k":         # x [T, M] and w [T, N]: blocks of tile_k rows; the output a group's [1, tm, tn]
        picks += [Pick(("schedule", "in_specs", op.lhs), BlockSpec(block_shape=[TILE_K, TILE_M], delay_release=1),
                       why + " (ragged: k: tile_k of the group's rows x tile_m columns)"),
                  Pick(("schedule", "in_specs", op.rhs), BlockSpec(block_shape=[TILE_K, tn], delay_release=1),
                       "the same tile: tile_k of the group's rows"),
                  Pick(("schedule", "out_specs", out_name), BlockSpec(block_shape=[1, TILE_M, tn]),
                       "the same tile of the group's output block")]
        return picks + _rest(spec, tn, hw, sch_written)
    picks += [Pick(("schedule", "in_specs", op.lhs), BlockSpec(block_shape=[TILE_M, TILE_K], delay_release=1), why),
              Pick(("schedule", "in_specs", op.rhs),
                   BlockSpec(block_shape=[tn, TILE_K] if op.transpose_rhs else [TILE_K, tn], delay_release=1),
                   "the same tile: one group's weight block"),
              Pick(("schedule", "out_specs", out_name), BlockSpec(block_shape=[TILE_M, tn]), "the same tile")]
    return picks + _rest(spec, tn, hw, sch_written)


def _rest(spec, tn: int | None, hw: Hardware, sch_written) -> list[Pick]:
    op = spec.op
    picks = []
    if not sch_written("pipeline", "num_compute_wgs"):
        picks.append(Pick(("schedule", "pipeline", "num_compute_wgs"), 2,
                          f"two consumers of {TILE_M // 2} rows (each thread's f32 accumulators fit its registers)"))
    if tn is not None and not sch_written("pipeline", "max_concurrent_steps"):
        isz = ITEMSIZE[op.inputs[op.lhs].dtype]
        osz = ITEMSIZE[next(iter(op.outputs.values())).dtype]
        stage = (TILE_M + tn) * TILE_K * isz
        staging = 64 * min(tn, 128 // osz) * osz * EPI_BUFFERS * 2
        want = STAGES.get(tn, 4)
        fit = stages_that_fit(hw, staging + 16 * want + 4 * (TABLE_WORDS_PER_GROUP * op.groups + 1) + STATIC_SMEM_EXTRA,
                              stage)
        stages = max(2, min(want, fit))
        picks.append(Pick(("schedule", "pipeline", "max_concurrent_steps"), stages,
                          f"{stages} stages of {stage // 1024} KiB" + ("" if stages == want else " (what fits in SMEM)")))
    if not sch_written("persistent", "tile_order") and not sch_written("persistent", "tile_width"):
        picks.append(Pick(("schedule", "persistent", "tile_order"), "planar_snake",
                          "inside each group, bands of tiles that share x rows and weight columns in the L2"))
        picks.append(Pick(("schedule", "persistent", "tile_width"), 8, "the matmul family's band width"))
    return picks
