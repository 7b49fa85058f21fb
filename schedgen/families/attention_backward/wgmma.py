"""Planning of the attention backward's warp-specialized wgmma CUDA kernel (templates/cuda_wgmma.cu.j2), chosen by
`schedule.pipeline.kind: warp_specialized` (the default stays the mma.sync kernel of templates/cuda.cu.j2).

FlashAttention-3's split on Hopper: a block is a TMA producer warpgroup (one thread issuing the loads into an
mbarrier ring) and `num_compute_wgs` consumer warpgroups of 64 rows. dK/dV blocks own 64 x consumers keys of one kv
head and stream the group's Q, dO, O (64 queries) and lse: S^T = K Q^T and dP^T = V dO^T by wgmma from SMEM, P^T and
dS^T in registers, dV += P^T dO and dK += dS^T Q by wgmma with A from registers. dQ blocks own 64 x consumers
queries and stream K, V (64 keys): S, dP from SMEM, dQ += dS K (A from registers). One launch, no atomics (the
runtime gives a kernel no f32 workspace to accumulate dQ into). Every rule is checked here and located."""
from __future__ import annotations

import dataclasses

from ...frontend.model import ITEMSIZE
from ...plan.common import KernelArg, Problems
from ...plan.hardware import Hardware
from ...plan.legality import check_setmaxnreg, max_consumer_regs, register_budget_problem
from ..attention.plan import seq_tmap
from .records import ROWS, WgmmaBackward

STEP = 64                # the rows of a streamed step (the N of S^T / S, the K of the register-A wgmmas)
PRODUCER_REGS = 24       # the producer warpgroup's setmaxnreg budget (the TMA thread; the delta warps' loads and sums)
MAX_CONSUMERS = 2
DELTA_OFFSET = 256       # after the barriers (fixed, full, empty and delta[stages]: 8 B each)
TILES_OFFSET = 1024      # after the dQ role's delta (consumers x 64 f32), 1024-aligned for the 128-byte swizzle
LSE_BYTES = 1024         # a stage's 64 f32 lse and 64 f32 delta, padded to keep the next stage's tiles aligned
SLACK = 1024             # the dynamic SMEM base is aligned up to 1024 B in the kernel


def wants_wgmma(sch) -> bool:
    """Whether the spec selects the wgmma kernel (pipeline.kind: warp_specialized)."""
    return sch.pipeline.kind == "warp_specialized"


def consumers_of(sch) -> int:
    """pipeline.num_compute_wgs as written, else 2 (128 keys a dK/dV block, as FlashAttention-3's)."""
    pipe = sch.pipeline
    return pipe.num_compute_wgs if "num_compute_wgs" in pipe.model_fields_set else MAX_CONSUMERS


def plan_wgmma(op, sch, names, dims, blocks: tuple[int, int], stages: int, ranges: dict, hw: Hardware,
               problems: Problems) -> WgmmaBackward | None:
    """The wgmma kernel's record, or None with located problems."""
    b, sq, hq, skv, hkv, d, dtype = dims
    before = len(problems)
    if ranges:
        problems.add(("op", "sizes", next(iter(ranges))), "the warp-specialized wgmma backward is specialized to "
                                                          "fixed sizes; give fixed sizes or leave pipeline.kind out")
        return None
    if d not in (64, 128):
        problems.add(("op", "inputs", names[0], "shape", 3),
                     f"the warp-specialized wgmma backward takes head_dim 64 or 128 (a consumer thread holds dK and "
                     f"dV of 64 x {d} f32 each: {d} registers); got {d}; leave pipeline.kind out (backends: [pallas])")
    for n, block, what in ((names[0], blocks[0], "queries"), (names[1], blocks[1], "keys")):
        if block != STEP:
            problems.add(("schedule", "in_specs", n, "block_shape", 0),
                         f"the warp-specialized wgmma backward streams {STEP} {what} a step (the N of its score "
                         f"wgmmas, m64n64k16); got {block}; legal: {STEP}")
    nc = consumers_of(sch)
    if nc > MAX_CONSUMERS:
        problems.add(("schedule", "pipeline", "num_compute_wgs"),
                     f"the warp-specialized wgmma backward takes 1 or 2 consumer warpgroups (64 rows each), got {nc}")
        return None
    rows = ROWS * nc
    axis = 1 if op.layout == "bshd" else 2
    for n, seq, what in ((names[0], sq, "Sq"), (names[1], skv, "Skv")):
        if seq % rows:
            problems.add(("op", "inputs", n, "shape", axis),
                         f"{what} = {seq} must be a multiple of {rows} (the rows of a block of {nc} consumer "
                         f"warpgroup(s)): the wgmma backward takes no ragged blocks; "
                         f"{'use num_compute_wgs: 1' if nc > 1 and seq % ROWS == 0 else 'pad the sequence'}")
    pipe = sch.pipeline
    budget = hw.regs_per_block(128 * (1 + nc))
    preg = pipe.memory_registers or PRODUCER_REGS
    creg = pipe.compute_registers or min(256, max_consumer_regs(budget, preg, nc))
    check_setmaxnreg({"memory_registers": preg, "compute_registers": creg}, problems, suggest=True)
    if (message := register_budget_problem(preg, nc, creg, hw)) is not None:
        problems.add(("schedule", "pipeline", "compute_registers"), message)
    isz = ITEMSIZE[dtype]
    tile64, fixed = STEP * d * isz, rows * d * isz
    dkv_stage, dq_stage = 3 * tile64 + LSE_BYTES, 2 * tile64
    dkv_ring, dq_ring = TILES_OFFSET + 2 * fixed, TILES_OFFSET + 3 * fixed
    smem = max(dkv_ring + stages * dkv_stage, dq_ring + stages * dq_stage) + SLACK
    if smem > hw.smem_per_block or 8 + 24 * stages > DELTA_OFFSET:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"the warp-specialized wgmma backward needs {smem} B of SMEM with {stages} stages and "
                     f"{nc} consumer warpgroup(s), over the {hw.smem_per_block} B a block may have; use fewer stages")
    if len(problems) != before:
        return None
    return WgmmaBackward(
        consumers=nc, rows=rows, threads=128 * (1 + nc), producer_regs=preg, consumer_regs=creg,
        dkv_blocks=(skv // rows) * hkv * b, dq_blocks=(sq // rows) * hq * b,
        q_strides=_strides(op.layout, sq, hq, d), kv_strides=_strides(op.layout, skv, hkv, d), tile64=tile64,
        slab64=STEP * 128, slab_rows=rows * 128, fixed_bytes=fixed, delta_offset=DELTA_OFFSET,
        tiles_offset=TILES_OFFSET, dkv_ring=dkv_ring, dkv_stage=dkv_stage, dq_ring=dq_ring, dq_stage=dq_stage,
        smem_bytes=smem)


def _strides(layout: str, seq: int, heads: int, d: int) -> tuple[int, int, int]:
    from .plan import _strides as strides      # the mma.sync kernel's (one definition)
    return strides(layout, seq, heads, d)


def wgmma_kernel_args(layout: str, dtype: str, shapes: list) -> tuple[KernelArg, ...]:
    """Tensor maps of q, k, v, o, do (3-D views, boxes of 64 rows x 64 columns, 128-byte swizzled); pointers of
    lse, dq, dk, dv."""
    return tuple(seq_tmap(layout, dtype, i, shapes[i], STEP) for i in range(5)) + tuple(
        KernelArg("ptr", i) for i in range(5, 9))


def with_wgmma(plan, wg: WgmmaBackward):
    """The plan with the wgmma kernel's launch (its blocks, threads, SMEM, tensor maps) in place of the mma.sync
    kernel's."""
    shapes = [o.shape for o in plan.operands]
    return dataclasses.replace(
        plan, wgmma=wg, kernel_name=f"{plan.kernel_name}_ws{wg.consumers}", threads=wg.threads,
        smem_bytes=wg.smem_bytes, num_blocks=wg.dkv_blocks + wg.dq_blocks,
        kernel_args=wgmma_kernel_args(plan.layout, plan.dtype, shapes))
