"""Planner of the `attention` family: flash-attention forward on Hopper tensor cores.

One CTA computes `block_q` query rows of one (batch, head): a TMA producer warpgroup loads the Q tile once and
streams K and V blocks (`block_kv` keys each) through `max_concurrent_steps` stages on separate full/empty
mbarrier rings; each of the 1-3 consumer warpgroups owns 64 query rows, computes S = Q K^T with wgmma from
SMEM, runs the online softmax in registers (exp2, row max/sum across the quad), and feeds P from registers as
the A operand of O += P V. With `barriers.schedule` (2 arrivals) the two consumers take turns issuing their
MMAs, so one's softmax overlaps the other's tensor-core work (ping-pong). Every rule is checked here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from typing import TYPE_CHECKING, NamedTuple

from ...frontend.model import ITEMSIZE
from ...plan.common import (
    CTYPE,
    KernelArg,
    Problems,
    SmemBuffer,
    SmemMap,
    resolve_shape,
)
from ...plan.hardware import Hardware
from ...plan.legality import (
    SMEM_SLACK,
    check_no_cluster,
    check_reserved_names,
    check_setmaxnreg,
    check_smem_fit,
    check_unique_names,
    max_consumer_regs,
    register_budget_problem,
    setmaxnreg_problem,
)
from .unread import check_unread

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

WGMMA_M = 64
DTYPES = ("bf16", "f16")
HEAD_DIMS = (64, 128, 256)
# registers a consumer thread needs beside S, O and P (addresses, row max / sum, loop state): ptxas fits
# block_kv 192 at head_dim 128 (96 + 64 + 48 + 32 = 240 of 240) and 3 consumers at head_dim 64 (64 + 32 + 32 + 32
# = 160 of 160) without spills; it serializes wgmma at block_kv 256 with head_dim 64 (128 + 32 + 64 = 224 of 240)
# and at block_kv 96, head_dim 128 on 160 registers (48 + 64 + 24 = 136). Low budgets can still spill: the build
# reports ptxas' verdict (build.compiler_verdicts)
REG_OVERHEAD = 32
# softmax code-shape choices, from A/B runs on the H200 (bench/results/raw/2026-12-02-attn-run6-ab.json; the --ab mode that set these is gone): the row max / sum in
# one accumulator chain each (4 chains measured 0-2% slower at every head_dim), and warps whose rows kept their
# running max skip the O rescale from head_dim 256 (a vote and a branch against D/2 multiplies a thread: +3% at
# D = 256 with 64-key blocks, -1 to -3% at D = 64 and 128)
ROW_CHAINS = 1
SKIP_RESCALE_MIN_D = 256
# lpt tile order: the share of the L2 that one section's K and V may fill (FlashAttention-3 takes 32 of the H100's
# 50 MB); Q, O and the other sections' tails pass through the rest
L2_SECTION = 0.625
# producer registers when it claims tiles dynamically: with 24 ptxas spills three values (H200 build, 2026-12-03)
DYNAMIC_PRODUCER_REGS = 32
# a TMA box row: 64 elements of 2 bytes, one 128-byte swizzle span
SLAB_ROW_BYTES = 128
# non-causal kernels of at most this many key blocks hide the trip count from ptxas (cuda.cu.j2's sg_tile)
OPAQUE_KV_BLOCKS = 4
MODULE_NAMES = frozenset({"make", "run_into"})


@dataclass(frozen=True)
class AttnOperand:
    name: str
    cname: str
    role: str            # "q" | "k" | "v" | "o" | "lse"
    dtype: str
    ctype: str
    itemsize: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class AttentionPlan:
    family: str
    name: str
    kernel_name: str
    sizes: dict
    constants: dict
    backends: tuple[str, ...]
    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_kv: int
    head_dim: int
    layout: str
    causal: bool
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
    q_blocks: int
    kv_blocks: int
    num_tiles: int             # q blocks x heads x batch
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
    threads: int
    smem_buffers: tuple[SmemBuffer, ...]
    smem_bytes: int
    kernel_args: tuple[KernelArg, ...]
    num_blocks: int
    auto_blocks: bool
    blocks_per_sm: int
    cluster_dims: tuple[int, int, int]
    approx_math: bool
    flops: int
    bytes_moved: int

    @property
    def operands(self) -> tuple[AttnOperand, ...]:
        return self.inputs + self.outputs

    @property
    def tma_ranks(self) -> list[int]:
        return sorted({len(a.shape) for a in self.kernel_args if a.kind == "tmap"})

    @property
    def sections(self) -> int:
        """lpt: sections of (batch, q head) pairs; the last one may hold fewer (last_section_heads)."""
        return -(-(self.batch * self.heads_q) // self.section_heads)

    @property
    def last_section_heads(self) -> int:
        return self.batch * self.heads_q - (self.sections - 1) * self.section_heads

    # --- derived numbers the templates print (computed here: the templates do no arithmetic)
    @property
    def group(self) -> int:
        """q heads per kv head (grouped-query attention)."""
        return self.heads_q // self.heads_kv

    @property
    def causal_offset(self) -> int:
        """Skv - Sq: causal query i sees keys j <= i + causal_offset."""
        return self.seq_kv - self.seq_q

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
    def last_q_block(self) -> int:
        return self.q_blocks - 1

    @property
    def last_kv_block(self) -> int:
        return self.kv_blocks - 1

    @property
    def kv_block_last_key(self) -> int:
        """block_kv - 1: the last key of a block, relative to its first."""
        return self.block_kv - 1

    @property
    def ragged_q_rows(self) -> int:
        """Rows of the ragged last query block (0: none)."""
        return self.seq_q % self.block_q

    @property
    def ragged_kv_keys(self) -> int:
        """Keys of the ragged last key block (0: none)."""
        return self.seq_kv % self.block_kv

    @property
    def section_tiles(self) -> int:
        """lpt: tiles of one (full) section."""
        return self.section_heads * self.q_blocks

    @property
    def last_section(self) -> int:
        return self.sections - 1

    @property
    def short_last_section(self) -> bool:
        return self.last_section_heads != self.section_heads

    @property
    def opaque_kv_end(self) -> bool:
        """Non-causal with few key blocks: the CUDA kernel hides the trip count from ptxas (see the template)."""
        return not self.causal and self.kv_blocks <= OPAQUE_KV_BLOCKS

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
        """Key blocks that query block qb reads (causal: up to the diagonal of its last row)."""
        if not self.causal:
            return self.kv_blocks
        return min(self.kv_blocks, ((qb + 1) * self.block_q + self.seq_kv - self.seq_q + self.block_kv - 1)
                   // self.block_kv)


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


def plan_attention(spec: SpecFile, hw: Hardware) -> tuple[AttentionPlan | None, Problems]:
    """Phases: names, shapes, the problem's dims and dtypes, blocks, grid, registers, SMEM, barriers, tile order,
    what each backend cannot express, fields no backend reads; each phase reports its own located problems."""
    op, sch = spec.op, spec.schedule
    problems = Problems()
    names = _check_names(spec, problems)
    before = len(problems)
    shapes = _resolve_shapes(op, names, problems)
    if shapes is None:
        return None, problems
    dims = _check_problem(op, names, shapes, problems)
    if len(problems) != before:
        return None, problems
    blocks = _plan_blocks(sch, names, dims, problems)
    grid = _grid(sch)
    regs = _plan_registers(sch.pipeline, blocks, dims, grid, names, hw, problems)
    smem = _plan_smem(sch.pipeline, blocks, dims, grid, hw, problems)
    pingpong = _check_sync(sch, blocks.nc, problems)
    order = _tile_order(op, sch, dims, hw, problems)
    _backend_limits(sch, names, blocks, grid, regs, smem, hw, problems)
    check_unread(sch, names.inputs, problems)
    if problems:
        return None, problems
    return _assemble(spec, names, dims, blocks, grid, regs, smem, pingpong, order), problems


def _check_names(spec: SpecFile, problems: Problems) -> Names:
    """One namespace for sizes and operands; the generated module's own names and schedgen.reserved's are taken."""
    op = spec.op
    check_unique_names((("sizes", op.sizes), ("inputs", op.inputs), ("outputs", op.outputs)), problems)
    for group, ns in (("sizes", op.sizes), ("outputs", op.outputs)):   # (input names: schedgen.reserved, below)
        for n in ns:
            if n in MODULE_NAMES:
                problems.add(("op", group, n), f"'{n}' is reserved by the generated module; choose another name")
    check_reserved_names(spec, problems)
    q, k, v = op.inputs
    outs = list(op.outputs)
    return Names(q, k, v, outs[0], outs[1] if len(outs) > 1 else None)


def _layout_text(op) -> str:
    return "[B, S, H, D]" if op.layout == "bshd" else "[B, H, S, D]"


def _resolve_shapes(op, names: Names, problems: Problems) -> dict | None:
    """Every operand's shape in numbers; None (reported) when a size is unknown or q, k, v, o are not 4-D."""
    before = len(problems)
    sizes = dict(op.sizes)
    shapes = {n: resolve_shape(o.shape, sizes, ("op", "inputs", n, "shape"), problems) for n, o in op.inputs.items()}
    shapes.update({n: resolve_shape(o.shape, sizes, ("op", "outputs", n, "shape"), problems) for n, o in op.outputs.items()})
    if len(problems) != before:
        return None
    for n in (*names.inputs, names.o):
        if len(shapes[n]) != 4:
            problems.add(("op", "inputs" if n in op.inputs else "outputs", n, "shape"),
                         f"attention operands are 4-D ({_layout_text(op)}); got {len(shapes[n])} dimensions")
    return None if len(problems) != before else shapes


def _check_problem(op, names: Names, shapes: dict, problems: Problems) -> Dims:
    """q, k, v and o agree (GQA heads, head_dim, the causal alignment), the scale is positive, the dtypes match."""
    def bshd(shape):
        return shape if op.layout == "bshd" else (shape[0], shape[2], shape[1], shape[3])

    b, sq, hq, d = bshd(shapes[names.q])
    bk, skv, hkv, dk = bshd(shapes[names.k])
    bv, sv, hv, dv = bshd(shapes[names.v])
    k_path = ("op", "inputs", names.k, "shape")
    if (bk, dk) != (b, d):
        problems.add(k_path, f"k {_layout_text(op)} must share B = {b} and D = {d} with q")
    if (bv, sv, hv, dv) != (bk, skv, hkv, dk):
        problems.add(("op", "inputs", names.v, "shape"),
                     f"v must have k's shape {list(shapes[names.k])}, got {list(shapes[names.v])}")
    if shapes[names.o] != shapes[names.q]:
        problems.add(("op", "outputs", names.o, "shape"), f"the output has q's shape {list(shapes[names.q])}")
    if hkv and hq % hkv:
        problems.add(k_path, f"q heads ({hq}) must be a multiple of kv heads ({hkv}) (grouped-query attention)")
    if d not in HEAD_DIMS:
        problems.add(("op", "inputs", names.q, "shape", 3), f"head_dim {d} is not supported; legal: 64, 128, 256")
    if op.scale is not None and op.scale <= 0:
        problems.add(("op", "scale"), f"the softmax scale must be positive (the running max is taken on scaled "
                                      f"scores), got {op.scale}")
    if op.causal and sq > skv:
        problems.add(("op", "causal"), f"causal attention aligns the last query with the last key; it needs "
                                       f"Sq <= Skv, got Sq = {sq}, Skv = {skv}")
    dims = Dims(b, sq, hq, skv, hkv, d, op.inputs[names.q].dtype, shapes)
    _check_dtypes(op, names, dims, problems)
    return dims


def _check_dtypes(op, names: Names, dims: Dims, problems: Problems) -> None:
    dtype = dims.dtype
    for n in names.inputs:
        if op.inputs[n].dtype not in DTYPES:
            problems.add(("op", "inputs", n, "dtype"), f"attention takes bf16 or f16, got {op.inputs[n].dtype}")
        elif op.inputs[n].dtype != dtype:
            problems.add(("op", "inputs", n, "dtype"), f"q, k and v share one dtype; q is {dtype}")
    if op.outputs[names.o].dtype != dtype:
        problems.add(("op", "outputs", names.o, "dtype"), f"the output has the inputs' dtype ({dtype})")
    if names.lse is not None:
        want = (dims.b, dims.hq, dims.sq)
        if dims.shapes[names.lse] != want or op.outputs[names.lse].dtype != "f32":
            problems.add(("op", "outputs", names.lse), f"the log-sum-exp output is f32 [B, Hq, Sq] = {list(want)}")


def _plan_blocks(sch, names: Names, dims: Dims, problems: Problems) -> Blocks:
    """block_q (64 rows a consumer warpgroup) and block_kv from the in_specs, which take no index maps."""
    pipe, d = sch.pipeline, dims.d
    nc = pipe.num_compute_wgs
    if pipe.kind != "warp_specialized":
        problems.add(("schedule", "pipeline", "kind"), "attention is warp-specialized (a TMA producer and 1-3 "
                                                       "consumer warpgroups): set pipeline.kind: warp_specialized")
    if nc > 3:
        problems.add(("schedule", "pipeline", "num_compute_wgs"), f"1 to 3 consumer warpgroups, got {nc}")
        nc = 3
    qs, ks, vs = (sch.in_specs.get(n) for n in names.inputs)
    block_q = qs.block_shape[0] if qs is not None else WGMMA_M * nc
    block_kv = ks.block_shape[0] if ks is not None else (128 if d <= 128 else 64)
    for n, bs, want in ((names.q, qs, None), (names.k, ks, None), (names.v, vs, block_kv)):
        if bs is None:
            continue
        path = ("schedule", "in_specs", n, "block_shape")
        if len(bs.block_shape) != 2 or bs.block_shape[1] != d:
            problems.add(path, f"a block is [rows, head_dim] = [..., {d}]")
        if want is not None and bs.block_shape[0] != want:
            problems.add((*path, 0), f"v's block has k's {want} rows")
        if bs.index_map is not None:
            problems.add(("schedule", "in_specs", n, "index_map"), "attention derives its index maps from the tile "
                                                                   "order; remove index_map")
    for n in sch.in_specs:
        if n not in names.inputs:
            problems.add(("schedule", "in_specs", n), f"no input named '{n}'; inputs are {', '.join(names.inputs)}")
    if block_q != WGMMA_M * nc:
        problems.add(("schedule", "in_specs", names.q, "block_shape", 0),
                     f"each consumer warpgroup owns {WGMMA_M} query rows (one wgmma M block): block_q is "
                     f"{WGMMA_M * nc} with {nc} consumer(s), got {block_q}")
    if block_kv % 16 or not 16 <= block_kv <= 256:
        problems.add(("schedule", "in_specs", names.k, "block_shape", 0),
                     f"block_kv is the N of S = Q K^T's wgmma and the K of O += P V's: a multiple of 16 in [16, 256], "
                     f"got {block_kv}")
    blocks = Blocks(nc, block_q, block_kv)
    if "pallas" in sch.backends:
        _pallas_ragged(names, dims, blocks, problems)
    return blocks


def _pallas_ragged(names: Names, dims: Dims, blocks: Blocks, problems: Problems) -> None:
    """The CUDA kernel clips / masks ragged last blocks; the Pallas one needs whole blocks."""
    sq, skv, block_q, block_kv = dims.sq, dims.skv, blocks.block_q, blocks.block_kv
    if sq % block_q:
        problems.add(("op", "inputs", names.q, "shape"), f"Sq = {sq} is not a multiple of block_q = {block_q}: the "
                                                         f"CUDA kernel clips a ragged last query block, the Pallas one "
                                                         f"does not yet; pad the sequence, pick a block_q that divides "
                                                         f"{sq}, or set schedule.backends: [cuda]")
    if skv % block_kv:
        problems.add(("op", "inputs", names.k, "shape"), f"Skv = {skv} is not a multiple of block_kv = {block_kv}: "
                                                         f"the CUDA kernel masks a ragged last key block, the Pallas "
                                                         f"one does not yet; pad the keys, pick a block_kv that "
                                                         f"divides {skv}, or set schedule.backends: [cuda]")


def _grid(sch) -> Grid:
    """A persistent grid: nd_loop strides over the tiles (CTA i takes i, i + grid, ...); dynamic claims each next
    tile from an atomic counter in GMEM (the CUDA kernel's rendering of dynamic_scheduling_loop on Hopper, which
    has no cluster launch control), so CTAs that drew short causal tiles take more of them."""
    persistent = sch.persistent.loop in ("nd_loop", "dynamic") and "loop" in sch.persistent.model_fields_set
    return Grid(persistent, persistent and sch.persistent.loop == "dynamic")


def _plan_registers(pipe, blocks: Blocks, dims: Dims, grid: Grid, names: Names, hw: Hardware,
                    problems: Problems) -> Regs:
    """setmaxnreg budgets of the producer and the consumers, within the block's registers and above what S, O
    and P need."""
    nc, block_kv = blocks.nc, blocks.block_kv
    s_regs, o_regs = block_kv // 2, dims.d // 2
    budget = hw.regs_per_block(128 * (1 + nc))
    # the producer that claims tiles keeps the counter's address and the claimed index beside the loads' coordinates
    min_preg = DYNAMIC_PRODUCER_REGS if grid.dynamic else 24
    preg = pipe.memory_registers or min_preg
    creg = pipe.compute_registers or min(256, max_consumer_regs(budget, preg, nc))
    check_setmaxnreg({"memory_registers": preg, "compute_registers": creg}, problems, suggest=True)
    if preg < min_preg:
        problems.add(("schedule", "pipeline", "memory_registers"),
                     f"the producer of a dynamic persistent grid claims its tiles from a counter and needs "
                     f"{min_preg} registers (24 spill); give memory_registers: {min_preg} and at most "
                     f"{max_consumer_regs(budget, min_preg, nc)} compute_registers")
    if (message := register_budget_problem(preg, nc, creg, hw)) is not None:
        problems.add(("schedule", "pipeline", "compute_registers"), message)
    need = s_regs + o_regs + block_kv // 4 + REG_OVERHEAD
    if need > min(creg, 255):
        problems.add(("schedule", "in_specs", names.k, "block_shape", 0),
                     f"a consumer thread holds S ({s_regs}), O ({o_regs}) and P ({block_kv // 4}) registers plus about "
                     f"{REG_OVERHEAD}: {need}, over its budget of {min(creg, 255)}; use a smaller block_kv")
    return Regs(s_regs, o_regs, preg, creg)


def _smem_map(q_bytes: int, kv_bytes: int, stages: int, o_staging: bool, dynamic: bool) -> SmemMap:
    m = SmemMap()
    m.alloc("q", q_bytes, note="Q tile" + ("" if o_staging else " (reused to stage O for the TMA store)"))
    m.alloc("k", kv_bytes, stages, note="K stages")
    m.alloc("v", kv_bytes, stages, note="V stages")
    if o_staging:
        m.alloc("o", q_bytes, note="O staging for the TMA store (Q is refilled under the epilogue)")
    for nm in ("q_full", "q_empty", "k_full", "k_empty", "v_full", "v_empty"):
        m.alloc(nm, 8, 1 if nm.startswith("q_") else stages, align=8, note="mbarrier")
    if dynamic:
        m.alloc("tile", 8, align=8, note="the claimed tile index, published with q_full")
    return m


def _plan_smem(pipe, blocks: Blocks, dims: Dims, grid: Grid, hw: Hardware, problems: Problems) -> Smem:
    """The Q tile, the K and V stage rings, O staging where it fits (persistent grids), the mbarriers."""
    stages = pipe.max_concurrent_steps
    if stages < 1:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"), "at least one K/V stage")
    isz = ITEMSIZE[dims.dtype]
    q_bytes = blocks.block_q * dims.d * isz
    kv_bytes = blocks.block_kv * dims.d * isz
    # a persistent CTA stages O in its own buffer where SMEM allows, so the next tile's Q loads under the epilogue
    o_staging = grid.persistent and \
        _smem_map(q_bytes, kv_bytes, stages, True, grid.dynamic).top + SMEM_SLACK <= hw.smem_per_block
    smem = _smem_map(q_bytes, kv_bytes, stages, o_staging, grid.dynamic)
    smem_bytes = check_smem_fit(smem, hw, ("schedule", "pipeline", "max_concurrent_steps"), problems,
                                "use fewer stages or a smaller block_kv")
    return Smem(stages, dims.d // 64, q_bytes, kv_bytes, o_staging, smem, smem_bytes)


def _check_sync(sch, nc: int, problems: Problems) -> bool:
    """One optional barrier, 'schedule' (the consumers' ping-pong, one arrival each), and no cluster; returns
    whether the consumers ping-pong."""
    for bname, bar in sch.barriers.items():
        if bname != "schedule":
            problems.add(("schedule", "barriers", bname), "attention names one barrier, 'schedule' (the consumers' "
                                                          "ping-pong); the K/V rings are the planner's")
        elif nc < 2 or bar.num_arrivals != nc:
            problems.add(("schedule", "barriers", "schedule", "num_arrivals"),
                         f"the ping-pong schedule barrier hands the tensor cores round robin among the consumer "
                         f"warpgroups: num_arrivals = num_compute_wgs (2 or 3), got num_arrivals "
                         f"{bar.num_arrivals} with {nc} consumer warpgroup(s)")
    check_no_cluster(sch.cluster, "attention CTAs share no operand here", problems)
    return "schedule" in sch.barriers


def _tile_order(op, sch, dims: Dims, hw: Hardware, problems: Problems) -> Order:
    """row_major or lpt (the default when causal), and lpt's sections: whole kv-head groups (the q heads that read
    one K/V) whose K and V fit in L2_SECTION of the L2, as few sections as that allows, of equal size (a short last
    section would start its long tiles late)."""
    order = sch.persistent.tile_order if "tile_order" in sch.persistent.model_fields_set else \
        ("lpt" if op.causal else "row_major")
    if order == "planar_snake":
        problems.add(("schedule", "persistent", "tile_order"), "attention tiles go row_major (query blocks fastest) or "
                                                               "lpt (longest first, heads fastest in L2-sized sections); "
                                                               "planar_snake orders a 2-D grid of like tiles")
    groups = dims.b * dims.hkv
    fit = max(1, int(hw.l2_bytes * L2_SECTION) // (2 * dims.skv * dims.d * ITEMSIZE[dims.dtype]))
    sections = -(-groups // fit)
    return Order(order, -(-groups // sections) * (dims.hq // dims.hkv))


def _backend_limits(sch, names: Names, blocks: Blocks, grid: Grid, regs: Regs, smem: Smem, hw: Hardware,
                    problems: Problems) -> None:
    if grid.persistent and "pallas" in sch.backends:
        problems.add(("schedule", "persistent", "loop"), f"the Pallas attention launches a block a tile; the "
                                                         f"persistent grid ({sch.persistent.loop}) is the CUDA "
                                                         f"kernel's (Mosaic GPU's dynamic_scheduling_loop needs "
                                                         f"Blackwell's cluster launch control): remove persistent.loop "
                                                         f"or set schedule.backends: [cuda]")
    if "pallas" in sch.backends:
        _pallas_limits(sch, names, blocks, regs, smem, hw, problems)


def _assemble(spec: SpecFile, names: Names, dims: Dims, blocks: Blocks, grid: Grid, regs: Regs, smem: Smem,
              pingpong: bool, order: Order) -> AttentionPlan:
    """The plan: every number the templates print."""
    op, sch = spec.op, spec.schedule
    b, sq, hq, skv, d, dtype = dims.b, dims.sq, dims.hq, dims.skv, dims.d, dims.dtype
    nc, block_q, block_kv, stages = blocks.nc, blocks.block_q, blocks.block_kv, smem.stages
    inputs, outputs = _operands(op, names, dims)
    scale = op.scale if op.scale is not None else 1.0 / math.sqrt(d)
    q_blocks, kv_blocks = -(-sq // block_q), -(-skv // block_kv)   # ragged last blocks: clipped / masked
    flops = 4 * b * hq * sq * skv * d // (2 if op.causal else 1)
    bytes_moved = sum(math.prod(o.shape) * o.itemsize for o in inputs + outputs)
    kname = "attn_{}_{}_d{}_q{}_kv{}_s{}_wg{}{}{}".format(
        spec.name, dtype, d, block_q, block_kv, stages, nc, "_pp" if pingpong else "",
        ("_dyn" if grid.dynamic else "_persist") if grid.persistent else "")
    return AttentionPlan(
        family="attention", name=spec.name, kernel_name=kname, sizes=dict(op.sizes), constants={},
        backends=tuple(sch.backends), batch=b, heads_q=hq, heads_kv=dims.hkv, seq_q=sq, seq_kv=skv, head_dim=d,
        layout=op.layout, causal=op.causal, scale=scale, scale_log2=scale * math.log2(math.e), dtype=dtype,
        with_lse=names.lse is not None, inputs=inputs, outputs=outputs, block_q=block_q, block_kv=block_kv,
        stages=stages, num_consumers=nc, pingpong=pingpong, q_blocks=q_blocks, kv_blocks=kv_blocks,
        num_tiles=q_blocks * hq * b, tile_order=order.order, section_heads=order.section_heads, slabs=smem.slabs,
        q_bytes=smem.q_bytes, kv_stage_bytes=smem.kv_bytes, s_regs=regs.s_regs, o_regs=regs.o_regs,
        producer_regs=regs.preg, consumer_regs=regs.creg, threads=128 * (1 + nc),
        smem_buffers=tuple(smem.map.buffers), smem_bytes=smem.bytes,
        kernel_args=_kernel_args(op.layout, names, dims, block_kv, grid.dynamic),
        num_blocks=q_blocks * hq * b, auto_blocks=grid.persistent, persistent=grid.persistent, dynamic=grid.dynamic,
        o_staging=smem.o_staging, row_chains=max(1, min(ROW_CHAINS, block_kv // 8)),
        skip_rescale=d >= SKIP_RESCALE_MIN_D, blocks_per_sm=1, cluster_dims=(1, 1, 1),
        approx_math=sch.compiler_params.approx_math, flops=flops, bytes_moved=bytes_moved,
    )


def _operands(op, names: Names, dims: Dims) -> tuple[tuple[AttnOperand, ...], tuple[AttnOperand, ...]]:
    isz, shapes = ITEMSIZE[dims.dtype], dims.shapes
    inputs = tuple(AttnOperand(n, f"in_{n}", r, op.inputs[n].dtype, CTYPE[op.inputs[n].dtype], isz, shapes[n])
                   for n, r in zip(names.inputs, ("q", "k", "v")))
    outputs = [AttnOperand(names.o, f"out_{names.o}", "o", dims.dtype, CTYPE[dims.dtype], isz, shapes[names.o])]
    if names.lse:
        outputs.append(AttnOperand(names.lse, f"out_{names.lse}", "lse", "f32", "float", 4, shapes[names.lse]))
    return inputs, tuple(outputs)


def _kernel_args(layout: str, names: Names, dims: Dims, block_kv: int, dynamic: bool) -> tuple[KernelArg, ...]:
    """Tensor maps: 3-D views [batch, sequence, columns] of the 4-D arrays, so that TMA zero-fills a ragged last
    block on load and clips it on store at each sequence's end (bshd: [B, S, H*D]; bhsd: [B*H, S, D]); the
    log-sum-exp pointer; the dynamic grid's tile counter."""
    isz = ITEMSIZE[dims.dtype]

    def tmap(i: int, shape, rows: int) -> KernelArg:
        bb, s_or_h, h_or_s, dd = shape
        v3 = (bb * s_or_h, h_or_s, dd) if layout == "bhsd" else (bb, s_or_h, h_or_s * dd)
        return KernelArg("tmap", i, dims.dtype, v3, (v3[1] * v3[2] * isz, v3[2] * isz, isz), (1, rows, 64), 128)

    shapes = dims.shapes
    args = [tmap(0, shapes[names.q], WGMMA_M), tmap(1, shapes[names.k], block_kv),
            tmap(2, shapes[names.v], block_kv), tmap(3, shapes[names.o], WGMMA_M)]
    if names.lse:
        args.append(KernelArg("ptr", 4))
    if dynamic:
        args.append(KernelArg("counter", -1))   # 2 u32: the next tile to claim, CTAs done (zero between launches)
    return tuple(args)


def _pallas_limits(sch, names: Names, blocks: Blocks, regs: Regs, smem: Smem, hw: Hardware,
                   problems: Problems) -> None:
    """What the Pallas (Mosaic GPU) rendering of this family (schedgen/families/attention/templates/pallas.py.j2)
    cannot express; each message names the way out."""
    hint = "; or set schedule.backends: [cuda]"
    nc, block_kv, stages, q_bytes, kv_bytes = blocks.nc, blocks.block_kv, smem.stages, smem.q_bytes, smem.kv_bytes
    if nc > 2:
        problems.add(("schedule", "pipeline", "num_compute_wgs"),
                     f"the Pallas attention has 1 or 2 consumer warpgroups (its schedule barrier alternates two), got "
                     f"{nc}" + hint)
    # jax.experimental.mosaic.gpu.wgmma issues K in groups of one swizzle width: with the 128-byte swizzle of the
    # K / V tiles that is 64 elements, and block_kv is the K of O += P V (the planner reports other illegal values)
    if block_kv % 64 and block_kv % 16 == 0 and 16 <= block_kv <= 256:
        problems.add(("schedule", "in_specs", names.k, "block_shape", 0),
                     f"the Pallas attention needs block_kv a multiple of 64 (64, 128, 192 or 256): Mosaic GPU's wgmma "
                     f"takes the K of O += P V (= block_kv) in 64-element groups of the 128-byte swizzle; got "
                     f"{block_kv}" + hint)
    # plgpu.set_max_registers is setmaxnreg
    for field, n in (("memory_registers", regs.preg), ("compute_registers", regs.creg)):
        if (message := setmaxnreg_problem(n, suggest=True, instruction="plgpu.set_max_registers")) is not None:
            problems.add(("schedule", "pipeline", field), message + hint)
    # Pallas SMEM: Q/O tile, K and V rings, the log-sum-exp rows, the barriers (q, 4 rings, schedule), 1 KiB slack
    # (only what the planner's own SMEM check, smem_bytes, did not already report)
    with_lse = names.lse is not None
    need = q_bytes + 2 * stages * kv_bytes + (nc * 64 * 4 if with_lse else 0) + 8 * (nc + 4 * stages + 1) + SMEM_SLACK
    if smem.bytes <= hw.smem_per_block < need:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"the Pallas kernel needs {need} B of SMEM (Q {q_bytes} B + 2 x {stages} x {kv_bytes} B of K/V"
                     f"{' + the log-sum-exp rows' if with_lse else ''}), over {hw.smem_per_block} B; use fewer stages "
                     f"or a smaller block_kv" + hint)
    _pallas_compiler_params(sch.compiler_params, hint, problems)
    for n in names.inputs:
        if n == "interpret":
            problems.add(("op", "inputs", n), "'interpret' is the generated Pallas function's own keyword argument; "
                                              "choose another name" + hint)


def _pallas_compiler_params(cp, hint: str, problems: Problems) -> None:
    if "lowering_semantics" in cp.model_fields_set and cp.lowering_semantics != "lane":
        problems.add(("schedule", "compiler_params", "lowering_semantics"),
                     "the Pallas attention is written for Lane semantics (explicit WGMMA register layouts, as jax's "
                     "attention_mgpu); remove lowering_semantics or set it to lane" + hint)
    if cp.unsafe_no_auto_barriers:
        problems.add(("schedule", "compiler_params", "unsafe_no_auto_barriers"),
                     "the Pallas attention stages O through the Q tile that its wgmmas read and relies on Mosaic GPU's "
                     "automatic barriers there; remove unsafe_no_auto_barriers" + hint)
    if cp.profile_space:
        problems.add(("schedule", "compiler_params", "profile_space"),
                     "the Pallas attention takes no profiler buffer; remove profile_space" + hint)
