"""What the rowwise planner picks for the schedule fields a spec does not write.

The row is split so that each thread holds about TARGET_CHUNKS 16-byte vectors of it (enough loads in flight to
cover HBM latency, few enough registers for several CTAs an SM): warps_per_row = N / (32 x vec x 4), a power of
two up to 16. Blocks have 8 warps (two warpgroups; 16 when a row needs them), rows_per_block = warps /
warps_per_row, and a row group keeps two rows in flight (max_concurrent_steps: 2) while that costs at most
TWO_STEP_REGS registers. A block that does not divide M gets out_of_bounds: zero. A row kept for a later pass that
is too long for one CTA's registers at that blocking gets a cluster (schedule.cluster [C, 1, 1]: C CTAs split the
row, reduced through DSMEM) and backends: [cuda]. When the CUDA kernel's prefetch ring (two SMEM slots of a piece
of rows, pipeline.kind emit_pipeline) would not fit a block's SMEM, pipeline.kind: none is picked (no prefetch).
A written field is never replaced.
"""
from __future__ import annotations

from ...frontend.model import ITEMSIZE, BlockSpec
from ...plan import dims as D
from ...plan.common import Problems, dynamic_ranges
from ...plan.defaults import Pick, written
from ...plan.hardware import Hardware
from .plan import (
    CLUSTER_SIZES,
    MAX_ROW_REGS,
    _kind,
    _parse_body,
    _registers,
    _shapes,
    kept_row_registers,
    ring_layout,
    streaming,
)

# approx_math where every output is 16-bit: ex2.approx, rsqrt.approx and a reciprocal a row err by about 1e-6
# relative, far below a bf16 / f16 output's rounding (2^-9 / 2^-12); and where the f32 outputs are per-row values
# (cross-entropy's loss, a saved mean or log-sum-exp) reduced from 16-bit rows: 1e-6 relative is far below what the
# rows' own rounding carries (torch.compile's Triton kernels take the same fast exp2). A full row written in f32, or
# f32 rows in with an f32 result, keep the IEEE-accurate functions unless the spec writes approx_math
SIXTEEN_BIT = ("bf16", "f16")
APPROX_WHY = ("the fast exp2 / log2 / rsqrt and a reciprocal a row: their error (about 1e-6 relative) is far below "
              "the 16-bit outputs' rounding")
APPROX_WHY_ROWS = ("the fast exp2 / log2 / rsqrt and a reciprocal a row: their error (about 1e-6 relative) is far "
                   "below the rounding the 16-bit rows in already carry (the f32 outputs are per-row values)")
TARGET_CHUNKS = 4
TWO_STEP_REGS = 32
CLUSTER_ROW_REGS = 32   # a picked cluster aims at this many registers of kept row a thread (the planner allows 64,
                        # but a 512-thread block keeping 64 spills in NVRTC's hands: tests/families/rowwise), and at
CLUSTER_ROW_REGS_COL = 16   # this many when vectors along the row (layernorm's w, b) are loaded in every sweep too


def pick_blocking(n: int, row_dtypes: list[str], kept_dtypes: list[str]) -> tuple[int, int, int, int]:
    """(num_warpgroups, rows_per_block, steps, vec) for rows of `n` elements."""
    vec = 16 // min(ITEMSIZE[d] for d in row_dtypes)
    if n % vec:
        vec = 1
    per_chunk = sum(max(1, vec * ITEMSIZE[d] // 4) for d in kept_dtypes) or 1
    warps_per_row = 1
    while warps_per_row < 16 and -(-n // (32 * warps_per_row * vec)) > TARGET_CHUNKS:
        warps_per_row *= 2
    wgs = 4 if warps_per_row == 16 else 2
    rows = 4 * wgs // warps_per_row
    chunks = -(-n // (32 * warps_per_row * vec))
    steps = 2 if 2 * chunks * per_chunk <= TWO_STEP_REGS else 1
    if chunks * per_chunk > MAX_ROW_REGS:
        steps = 1
    return wgs, rows, steps, vec


def pick_cluster(n: int, vec: int, warps_per_row: int, steps: int, kept_dtypes: list[str],
                 col_inputs: bool = False) -> int:
    """1 when a kept row of `n` fits one CTA's registers with this blocking; else the fewest CTAs (2, 4, 8, 16)
    whose equal slices take at most CLUSTER_ROW_REGS registers a thread (CLUSTER_ROW_REGS_COL with `col_inputs`;
    failing that, the next limit up to the planner's MAX_ROW_REGS); 1 when none does (the planner's located error
    then says so)."""
    def regs(c):
        return kept_row_registers(n // c, vec, warps_per_row, steps, kept_dtypes) if n % (c * vec) == 0 else 1 << 30
    if regs(1) <= MAX_ROW_REGS:
        return 1
    for limit in ((CLUSTER_ROW_REGS_COL,) if col_inputs else ()) + (CLUSTER_ROW_REGS, MAX_ROW_REGS):
        for c in CLUSTER_SIZES:
            if regs(c) <= limit:
                return c
    return 1


def _cluster_picks(spec, kinds, n, vec, warps_per_row, steps, kept) -> tuple[int, list[Pick]]:
    """schedule.cluster when a kept row is too long for one CTA at the blocking (written or picked) and the spec
    does not write it, and backends: [cuda] for a clustered spec that does not write its backends (the Pallas kernel
    has no cluster)."""
    op, sch = spec.op, spec.schedule
    if written(spec, ("schedule", "cluster")):
        size = sch.cluster[0] if all(c == 1 for c in sch.cluster[1:]) else 1
        picks = []
    else:
        body = _parse_body(op, kinds, Problems())
        cols = any(kinds[nm] == "col" for nm in op.inputs)
        reduced = any(kinds.get(nm) == "scalar" for nm in op.outputs)    # its blocks' sums: no cluster
        size = 1 if body is None or reduced or streaming(op, kinds, body) else \
            pick_cluster(n, vec, warps_per_row, steps, kept, cols)
        picks = [] if size == 1 else [Pick(("schedule", "cluster"), [size, 1, 1],
                                           f"a row of {n} is too long for one CTA's registers: {size} CTAs hold "
                                           f"{n // size} columns each and combine their partials through DSMEM")]
    if size > 1 and not written(spec, ("schedule", "backends")) and "pallas" in sch.backends:
        picks.append(Pick(("schedule", "backends"), ["cuda"], "the Pallas kernel does not split a row across a "
                                                             "cluster (CUDA only)"))
    return size, picks


def ring_bytes(spec, kinds, n: int, rows: int, steps: int, wgs: int, csize: int) -> int:
    """SMEM of the CUDA kernel at this blocking with its prefetch ring (0 when it does not prefetch)."""
    op, sch = spec.op, spec.schedule
    body = _parse_body(op, kinds, Problems())
    if body is None:
        return 0
    wpr = max(1, 4 * wgs // rows)
    vec, chunks, _, _ = _registers(op, kinds, n, rows, steps, wpr, sch, streaming(op, kinds, body), Problems(),
                                   csize)
    prefetch, offset, slot = ring_layout(op, sch, kinds, body, vec, chunks, rows, steps, wpr, csize, 128 * wgs)
    return offset + 2 * slot if prefetch else 0


def _ring_picks(spec, kinds, n: int, rows: int, steps: int, wgs: int, csize: int, picks: list[Pick],
                hw: Hardware) -> list[Pick]:
    """`picks` with pipeline.kind: none (and no depth) when the prefetch ring of the blocking does not fit a
    block's SMEM and the spec writes neither the kind nor the depth (a written one gets the planner's located
    error)."""
    path = ("schedule", "pipeline", "max_concurrent_steps")
    if ring_bytes(spec, kinds, n, rows, steps, wgs, csize) <= hw.smem_per_block or \
            written(spec, ("schedule", "pipeline", "kind")) or written(spec, path):
        return picks
    return [k for k in picks if k.path != path] + [
        Pick(("schedule", "pipeline", "kind"), "none", "no prefetch: two SMEM slots of a piece of rows would not fit "
                                                       "a block's SMEM")]


def rowwise_defaults(spec, hw: Hardware) -> list[Pick]:
    op, sch = spec.op, spec.schedule
    kinds, m, n = _shapes(op, Problems())
    if kinds is None or n is None or any(k is None for k in kinds.values()):
        return []                               # the planner reports a bad op
    if any(o.dtype not in ITEMSIZE for o in (op.inputs | op.outputs).values()):
        return []
    rows_dt = [o.dtype for nm, o in (op.inputs | op.outputs).items() if kinds[nm] in ("row", "col")]
    kept = [o.dtype for nm, o in op.inputs.items() if kinds[nm] == "row"]
    wgs, rows, steps, vec = pick_blocking(n, rows_dt or ["f32"], kept)
    picks = []
    if written(spec, ("schedule", "num_warpgroups")):
        wgs = sch.num_warpgroups
        rows = max(1, min(rows, 4 * wgs))
    else:
        picks.append(Pick(("schedule", "num_warpgroups"), wgs, f"{128 * wgs} threads: {rows} row(s) a block, "
                                                               f"{4 * wgs // rows} warp(s) a row"))
    if not written(spec, ("schedule", "pipeline", "max_concurrent_steps")) and sch.pipeline.kind != "none":
        picks.append(Pick(("schedule", "pipeline", "max_concurrent_steps"), steps,
                          f"{steps} row(s) in flight per row group" +
                          (" (two would take too many registers)" if steps == 1 else "")))
    else:
        steps = 1 if sch.pipeline.kind == "none" else sch.pipeline.max_concurrent_steps
    out0 = next(iter(op.outputs))
    given = sch.out_specs.get(out0)
    block_rows = given.block_shape[0] if given is not None and given.block_shape else rows
    csize, more = _cluster_picks(spec, kinds, n, vec, max(1, 4 * wgs // max(1, block_rows)), steps, kept)
    picks = _ring_picks(spec, kinds, n, max(1, block_rows), steps, wgs, csize, picks + more, hw)
    if not sch.in_specs and not sch.out_specs and not written(spec, ("schedule", "out_specs")):
        ranges = dynamic_ranges(op.sizes)
        ragged = not D.divisible(m, rows * steps, ranges)
        shape = op.outputs[out0].shape
        block = [rows, n] if kinds[out0] in ("row", "partial") else [rows] + ([1] if len(shape) == 2 else [])
        picks.append(Pick(("schedule", "out_specs", out0), BlockSpec(block_shape=block,
                                                                   out_of_bounds="zero" if ragged else "reject"),
                          f"{rows} row(s) a block (16-byte vectors of {vec} elements, {vec and -(-(n // csize) // (32 * (4 * wgs // rows) * vec))} a thread a row"
                          + (f" of a CTA's {n // csize} columns" if csize > 1 else "") + ")"
                          + ("; the last block is partial (out_of_bounds: zero)" if ragged else "")))
    why = approx_reason(op, kinds)
    if why and not written(spec, ("schedule", "compiler_params", "approx_math")):
        picks.append(Pick(("schedule", "compiler_params", "approx_math"), True, why))
    return picks


def approx_reason(op, kinds) -> str | None:
    """Why approx_math is the default for this op, or None where the IEEE-accurate functions are."""
    if all(o.dtype in SIXTEEN_BIT for o in op.outputs.values()):
        return APPROX_WHY
    rows_in = [o.dtype for nm, o in op.inputs.items() if kinds[nm] == "row"]
    full_rows_out = [o.dtype for nm, o in op.outputs.items() if kinds[nm] == "row"]
    if rows_in and all(d in SIXTEEN_BIT for d in rows_in + full_rows_out):
        return APPROX_WHY_ROWS
    return None


__all__ = ["rowwise_defaults", "pick_blocking", "pick_cluster", "_kind"]
