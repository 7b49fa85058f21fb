"""What the attention_backward planner returns: the plan (every number the templates print) and its FLOP count."""
from __future__ import annotations

from dataclasses import dataclass, field

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
