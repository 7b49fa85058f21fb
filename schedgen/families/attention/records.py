"""What the attention planner passes between its phases and returns: the kernel's constants, the operand record, the
plan itself (AttentionPlan, with the numbers the templates print derived as properties), the tile order's tile_of
and the phases' small typed values."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, NamedTuple

from ...plan.launch import KernelLaunch, inline_field
from ...plan import dims as X
from ...plan.dims import DimLike, SizeRange
from ...plan.hardware import SM_COUNT
from ...plan.common import (
    KernelArg,
    SmemBuffer,
    SmemMap,
)

WGMMA_M = 64
DTYPES = ("bf16", "f16")
HEAD_DIMS = (64, 128, 256)
# registers a consumer thread needs beside S, O and P (addresses, row max / sum, loop state): ptxas fits
# block_kv 192 at head_dim 128 (96 + 64 + 48 + 32 = 240 of 240) and 3 consumers at head_dim 64 (64 + 32 + 32 + 32
# = 160 of 160) without spills; it serializes wgmma at block_kv 256 with head_dim 64 (128 + 32 + 64 = 224 of 240)
# and at block_kv 96, head_dim 128 on 160 registers (48 + 64 + 24 = 136). Low budgets can still spill: the build
# reports ptxas' verdict (build.compiler_verdicts)
REG_OVERHEAD = 32
# softmax code-shape choices, from A/B runs on the H200 (bench/results/raw/2026-12-02-attn-run6-ab.json; the --ab
# mode that set these is gone): the row max / sum in one accumulator chain each (4 chains measured 0-2% slower at every head_dim), and warps whose rows kept their
# running max skip the O rescale from head_dim 256 (a vote and a branch against D/2 multiplies a thread: +3% at
# D = 256 with 64-key blocks, -1 to -3% at D = 64 and 128)
ROW_CHAINS = 1
SKIP_RESCALE_MIN_D = 256
# producer registers when it claims tiles dynamically: with 24 ptxas spills three values (H200 build, 2026-12-03)
DYNAMIC_PRODUCER_REGS = 32
# a TMA box row: 64 elements of 2 bytes, one 128-byte swizzle span
SLAB_ROW_BYTES = 128
# non-causal kernels of at most this many key blocks hide the trip count from ptxas (cuda.cu.j2's sg_tile)
OPAQUE_KV_BLOCKS = 4
MODULE_NAMES = frozenset({"make", "run_into", "sizes_of"})
ALIGNMENTS = ("top_left", "bottom_right")


def causal_alignment(causal: bool | str) -> str | None:
    """The op's `causal` as an alignment: None (no mask), "top_left" or "bottom_right" (`causal: true`)."""
    if causal is False:
        return None
    return "bottom_right" if causal is True else causal


def causal_offset_of(alignment: str | None, seq_q, seq_kv):
    """The causal mask's offset: query i sees keys j <= i + offset (top_left: 0; bottom_right: Skv - Sq, the last
    query sees the last key). An extent when a sequence length is dynamic; None without a mask."""
    if alignment is None:
        return None
    return 0 if alignment == "top_left" else seq_kv - seq_q


def score_pairs(seq_q: int, seq_kv: int, offset: int | None) -> int:
    """Unmasked (query, key) pairs of one (batch, head): query i sees keys 0 <= j < Skv with j <= i + offset
    (every key without a mask, offset None). Closed form: rows before -offset see no key, rows from Skv - offset
    on see all Skv, the rows between see i + offset + 1."""
    if offset is None:
        return seq_q * seq_kv
    lo = min(seq_q, max(0, -offset))              # first row that sees a key
    hi = max(lo, min(seq_q, seq_kv - offset))     # first row that sees every key
    first, last = lo + offset + 1, hi + offset    # keys seen by rows lo .. hi - 1
    return (first + last) * (hi - lo) // 2 + (seq_q - hi) * seq_kv


def attention_flops(batch: int, heads_q: int, seq_q: int, seq_kv: int, head_dim: int, alignment: str | None) -> int:
    """4 D flops (2 D for S = Q K^T, 2 D for O += P V) per unmasked (query, key) pair, per head and batch."""
    pairs = score_pairs(seq_q, seq_kv, causal_offset_of(alignment, seq_q, seq_kv))
    return 4 * head_dim * pairs * heads_q * batch


@dataclass(frozen=True)
class AttnOperand:
    name: str
    cname: str
    role: str            # "q" | "k" | "v" | "o" | "lse"
    dtype: str
    ctype: str
    itemsize: int
    shape: tuple[DimLike, ...]   # a dynamic dimension is the extent size(name)


@dataclass(frozen=True)
class AttentionPlan:
    launch: KernelLaunch = inline_field()   # the launch header (plan/launch.py; plan.json: its fields here)
    sizes: dict
    constants: dict
    batch: DimLike             # an int, or the extent of a dynamic size (plan/dims.py) known at the call
    heads_q: DimLike
    heads_kv: DimLike
    seq_q: DimLike
    seq_kv: DimLike
    head_dim: int
    layout: str
    causal: bool
    causal_alignment: str | None   # None (no mask), "top_left" (query i sees keys j <= i) or "bottom_right"
                                   # (j <= i + Skv - Sq: the last query sees the last key; `causal: true`)
    scale: float
    scale_log2: float          # scale * log2(e): the softmax runs in base 2
    dtype: str
    with_lse: bool
    inputs: tuple[AttnOperand, ...]
    outputs: tuple[AttnOperand, ...]
    block_q: int               # query rows per CTA (64 per consumer warpgroup)
    block_kv: int
    stages: int
    num_consumers: int
    pingpong: bool
    q_blocks: DimLike
    kv_blocks: DimLike
    num_tiles: DimLike         # q blocks x heads x batch
    persistent: bool           # a grid of one CTA per SM walking the tiles (else one CTA a tile)
    dynamic: bool              # persistent, each CTA claiming its next tile from a GMEM counter (else t += grid)
    row_chains: int            # independent accumulator chains of the softmax's row max and row sum
    skip_rescale: bool         # warps whose rows kept their running max skip the O rescale
    o_staging: bool            # O staged in its own SMEM buffer (persistent, where it fits), else in the Q tile
    tile_order: str            # "row_major": q blocks fastest, then heads, then batch (causal: q blocks reversed);
                               # "lpt": longest tiles first, (batch, head) fastest within sections (see tile_of)
    section_heads: int         # lpt: (batch, q head) pairs per section, whose K/V fit in the L2 together
    slabs: int                 # head_dim / 64: TMA boxes (128 B swizzled) per row block
    q_bytes: int
    kv_stage_bytes: int
    s_regs: int
    o_regs: int
    producer_regs: int
    consumer_regs: int
    smem_buffers: tuple[SmemBuffer, ...]
    approx_math: bool
    flops: int                 # 4 D per unmasked (q, k) pair (attention_flops), at the largest sizes when dynamic
    bytes_moved: int
    # sm_100a: the Pallas tcgen05 kernel's record (blackwell.AttnTcgen05Plan; absent in plan.json on sm_90a)
    tcgen05: object = field(default=None, metadata={"omit_default": True})
    # How the Hopper consumers build their wgmma descriptors (plan.desc_offsets_of): False, each k-step's from its SMEM
    # address (sg_desc: mask, shift, or, ~5 uniform instructions a descriptor); True, a tile's once a step (Q's once),
    # each k-step's byte offset >> 4 added to its start-address field (the low word; the 14-bit field cannot carry:
    # every address is inside the CTA's SMEM, under 256 KiB): the same descriptor bits. Left out of plan.json at False.
    desc_offsets: bool = field(default=False, metadata={"omit_default": True})

    @property
    def operands(self) -> tuple[AttnOperand, ...]:
        return self.inputs + self.outputs

    def at(self, sizes: Mapping[str, int]) -> "AttentionPlan":
        """This plan at one call's dynamic sizes: every extent evaluated (what the kernel computes at entry from its
        sz_ arguments), the tile order and everything else as built. A static plan is returned as it is."""
        if not self.launch.dynamic_sizes:
            return self

        def ev(x):
            return X.evaluate(x, sizes)

        def arg(a: KernelArg) -> KernelArg:
            return replace(a, shape=tuple(map(ev, a.shape)), strides=tuple(map(ev, a.strides)), value=ev(a.value))

        def operands(os):
            return tuple(replace(o, shape=tuple(map(ev, o.shape))) for o in os)

        b, hq, sq, skv = ev(self.batch), ev(self.heads_q), ev(self.seq_q), ev(self.seq_kv)
        return replace(
            self, sizes={**self.sizes, **{r.name: int(sizes[r.name]) for r in self.launch.dynamic_sizes}},
            flops=attention_flops(b, hq, sq, skv, self.head_dim, self.causal_alignment),
            batch=ev(self.batch), heads_q=ev(self.heads_q), heads_kv=ev(self.heads_kv), seq_q=ev(self.seq_q),
            seq_kv=ev(self.seq_kv), q_blocks=ev(self.q_blocks), kv_blocks=ev(self.kv_blocks),
            num_tiles=ev(self.num_tiles), inputs=operands(self.inputs), outputs=operands(self.outputs),
            launch=replace(self.launch, num_blocks=ev(self.launch.num_blocks), dynamic_sizes=(),
                           kernel_args=tuple(arg(a) for a in self.launch.kernel_args)))

    @property
    def ranges(self) -> dict[str, SizeRange]:
        return {r.name: r for r in self.launch.dynamic_sizes}

    @property
    def sections(self) -> DimLike:
        """lpt: sections of (batch, q head) pairs; the last one may hold fewer (last_section_heads)."""
        return X.cdiv(self.batch * self.heads_q, self.section_heads)

    @property
    def last_section_heads(self) -> DimLike:
        total, sh = self.batch * self.heads_q, self.section_heads
        if X.is_static(total):
            return total - (self.sections - 1) * sh
        return (total + (sh - 1)) % sh + 1      # = total - (sections - 1) sh, in the extents' operators

    # --- derived numbers the templates print (computed here: the templates do no arithmetic)
    @property
    def group(self) -> int:
        """q heads per kv head (grouped-query attention); dynamic heads are one size for q and kv (the planner)."""
        return 1 if self.heads_q == self.heads_kv else self.heads_q // self.heads_kv

    @property
    def causal_offset(self) -> int | None:
        """Causal query i sees keys j <= i + causal_offset: 0 top-left, Skv - Sq bottom-right (also 0 without a
        mask, where the templates do not read it); None when known only at the call (the templates take the
        difference of seq_kv and seq_q there)."""
        if self.causal_alignment != "bottom_right" or self.seq_kv == self.seq_q:
            return 0
        if X.is_static(self.seq_kv) and X.is_static(self.seq_q):
            return self.seq_kv - self.seq_q
        return None

    @property
    def causal_past_keys(self) -> bool:
        """Top-left causal where Sq may exceed Skv: the rows past Skv see every key, so a block's causal key count
        is capped at the key blocks there are (the Pallas kernel takes the min; the CUDA kernel always does)."""
        if self.causal_alignment != "top_left" or self.seq_q == self.seq_kv:
            return False
        return X.upper(self.seq_q, self.ranges) > X.lower(self.seq_kv, self.ranges)

    @property
    def p_regs(self) -> int:
        """b32 registers of P (packed pairs) per consumer thread: the A fragment of O += P V."""
        return self.block_kv // 4

    @property
    def qk_steps(self) -> int:
        """k16 steps of S = Q K^T (over head_dim)."""
        return self.head_dim // 16

    @property
    def pv_steps(self) -> int:
        """k16 steps of O += P V (over block_kv)."""
        return self.block_kv // 16

    @property
    def s_groups(self) -> int:
        """8-column groups of a thread's S fragment."""
        return self.block_kv // 8

    @property
    def o_groups(self) -> int:
        """8-column groups of a thread's O fragment."""
        return self.head_dim // 8

    @property
    def q_slab_bytes(self) -> int:
        """One 64-column (128-byte swizzled) slab of the Q tile."""
        return self.block_q * SLAB_ROW_BYTES

    @property
    def kv_slab_bytes(self) -> int:
        return self.block_kv * SLAB_ROW_BYTES

    @property
    def consumer_slab_bytes(self) -> int:
        """A consumer's 64 rows of one slab."""
        return WGMMA_M * SLAB_ROW_BYTES

    @property
    def pv_step_bytes(self) -> int:
        """The V rows (16 keys) of one k16 step of O += P V."""
        return 16 * SLAB_ROW_BYTES

    @property
    def qk_asm(self) -> tuple[int, int, int]:
        """Operand numbers of sg_wgmma_qk's inline asm after the S registers: Q descriptor, K descriptor, the
        accumulate flag."""
        return self.s_regs, self.s_regs + 1, self.s_regs + 2

    @property
    def pv_asm(self) -> tuple[int, ...]:
        """Operand numbers of sg_wgmma_pv's inline asm after the O registers: the 4 P registers, V's descriptor."""
        return tuple(self.o_regs + i for i in range(5))

    @property
    def epi_bar(self) -> int:
        """The first epilogue named barrier (0 is __syncthreads, 1..num_consumers the ping-pong ring)."""
        return self.num_consumers + 1

    @property
    def last_consumer(self) -> int:
        return self.num_consumers - 1

    @property
    def several_consumers(self) -> bool:
        return self.num_consumers > 1

    @property
    def q_empty_arrivals(self) -> int:
        """Arrivals that free Q: every consumer thread when the consumers also read the claimed tile index."""
        return self.num_consumers * 128 if self.dynamic else self.num_consumers

    @property
    def last_q_block(self) -> int | None:
        """q_blocks - 1 (None when dynamic: the kernel takes it from its q block count)."""
        return self.q_blocks - 1 if X.is_static(self.q_blocks) else None

    @property
    def last_kv_block(self) -> int | None:
        return self.kv_blocks - 1 if X.is_static(self.kv_blocks) else None

    @property
    def kv_block_last_key(self) -> int:
        """block_kv - 1: the last key of a block, relative to its first."""
        return self.block_kv - 1

    @property
    def ragged_q_rows(self) -> DimLike:
        """Rows of the ragged last query block (0: none)."""
        return self.seq_q % self.block_q

    @property
    def ragged_kv_keys(self) -> DimLike:
        """Keys of the ragged last key block (0: none)."""
        return self.seq_kv % self.block_kv

    @property
    def may_ragged_q(self) -> bool:
        """A call may have a ragged last query block (the kernel then checks its rows)."""
        return not X.divisible(self.seq_q, self.block_q, self.ranges)

    @property
    def may_ragged_kv(self) -> bool:
        """A call may have a ragged last key block (the kernel then masks its keys past Skv)."""
        return not X.divisible(self.seq_kv, self.block_kv, self.ranges)

    @property
    def section_tiles(self) -> int:
        """lpt: tiles of one (full) section."""
        return self.section_heads * self.q_blocks

    @property
    def last_section(self) -> int | None:
        return self.sections - 1 if X.is_static(self.sections) else None

    @property
    def short_last_section(self) -> bool:
        """The last section may hold fewer heads (always possible when the batch or the heads are dynamic)."""
        last = self.last_section_heads
        return not X.is_static(last) or last != self.section_heads

    @property
    def opaque_kv_end(self) -> bool:
        """Non-causal with few key blocks: the CUDA kernel hides the trip count from ptxas (see the template)."""
        return not self.causal and X.is_static(self.kv_blocks) and self.kv_blocks <= OPAQUE_KV_BLOCKS

    @property
    def causal_capped(self) -> bool:
        """The Pallas kernel caps a query block's causal key-block count at the key blocks there are: where rows
        past Skv see every key (top-left), or where a ragged last query block's rows past Sq reach past them."""
        return self.causal and (self.causal_past_keys or self.may_ragged_q)

    @property
    def sm_count(self) -> int:
        """The H200's SMs (plan/hardware.py): the Pallas persistent grid's blocks when no GPU is visible to jax (the
        generated module counts the device's at make() otherwise, as the CUDA launch does)."""
        return SM_COUNT

    @property
    def pp_sums_before_turn(self) -> bool:
        """Pallas ping-pong: the row sums are taken before handing over the tensor cores (head_dim <= 128), else
        under the other consumer's MMAs."""
        return self.pingpong and self.head_dim <= 128

    @property
    def q_loads(self) -> tuple[tuple[int, int, int], ...]:
        """The Q tile's TMA loads: (SMEM offset, column, row) per consumer and slab."""
        return tuple((sl * self.q_slab_bytes + w * self.consumer_slab_bytes, sl * 64, w * WGMMA_M)
                     for w in range(self.num_consumers) for sl in range(self.slabs))

    @property
    def kv_slabs(self) -> tuple[tuple[int, int], ...]:
        """A K or V stage's TMA loads: (SMEM offset in the stage, column) per slab."""
        return tuple((sl * self.kv_slab_bytes, sl * 64) for sl in range(self.slabs))

    @property
    def o_slabs(self) -> tuple[tuple[int, int], ...]:
        """A consumer's O stores: (SMEM offset in its staging rows, column) per slab."""
        return tuple((sl * self.q_slab_bytes, sl * 64) for sl in range(self.slabs))

    def kv_end(self, qb: int) -> int:
        """Key blocks that query block qb reads (causal: up to the diagonal of its last row, at the alignment's
        offset; the lpt order's and the drawings' work estimate)."""
        if not self.causal:
            return self.kv_blocks
        offset = causal_offset_of(self.causal_alignment, self.seq_q, self.seq_kv)
        return min(self.kv_blocks, ((qb + 1) * self.block_q + offset + self.block_kv - 1) // self.block_kv)


def tile_of(p: AttentionPlan, t: int) -> tuple[int, int, int]:
    """(batch, q head, q block) of tile t: the reference for sg_tile / _tile in the templates.

    row_major: q blocks fastest (reversed when causal: the longest rows of a head first), then heads, then batch,
    so consecutive CTAs share one head's K/V in L2. lpt: the (batch, q head) pairs are cut into sections of
    `section_heads` whose K/V fit in the L2 together; within a section tiles go q block slowest, from the last (the
    most keys when causal) down, (batch, head) fastest, so every section starts its longest tiles first and the
    hardware's in-order block dispatch packs the short ones into the tail (longest-processing-time-first)."""
    qbs = p.q_blocks
    if p.tile_order == "lpt":
        sec, r = divmod(t, p.section_heads * qbs)
        here = p.last_section_heads if sec == p.sections - 1 else p.section_heads
        qb = qbs - 1 - r // here
        u = sec * p.section_heads + r % here
        return u // p.heads_q, u % p.heads_q, qb
    qb = t % qbs
    u = t // qbs
    if p.causal:
        qb = qbs - 1 - qb
    return u // p.heads_q, u % p.heads_q, qb


class Names(NamedTuple):
    """The operands' names, by role."""
    q: str
    k: str
    v: str
    o: str
    lse: str | None

    @property
    def inputs(self) -> tuple[str, str, str]:
        return self.q, self.k, self.v


class Dims(NamedTuple):
    """The problem in [B, S, H, D] terms (whatever the layout) and the operands' resolved shapes."""
    b: int
    sq: int
    hq: int
    skv: int
    hkv: int
    d: int
    dtype: str
    shapes: dict
    ranges: dict = {}    # the dynamic sizes' SizeRanges by name ({} when none)


class Blocks(NamedTuple):
    nc: int              # consumer warpgroups
    block_q: int
    block_kv: int


class Grid(NamedTuple):
    persistent: bool     # one CTA an SM walking the tiles
    dynamic: bool        # ... claiming each next tile from a counter


class Regs(NamedTuple):
    s_regs: int
    o_regs: int
    preg: int            # producer
    creg: int            # each consumer


class Smem(NamedTuple):
    stages: int
    slabs: int
    q_bytes: int
    kv_bytes: int
    o_staging: bool
    map: SmemMap
    bytes: int           # with the 1 KiB alignment slack


class Order(NamedTuple):
    order: str
    section_heads: int
