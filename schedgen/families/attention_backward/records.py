"""What the attention_backward planner returns: the plan (every number the templates print) and its FLOP count."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

from ...plan import dims as X
from ...plan.dims import DimLike
from ...plan.launch import KernelLaunch, inline_field
from ..attention.records import AttnOperand, score_pairs, causal_offset_of

ROWS = 64                      # rows a warpgroup owns: one wgmma M block (the dK/dV kernel's keys, the dQ one's queries)
DTYPES = ("bf16", "f16")
BLOCKS = (64, 128, 192, 256)   # block_q / block_kv: the N of S^T = K Q^T (S = Q K^T) and the K of dV += P^T dO
                               # (dQ += dS K): Mosaic GPU's wgmma takes K in 64-element groups of the 128-byte swizzle
REG_OVERHEAD = 32              # registers a thread needs beside its accumulators (addresses, loop state, lse, delta)
REG_LIMIT = 255
CUDA_THREADS = 128             # the CUDA kernel's block: 4 warps, 16 rows each (mma.sync m16n8k16)
CUDA_REG_OVERHEAD = 63         # registers a CUDA thread needs beside its f32 fragments (addresses, loop state, the
                               # ldmatrix'd operands): ptxas (NVRTC 13, 2026-12-05) fits 192 fragment registers a thread
                               # with no spill, and spilled at 224 (dQ at head_dim 128 with block_kv 128)
MODULE_NAMES = frozenset({"make", "run_into", "sizes_of", "delta_of"})
# FLOPs of the backward: 5 matmul-equivalents of 2 D per unmasked (query, key) pair (S recomputed, dP = dO V^T,
# dV += P^T dO, dQ += dS K, dK += dS^T Q): 2.5 x the forward's 4 D (FlashAttention's and torch's convention)
FLOPS_PER_PAIR_D = 10


def backward_flops(batch: int, heads_q: int, seq_q: int, seq_kv: int, head_dim: int, alignment: str | None) -> int:
    """10 D flops per unmasked (query, key) pair, per head and batch (2.5 x attention_flops: causal halves both)."""
    pairs = score_pairs(seq_q, seq_kv, causal_offset_of(alignment, seq_q, seq_kv))
    return FLOPS_PER_PAIR_D * head_dim * pairs * heads_q * batch


@dataclass(frozen=True)
class CudaBackward:
    """The CUDA C++ kernel's numbers (one launch: dK/dV blocks first, then dQ blocks; mma.sync m16n8k16).
    Element strides of the [B, S, H, D] (or [B, H, S, D]) operands, SMEM offsets in bytes from the aligned base."""
    dkv_blocks: int                # (Skv / 64) x Hkv x B: blocks [0, dkv_blocks) compute dK, dV of 64 keys
    dq_blocks: int                 # (Sq / 64) x Hq x B: the rest compute dQ of 64 queries
    q_strides: tuple[int, int, int]    # q, o, do, dq: elements between batches, sequence rows, heads
    kv_strides: tuple[int, int, int]   # k, v, dk, dv
    tile_bytes: int                # 64 rows x D (the K, V of a dK/dV block; the Q, dO, O of a dQ block)
    q_step_bytes: int              # block_q rows x D (a streamed Q, dO or O of a dK/dV step)
    kv_step_bytes: int             # block_kv rows x D (a streamed K or V of a dQ step)
    dkv_stage_bytes: int           # Q, dO, O and block_q f32 lse
    dq_stage_bytes: int            # K, V
    dkv_ring: int                  # offset of the dK/dV ring (after K, V)
    dkv_delta: int                 # offset of the dK/dV step's delta (block_q f32)
    dq_ring: int                   # offset of the dQ ring (after Q, dO, O)
    dq_delta: int                  # offset of the dQ block's delta (64 f32)
    dkv_regs: int                  # f32 registers a thread of a dK/dV block needs (estimate, checked)
    dq_regs: int
    smem_bytes: int                # the larger role's, plus the alignment slack


@dataclass(frozen=True)
class WgmmaBackward:
    """The warp-specialized wgmma CUDA kernel's numbers (schedule.pipeline.kind: warp_specialized; wgmma.py plans
    it): one launch of blocks of a TMA producer warpgroup and `consumers` consumer warpgroups of 64 keys, each block
    `rows` keys of one kv head; the streamed steps are 64 queries. dQ is summed in an f32 workspace (B x Hq x Sq x D,
    then one u32 arrival counter a 64-query tile). SMEM offsets in bytes from the 1024-aligned base: barriers at 0,
    the consumers' flags at flag_offset, the fixed tiles (K, V) at tiles_offset, the ring, the two dS buffers (one
    in the bulk form, then its f32 dQ staging buffer at dq_offset)."""
    consumers: int                 # consumer warpgroups (pipeline.num_compute_wgs)
    rows: int                      # 64 x consumers: the keys a block owns
    threads: int                   # 128 x (1 + consumers)
    producer_regs: int             # setmaxnreg budgets (pipeline.memory_registers / compute_registers)
    consumer_regs: int
    dkv_blocks: int                # (Skv / rows) x Hkv x B: the grid
    q_strides: tuple[int, int, int]    # elements between batches, sequence rows, heads of q, o, do, dq
    kv_strides: tuple[int, int, int]   # of k, v, dk, dv
    tile64: int                    # 64 rows x head_dim bytes: a streamed tile
    slab64: int                    # a 64-row tile's 64-column slab (64 x 128 B)
    slab_rows: int                 # a fixed tile's slab (rows x 128 B)
    fixed_bytes: int               # a fixed tile: rows x head_dim (K, V)
    flag_offset: int
    tiles_offset: int
    dkv_ring: int                  # the ring's offset; a stage: Q, dO, O (64 rows) and 64 f32 lse, 64 f32 delta
    dkv_stage: int
    ds_offset: int                 # dS of a step (64 queries x rows keys), double-buffered
    ds_bytes: int
    dq_column_split: bool          # 2 consumers at head_dim 128: each sums 64 columns over all keys (else: all
    dq_slabs: int                  # columns over its own 64 keys); 64-column accumulators a consumer holds
    dq_ksteps: int                 # k-steps of 16 keys in a consumer's dS K
    counters_offset: int           # f32 elements before the arrival counters in the workspace
    counters_bytes: int
    workspace_bytes: int           # the launch's zeroed workspace (the "workspace" kernel argument)
    smem_bytes: int                # plus the alignment slack
    max_stages: int                # the most ring stages this block's SMEM and barrier area allow (stages: as written)
    # How the dQ partials reach the workspace (wgmma.dq_reduce_of): "red" (red.global.add.v4.f32 from the consumers'
    # registers, row-major sums) or "bulk" (FlashAttention-3's: each consumer stores its f32 partial to an SMEM
    # buffer in accumulator-fragment order, one thread of the producer's warp 3 adds it to the workspace tile by
    # cp.reduce.async.bulk and counts the block's one arrival; the workspace tile in that order). The fields below
    # are the bulk form's (left out of the plan's JSON at their defaults: the red form's).
    dq_reduce: str = field(default="red", metadata={"omit_default": True})
    ds_buffers: int = field(default=2, metadata={"omit_default": True})     # dS buffers (bulk: 1, freed by a barrier)
    dq_offset: int = field(default=0, metadata={"omit_default": True})      # SMEM: the f32 dQ staging buffer
    dq_bulk_ops: int = field(default=0, metadata={"omit_default": True})    # bulk reduce-adds a step (a tile each)
    dq_bulk_bytes: int = field(default=0, metadata={"omit_default": True})  # bytes of each: 64 x head_dim f32
    dq_consumer_bytes: int = field(default=0, metadata={"omit_default": True})  # between consumers' parts of it
    dq_sync_threads: int = field(default=0, metadata={"omit_default": True})    # the consumers and warp 3
    dq_converters: int = field(default=0, metadata={"omit_default": True})      # threads converting a tile to dq
    dq_tile_vec4: int = field(default=0, metadata={"omit_default": True})       # float4s of a workspace tile
    tile_arrivals: int = field(default=0, metadata={"omit_default": True})      # non-causal: a tile's arrivals
    # Where delta = rowsum(dO * O) comes from (wgmma.delta_of: pipeline.delta): "in_kernel" (the producer's warps
    # 1-2, from each stage's O tile) or "preprocess" (the launch's first pre_blocks blocks, by ticket, compute it
    # into the workspace and zero the dQ sums and counters, a 64-query tile at a time, each tile's flag set after;
    # a stage holds Q, dO, lse, delta). The fields below are the preprocess form's (left out at their defaults).
    delta: str = field(default="in_kernel", metadata={"omit_default": True})
    pre_blocks: int = field(default=0, metadata={"omit_default": True})      # blocks [0, pre_blocks) by ticket
    pre_tiles: int = field(default=0, metadata={"omit_default": True})       # B x Hq x Sq / 64: their tiles
    delta_offset: int = field(default=0, metadata={"omit_default": True})    # workspace bytes: delta [B, Hq, Sq] f32
    acc_offset: int = field(default=0, metadata={"omit_default": True})      # workspace bytes: the dQ sums
    workspace_zero: int = field(default=0, metadata={"omit_default": True})  # bytes the runtime zeroes: tickets, flags
    # The consumers' wgmma waits (wgmma.overlap_of): False, each step's S^T and dP^T one commit group waited for
    # together before P^T, dV and dK waited for before dQ's wgmma is issued; True, FlashAttention-3's overlap: S^T and
    # dP^T two groups (wait_group 1 before P^T: dP^T runs while P^T is computed; wait_group 1 after dV's issue: dV runs
    # while dS^T is computed) and dQ's wgmma issued behind dK's before the wait (wait_group 1: dV, dK done, the stage
    # released, dQ still running; then wait_group 0). Left out of the plan's JSON at its default.
    overlap: bool = field(default=False, metadata={"omit_default": True})
    # How the consumers build their wgmma descriptors (wgmma.desc_offsets_of): False, each k-step's from its SMEM
    # address (sg_desc: mask, shift, or: ~13 instructions a HGMMA); True, a tile's once, each k-step's offset added to
    # its start-address field (the low word; the 14-bit field cannot carry: SMEM < 256 KiB): the same bits, ~7 a HGMMA.
    desc_offsets: bool = field(default=False, metadata={"omit_default": True})


@dataclass(frozen=True)
class AttentionBackwardPlan:
    launch: KernelLaunch = inline_field()   # the launch header (plan/launch.py; plan.json: its fields here)
    sizes: dict
    constants: dict
    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_kv: int
    head_dim: int
    layout: str
    causal: bool
    causal_alignment: str | None   # None, "top_left" (query i sees keys j <= i) or "bottom_right" (j <= i + Skv - Sq)
    causal_offset: int             # query i sees keys j <= i + causal_offset (0 without a mask: unread then)
    scale: float
    scale_log2: float              # scale * log2(e): P = exp2(S scale_log2 - lse log2(e))
    dtype: str
    inputs: tuple[AttnOperand, ...]    # q, k, v, o, do, lse (roles)
    outputs: tuple[AttnOperand, ...]   # dq, dk, dv
    block_q: int                   # queries a step of the dK/dV kernel (the N of S^T = K Q^T)
    block_kv: int                  # keys a step of the dQ kernel (the N of S = Q K^T)
    stages: int                    # the SMEM ring of each kernel's streamed operands
    q_blocks: int                  # Sq / block_q (dK/dV steps per q head)
    kv_blocks: int                 # Skv / block_kv (dQ steps)
    q_rows_blocks: int             # Sq / 64: the dQ kernel's blocks per head
    kv_rows_blocks: int            # Skv / 64: the dK/dV kernel's blocks per kv head
    d_split: int                   # column parts of head_dim a dK/dV block's dK, dV hold one of (head_dim 256: 2)
    dkv_regs: int                  # f32 registers a thread of the dK/dV kernel needs (estimate, checked)
    dq_regs: int
    dkv_smem_bytes: int
    dq_smem_bytes: int
    approx_math: bool
    flops: int
    bytes_moved: int
    cuda: CudaBackward | None = None   # the CUDA kernel's numbers (None without the cuda backend)
    wgmma: WgmmaBackward | None = None  # the warp-specialized wgmma kernel's instead (pipeline.kind: warp_specialized)
    fused: bool = False              # pipeline.kind warp_specialized: the one-kernel Pallas form (fused.py)
    consumers: int = 1               # its consumer warpgroups a block (64 keys each)
    consumer_regs: int = 0           # its setmaxnreg budgets (registers a thread); the CUDA wgmma kernel's are wgmma's
    producer_regs: int = 0
    fused_regs: int = 0              # registers a consumer thread needs (estimate, checked)
    fused_smem_bytes: int = 0

    @property
    def operands(self) -> tuple[AttnOperand, ...]:
        return self.inputs + self.outputs

    def at(self, sizes) -> "AttentionBackwardPlan":
        """This plan at one call's dynamic sizes (explain --at): the FLOP count there (the planner's is at the
        max); explain evaluates every other extent. A static plan is returned as it is."""
        if not self.launch.dynamic_sizes:
            return self

        def ev(x):
            return X.evaluate(x, sizes)

        return dataclasses.replace(self, flops=backward_flops(ev(self.batch), ev(self.heads_q), ev(self.seq_q),
                                                              ev(self.seq_kv), self.head_dim, self.causal_alignment))

    @property
    def forms(self) -> dict[str, str]:
        """The kernel each backend of this plan builds, by backend: what `schedgen explain` states (the family's
        text and each backward step's) and what the templates render, read off the planner's decision (`fused`,
        `wgmma`: pipeline.kind as written or picked by defaults.py), never restated elsewhere."""
        out = {}
        if "pallas" in self.launch.backends:
            out["pallas"] = ("one kernel, FlashAttention-3's form (pipeline.kind warp_specialized)" if self.fused else
                             "two kernels, FlashAttention-2's form (pipeline.kind emit_pipeline: dK/dV, then dQ "
                             "recomputing S and dP)")
        if "cuda" in self.launch.backends:
            out["cuda"] = ("one warp-specialized wgmma kernel, FlashAttention-3's form (pipeline.kind "
                           "warp_specialized)" if self.wgmma is not None else
                           "one mma.sync kernel, FlashAttention-2's form (pipeline.kind emit_pipeline: dK/dV blocks, "
                           "then dQ blocks)")
        return out

    @property
    def form(self) -> str:
        """`forms` as one line: 'Pallas: ...; CUDA: ...'."""
        return "; ".join(f"{'CUDA' if b == 'cuda' else 'Pallas'}: {f}" for b, f in self.forms.items())

    @property
    def spill_advice(self) -> tuple[tuple, str]:
        """Where a CUDA build's spill warning points (build.Built.warnings): the kernel's f32 fragments fill the 255
        registers a thread may have at head_dim 128; dynamic sizes add the call's strides to what stays live."""
        if self.launch.dynamic_sizes:
            return (("op", "sizes", self.launch.dynamic_sizes[0].name),
                    "; the CUDA kernel's fragments fill its 255 registers and the dynamic sizes' runtime strides "
                    "add a few: the same spec with fixed sizes does not spill")
        return (("schedule", "in_specs"), "; the CUDA kernel's dK, dV (dQ), S and dP fragments fill its 255 registers: "
                                          "use smaller block_q / block_kv")

    @property
    def splits_d(self) -> bool:
        """Whether a dK/dV block of the Pallas two-kernel form holds part of head_dim's columns (d_split > 1)."""
        return self.d_split > 1

    @property
    def fused_blocks(self) -> int:
        """The one-kernel form's key blocks of a kv head ({consumers} x 64 keys each)."""
        return self.kv_rows_blocks // self.consumers

    @property
    def d_part(self) -> int:
        """The columns of dK and dV a dK/dV block computes."""
        return self.head_dim // self.d_split

    @property
    def group(self) -> int:
        """q heads per kv head (grouped-query attention; dynamic heads are one size for q and kv: 1)."""
        return 1 if self.heads_q == self.heads_kv else self.heads_q // self.heads_kv

    @property
    def rows(self) -> int:
        return ROWS

    @property
    def keys(self) -> int:
        """The keys a block of the one-kernel form owns (64 a consumer warpgroup)."""
        return ROWS * self.consumers

    # --- derived numbers the CUDA templates print (computed here: the templates do no arithmetic)
    @property
    def cuda_numbers(self) -> CudaNumbers:
        """The mma.sync kernel's (templates/attention_backward/cuda.cu.j2)."""
        return cuda_numbers(self)

    @property
    def wgmma_numbers(self) -> WgmmaNumbers:
        """The warp-specialized wgmma kernel's (templates/attention_backward/cuda_wgmma.cu.j2)."""
        return wgmma_numbers(self)


@dataclass(frozen=True)
class CudaNumbers:
    """What the mma.sync kernel's template prints that is derived from the plan's numbers (plan.cuda_numbers).
    Extents (`DimLike`) where they involve a size that may be dynamic."""
    blocks: DimLike                # dkv_blocks + dq_blocks: the grid
    d8: int                        # head_dim / 8: 16-byte chunks of a row; 8-column groups of a 16 x head_dim fragment
    d16: int                       # head_dim / 16: k16 steps over head_dim
    row_bytes: int                 # head_dim x 2: a row of a swizzled tile
    delta_rows: int                # threads / 4: the rows one pass of sg_delta covers (4 threads a row)
    q8: int                        # block_q / 8: 8-column groups of a warp's S^T, dP^T
    kv8: int                       # block_kv / 8: of its S, dP
    lse_copies: int                # block_q / 4: the 16-byte copies of a dK/dV step's lse
    ahead: int                     # stages - 1: the steps issued ahead of the one computed
    kv_last: int                   # block_kv - 1
    kv_heads: DimLike              # heads_kv x batch
    q_heads: DimLike               # heads_q x batch
    o_at: int                      # a dK/dV stage's O (Q at 0, dO at q_step_bytes): 2 x q_step_bytes
    lse_at: int                    # its lse: 3 x q_step_bytes
    dq_o_at: int                   # the dQ block's O (Q at 0, dO at tile_bytes): 2 x tile_bytes


def cuda_numbers(p: AttentionBackwardPlan) -> CudaNumbers:
    c, d = p.cuda, p.head_dim
    return CudaNumbers(
        blocks=c.dkv_blocks + c.dq_blocks, d8=d // 8, d16=d // 16, row_bytes=d * 2, delta_rows=p.launch.threads // 4,
        q8=p.block_q // 8, kv8=p.block_kv // 8, lse_copies=p.block_q // 4, ahead=p.stages - 1,
        kv_last=p.block_kv - 1, kv_heads=p.heads_kv * p.batch, q_heads=p.heads_q * p.batch,
        o_at=2 * c.q_step_bytes, lse_at=3 * c.q_step_bytes, dq_o_at=2 * c.tile_bytes)


class TmaBox(NamedTuple):
    """One TMA box (64 rows x 64 columns) of a tile load: where in the SMEM tile, which column and row of the map."""
    at: int                        # bytes from the tile's start: slab j, 64-row part rc
    column: int                    # 64 j: the box's first column of head_dim
    row: int                       # 64 rc: its first row past the tile's


@dataclass(frozen=True)
class WgmmaNumbers:
    """What the wgmma kernel's template prints that is derived from the plan's numbers (plan.wgmma_numbers). The
    kernel takes fixed sizes only: every number is an int."""
    acc: int                       # head_dim / 2: a consumer thread's f32 accumulators of 64 x head_dim (dK, dV)
    rs_a: tuple[int, ...]          # sg_wgmma_rs's asm operand numbers of A's four registers (after the accumulators)
    rs_b: int                      # and of B's descriptor
    d8: int                        # head_dim / 8: 16-byte chunks of a row (the preprocessing's lanes a row)
    d16: int                       # head_dim / 16: k16 steps over head_dim
    lane_half: int                 # d8 / 2: the first distance of the preprocessing's shuffle across a row's lanes
    tile_chunks: int               # 8 x head_dim: 16-byte chunks of a 64-row tile
    tile_vec4: int                 # 16 x head_dim: float4s of a 64 x head_dim f32 tile
    pre_chunks: int                # a preprocessing thread's chunks of a tile: tile_chunks / threads, rounded up
    split_cols: int                # head_dim / consumers: a consumer's dQ columns (dq_column_split)
    counters: int                  # counters_bytes / 4: the u32 arrival counters
    q_heads: int                   # batch x heads_q
    kv_heads: int                  # heads_kv x batch
    q_tiles: int                   # seq_q / 64
    key_blocks: int                # seq_kv / rows: the key blocks of a kv head
    rows_last: int                 # rows - 1
    red_arrivals: int              # consumers x key_blocks: a 64-query tile's arrivals (red form, no mask)
    q_tile_stride: int             # 64 x q_strides[1]: elements between 64-query tiles
    delta_f32: int                 # delta_offset / 4: the workspace's delta, in f32
    acc_f32: int                   # acc_offset / 4: its dQ sums
    counters_f32: int              # acc_f32 + counters_offset: its arrival counters
    bar_empty: int                 # 8 + 8 stages: the SMEM offset of the ring's "empty" barriers (after "full")
    bar_delta: int                 # 8 + 16 stages: of the "delta" ones
    ticket_at: int                 # flag_offset + 64: the block's ticket (delta preprocess)
    fixed_pair: int                # 2 x fixed_bytes: K and V
    stage_tx: int                  # a stage's TMA bytes: Q, dO (, O) and lse (, delta)
    o_at: int                      # a stage's O: 2 x tile64 (Q at 0, dO at tile64)
    lse_at: int                    # its lse: after Q, dO (and O when delta is computed in the kernel)
    delta_at: int                  # its delta: lse_at + 256
    consumer_threads: int          # 128 x consumers
    double_ds: bool                # two dS buffers (ds_buffers 2)
    fixed_boxes: tuple[TmaBox, ...]    # the boxes of a fixed tile (K, V: rows x head_dim, slab_rows-byte slabs)
    step_boxes: tuple[TmaBox, ...]     # of a streamed one (Q, dO, O: 64 x head_dim, slab64-byte slabs)


def _boxes(d: int, rows: int, slab: int) -> tuple[TmaBox, ...]:
    return tuple(TmaBox(j * slab + rc * 8192, j * 64, rc * 64) for j in range(d // 64) for rc in range(rows // 64))


def wgmma_numbers(p: AttentionBackwardPlan) -> WgmmaNumbers:
    w, d = p.wgmma, p.head_dim
    acc, pre = d // 2, w.delta == "preprocess"
    lse_at = (2 if pre else 3) * w.tile64
    return WgmmaNumbers(
        acc=acc, rs_a=(acc, acc + 1, acc + 2, acc + 3), rs_b=acc + 4, d8=d // 8, d16=d // 16, lane_half=d // 16,
        tile_chunks=8 * d, tile_vec4=16 * d, pre_chunks=(8 * d + w.threads - 1) // w.threads,
        split_cols=d // w.consumers, counters=w.counters_bytes // 4, q_heads=p.batch * p.heads_q,
        kv_heads=p.heads_kv * p.batch, q_tiles=p.seq_q // 64, key_blocks=p.seq_kv // w.rows, rows_last=w.rows - 1,
        red_arrivals=w.consumers * (p.seq_kv // w.rows), q_tile_stride=64 * w.q_strides[1],
        delta_f32=w.delta_offset // 4, acc_f32=w.acc_offset // 4, counters_f32=w.acc_offset // 4 + w.counters_offset,
        bar_empty=8 + 8 * p.stages, bar_delta=8 + 16 * p.stages, ticket_at=w.flag_offset + 64,
        fixed_pair=2 * w.fixed_bytes, stage_tx=2 * w.tile64 + 512 if pre else 3 * w.tile64 + 256,
        o_at=2 * w.tile64, lse_at=lse_at, delta_at=lse_at + 256, consumer_threads=128 * w.consumers,
        double_ds=w.ds_buffers == 2, fixed_boxes=_boxes(d, w.rows, w.slab_rows), step_boxes=_boxes(d, 64, w.slab64))
