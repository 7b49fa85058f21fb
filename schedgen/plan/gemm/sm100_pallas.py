"""The Pallas (Mosaic GPU) rendering of the GEMM on Blackwell (schedule.target: sm_100a): what it takes and its
numbers (`Tcgen05Plan`, plan.mma.tcgen05), computed when `pallas` is in schedule.backends.

The kernel (templates/matmul/pallas_sm_100a.py.j2, jax 0.11.2, warpgroup lowering semantics) has two warpgroups a CTA:
warpgroup 0 is split by `plgpu.warp_map` into warp 0, which issues the TMA loads of the lhs / rhs blocks into an
SMEM ring (`full` barriers), and warp 1, which issues `plgpu.tcgen05_mma` into the f32 accumulator in tensor memory
(`plgpu.TMEM`), the MMA's completion arriving on the stage's `empty` barrier (a tcgen05 commit) and, after a tile's
last k-step, `plgpu.tcgen05_commit_arrive` on the accumulator's `acc_full` barrier. Warpgroup 1, the epilogue, reads
the accumulator 32 columns at a time (`plgpu.async_load_tmem`), applies the epilogue body (its operands loaded from
GMEM in the TMEM register layout), casts, stages each chunk in SMEM and stores it by TMA; `plgpu.wait_load_tmem` before
it frees the TMEM buffer (`acc_empty`). The accumulator is double-buffered in TMEM when two tile_n-column buffers fit
its 512 columns. cta_group 2 (a 256-row tile on a [2, 1] cluster): one `tcgen05_mma(collective_axis=...)` for the
CTA pair, each CTA loading its 128 lhs rows and half of the rhs columns (`leader_tracked` TMA copies) into a collective
TMEM allocation. A 2-CTA cluster of 128-row tiles sharing an operand (collective_axes: multicast TMA copies): each
CTA's MMA commit frees the stage locally and the producer relays it to the peer through a cluster barrier, so both
CTAs' MMAs have read a stage before either refills it (three warpgroups then: see `relay`). Tiles: `plgpu.nd_loop` (persistent.loop: nd_loop) or `plgpu.dynamic_scheduling_loop` (loop:
dynamic: one grid CTA a tile, the rest claimed by cluster launch control).

Sizes: partial tiles (TMA zero-fills the copies past M, N, K and clips the stores) and dynamic sizes (the kernel body
built per call's sizes, `_kernel_body`, as in the sm_90a Pallas module), within the sm_90a Pallas kernel's edge rules
(schedule.pallas_edge_limits: Mosaic GPU's GMEM tiling, no masked plgpu.load).

NOT RUN on Blackwell hardware: lowered for sm_100a on the CPU (the MLIR holds the tcgen05 / TMEM operations) and run
in Mosaic GPU's interpreter against float64 (tests/families/matmul/test_sm100_pallas.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..common import Problems
from ..hardware import Hardware
from .schedule import pallas_edge_limits

EPI_COLS = 32                 # columns of one TMEM load (the CUDA kernel's tcgen05.ld.32x32b.x32 width)
BARRIER_BYTES = 8
SMEM_SLACK = 2048             # Mosaic GPU's own SMEM: the TMEM address slot, the CLC responses and barriers, alignment

# jax 0.11.2's Mosaic GPU interpreter asserts `collective_axis is None` in tcgen05_mma
NOT_INTERPRETABLE_PAIR = ("not_interpretable: the CTA pair's tcgen05_mma(collective_axis=...) (cta_group::2) is not "
                          "simulated by jax 0.11.2's Mosaic GPU interpreter; the lowering for sm_100a is checked on "
                          "the CPU (tests/families/matmul/test_sm100_pallas.py)")


@dataclass(frozen=True)
class Tcgen05Plan:
    """What the Pallas sm_100a template needs beyond the shared matmul plan."""
    cta_group: int            # 1: each CTA its own 128-row tcgen05_mma; 2: one for a [2, 1] cluster's CTA pair
    rows: int                 # output rows (TMEM lanes) a CTA holds: 128
    cols_b: int               # rhs columns a CTA loads (tile_n, or half of it for the pair)
    acc_stages: int           # accumulator buffers in TMEM (2: the epilogue of a tile under the MMAs of the next)
    tmem_cols: int            # TMEM columns the accumulator takes (acc_stages x tile_n)
    epi_cols: int             # columns of one TMEM load / SMEM staging chunk
    epi_chunks: int           # chunks a tile row (tile_n / epi_cols)
    epi_buffers: int
    epi_swizzle: int          # the staging chunk's swizzle (its row bytes)
    stage_bytes: int          # one ring stage a CTA: lhs then rhs block
    smem_bytes: int           # the ring, the staging buffers, the barriers (+ Mosaic GPU's own, estimated)
    dynamic: bool             # plgpu.dynamic_scheduling_loop (cluster launch control)
    relay: bool               # a 2-CTA cluster of 1-CTA MMAs sharing an operand by multicast: a stage is freed in both
                              # CTAs through a cluster barrier (`freed`) each CTA arrives on after its own MMAs' commit,
                              # so the kernel has three warpgroups (TMA, MMA, epilogue: Mosaic GPU cannot arrive on a
                              # cluster barrier from a warp_map warp)
    interpretable: str        # "" or why Mosaic GPU's interpreter cannot run it (a verify SKIP row)


def tcgen05_plan(op, sch, dims, tile, cl, pipe, bw, hw: Hardware, problems: Problems) -> Tcgen05Plan | None:
    """The Pallas sm_100a numbers (after blackwell_plan accepted the tile): its own located errors for what the
    Mosaic GPU rendering cannot do (fp8 inputs, epilogue.tile, ...), each naming the cause and what to write instead
    (one output: blackwell_plan's rule for both backends)."""
    if "pallas" not in sch.backends or bw is None:
        return None
    bad = len(problems)
    if sch.compiler_params.unsafe_no_auto_barriers:
        problems.add(("schedule", "compiler_params", "unsafe_no_auto_barriers"),
                     "the Pallas sm_100a kernel's epilogue relies on Mosaic GPU's automatic warpgroup barriers between "
                     "the SMEM staging writes and the TMA stores that read them; remove unsafe_no_auto_barriers, or "
                     "write backends: [cuda]")
    if bw.mma_kind != "f16":
        problems.add(("op", "inputs", op.lhs, "dtype"), f"the Pallas sm_100a kernel takes bf16 / f16 inputs "
                                                         f"(tcgen05_mma kind::f16); {dims.in_dtype} (kind::f8f6f4) is "
                                                         f"rendered by the CUDA kernel: write backends: [cuda]")
    # partial tiles: TMA zero-fills the copies past the edge and clips the stores, where jax 0.11.2 can view the
    # operands (the sm_90a Pallas kernel's rules)
    pallas_edge_limits(op, tile.ragged_dims, dims, problems)
    if sch.epilogue.tile is not None:
        problems.add(("schedule", "epilogue", "tile"), f"the Pallas sm_100a kernel stages its epilogue warpgroup's "
                                                       f"{bw.rows} rows x {EPI_COLS} columns (one TMEM load) a chunk; "
                                                       f"epilogue.tile is the CUDA kernel's: leave it out, or write "
                                                       f"backends: [cuda]")
    if bad < len(problems):
        return None
    osz = dims.osz
    buffers = sch.epilogue.buffers          # the staging buffers (default 2), as the CUDA kernel's a warp
    epi_cols = min(EPI_COLS, tile.tn)
    stage = bw.stage_bytes
    staging = buffers * bw.rows * epi_cols * osz
    relay = bw.cta_group == 1 and bool(cl.multicast)
    barriers = BARRIER_BYTES * ((3 if relay else 2) * pipe.stages + 2 * bw.acc_stages)
    smem = pipe.stages * stage + staging + barriers + SMEM_SLACK
    if smem > hw.smem_per_block:
        fit = max((hw.smem_per_block - staging - SMEM_SLACK) // (stage + 3 * BARRIER_BYTES), 0)
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"the Pallas sm_100a kernel needs {smem} B of SMEM for {pipe.stages} stages of {stage} B, "
                     f"{buffers} epilogue staging buffers of {bw.rows} x {epi_cols} and its barriers, over the "
                     f"{hw.name}'s {hw.smem_per_block} B a block; {fit} stages would fit")
        return None
    return Tcgen05Plan(
        cta_group=bw.cta_group, rows=bw.rows, cols_b=tile.tn // bw.cta_group, acc_stages=bw.acc_stages,
        tmem_cols=bw.acc_stages * tile.tn, epi_cols=epi_cols, epi_chunks=tile.tn // epi_cols,
        epi_buffers=buffers, epi_swizzle=_widest_swizzle(epi_cols * osz), stage_bytes=stage, smem_bytes=smem,
        dynamic=bw.dynamic, relay=relay, interpretable=NOT_INTERPRETABLE_PAIR if bw.cta_group == 2 else "")


def _widest_swizzle(nbytes: int) -> int:
    for s in (128, 64, 32):
        if nbytes % s == 0:
            return s
    return 0


def tmem_map(p) -> list[tuple[int, int, str]]:
    """The TMEM columns of the Pallas sm_100a kernel, like the SMEM map: (first column, columns, what)."""
    t, tile_n = p.mma.tcgen05, p.tiles.tile_n
    return [(i * tile_n, tile_n, f"acc[{i}]: the f32 accumulator of the CTA's {'even' if i == 0 else 'odd'} local "
                                 f"tiles ({t.rows} lanes x {tile_n} columns)" if t.acc_stages > 1 else
                                 f"acc: the f32 accumulator ({t.rows} lanes x {tile_n} columns)")
            for i in range(t.acc_stages)]


__all__ = ["Tcgen05Plan", "tcgen05_plan", "tmem_map"]
