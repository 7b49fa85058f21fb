"""128 x 128 block scaling of fp8 GEMMs (op.block_scales, DeepGEMM's recipe): what the planner checks of it.

lhs's scales are f32 [M, KB] (one per row and 128-K block), rhs's f32 [NB, KB] (one per 128 x 128 block of the
[N, K] rhs), KB = cdiv(K, 128), NB = cdiv(N, 128). The CUDA kernel runs each stage's wgmmas (one 128-K block:
tile_k is 128) into a fresh f32 partial sum, then adds it to the accumulator times the block's two scales
(common/gemm.cuh.j2 consumer_k_loop_promoted), so fp8 wgmma's shorter running sum covers 128 K terms at a time.
The scales ride in the plan as epilogue-side operands (MatOperand.bcast "kblock_lhs" / "kblock_rhs") that the
epilogue itself never reads."""
from __future__ import annotations

from ...plan import dims as D
from ...plan.common import Problems
from ...plan.gemm import FP8_DTYPES, REG_OVERHEAD, MatOperand, mat_operand

SCALE_BLOCK = 128            # K (and rhs N) elements a scale covers
KINDS = {"lhs": "kblock_lhs", "rhs": "kblock_rhs"}


def block_scale_names(op) -> dict[str, str]:
    """{input name: "lhs" | "rhs"} of op.block_scales ({} without; the collective op has none)."""
    bs = getattr(op, "block_scales", None)
    return {} if bs is None else {bs.lhs: "lhs", bs.rhs: "rhs"}


def is_block_scaled(plan) -> bool:
    return any(e.bcast in KINDS.values() for e in plan.extras)


def scale_operand(plan, side: str) -> MatOperand:
    return next(e for e in plan.extras if e.bcast == KINDS[side])


def block_scale_operand(op, nm: str, shape: tuple, m, n, k, problems: Problems) -> MatOperand:
    """One block-scale input: f32 of its side's shape."""
    side = block_scale_names(op)[nm]
    kb = D.cdiv(k, SCALE_BLOCK)
    want = (m, kb) if side == "lhs" else (D.cdiv(n, SCALE_BLOCK), kb)
    path = ("op", "inputs", nm)
    if not all(isinstance(x, int) for x in (m, n, k)):
        problems.add(("op", "block_scales"), "block scales take static sizes in this release (the scale shapes are "
                                             "checked against cdiv(K, 128) when planning); declare M, N, K fixed")
    elif tuple(shape) != want:
        what = "[M, cdiv(K, 128)]" if side == "lhs" else "[cdiv(N, 128), cdiv(K, 128)]"
        problems.add((*path, "shape"), f"{side} block scales are {what} = {list(want)}, got {list(shape)}")
    if op.inputs[nm].dtype != "f32":
        problems.add((*path, "dtype"), f"block scales are f32, got {op.inputs[nm].dtype}")
    return mat_operand(nm, "extra", op.inputs[nm].dtype, shape, KINDS[side])


def check_block_scale_names(op, problems: Problems) -> None:
    """lhs and rhs scales: two inputs other than lhs and rhs, on an fp8 product."""
    bs = getattr(op, "block_scales", None)
    if bs is None:
        return
    for side in ("lhs", "rhs"):
        nm = getattr(bs, side)
        if nm not in op.inputs or nm in (op.lhs, op.rhs):
            problems.add(("op", "block_scales", side), f"block_scales.{side} names '{nm}', which is not an input "
                                                       f"other than lhs and rhs; add it to op.inputs")
    if bs.lhs == bs.rhs:
        problems.add(("op", "block_scales", "rhs"), "lhs and rhs block scales are two different inputs")
    if op.lhs in op.inputs and op.inputs[op.lhs].dtype not in FP8_DTYPES:
        problems.add(("op", "block_scales"), f"block scales scale fp8 products (f8e4m3 / f8e5m2 inputs); lhs is "
                                             f"{op.inputs[op.lhs].dtype}: remove block_scales")


def check_block_scaled_schedule(op, sch, tile, wg, creg: int, delay: int, dims, problems: Problems) -> int:
    """A stage is one 128-K scale block, each consumer's columns lie in one 128-column scale block of rhs, the
    partial sums fit beside the accumulators, CUDA only, no batch. Returns the partial-sum sets a consumer rotates
    through (pipeline.partial_sums, or the planner's pick: 2 where three accumulator tiles fit the registers and
    no stage is held past its wgmma, else 1); 1 without block scales."""
    written = sch.pipeline.partial_sums
    if getattr(op, "block_scales", None) is None:
        for field in ("partial_sums", "scale_prefetch"):     # they shape the block-scaled k-loop only
            if getattr(sch.pipeline, field) is not None:
                problems.add(("schedule", "pipeline", field),
                             f"{field} shapes how a block-scaled fp8 matmul (op.block_scales) promotes its K blocks' "
                             f"partial sums; this op has no block scales: remove it")
        return 1
    where = ("schedule", "in_specs", op.lhs, "block_shape")
    if tile.tk != SCALE_BLOCK:
        problems.add(where, f"with block_scales a stage is one {SCALE_BLOCK}-K scale block: tile_k must be "
                            f"{SCALE_BLOCK}, got {tile.tk}")
    if wg.wtn > 0 and SCALE_BLOCK % wg.wtn:       # (a tile too small for a consumer is the warpgroup phase's error)
        problems.add(("schedule", "in_specs", op.rhs, "block_shape"),
                     f"with block_scales each consumer's {wg.wtn} columns must lie in one {SCALE_BLOCK}-column scale "
                     f"block of rhs: a consumer's N ({wg.wtn}) must divide {SCALE_BLOCK} (e.g. tile_n 128 with the "
                     f"consumers split along m)")
    acc = wg.wtm * wg.wtn // 128
    budget = min(creg, 255)
    sets = written or (2 if 3 * acc + REG_OVERHEAD <= budget and delay == 0 else 1)
    if (1 + sets) * acc + REG_OVERHEAD > budget:
        where = ("schedule", "pipeline", "partial_sums" if written == 2 else "compute_registers")
        problems.add(where, f"block scaling keeps {sets} K block partial sum{'s' if sets > 1 else ''} beside the "
                            f"accumulators: {1 + sets} x {acc} f32 registers per consumer thread plus about "
                            f"{REG_OVERHEAD}, over the budget of {budget}; use a smaller tile (128 x 128 with two "
                            f"consumers){' or partial_sums: 1' if sets == 2 else ''}")
    if sets == 2 and delay != 0:
        problems.add(("schedule", "pipeline", "partial_sums"),
                     f"with partial_sums 2 a stage is released as soon as its wgmmas are waited for, one block "
                     f"behind the next block's wgmmas: delay_release must be 0 on '{op.lhs}' and '{op.rhs}' (got "
                     f"{delay}), or set partial_sums: 1")
    if D.upper(dims.batch, dims.ranges) != 1:
        problems.add(("op", "block_scales"), "block scales take an unbatched product in this release")
    if "pallas" in sch.backends:
        problems.add(("schedule", "backends"),
                     "block_scales are rendered for the CUDA backend only in this release (the Pallas matmul's "
                     "pipeline body has no per-stage promotion of a partial wgmma sum yet); set schedule.backends: "
                     "[cuda]")
    return sets


def scale_prefetch_of(op, sch) -> bool:
    """pipeline.scale_prefetch as written, else true with block scales (the H200, 2026-12-06, 4096x7168x16384:
    1134 TFLOP/s with it against 1102 without, partial_sums 2) and false without (nothing to prefetch)."""
    written = sch.pipeline.scale_prefetch
    return bool(block_scale_names(op)) if written is None else written
