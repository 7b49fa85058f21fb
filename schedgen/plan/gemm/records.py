"""The records of a GEMM kernel's plan: the constants of the kernel's shape, the operand record, the small frozen
values the planner's phases pass between them, and the plan itself (`MatmulPlan`), composed of one record per part of
the kernel:

- `plan.launch`   the launch header (schedgen/plan/launch.py)
- `plan.tiles`    the tile and the walk over the tiles (TileGrid)
- `plan.cluster`  the thread-block cluster: the operand its CTAs multicast, or split-K (ClusterShape)
- `plan.pipeline` the SMEM stage ring, its barriers and the SMEM map (StageRing)
- `plan.layout`   how lhs and rhs sit in SMEM and are loaded: major order, swizzle, TMA boxes, descriptors
                  (OperandLayout)
- `plan.warps`    the warp roles and their register budgets (WarpRoles)
- `plan.staging`  how the epilogue stores the output tile (EpilogueStaging)
- `plan.mma`      the MMA generation's own record: `Wgmma` (sm_90a, sm90.py) or `Tcgen05Mma` (sm_100a, sm100.py)

plan.json shows every record's fields at the plan's top level (`inline_field`), as it did before the plan was split.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...frontend.model import ITEMSIZE
from ..common import CTYPE, SmemBuffer
from .. import dims
from ..dims import DimLike
from ..exprs import PlanExpr
from ..hardware import peak_tflops as _peak_by_dtype
from ..launch import KernelLaunch, inline_field

if TYPE_CHECKING:
    from ...frontend.model import BlockSpec
    from .sm90 import Wgmma
    from .sm100 import Tcgen05Mma

WGMMA_M = 64
WGMMA_K_BYTES = 32            # one wgmma consumes 32 B of K (k16 for 16-bit inputs)
MMA_DTYPES = ("bf16", "f16", "f8e4m3", "f8e5m2")
FP8_DTYPES = ("f8e4m3", "f8e5m2")   # wgmma k32, both operands K-major in SMEM (no transpose for 8-bit inputs)
OUT_DTYPES = ("bf16", "f16", "f32")
REG_OVERHEAD = 40             # registers a consumer thread needs beside its accumulators (addresses, epilogue)
DEFAULT_TILE = (128, 256, 64)


@dataclass(frozen=True)
class MatOperand:
    name: str
    cname: str
    role: str                 # "lhs" | "rhs" | "extra" | "out" | "saved" (a second output: a value kept for a backward)
    dtype: str
    ctype: str
    itemsize: int
    shape: tuple[DimLike, ...]
    bcast: str = ""           # extra operands: "scalar" ([1], [1, 1]), "row" ([N]), "col" ([M, 1]), "full" ([M, N]),
                              # "batch" ([B, M, N])


@dataclass(frozen=True)
class StagedVector:
    """One operand staged in SMEM: its slot offset, its elements a tile (tile_n for a row, tile_m for a column)
    and the 16-byte copies they take."""
    name: str
    cname: str
    bcast: str                # "row" | "col"
    dtype: str
    itemsize: int
    offset: int               # bytes into a slot
    elems: int
    copies: int


@dataclass(frozen=True)
class VectorSlots:
    vectors: tuple[StagedVector, ...] = ()
    slots: int = 0            # 1 (cooperative) or 2 (ping-pong: one a consumer)
    slot_bytes: int = 0
    readers: int = 0          # consumer warpgroups reading a slot: vec_empty counts 128 x this thread arrivals
    fill_threads: int = 32    # the producer's warp 1 copies; each lane arrives once on vec_full a fill

    @property
    def nbytes(self) -> int:
        """The SMEM the slots and their two barrier rings take (beside the ring, in the budget)."""
        return self.slots * (self.slot_bytes + 16)

    @property
    def by_name(self) -> dict[str, StagedVector]:
        return {v.name: v for v in self.vectors}


def _batched(batch: DimLike) -> bool:
    return not (isinstance(batch, int) and batch == 1)


def broadcast_kind(shape: tuple[int, ...], batch: int, m: int, n: int) -> str | None:
    """How an epilogue operand of `shape` is read across the output tile (MatOperand.bcast), or None."""
    if shape in ((1,), (1, 1)):           # one value for the whole output (a per-tensor scale)
        return "scalar"
    if shape in ((n,), (1, n)):
        return "row"
    if shape == (m, 1):
        return "col"
    if shape == (m, n):
        return "full"
    if batch != 1 and shape == (batch, m, n):   # batch may be a dynamic extent (never compared by value)
        return "batch"
    return None


def mat_operand(name: str, role: str, dtype: str, shape: tuple[int, ...], bcast: str = "") -> MatOperand:
    """One operand as the templates name it: `out_<name>` for the output, `in_<name>` for the inputs."""
    cname = f"out_{name}" if role in ("out", "saved") else f"in_{name}"
    return MatOperand(name, cname, role, dtype, CTYPE[dtype], ITEMSIZE[dtype], tuple(shape), bcast)


# ------------------------------------------------------------------------------ what the phases pass each other


@dataclass(frozen=True)
class Dims:
    """The problem: operand shapes and dtypes, M, N, K and the batch, the epilogue's operands."""
    a_shape: tuple[DimLike, ...]
    b_shape: tuple[DimLike, ...]
    o_shape: tuple[DimLike, ...]
    in_dtype: str
    out_dtype: str
    m: DimLike
    n: DimLike
    k: DimLike
    batch: DimLike
    ranges: dict                # the dynamic sizes: name -> SizeRange ({} for a static problem)
    lhs_batched: bool
    rhs_batched: bool
    extra_ops: tuple[MatOperand, ...]

    @property
    def isz(self) -> int:
        return ITEMSIZE[self.in_dtype]

    @property
    def osz(self) -> int:
        return ITEMSIZE[self.out_dtype]


@dataclass(frozen=True)
class Tile:
    """The block tile (tile_m x tile_n x tile_k) and the lhs / rhs BlockSpecs it came from."""
    tm: int
    tn: int
    tk: int
    a_spec: BlockSpec | None
    b_spec: BlockSpec | None
    ragged_dims: frozenset = frozenset()   # "M", "N", "K": those the tile does not divide (at some size in range)

    @property
    def ragged(self) -> bool:
        return bool(self.ragged_dims)


@dataclass(frozen=True)
class Warpgroups:
    """How the consumer warpgroups split the tile (cooperative), or that each owns whole tiles (ping-pong)."""
    nc: int
    axis: str
    wtm: int
    wtn: int
    schedule: str = "cooperative"

    @property
    def pingpong(self) -> bool:
        return self.schedule != "cooperative"


@dataclass(frozen=True)
class Layout:
    """The SMEM layout of the lhs / rhs stages: major order, swizzle bytes, swizzle-row elements."""
    k_major_a: bool
    k_major_b: bool
    swz_a: int
    swz_b: int
    atom_a: int
    atom_b: int


@dataclass(frozen=True)
class Cluster:
    cm: int
    cn: int
    csize: int
    multicast: str
    tiles_m: int
    tiles_n: int
    ck: int = 1               # split-K: CTAs of the cluster sharing each tile's k-steps (1: no split)


@dataclass(frozen=True)
class EpilogueChunks:
    rows: int
    cols: int
    direct: bool
    swizzle: int
    nbytes: int


@dataclass(frozen=True)
class Registers:
    threads: int
    preg: int
    creg: int
    acc_regs: int
    block: int                # hw.regs_per_block(threads)


@dataclass(frozen=True)
class Pipeline:
    stages: int
    k_iters: int
    delay: int


@dataclass(frozen=True)
class Smem:
    buffers: tuple[SmemBuffer, ...]
    nbytes: int
    full_arrivals: int
    empty_arrivals: int
    a_stage: int
    b_stage: int
    a_rows: int               # the lhs rows a stage loads (operands.lhs_stage_rows)


@dataclass(frozen=True)
class TileLoop:
    num_tiles: int
    auto: bool
    clusters: int


@dataclass(frozen=True)
class EpilogueCode:
    statements: tuple[tuple[str, PlanExpr], ...]
    roles: dict
    identity: bool


# ------------------------------------------------------------------------------------ the records of the plan


@dataclass(frozen=True)
class TileGrid:
    """The block tile and the persistent walk over the output's tiles."""
    tile_m: int
    tile_n: int
    tile_k: int
    tiles_m: DimLike
    tiles_n: DimLike
    cluster_tiles_m: DimLike   # the tile grid in cluster units (tiles_m / cluster_m x tiles_n / cluster_n)
    cluster_tiles_n: DimLike
    num_tiles: DimLike         # in cluster units (each cluster computes cluster_m x cluster_n tiles at once)
    k_iters: DimLike
    tile_order: str
    minor_dim: int
    tile_width: int
    ragged: bool               # M, N or K not a multiple of the tile (TMA zero-fills loads, clips stores)


@dataclass(frozen=True)
class ClusterShape:
    """The thread-block cluster: CTAs along M or N sharing one operand tile by multicast, or split-K."""
    cluster_m: int
    cluster_n: int
    cluster_size: int
    multicast: str             # "" | "lhs" | "rhs": the operand shared by the cluster, split and multicast
    mc_rank_bytes: int         # K-major multicast operand: a CTA's half starts rank x this many bytes into the stage
    mc_rank_elems: int         # ... and rank x this many rows (lhs) / columns (rhs) into the tile
    mc_rank_boxes: int         # MN-major multicast operand: TMA boxes each CTA loads (its half of the stage's)
    split_k: int               # CTAs of a cluster sharing each tile's k-steps (1: none): rank r runs k-steps
                               # [r k_iters / S, (r + 1) k_iters / S) and ranks > 0 hand their f32 partial tile to rank
                               # 0 through DSMEM (the `red` buffer and the red_full / red_empty barriers)


@dataclass(frozen=True)
class StageRing:
    """The TMA stage ring (lhs and rhs blocks a stage), its full / empty barriers and the kernel's SMEM map."""
    stages: int
    delay_release: int         # MMA groups kept in flight before a stage is released (0 or 1)
    stage_tx_bytes: int        # the bytes a stage's TMA loads bring (the full barrier's expect_tx)
    full_arrivals: int
    empty_arrivals: int
    smem_buffers: tuple[SmemBuffer, ...]


@dataclass(frozen=True)
class OperandLayout:
    """How lhs and rhs sit in SMEM and are loaded: major order, swizzle, the TMA boxes of a stage, the SMEM
    descriptors' strides."""
    swizzle_a: int
    swizzle_b: int
    atom_a: int                # elements per swizzle row of lhs / rhs (swizzle bytes / itemsize)
    atom_b: int
    k_major_a: bool
    k_major_b: bool
    a_stage_bytes: int
    b_stage_bytes: int
    a_sub_bytes: int           # bytes of one TMA box of lhs / rhs inside a stage
    b_sub_bytes: int
    a_boxes: tuple[tuple[int, int], ...]   # each TMA box of an lhs stage: (SMEM byte offset, element offset along
    b_boxes: tuple[tuple[int, int], ...]   # its swizzled dimension); rhs likewise
    a_lbo: int                 # the SMEM descriptors' leading / stride byte offsets
    a_sbo: int
    b_lbo: int
    b_sbo: int
    a_box_rows: int            # K-major lhs: rows its TMA box loads (tile_m, or a static M below it: the stage's
                               # rows past it are zeroed once and never loaded)
    a_compact: bool            # the lhs ring holds a_box_rows rows a box (operands.compact_lhs): a box's 64-row
                               # wgmma window runs on over the next boxes, or the zeroed tail `a_tail`
    a_zero_bytes: int          # short lhs: bytes of a box past its loaded rows ((tile_m - a_box_rows) x swizzle),
                               # zeroed once (compact: the one tail past the ring)
    a_zero_offset: int         # ... where they start in a box (a_box_rows x swizzle)
    a_zero_boxes: int          # ... how many boxes have them (stages x boxes a stage; compact: the one tail)
    zero_step: int             # bytes the whole block zeroes per pass (threads x 16)


@dataclass(frozen=True)
class WarpRoles:
    """The consumer warpgroups (how they share the tiles) and the register budgets of the warp roles."""
    num_consumers: int
    consumer_schedule: str     # "cooperative": the consumers split one tile along wg_axis; "pingpong": each
                               # owns a whole tile, the two take alternate tiles, their k-loops taking turns through a
                               # named-barrier handshake
    wg_axis: str               # "m" | "n": how the consumers split the tile
    wg_tile_m: int
    wg_tile_n: int
    producer_regs: int
    consumer_regs: int
    block_regs: int            # registers the block holds under __launch_bounds__(threads, 1) (setmaxnreg's budget)
    acc_regs: int              # f32 accumulators per consumer thread

    @property
    def pingpong(self) -> bool:
        """Each consumer warpgroup owns whole tiles, taking alternate tiles of the block's sequence."""
        return self.consumer_schedule != "cooperative"


@dataclass(frozen=True)
class EpilogueStaging:
    """How the epilogue stores the output tile: in chunks staged through SMEM buffers and stored by TMA, or
    directly from registers."""
    epi_rows: int
    epi_cols: int
    epi_buffers: int
    epi_swizzle: int
    epi_bytes: int
    epi_store: str             # "tma" | "direct"
    epi_chunks_m: int          # epilogue chunks per consumer tile: wg_tile_m / epi_rows x wg_tile_n / epi_cols
    epi_chunks_n: int
    epi_n8: int                # n8 accumulator blocks per chunk row (epi_cols / 8)
    epi_row_bytes: int         # bytes of one staged chunk row
    epi_swizzle_mask: int      # the 16-byte-unit row mask of the staging swizzle (epi_swizzle / 16 - 1; 0: none)
    epi_pending: int           # TMA stores left in flight before a staging buffer is reused (epi_buffers - 1)
    epi_uneven: bool           # staged stores per tile (chunks x outputs: a second output takes a slot of each
                               # chunk too) not a multiple of the buffers (Pallas waits for all first)


@dataclass(frozen=True)
class MatmulPlan:
    """The plan of one GEMM kernel: `out = epilogue(lhs @ rhs)` (the matmul family's plan, and the step plan the
    grouped_matmul and collective_matmul families hold as `plan.mm`)."""
    launch: KernelLaunch = inline_field()   # the launch header (plan/launch.py; plan.json: its fields here)
    sizes: dict
    constants: dict
    # the problem
    batch: DimLike
    m: DimLike
    n: DimLike
    k: DimLike
    lhs_batched: bool
    rhs_batched: bool
    in_dtype: str
    out_dtype: str
    transpose_lhs: bool        # lhs stored [K, M]: M-major for wgmma
    transpose_rhs: bool        # rhs stored [N, K]: K-major for wgmma (the default [K, N] is N-major)
    inputs: tuple[MatOperand, ...]
    outputs: tuple[MatOperand, ...]
    extras: tuple[MatOperand, ...]
    # the kernel's records (plan.json: their fields here)
    tiles: TileGrid = inline_field()
    cluster: ClusterShape = inline_field()
    pipeline: StageRing = inline_field()
    layout: OperandLayout = inline_field()
    warps: WarpRoles = inline_field()
    staging: EpilogueStaging = inline_field()
    mma: Wgmma | Tcgen05Mma = inline_field()   # the MMA generation's own numbers (sm90.Wgmma / sm100.Tcgen05Mma)
    # the epilogue's code
    epilogue: tuple[tuple[str, PlanExpr], ...]  # (target, value) statements over the spec's names, in order
    epilogue_roles: dict       # every name the epilogue reads or writes -> accumulator | operand | constant |
                               # temporary | output (the templates spell each role)
    identity_epilogue: bool
    pair_loads: bool           # N even at every call: the epilogue reads its operands two columns a load (a thread's
                               # fragment holds column pairs), 4 B for 16-bit operands, 8 B for f32
    approx_math: bool
    lowering_semantics: str
    profile_space: int
    profile_dir: str
    flops: DimLike
    bytes_moved: DimLike
    # op.block_scales: partial-sum register sets a consumer rotates through (pipeline.partial_sums; 1: each K block
    # waits for its wgmmas before its promotion, 2: block k + 1's wgmmas run under block k's promotion)
    partial_sums: int = dataclasses.field(default=1, metadata={"omit_default": True})
    # ... and whether a consumer reads a K block's scales a step ahead (pipeline.scale_prefetch: a block with one set,
    # a pair with two), so their global-load latency runs under the wgmmas of a whole step
    scale_prefetch: bool = dataclasses.field(default=False, metadata={"omit_default": True})
    # schedule.persistent.decomposition: stream_k: the tail waves' tiles are shared by k-steps over the grid, partial
    # tiles handed over a workspace (the matmul family's stream_k.py)
    stream_k: bool = dataclasses.field(default=False, metadata={"omit_default": True})
    # ... its workspace: u32 flags first (sk_flag_words, the zeroed prefix), then a slot of sk_slot_floats f32 a block;
    # a thread's fragment moves sk_quads 16-byte pieces an m block
    sk_flag_words: int = dataclasses.field(default=0, metadata={"omit_default": True})
    sk_slot_floats: int = dataclasses.field(default=0, metadata={"omit_default": True})
    sk_quads: int = dataclasses.field(default=0, metadata={"omit_default": True})
    # schedule.epilogue.operands: smem: the row / column operands a producer warp stages in SMEM a tile (epilogue.py)
    epi_vectors: VectorSlots = dataclasses.field(default=VectorSlots(), metadata={"omit_default": True})

    @property
    def not_interpretable(self) -> str:
        """Why Mosaic GPU's interpreter cannot run this plan's Pallas kernel ('' when it can): verify's SKIP row."""
        return self.mma.not_interpretable

    @property
    def operands(self) -> tuple[MatOperand, ...]:
        return self.inputs + self.outputs

    @property
    def batched(self) -> bool:
        """More than one batch (a dynamic batch counts: it may be)."""
        return _batched(self.batch)


def peak_tflops(plan) -> float:
    """The datasheet dense tensor-core peak for the plan's inputs (fp8: twice bf16's)."""
    return _peak_by_dtype("fp8" if plan.in_dtype in FP8_DTYPES else plan.in_dtype)


def at_max(p: MatmulPlan) -> MatmulPlan:
    """The plan with every extent at its dynamic sizes' max (what explain and the drawings show for a dynamic plan;
    the plan itself unchanged when it has none): its own fields and its records' (the launch header, the tiles)."""
    at = {r.name: r.max for r in p.launch.dynamic_sizes}
    return _evaluated(p, at) if at else p


def _evaluated(record, at: dict):
    """`record` with each of its fields that is an extent (dims.Dim) evaluated at `at`, and each record it holds
    likewise (not the records in its tuples: operands, kernel arguments)."""
    changes = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if isinstance(value, dims.Dim):
            changes[f.name] = dims.evaluate(value, at)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes[f.name] = _evaluated(value, at)
    return dataclasses.replace(record, **changes)
