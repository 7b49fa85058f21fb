"""Planning of the attention backward's warp-specialized wgmma CUDA kernel
(templates/attention_backward/cuda_wgmma.cu.j2), chosen by `schedule.pipeline.kind: warp_specialized`, written or
picked (defaults.py); else the mma.sync kernel of templates/attention_backward/cuda.cu.j2.

FlashAttention-3's form on Hopper: a block is a TMA producer warpgroup (one thread issuing the loads into an
mbarrier ring, two warps computing delta = rowsum(dO * O)) and `num_compute_wgs` consumer warpgroups of 64 keys of
one kv head. It streams the group's Q, dO, O (64 queries) and lse: S^T = K Q^T and dP^T = V dO^T by wgmma from SMEM,
P^T and dS^T in registers, dV += P^T dO and dK += dS^T Q by wgmma with A from registers (5 matmuls a step, none
recomputed). dS^T also goes to SMEM (stmatrix.trans: dS, K-major) for dQ_partial = dS K by wgmma from SMEM: with 2
consumers at head_dim 128 each takes 64 of the columns over all 128 keys, so a block adds each dQ element once;
otherwise each consumer takes all columns over its own 64 keys.

The partial goes into an f32 workspace (the launch record's "workspace" argument: the runtime zeroes it on the
launch's stream before each launch) by red.global.add.v4.f32 straight from the accumulators (a lane trades a pair
with its neighbour so that one REDG.E.ADD.F32x4 adds 4 consecutive floats), or, where dq_reduce_of says "bulk"
(FlashAttention-3's form; not the default until the H200 times it), staged in SMEM and added a tile at a time by a
TMA bulk reduce-add (cp.reduce.async.bulk) issued by the producer's warp 3, which also counts the block's arrival
once the adds completed; the staging buffer (32 KiB at head_dim 128) fits beside the 2-stage ring of K, V, Q, dO,
O only with one dS buffer instead of two. dq = scale * the sum is written by the last consumer to add to a 64-query tile (an arrival
counter a tile in the workspace: fence.acq_rel + atom.add.acq_rel at gpu scope, the expected count known from the
causal geometry), not by a second pass: the runtime launches one kernel a call, and a pass inside the same launch
would have to wait for the other blocks (no grid barrier without cooperative launch). The sums' order, so dq's
last bits, vary between runs. The earlier no-atomics form (separate dQ blocks recomputing S and dP: 7 matmuls) is
gone: keeping it selectable needs a new schedule field in every family's model and unread table.

`pipeline.delta: preprocess` (FlashAttention-3's preprocessing, delta_of) takes delta = rowsum(dO * O) out of the
key blocks: a stage then holds Q, dO, lse and delta (2 tiles + 512 B instead of 3 tiles + 512 B: no O re-read by
every key block, no delta loop in the producer, more stages fit: max_stages). The runtime launches one kernel a call,
so the preprocessing is the same launch's first `pre_blocks` blocks: each block takes a ticket from a counter in
the workspace as it starts, and the first tickets compute delta of their 64-query tiles (16-byte loads of dO and O)
into the workspace, zero the tiles' dQ sums and arrival counters (the runtime then zeroes only the tickets and
flags: no memset of the sums) and set each tile's flag (release); a key block's producer waits for a tile's flag
(acquire) before it loads the tile's delta by bulk copy. A key block waits only on blocks that hold earlier tickets,
which are running (they took them), so the wait always ends (no assumption on the order blocks are scheduled in).
Every rule is checked here and located."""
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
MAX_STAGES = 16          # pipeline.max_concurrent_steps's bound (the model's)
FLAG_OFFSET = 256        # after the barriers (fixed, full, empty and delta[stages]: 8 B each): a u32 a consumer
TICKET_OFFSET = FLAG_OFFSET + 64   # delta "preprocess": the block's ticket (its role), after the flags
TILES_OFFSET = 1024      # 1024-aligned for the 128-byte swizzle
LSE_BYTES = 1024         # a stage's 64 f32 lse and 64 f32 delta (512 B), padded to keep the next stage's tiles aligned
SLACK = 1024             # the dynamic SMEM base is aligned up to 1024 B in the kernel


def wants_wgmma(sch) -> bool:
    """Whether the spec selects the wgmma kernel (pipeline.kind: warp_specialized)."""
    return sch.pipeline.kind == "warp_specialized"


def consumers_of(sch) -> int:
    """pipeline.num_compute_wgs: as written, or the planner's pick (defaults._consumers: 2 where Sq and Skv are
    multiples of 128, else 1), which complete() applies before planning."""
    return sch.pipeline.num_compute_wgs


def shares_ds(nc: int, d: int) -> bool:
    """Whether the two consumers share dS through SMEM and split dQ's columns over all the block's keys (half the
    adds into the workspace, but a barrier of both consumers every step, which keeps them in lock-step), rather than
    each adding all of dQ's columns over its own 64 keys (twice the adds, no barrier between them). Head_dim 128 with
    two consumers shares (a consumer's own dQ partial would be 64 more registers)."""
    return nc == 2 and d == 128


def dq_reduce_of(nc: int, d: int) -> str:
    """How the dQ partials reach the f32 workspace: "red" (red.global.add.v4.f32 straight from the consumers'
    registers) or "bulk" (FlashAttention-3's: the consumers store the f32 partial to SMEM, one thread of the producer
    warpgroup's warp 3 adds it to the workspace by cp.reduce.async.bulk, waits for the add to complete a step later
    and counts the block's arrival). "red" everywhere until the H200 times "bulk" (python -m bench.candidates).
    The bulk form's SMEM: one dS buffer (not two) and the f32 staging buffer (64 x head_dim x 4 B, a consumer's own
    where the consumers do not share dS): at head_dim 128 with 2 consumers and 2 stages it fits (217088 B), with
    two dS buffers it would not (233472 B of 232448)."""
    del nc, d
    return "red"


def overlap_of(nc: int, d: int) -> bool:
    """Whether the consumers overlap their wgmmas with their register math as FlashAttention-3's backward does
    (records.WgmmaBackward.overlap): S^T and dP^T committed as two groups, P^T computed after wait_group 1 (dP^T still
    running), dS^T after dV's issue and wait_group 1 (dV still running), dQ's wgmma issued before the wait for dV and
    dK. The same math in the same order, only the waits moved (docs/perf-notes.md, "Attention backward, CUDA wgmma:
    static analysis"). False everywhere until the H200 times it (python -m bench.candidates)."""
    del nc, d
    return False


def desc_offsets_of(nc: int, d: int) -> bool:
    """Whether the consumers build a tile's wgmma descriptor once and add each k-step's byte offset (>> 4) to its
    start-address field (records.WgmmaBackward.desc_offsets) rather than rebuilding it from the address each k-step:
    the same descriptors, about half the instructions between the HGMMAs of S^T, dP^T and dQ. False everywhere until
    the H200 times it (python -m bench.candidates)."""
    del nc, d
    return False


def delta_of(sch) -> str:
    """pipeline.delta: "in_kernel" (the producer's warps 1-2 compute delta = rowsum(dO * O) of every step from the
    stage's O tile) or "preprocess" (FlashAttention-3's: the launch's first `pre_blocks` blocks compute it once into
    the workspace and zero the dQ sums; a stage then carries Q, dO, lse and delta, no O). The default stays
    in_kernel until the H200 times preprocess (python -m bench.candidates)."""
    return sch.pipeline.delta


def stage_bytes(tile64: int, delta: str) -> int:
    """A ring stage: Q, dO (and O when delta is computed in the kernel), 64 tiles of 64 rows, and the 64 f32 lse and
    64 f32 delta (LSE_BYTES)."""
    return (3 if delta == "in_kernel" else 2) * tile64 + LSE_BYTES


def _barriers_fit(stages: int, delta: str) -> bool:
    """The barriers before the flags: fixed, then full and empty a stage (and delta a stage, in_kernel)."""
    return 8 + (24 if delta == "in_kernel" else 16) * stages <= FLAG_OFFSET


def _smem(stages: int, dkv_stage: int, dkv_ring: int, ds_bytes: int, bulk: dict) -> int:
    ds_offset = dkv_ring + stages * dkv_stage
    if bulk:
        return ds_offset + ds_bytes + bulk["dq_bulk_ops"] * bulk["dq_bulk_bytes"] + SLACK
    return ds_offset + 2 * ds_bytes + SLACK


def max_stages_of(dkv_stage: int, dkv_ring: int, ds_bytes: int, bulk: dict, delta: str, hw: Hardware) -> int:
    """The most ring stages the SMEM (and the barrier area) of a block allows (0: not even one)."""
    fit = [n for n in range(1, MAX_STAGES + 1)
           if _smem(n, dkv_stage, dkv_ring, ds_bytes, bulk) <= hw.smem_per_block and _barriers_fit(n, delta)]
    return max(fit, default=0)


def _preprocess_fields(b: int, hq: int, sq: int, hw: Hardware) -> dict:
    """The preprocess form's record fields (delta_of "preprocess"). Workspace: a u32 ticket counter and a u32 flag a
    64-query tile (the only bytes the runtime zeroes), delta [B, Hq, Sq] f32, then the f32 dQ sums and the arrival
    counters (zeroed by the preprocessing blocks, a tile before its flag). pre_blocks: the launch's first blocks (by
    ticket), one an SM at most, each taking the tiles pre_block, pre_block + pre_blocks, ... (query tile major)."""
    tiles = b * hq * (sq // STEP)
    head = -(-4 * (1 + tiles) // 128) * 128              # delta and the sums start 128-byte lines
    return dict(delta="preprocess", pre_blocks=min(tiles, hw.sm_count), pre_tiles=tiles, delta_offset=head,
                acc_offset=head + b * hq * sq * 4, workspace_zero=head)


def _bulk_fields(nc: int, d: int, split: bool, ds_offset: int, ds_bytes: int, skv: int, rows: int) -> dict:
    """The bulk form's record fields (dq_reduce_of "bulk"): one dS buffer, then the f32 dQ staging buffer: one tile
    of 64 queries x d (the consumers' column halves side by side) where they share dS, else one a consumer."""
    tile = STEP * d * 4
    return dict(dq_reduce="bulk", ds_buffers=1, dq_offset=ds_offset + ds_bytes, dq_bulk_ops=1 if split else nc,
                dq_bulk_bytes=tile, dq_consumer_bytes=STEP * 64 * 4 if split else tile,
                dq_sync_threads=32 + 128 * nc, dq_converters=128 * nc, dq_tile_vec4=tile // 16,
                tile_arrivals=skv // rows)


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
    delta = delta_of(sch)
    dkv_stage = stage_bytes(tile64, delta)
    dkv_ring = TILES_OFFSET + 2 * fixed
    ds_offset, ds_bytes = dkv_ring + stages * dkv_stage, STEP * rows * isz
    split = shares_ds(nc, d)
    bulk = _bulk_fields(nc, d, split, ds_offset, ds_bytes, skv, rows) if dq_reduce_of(nc, d) == "bulk" else {}
    smem = _smem(stages, dkv_stage, dkv_ring, ds_bytes, bulk)
    most = max_stages_of(dkv_stage, dkv_ring, ds_bytes, bulk, delta, hw)
    if smem > hw.smem_per_block or not _barriers_fit(stages, delta):
        buffers = "one dS buffer and the f32 dQ staging buffer" if bulk else "two dS buffers"
        tiles = "Q, dO, O" if delta == "in_kernel" else "Q, dO (delta: preprocess)"
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"the warp-specialized wgmma backward needs {smem} B of SMEM with {stages} stages and "
                     f"{nc} consumer warpgroup(s) (K, V of {rows} keys, a stage of {tiles}, and {buffers}), "
                     f"over the {hw.smem_per_block} B a block may have; legal: at most {most} stages")
    if len(problems) != before:
        return None
    acc = b * hq * sq * d                                   # f32 dQ sums, then a u32 counter a 64-query tile
    counters = -(-b * hq * (sq // STEP) * 4 // 16) * 16
    pre = _preprocess_fields(b, hq, sq, hw) if delta == "preprocess" else {}
    return WgmmaBackward(
        consumers=nc, rows=rows, threads=128 * (1 + nc), producer_regs=preg, consumer_regs=creg,
        dkv_blocks=(skv // rows) * hkv * b, q_strides=_strides(op.layout, sq, hq, d),
        kv_strides=_strides(op.layout, skv, hkv, d), tile64=tile64, slab64=STEP * 128, slab_rows=rows * 128,
        fixed_bytes=fixed, flag_offset=FLAG_OFFSET, tiles_offset=TILES_OFFSET, dkv_ring=dkv_ring,
        dkv_stage=dkv_stage, ds_offset=ds_offset, ds_bytes=ds_bytes, dq_column_split=split,
        dq_slabs=1 if split else d // 64, dq_ksteps=rows // 16 if split else 4, counters_offset=acc,
        counters_bytes=counters, workspace_bytes=pre.get("acc_offset", 0) + acc * 4 + counters, smem_bytes=smem,
        max_stages=most, overlap=overlap_of(nc, d),
        desc_offsets=desc_offsets_of(nc, d), **bulk, **pre)


def _strides(layout: str, seq: int, heads: int, d: int) -> tuple[int, int, int]:
    """Element strides (batch, sequence row, head) of a [B, S, H, D] (bshd) or [B, H, S, D] (bhsd) operand (the
    mma.sync kernel's too: plan.py imports it from here)."""
    if layout == "bshd":
        return seq * heads * d, heads * d, d
    return heads * seq * d, d, seq * d


def wgmma_kernel_args(layout: str, dtype: str, shapes: list, wg: WgmmaBackward) -> tuple[KernelArg, ...]:
    """Tensor maps of q, k, v, o, do (3-D views, boxes of 64 rows x 64 columns, 128-byte swizzled); pointers of
    lse, dq, dk, dv; the zeroed f32 workspace of the dQ sums and arrival counters. delta "preprocess": no tensor map
    of o (no stage holds it), the pointers of o and do (the preprocessing blocks' 16-byte loads) after do's map, and
    only the workspace's tickets and flags zeroed by the runtime."""
    if wg.delta == "in_kernel":
        return tuple(seq_tmap(layout, dtype, i, shapes[i], STEP) for i in range(5)) + tuple(
            KernelArg("ptr", i) for i in range(5, 9)) + (KernelArg("workspace", -1, value=wg.workspace_bytes),)
    return tuple(seq_tmap(layout, dtype, i, shapes[i], STEP) for i in (0, 1, 2, 4)) + tuple(
        KernelArg("ptr", i) for i in range(3, 9)) + (
        KernelArg("workspace", -1, value=wg.workspace_bytes, zero=wg.workspace_zero),)


def with_wgmma(plan, wg: WgmmaBackward):
    """The plan with the wgmma kernel's launch (its blocks, threads, SMEM, tensor maps, workspace) in place of the
    mma.sync kernel's."""
    shapes = [o.shape for o in plan.operands]
    launch = dataclasses.replace(
        plan.launch, kernel_name=f"{plan.launch.kernel_name}_ws{wg.consumers}{'_pre' if wg.pre_blocks else ''}",
        threads=wg.threads, smem_bytes=wg.smem_bytes, num_blocks=wg.pre_blocks + wg.dkv_blocks,
        kernel_args=wgmma_kernel_args(plan.layout, plan.dtype, shapes, wg))
    return dataclasses.replace(plan, wgmma=wg, launch=launch)
