"""Planner of the `matmul` family: `out = epilogue(lhs @ rhs)` on Hopper tensor cores.

The kernel is persistent and warp-specialized. One producer warpgroup (one elected thread) streams
(tile_m x tile_k) blocks of lhs and (tile_k x tile_n) blocks of rhs through a `max_concurrent_steps`-deep
ring of SMEM stages by TMA, on `full` / `empty` mbarrier rings; with a 2-CTA cluster the operand both
CTAs share is split between them and multicast. 1-2 consumer warpgroups split the (tile_m x tile_n)
output tile along M or N (`pipeline.wg_axis`), issue `wgmma` from SMEM descriptors with f32 accumulators
in registers, apply the epilogue, and store the tile in `epilogue.tile` chunks staged through
`epilogue.buffers` SMEM buffers by TMA. Tiles are visited by an nd_loop in row-major or planar-snake
order. Every hardware rule is checked here, located at the field that decides it.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...frontend import expr as ex
from ...frontend.model import ITEMSIZE
from ...plan.common import (
    CTYPE,
    KernelArg,
    Problems,
    SmemBuffer,
    SmemMap,
    cdiv,
    resolve_shape,
    row_major_strides,
)
from ...plan.hardware import Hardware
from ...plan.legality import (
    check_reserved_names,
    check_setmaxnreg,
    check_sizes_int32,
    check_smem_fit,
    check_tma_box_extent,
    check_unique_names,
    choose_swizzle,
    register_budget_problem,
    stages_that_fit,
)
from .epilogue import PlanExpr

if TYPE_CHECKING:
    from ...frontend.model import BlockSpec
    from ...frontend.specfile import SpecFile

WGMMA_M = 64
WGMMA_K_BYTES = 32            # one wgmma consumes 32 B of K (k16 for 16-bit inputs)
MMA_DTYPES = ("bf16", "f16")
OUT_DTYPES = ("bf16", "f16", "f32")
REG_OVERHEAD = 40             # registers a consumer thread needs beside its accumulators (addresses, epilogue)
DEFAULT_TILE = (128, 256, 64)


@dataclass(frozen=True)
class MatOperand:
    name: str
    cname: str
    role: str                 # "lhs" | "rhs" | "extra" | "out"
    dtype: str
    ctype: str
    itemsize: int
    shape: tuple[int, ...]
    bcast: str = ""           # extra operands: "row" ([N]), "col" ([M, 1]), "full" ([M, N]), "batch" ([B, M, N])


@dataclass(frozen=True)
class MatmulPlan:
    family: str
    name: str
    kernel_name: str
    sizes: dict
    constants: dict
    backends: tuple[str, ...]
    # the problem
    batch: int
    m: int
    n: int
    k: int
    lhs_batched: bool
    rhs_batched: bool
    in_dtype: str
    out_dtype: str
    transpose_lhs: bool        # lhs stored [K, M]: M-major for wgmma
    transpose_rhs: bool        # rhs stored [N, K]: K-major for wgmma (the default [K, N] is N-major)
    inputs: tuple[MatOperand, ...]
    outputs: tuple[MatOperand, ...]
    extras: tuple[MatOperand, ...]
    # the tiling
    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    delay_release: int         # wgmma groups kept in flight before a stage is released (0 or 1)
    num_consumers: int
    wg_axis: str               # "m" | "n": how the consumers split the tile
    wg_tile_m: int
    wg_tile_n: int
    m_blocks: int              # wgmma M blocks (64 rows) per consumer
    acc_regs: int              # f32 accumulators per consumer thread
    wgmma_regs: int            # f32 accumulators per thread of one m64nN wgmma (wg_tile_n / 2)
    k_wgmmas: int              # wgmma K steps (16 elements each) per stage
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
    a_mblock_bytes: int        # K-major lhs: bytes between the 64-row wgmma M blocks of a stage
    a_lbo: int
    a_sbo: int
    b_lbo: int
    b_sbo: int
    # cluster
    cluster_m: int
    cluster_n: int
    cluster_size: int
    cluster_dims: tuple[int, int, int]   # the launch's cluster shape: CTAs of a cluster are consecutive in x
    multicast: str             # "" | "lhs" | "rhs": the operand shared by the cluster, split and multicast
    mc_rank_bytes: int         # K-major multicast operand: a CTA's half starts rank x this many bytes into the stage
    mc_rank_elems: int         # ... and rank x this many rows (lhs) / columns (rhs) into the tile
    mc_rank_boxes: int         # MN-major multicast operand: TMA boxes each CTA loads (its half of the stage's)
    # epilogue
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
    epi_uneven: bool           # chunks per tile not a multiple of the buffers (Pallas waits for all first)
    wg_n8: int                 # n8 accumulator blocks across a consumer's columns (wg_tile_n / 8)
    epilogue: tuple[tuple[str, PlanExpr], ...]  # (target, value) statements over the spec's names, in order
    epilogue_roles: dict       # every name the epilogue reads or writes -> accumulator | operand | constant |
                               # temporary | output (the templates spell each role)
    identity_epilogue: bool
    ragged: bool               # M, N or K not a multiple of the tile (TMA zero-fills loads, clips stores)
    # the loop over tiles
    tiles_m: int
    tiles_n: int
    cluster_tiles_m: int       # the tile grid in cluster units (tiles_m / cluster_m x tiles_n / cluster_n)
    cluster_tiles_n: int
    num_tiles: int             # in cluster units (each cluster computes cluster_m x cluster_n tiles at once)
    k_iters: int
    tile_order: str
    minor_dim: int
    tile_width: int
    num_blocks: int
    auto_blocks: bool          # the runtime lowers num_blocks to the clusters the GPU can hold at once
    blocks_per_sm: int
    # warp specialization
    threads: int
    producer_regs: int
    consumer_regs: int
    block_regs: int            # registers the block holds under __launch_bounds__(threads, 1) (setmaxnreg's budget)
    # SMEM
    smem_buffers: tuple[SmemBuffer, ...]
    smem_bytes: int
    full_arrivals: int
    empty_arrivals: int
    stage_tx_bytes: int
    kernel_args: tuple[KernelArg, ...]
    approx_math: bool
    lowering_semantics: str
    profile_space: int
    flops: int
    bytes_moved: int

    @property
    def operands(self) -> tuple[MatOperand, ...]:
        return self.inputs + self.outputs

    @property
    def tma_ranks(self) -> list[int]:
        return sorted({len(a.shape) for a in self.kernel_args if a.kind == "tmap"})




def _broadcast_kind(shape: tuple[int, ...], batch: int, m: int, n: int) -> str | None:
    if shape in ((n,), (1, n)):
        return "row"
    if shape == (m, 1):
        return "col"
    if shape == (m, n):
        return "full"
    if batch > 1 and shape == (batch, m, n):
        return "batch"
    return None


def mat_operand(name: str, role: str, dtype: str, shape: tuple[int, ...], bcast: str = "") -> MatOperand:
    """One operand as the templates name it: `out_<name>` for the output, `in_<name>` for the inputs."""
    cname = f"out_{name}" if role == "out" else f"in_{name}"
    return MatOperand(name, cname, role, dtype, CTYPE[dtype], ITEMSIZE[dtype], tuple(shape), bcast)


def check_operand_roles(op, problems: Problems) -> None:
    """op.lhs and op.rhs name two different inputs (the matmul and collective_matmul families)."""
    for role in ("lhs", "rhs"):
        nm = getattr(op, role)
        if nm not in op.inputs:
            problems.add(("op", role), f"op.{role} names input '{nm}', which is not among the inputs "
                                       f"({', '.join(op.inputs)}); set op.{role} to one of them")
    if op.lhs == op.rhs:
        problems.add(("op", "rhs"), f"lhs and rhs are both '{op.lhs}'; A @ A^T style products need two inputs here")


# ------------------------------------------------------------------------------------ the records of the phases


@dataclass(frozen=True)
class Dims:
    """The problem: operand shapes and dtypes, M, N, K and the batch, the epilogue's operands."""
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    o_shape: tuple[int, ...]
    in_dtype: str
    out_dtype: str
    m: int
    n: int
    k: int
    batch: int
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
    ragged: bool


@dataclass(frozen=True)
class Warpgroups:
    """How the consumer warpgroups split the tile."""
    nc: int
    axis: str
    wtm: int
    wtn: int


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


# --------------------------------------------------------------------------------------------- the planner


def plan_matmul(spec: SpecFile, hw: Hardware) -> tuple[MatmulPlan | None, Problems]:
    """The phases in order, each checking its own rules; every problem is collected, and a phase whose inputs are
    broken stops the planner before it runs."""
    op, sch = spec.op, spec.schedule
    problems = Problems()
    out_name, extras = check_names(spec, problems)
    body = parse_epilogue(op, out_name, extras, problems)
    if problems and (op.lhs not in op.inputs or op.rhs not in op.inputs):
        return None, problems
    dims = problem_dims(op, out_name, extras, problems)
    if dims is None:
        return None, problems
    tile = block_tile(op, sch, out_name, dims, problems)
    wg = warpgroups(op, sch.pipeline, tile, dims, problems)
    layout = smem_layouts(op, tile, wg, dims.isz, hw, problems)
    cluster = cluster_shape(op, sch, tile, dims, layout, problems)
    chunks = epilogue_chunks(sch.epilogue, wg, dims, hw, problems)
    regs = registers(sch.pipeline, wg, hw, problems)
    pipe = pipeline(op, sch.pipeline, tile, dims.k, problems)
    smem = smem_map(sch, tile, dims.isz, pipe.stages, wg.nc, cluster.csize, chunks, hw, problems)
    loop = tile_loop(sch.persistent, dims.batch, cluster, hw, problems)
    backend_limits(op, sch, tile.ragged, dims, problems)
    if problems or body is None:
        return None, problems
    code = epilogue_code(op, body, out_name, extras)
    inputs, outputs = mat_operands(op, out_name, dims)
    args = kernel_args(op, out_name, inputs + outputs, tile, layout, cluster, chunks, hw, problems)
    if problems:
        return None, problems
    return launch_record(spec, dims, tile, wg, layout, cluster, chunks, regs, pipe, smem, loop, code,
                         inputs, outputs, args), problems


# --------------------------------------------------------------------------------- names and the epilogue body


def check_names(spec: SpecFile, problems: Problems) -> tuple[str, tuple[str, ...]]:
    """One namespace, no reserved names, lhs / rhs among the inputs. Returns the output's name and the inputs the
    epilogue reads (neither lhs nor rhs)."""
    op = spec.op
    check_unique_names((("sizes", op.sizes), ("constants", op.constants), ("inputs", op.inputs),
                        ("outputs", op.outputs)), problems)
    for nm in list(op.outputs) + list(op.constants):
        if nm == "acc":   # the epilogue reads the accumulator as `acc`
            problems.add(("op", "outputs" if nm in op.outputs else "constants", nm),
                         f"'{nm}' is reserved (the accumulator); choose another name")
    check_reserved_names(spec, problems)
    check_operand_roles(op, problems)
    out_name = next(iter(op.outputs))
    return out_name, tuple(nm for nm in op.inputs if nm not in (op.lhs, op.rhs))


def parse_epilogue(op, out_name: str, extras: tuple[str, ...], problems: Problems):
    """op.epilogue parsed over acc, the epilogue operands and the constants (None where it does not parse); every
    epilogue operand must be read by it."""
    body = None
    text = op.epilogue or f"{out_name} = acc"
    try:
        body = ex.parse_body(text, inputs=["acc", *extras], outputs=[out_name], constants=list(op.constants))
    except ex.ExprError as err:
        problems.add(("op", "epilogue"), err.message, (err.line, err.col))
    for nm in extras:
        if body is not None and not any(nm in _names(v) for _, v in body.statements):
            problems.add(("op", "inputs", nm), f"input '{nm}' is neither lhs, rhs nor read by op.epilogue; "
                                               f"use it in the epilogue or remove it")
    return body


# ----------------------------------------------------------------------------------------- operands and dtypes


def problem_dims(op, out_name: str, extras: tuple[str, ...], problems: Problems) -> Dims | None:
    """Shapes, dtypes, M / N / K and the batch; None (the problems said why) where the later phases cannot run."""
    before = len(problems)
    shapes = {nm: resolve_shape(o.shape, op.sizes, ("op", "inputs", nm, "shape"), problems) for nm, o in op.inputs.items()}
    shapes[out_name] = resolve_shape(op.outputs[out_name].shape, op.sizes, ("op", "outputs", out_name, "shape"), problems)
    if len(problems) != before:
        return None
    check_dtypes(op, out_name, problems)
    check_ranks(op, out_name, shapes, problems)
    if len(problems) != before:
        return None
    a_shape, b_shape, o_shape = shapes[op.lhs], shapes[op.rhs], shapes[out_name]
    m, n, k = contraction(op, a_shape, b_shape, problems)
    batch = check_batch(op, out_name, a_shape, b_shape, o_shape, m, n, problems)
    extra_ops = tuple(extra_operand(op, nm, shapes[nm], batch, m, n, problems) for nm in extras)
    if len(problems) != before:
        return None
    return Dims(a_shape, b_shape, o_shape, op.inputs[op.lhs].dtype, op.outputs[out_name].dtype, m, n, k, batch,
                len(a_shape) == 3, len(b_shape) == 3, extra_ops)


def check_dtypes(op, out_name: str, problems: Problems) -> None:
    """lhs and rhs: one wgmma input type; the output: one the epilogue stores."""
    in_dtype = op.inputs[op.lhs].dtype
    for role, nm in (("lhs", op.lhs), ("rhs", op.rhs)):
        dt = op.inputs[nm].dtype
        if dt not in MMA_DTYPES:
            problems.add(("op", "inputs", nm, "dtype"),
                         f"{role} dtype {dt} is not supported by this family yet; legal: {', '.join(MMA_DTYPES)} "
                         f"(f32 accumulation)")
    if op.inputs[op.rhs].dtype != in_dtype:
        problems.add(("op", "inputs", op.rhs, "dtype"), f"lhs is {in_dtype} but rhs is {op.inputs[op.rhs].dtype}; "
                                                       f"wgmma takes one input type: make them equal")
    out_dtype = op.outputs[out_name].dtype
    if out_dtype not in OUT_DTYPES:
        problems.add(("op", "outputs", out_name, "dtype"), f"output dtype {out_dtype} is not supported; legal: "
                                                            f"{', '.join(OUT_DTYPES)}")


def check_ranks(op, out_name: str, shapes: dict, problems: Problems) -> None:
    for role, nm in (("lhs", op.lhs), ("rhs", op.rhs)):
        if len(shapes[nm]) not in (2, 3):
            problems.add(("op", "inputs", nm, "shape"), f"{role} must be 2-D, or 3-D with a leading batch dimension; "
                                                       f"got {len(shapes[nm])} dimensions")
    if len(shapes[out_name]) not in (2, 3):
        problems.add(("op", "outputs", out_name, "shape"), "the output must be [M, N] or [B, M, N]")


def contraction(op, a_shape: tuple[int, ...], b_shape: tuple[int, ...], problems: Problems) -> tuple[int, int, int]:
    """M, N, K from lhs and rhs as stored (op.transpose_lhs / op.transpose_rhs); their K must agree."""
    m, ka = (a_shape[-1], a_shape[-2]) if op.transpose_lhs else (a_shape[-2], a_shape[-1])
    kb, n = (b_shape[-1], b_shape[-2]) if op.transpose_rhs else (b_shape[-2], b_shape[-1])
    a_lay = "[K, M]" if op.transpose_lhs else "[M, K]"
    b_lay = "[N, K]" if op.transpose_rhs else "[K, N]"
    if ka != kb:
        problems.add(("op", "inputs", op.rhs, "shape"),
                     f"contraction sizes differ: lhs {a_lay} = {list(a_shape[-2:])} has K = {ka}, rhs {b_lay} = "
                     f"{list(b_shape[-2:])} has K = {kb}" + ("" if op.transpose_rhs else
                                                           " (set op.transpose_rhs: true if rhs is stored [N, K])"))
    return m, n, ka


def check_batch(op, out_name: str, a_shape, b_shape, o_shape, m: int, n: int, problems: Problems) -> int:
    """The output is [M, N] or [B, M, N]; a batched operand needs a batched output of its batch. Returns B."""
    batch = o_shape[0] if len(o_shape) == 3 else 1
    lhs_batched, rhs_batched = len(a_shape) == 3, len(b_shape) == 3
    if tuple(o_shape[-2:]) != (m, n):
        problems.add(("op", "outputs", out_name, "shape"), f"the output must be [M, N] = [{m}, {n}], got {list(o_shape)}")
    if len(o_shape) == 2 and (lhs_batched or rhs_batched):
        problems.add(("op", "outputs", out_name, "shape"), "a batched lhs or rhs needs a batched output [B, M, N]")
    for role, nm, shp in (("lhs", op.lhs, a_shape), ("rhs", op.rhs, b_shape)):
        if len(shp) == 3 and shp[0] != batch:
            problems.add(("op", "inputs", nm, "shape", 0), f"{role} batch is {shp[0]} but the output's is {batch}")
    if len(o_shape) == 3 and not lhs_batched:
        problems.add(("op", "inputs", op.lhs, "shape"), "a batched output needs a batched lhs [B, M, K]")
    return batch


def extra_operand(op, nm: str, shape: tuple[int, ...], batch: int, m: int, n: int, problems: Problems) -> MatOperand:
    """An epilogue operand: a row, a column or a full (batched) output-shaped array of a float dtype."""
    kind = _broadcast_kind(shape, batch, m, n)
    if kind is None:
        problems.add(("op", "inputs", nm, "shape"),
                     f"epilogue operand shape {list(shape)} is not one the epilogue reads: a row [N] = [{n}], "
                     f"a column [M, 1] = [{m}, 1], or a full [M, N] = [{m}, {n}]" + (" or [B, M, N]" if batch > 1 else ""))
        kind = "row"
    dt = op.inputs[nm].dtype
    if dt not in ("bf16", "f16", "f32"):
        problems.add(("op", "inputs", nm, "dtype"), f"epilogue operands are bf16, f16 or f32, got {dt}")
    return mat_operand(nm, "extra", dt, shape, kind)


# ----------------------------------------------------------------------------------- the tile and the warpgroups


def block_tile(op, sch, out_name: str, dims: Dims, problems: Problems) -> Tile:
    """The block tile from the BlockSpecs (each as stored), defaults where absent; what a BlockSpec may say here."""
    tm, tn, tk = tile_from_block_specs(op, sch, out_name, problems)
    for nm in sch.in_specs:
        if nm not in (op.lhs, op.rhs):
            problems.add(("schedule", "in_specs", nm), f"only lhs '{op.lhs}' and rhs '{op.rhs}' are tiled by BlockSpecs; "
                                                      f"epilogue operands follow the output tile")
    for nm in sch.out_specs:
        if nm != out_name:
            problems.add(("schedule", "out_specs", nm), f"no output named '{nm}'; the output is '{out_name}'")
    for nm, bs in list(sch.in_specs.items()) + list(sch.out_specs.items()):
        group = "in_specs" if nm in op.inputs else "out_specs"
        if bs.memory_space != "smem":
            problems.add(("schedule", group, nm, "memory_space"),
                         "matmul operands are staged in smem (wgmma reads SMEM descriptors); tmem is Blackwell-only")
        if bs.index_map is not None:
            problems.add(("schedule", group, nm, "index_map"),
                         "the matmul family derives its index maps from the tile order (persistent.tile_order); "
                         "remove index_map")
    a_spec, b_spec = sch.in_specs.get(op.lhs), sch.in_specs.get(op.rhs)
    oob = {bs.out_of_bounds for bs in (a_spec, b_spec) if bs is not None}
    m, n, k = dims.m, dims.n, dims.k
    ragged = m % tm != 0 or n % tn != 0 or k % tk != 0
    if "nan" in oob:
        problems.add(("schedule", "in_specs", op.lhs if a_spec and a_spec.out_of_bounds == "nan" else op.rhs,
                      "out_of_bounds"), "NaN padding would poison whole output rows; use zero (K padding must add 0)")
    if ragged and "zero" not in oob:
        problems.add(("schedule", "in_specs", op.lhs, "out_of_bounds"),
                     f"M, N, K = {m}, {n}, {k} are not all multiples of the tile {tm} x {tn} x {tk}; set "
                     f"out_of_bounds: zero on the lhs/rhs BlockSpecs (TMA zero-fills the edge) or use sizes that divide")
    return Tile(tm, tn, tk, a_spec, b_spec, ragged)


def warpgroups(op, pipe, tile: Tile, dims: Dims, problems: Problems) -> Warpgroups:
    """1-2 consumer warpgroups split the tile along M or N; each one's share is a legal wgmma shape."""
    tm, tn, tk = tile.tm, tile.tn, tile.tk
    nc = pipe.num_compute_wgs
    if pipe.kind != "warp_specialized":
        problems.add(("schedule", "pipeline", "kind"),
                     "the matmul family is warp-specialized (a TMA producer warpgroup and 1-2 wgmma consumers); set "
                     "pipeline.kind: warp_specialized")
    if nc > 2:
        problems.add(("schedule", "pipeline", "num_compute_wgs"), f"1 or 2 consumer warpgroups, got {nc}")
        nc = 2
    axis = (pipe.wg_axis or ("m" if tm // nc >= WGMMA_M and tm % (nc * WGMMA_M) == 0 else "n")).lower()
    if axis not in ("m", "n"):
        problems.add(("schedule", "pipeline", "wg_axis"), f"consumers split the tile along m or n, got '{pipe.wg_axis}'")
        axis = "m"
    wtm, wtn = (tm // nc, tn) if axis == "m" else (tm, tn // nc)
    if (axis == "m" and tm % nc) or wtm % WGMMA_M:
        problems.add(("schedule", "in_specs", op.lhs, "block_shape"),
                     f"each consumer warpgroup takes {wtm} rows of the {tm}-row tile; wgmma needs a multiple of {WGMMA_M} "
                     f"(tile_m a multiple of {WGMMA_M * (nc if axis == 'm' else 1)})")
    if axis == "n" and tn % nc:
        problems.add(("schedule", "in_specs", op.rhs, "block_shape"), f"tile_n {tn} does not split over {nc} consumers")
    if wtn % 8 or wtn > 256 or wtn < 8:
        problems.add(("schedule", "in_specs", op.rhs, "block_shape"),
                     f"each consumer's wgmma N is {wtn}; it must be a multiple of 8 between 8 and 256 "
                     f"(tile_n {tn}{' split over ' + str(nc) + ' consumers' if axis == 'n' else ''})")
    if tk % (WGMMA_K_BYTES // dims.isz):
        problems.add(("schedule", "in_specs", op.lhs, "block_shape"),
                     f"tile_k {tk} must be a multiple of wgmma's K ({WGMMA_K_BYTES // dims.isz} for {dims.in_dtype})")
    return Warpgroups(nc, axis, wtm, wtn)


# ------------------------------------------------------------------------------------------ SMEM layouts


def smem_layouts(op, tile: Tile, wg: Warpgroups, isz: int, hw: Hardware, problems: Problems) -> Layout:
    """K-major operands are cut into swizzle-wide K slabs, MN-major ones into swizzle-wide MN slabs."""
    k_major_a, k_major_b = not op.transpose_lhs, op.transpose_rhs
    swz_a = _swizzle(tile.a_spec, tile.tk if k_major_a else WGMMA_M, isz, ("schedule", "in_specs", op.lhs), problems, hw)
    swz_b = _swizzle(tile.b_spec, tile.tk if k_major_b else min(wg.wtn, 64), isz, ("schedule", "in_specs", op.rhs),
                     problems, hw)
    check_transforms(op, tile, swz_a, swz_b, isz, problems)
    layout = Layout(k_major_a, k_major_b, swz_a, swz_b, max(swz_a // isz, 1), max(swz_b // isz, 1))
    check_swizzle_widths(op, tile, wg, layout, problems)
    return layout


def _swizzle(bs, minor_elems: int, isz: int, path: tuple, problems: Problems, hw: Hardware) -> int:
    return choose_swizzle(None if bs is None else bs.transforms.swizzle, minor_elems * isz, hw,
                          (*path, "transforms", "swizzle"), problems, what="the swizzled dimension's bytes", none="none")


def check_transforms(op, tile: Tile, swz_a: int, swz_b: int, isz: int, problems: Problems) -> None:
    """No SMEM transpose (wgmma reads either major order); a tiling, if given, is the swizzle's."""
    for bs, nm in ((tile.a_spec, op.lhs), (tile.b_spec, op.rhs)):
        if bs is not None and bs.transforms.transpose is not None:
            problems.add(("schedule", "in_specs", nm, "transforms", "transpose"),
                         "say the stored layout with op.transpose_lhs / op.transpose_rhs; wgmma reads either major "
                         "order from SMEM, so no SMEM transpose is needed")
        if bs is not None and bs.transforms.tiling is not None:
            sw = swz_a if nm == op.lhs else swz_b
            want = [8, sw // isz] if sw else None
            if list(bs.transforms.tiling) != want:
                problems.add(("schedule", "in_specs", nm, "transforms", "tiling"),
                             f"with swizzle {sw} the tiling is {want} (8 rows of swizzle/itemsize elements); omit it "
                             f"or write {want}")


def check_swizzle_widths(op, tile: Tile, wg: Warpgroups, lay: Layout, problems: Problems) -> None:
    """The slabs tile the stage: the swizzled extent of each operand is a multiple of the swizzle width."""
    tk = tile.tk
    if lay.k_major_a and tk % lay.atom_a:
        problems.add(("schedule", "in_specs", op.lhs, "transforms", "swizzle"),
                     f"tile_k {tk} must be a multiple of the swizzle width ({lay.swz_a} B = {lay.atom_a} elements)")
    if lay.k_major_b and tk % lay.atom_b:
        problems.add(("schedule", "in_specs", op.rhs, "transforms", "swizzle"),
                     f"tile_k {tk} must be a multiple of the swizzle width ({lay.swz_b} B = {lay.atom_b} elements)")
    if not lay.k_major_a and wg.wtm % lay.atom_a:
        problems.add(("schedule", "in_specs", op.lhs, "transforms", "swizzle"),
                     f"M-major lhs: each consumer's {wg.wtm} rows must be a multiple of the swizzle width "
                     f"({lay.atom_a} elements)")
    if not lay.k_major_b and (wg.wtn % lay.atom_b or tile.tn % lay.atom_b):
        problems.add(("schedule", "in_specs", op.rhs, "transforms", "swizzle"),
                     f"N-major rhs: each consumer's {wg.wtn} columns must be a multiple of the swizzle width "
                     f"({lay.swz_b} B = {lay.atom_b} elements); use a smaller swizzle or a wider tile_n")
    if lay.swz_a == 0 or lay.swz_b == 0:
        problems.add(("schedule", "in_specs", op.lhs if lay.swz_a == 0 else op.rhs, "transforms", "swizzle"),
                     "this family's SMEM descriptors use a swizzled layout; choose 32, 64 or 128 (or auto)")


# ------------------------------------------------------------------------------------- cluster and multicast


def cluster_shape(op, sch, tile: Tile, dims: Dims, lay: Layout, problems: Problems) -> Cluster:
    """A 1x1, 2x1 or 1x2 cluster; the operand its CTAs share is split between them and multicast."""
    cl = list(sch.cluster) + [1] * (2 - len(sch.cluster))
    cm, cn = cl[0], cl[1]
    csize = cm * cn
    if len(sch.cluster) > 2 or csize > 2:
        problems.add(("schedule", "cluster"), f"clusters of 1x1, 2x1 or 1x2 CTAs are supported, got {list(sch.cluster)}")
        cm, cn, csize = 1, 1, 1
    multicast = "rhs" if cm == 2 else "lhs" if cn == 2 else ""
    tiles_m, tiles_n = cdiv(dims.m, tile.tm), cdiv(dims.n, tile.tn)
    if tiles_m % cm or tiles_n % cn:
        problems.add(("schedule", "cluster"), f"a {cm}x{cn} cluster needs the tile grid ({tiles_m} x {tiles_n}) divisible by it")
    shared_spec = tile.b_spec if multicast == "rhs" else tile.a_spec if multicast == "lhs" else None
    for nm, bs in ((op.lhs, tile.a_spec), (op.rhs, tile.b_spec)):
        if bs is not None and bs.collective_axes and (csize == 1 or bs is not shared_spec):
            problems.add(("schedule", "in_specs", nm, "collective_axes"),
                         "only the operand the cluster's CTAs share is multicast: rhs with cluster [2, 1], lhs with "
                         "[1, 2]" + ("; this launch has no cluster" if csize == 1 else ""))
    tm, tn = tile.tm, tile.tn
    if multicast == "rhs" and (tn // 2) % (1 if lay.k_major_b else lay.atom_b):
        problems.add(("schedule", "cluster"), f"each CTA loads half of the rhs tile ({tn // 2} columns); it must be a "
                                              f"multiple of the swizzle width {lay.atom_b}")
    if multicast == "lhs" and (tm // 2) % (8 if lay.k_major_a else lay.atom_a):
        problems.add(("schedule", "cluster"), f"each CTA loads half of the lhs tile ({tm // 2} rows); it must be a "
                                              f"multiple of {8 if lay.k_major_a else lay.atom_a}")
    return Cluster(cm, cn, csize, multicast, tiles_m, tiles_n)


# -------------------------------------------------------------------------------------------------- epilogue


def epilogue_chunks(epi, wg: Warpgroups, dims: Dims, hw: Hardware, problems: Problems) -> EpilogueChunks:
    """The output tile is stored in (64 x cols) chunks staged through SMEM by TMA, or directly from registers."""
    osz = dims.osz
    if epi.tile is not None:
        er, ec = epi.tile
    else:
        er, ec = WGMMA_M, min(wg.wtn, 128 // osz)
    direct = epi.store == "direct"
    epi_swz = 0
    if not direct:
        if er != WGMMA_M:
            problems.add(("schedule", "epilogue", "tile", 0), f"epilogue chunks are one wgmma M block tall: {WGMMA_M} rows, got {er}")
        if ec <= 0 or ec % 16 or wg.wtn <= 0 or wg.wtn % ec:
            problems.add(("schedule", "epilogue", "tile", 1),
                         f"epilogue chunk width {ec} must be a multiple of 16 dividing each consumer's {wg.wtn} columns")
        epi_swz = ec * osz if ec * osz in hw.swizzles else 0
        if ec * osz > 128:
            problems.add(("schedule", "epilogue", "tile", 1), f"epilogue chunk rows are {ec * osz} B; at most 128 B (the "
                                                              f"widest swizzle): use at most {128 // osz} columns")
    if direct and dims.n % 2:
        problems.add(("schedule", "epilogue", "store"), f"direct stores write column pairs; N = {dims.n} is odd: use store: tma")
    return EpilogueChunks(er, ec, direct, epi_swz, er * ec * osz)


def epilogue_code(op, body, out_name: str, extras: tuple[str, ...]) -> EpilogueCode:
    """The epilogue's validated statements and the role of every name in them (the templates spell the roles)."""
    roles = {"acc": "accumulator", **{nm: "operand" for nm in extras}, **{c: "constant" for c in op.constants}}
    roles.update({target: "output" if target == out_name else "temporary" for target, _ in body.statements})
    statements = tuple((target, PlanExpr(value)) for target, value in body.statements)
    tree = body.statements[0][1].tree
    while isinstance(tree, ast.UnaryOp) and isinstance(tree.op, ast.UAdd):   # `out = +acc` is a plain store too
        tree = tree.operand
    identity = len(statements) == 1 and isinstance(tree, ast.Name) and tree.id == "acc"
    return EpilogueCode(statements, roles, identity)


# ---------------------------------------------------------------------------------------- registers, pipeline


def registers(pipe, wg: Warpgroups, hw: Hardware, problems: Problems) -> Registers:
    """setmaxnreg budgets of the producer and the consumers, within the registers the block is launched with
    (`__launch_bounds__(threads, 1)`); the accumulators fit a consumer thread's."""
    nc = wg.nc
    threads = 128 * (1 + nc)
    preg = pipe.memory_registers or (40 if nc == 2 else 56)
    creg = pipe.compute_registers or (232 if nc == 2 else 240)
    acc_regs = wg.wtm * wg.wtn // 128
    check_setmaxnreg({"memory_registers": preg, "compute_registers": creg}, problems)
    if (message := register_budget_problem(preg, nc, creg, hw)) is not None:
        problems.add(("schedule", "pipeline", "compute_registers"), message)
    if acc_regs + REG_OVERHEAD > min(creg, 255):
        problems.add(("schedule", "pipeline", "compute_registers"),
                     f"each consumer thread holds {acc_regs} f32 accumulators ({wg.wtm} x {wg.wtn} / 128) plus about "
                     f"{REG_OVERHEAD} working registers, over its budget of {min(creg, 255)}; use a smaller tile or "
                     f"more consumers")
    return Registers(threads, preg, creg, acc_regs, hw.regs_per_block(threads))


def pipeline(op, pipe, tile: Tile, k: int, problems: Problems) -> Pipeline:
    """The TMA ring's depth and how long a stage is held after its wgmma (delay_release)."""
    stages = pipe.max_concurrent_steps
    if stages < 2:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"), "the TMA ring needs at least 2 stages")
    specs = [bs for bs in (tile.a_spec, tile.b_spec) if bs is not None]
    delay = max((bs.delay_release for bs in specs), default=1)
    if delay > 1:
        problems.add(("schedule", "in_specs", op.lhs, "delay_release"),
                     "the CUDA kernel keeps at most one wgmma group in flight (delay_release 0 or 1)")
    if delay >= stages:
        problems.add(("schedule", "in_specs", op.lhs, "delay_release"), f"delay_release {delay} must be below the "
                                                                          f"{stages} stages")
    return Pipeline(stages, cdiv(k, tile.tk), delay)


# ------------------------------------------------------------------------------------------------- SMEM map


def smem_map(sch, tile: Tile, isz: int, stages: int, nc: int, csize: int, chunks: EpilogueChunks, hw: Hardware,
             problems: Problems) -> Smem:
    """The lhs / rhs stage rings, the output staging buffers and the barriers; they must fit a block's SMEM."""
    a_stage = tile.tm * tile.tk * isz
    b_stage = tile.tn * tile.tk * isz
    buffers = sch.epilogue.buffers
    smem = SmemMap()
    smem.alloc("a", a_stage, stages, note="lhs stage ring")
    smem.alloc("b", b_stage, stages, note="rhs stage ring")
    if not chunks.direct:
        smem.alloc("epi", chunks.nbytes, buffers * nc, note="output staging per consumer")
    full_arr, empty_arr = barrier_arrivals(sch, stages, nc * csize, problems)
    smem.alloc("full", 8, stages, align=8, note="TMA landed (expect_tx)")
    smem.alloc("empty", 8, stages, align=8, note=f"stage free ({nc * csize} consumer arrivals)")
    staging = 0 if chunks.direct else chunks.nbytes * buffers * nc
    fit = stages_that_fit(hw, staging + 16 * stages, a_stage + b_stage)
    nbytes = check_smem_fit(smem, hw, ("schedule", "pipeline", "max_concurrent_steps"), problems,
                            f"at most {fit} stages fit this tile")
    return Smem(tuple(smem.buffers), nbytes, full_arr, empty_arr, a_stage, b_stage)


def barrier_arrivals(sch, stages: int, consumers: int, problems: Problems) -> tuple[int, int]:
    """The 'full' and 'empty' rings: one barrier per stage; their arrivals (1 TMA, one per consumer warpgroup of the
    cluster) unless schedule.barriers says otherwise."""
    full_arr, empty_arr = 1, consumers
    for bname, bar in sch.barriers.items():
        if bname not in ("full", "empty"):
            problems.add(("schedule", "barriers", bname), f"the matmul family's barriers are 'full' and 'empty'; got '{bname}'")
            continue
        if bar.num_barriers != stages:
            problems.add(("schedule", "barriers", bname, "num_barriers"),
                         f"'{bname}' has one barrier per stage: {stages}, got {bar.num_barriers}")
        if bname == "full":
            full_arr = bar.num_arrivals
        else:
            empty_arr = bar.num_arrivals
    return full_arr, empty_arr


# ------------------------------------------------------------------------------------- the loop over tiles


def tile_loop(pers, batch: int, cluster: Cluster, hw: Hardware, problems: Problems) -> TileLoop:
    """A persistent nd_loop over the tiles (in cluster units) in row-major or planar-snake order, or a CTA a tile."""
    if pers.loop == "dynamic":
        problems.add(("schedule", "persistent", "loop"), "dynamic work claiming pays where tiles differ in "
                                                         "length (the attention family's causal tiles); matmul tiles "
                                                         "are all alike: use nd_loop")
    csize = cluster.csize
    num_tiles = batch * (cluster.tiles_m // max(cluster.cm, 1)) * (cluster.tiles_n // max(cluster.cn, 1))
    auto = pers.loop == "nd_loop" and pers.num_blocks == "auto"
    if pers.loop == "none":
        clusters = num_tiles
    elif pers.num_blocks == "auto":
        clusters = min(num_tiles, hw.sm_count // csize)
    else:
        if pers.num_blocks % csize:
            problems.add(("schedule", "persistent", "num_blocks"), f"num_blocks must be a multiple of the cluster size {csize}")
        clusters = min(num_tiles, max(pers.num_blocks // csize, 1))
    if pers.tile_order == "lpt":
        problems.add(("schedule", "persistent", "tile_order"), "lpt (longest tiles first) orders attention tiles; "
                                                               "matmul tiles are all alike: use row_major or planar_snake")
    return TileLoop(num_tiles, auto, clusters)


def backend_limits(op, sch, ragged: bool, dims: Dims, problems: Problems) -> None:
    """32-bit coordinates; what the Pallas rendering can take."""
    check_sizes_int32(op.sizes, problems)
    if sch.compiler_params.lowering_semantics == "lane" and "pallas" in sch.backends:
        problems.add(("schedule", "compiler_params", "lowering_semantics"),
                     "the Pallas matmul uses warpgroup semantics (wgmma); remove lowering_semantics: lane")
    if "pallas" in sch.backends:
        _pallas_limits(op, sch, ragged, dims.extra_ops, dims.batch, problems)


# ------------------------------------------------------------------------------ operands, tensor maps, the record


def mat_operands(op, out_name: str, dims: Dims) -> tuple[tuple[MatOperand, ...], tuple[MatOperand, ...]]:
    """The inputs in op.inputs order (lhs, rhs and the epilogue operands) and the output."""
    inputs = []
    for nm in op.inputs:
        if nm == op.lhs:
            inputs.append(mat_operand(nm, "lhs", dims.in_dtype, dims.a_shape))
        elif nm == op.rhs:
            inputs.append(mat_operand(nm, "rhs", dims.in_dtype, dims.b_shape))
        else:
            inputs.append(next(e for e in dims.extra_ops if e.name == nm))
    return tuple(inputs), (mat_operand(out_name, "out", dims.out_dtype, dims.o_shape),)


def tensor_map(operand: int, shape: tuple[int, ...], dtype: str, rows: int, cols: int, swizzle: int) -> KernelArg:
    """A tensor map over a row-major [(B,) R, C] operand with (1,) rows x cols boxes."""
    box = ((1,) if len(shape) == 3 else ()) + (rows, cols)
    return KernelArg("tmap", operand, dtype, tuple(shape), row_major_strides(shape, ITEMSIZE[dtype]), box, swizzle)


def kernel_args(op, out_name: str, operands: tuple[MatOperand, ...], tile: Tile, lay: Layout, cluster: Cluster,
                chunks: EpilogueChunks, hw: Hardware, problems: Problems) -> tuple[KernelArg, ...]:
    """Tensor maps over lhs, rhs and the output (or its pointer: direct stores), pointers to the epilogue operands.
    Boxes as loaded: a multicast operand is loaded in halves."""
    idx = {o.name: i for i, o in enumerate(operands)}
    by_name = {o.name: o for o in operands}
    a, b, out = by_name[op.lhs], by_name[op.rhs], by_name[out_name]
    a_rows = (tile.tm // (2 if cluster.multicast == "lhs" else 1)) if lay.k_major_a else tile.tk
    b_rows = (tile.tn // (2 if cluster.multicast == "rhs" else 1)) if lay.k_major_b else tile.tk
    args = [tensor_map(idx[op.lhs], a.shape, a.dtype, a_rows, lay.atom_a, lay.swz_a),
            tensor_map(idx[op.rhs], b.shape, b.dtype, b_rows, lay.atom_b, lay.swz_b),
            KernelArg("ptr", idx[out_name]) if chunks.direct else
            tensor_map(idx[out_name], out.shape, out.dtype, chunks.rows, chunks.cols, chunks.swizzle)]
    args += [KernelArg("ptr", idx[o.name]) for o in operands if o.role == "extra"]
    for nm, rows in ((op.lhs, a_rows), (op.rhs, b_rows)):
        check_tma_box_extent(rows, hw, ("schedule", "in_specs", nm, "block_shape"), problems,
                             f"a TMA box holds at most {hw.tma_max_box} rows; this tile loads {rows}")
    return tuple(args)


def launch_record(spec: SpecFile, dims: Dims, tile: Tile, wg: Warpgroups, lay: Layout, cl: Cluster,
                  chunks: EpilogueChunks, regs: Registers, pipe: Pipeline, smem: Smem, loop: TileLoop,
                  code: EpilogueCode, inputs, outputs, args) -> MatmulPlan:
    """The plan: every number the templates use, from the phases' records."""
    op, sch = spec.op, spec.schedule
    tm, tn, tk = tile.tm, tile.tn, tile.tk
    a_sub = (tm if lay.k_major_a else tk) * lay.swz_a
    b_sub = (tn if lay.k_major_b else tk) * lay.swz_b
    # a stage is cut into TMA boxes one swizzle row wide along its swizzled dimension (K, or M / N for MN-major)
    a_boxes = tuple((i * a_sub, i * lay.atom_a) for i in range((tk if lay.k_major_a else tm) // lay.atom_a))
    b_boxes = tuple((i * b_sub, i * lay.atom_b) for i in range((tk if lay.k_major_b else tn) // lay.atom_b))
    # the multicast operand: each CTA of the pair loads half of its stage (K-major: a half of the rows / columns in
    # every box; MN-major: half of the boxes)
    mc_tile, mc_swz, mc_boxes, mc_k_major = {"lhs": (tm, lay.swz_a, a_boxes, lay.k_major_a),
                                             "rhs": (tn, lay.swz_b, b_boxes, lay.k_major_b)}.get(
        cl.multicast, (0, 0, (), False))
    if not mc_k_major:
        mc_tile = 0
    elif cl.multicast:
        mc_boxes = ()
    chunks_m, chunks_n = wg.wtm // chunks.rows, wg.wtn // chunks.cols
    kname = "matmul_{}_{}_{}x{}x{}_s{}_wg{}_c{}x{}".format(spec.name, dims.in_dtype, tm, tn, tk, pipe.stages, wg.nc,
                                                           cl.cm, cl.cn)
    return MatmulPlan(
        family="matmul", name=spec.name, kernel_name=kname, sizes=dict(op.sizes), constants=dict(op.constants),
        backends=tuple(sch.backends), batch=dims.batch, m=dims.m, n=dims.n, k=dims.k, lhs_batched=dims.lhs_batched,
        rhs_batched=dims.rhs_batched, in_dtype=dims.in_dtype, out_dtype=dims.out_dtype,
        transpose_lhs=op.transpose_lhs, transpose_rhs=op.transpose_rhs,
        inputs=inputs, outputs=outputs, extras=dims.extra_ops,
        tile_m=tm, tile_n=tn, tile_k=tk, stages=pipe.stages, delay_release=pipe.delay, num_consumers=wg.nc,
        wg_axis=wg.axis, wg_tile_m=wg.wtm, wg_tile_n=wg.wtn, m_blocks=wg.wtm // WGMMA_M, acc_regs=regs.acc_regs,
        wgmma_regs=wg.wtn // 2, k_wgmmas=tk // (WGMMA_K_BYTES // dims.isz),
        swizzle_a=lay.swz_a, swizzle_b=lay.swz_b, atom_a=lay.atom_a, atom_b=lay.atom_b, k_major_a=lay.k_major_a,
        k_major_b=lay.k_major_b, a_stage_bytes=smem.a_stage, b_stage_bytes=smem.b_stage, a_sub_bytes=a_sub,
        b_sub_bytes=b_sub, a_boxes=a_boxes, b_boxes=b_boxes, a_mblock_bytes=WGMMA_M * lay.swz_a, a_lbo=1 if lay.k_major_a else a_sub, a_sbo=8 * lay.swz_a,
        b_lbo=1 if lay.k_major_b else b_sub, b_sbo=8 * lay.swz_b,
        cluster_m=cl.cm, cluster_n=cl.cn, cluster_size=cl.csize, cluster_dims=(cl.csize, 1, 1),
        multicast=cl.multicast, mc_rank_bytes=mc_tile // 2 * mc_swz, mc_rank_elems=mc_tile // 2,
        mc_rank_boxes=len(mc_boxes) // 2,
        epi_rows=chunks.rows, epi_cols=chunks.cols, epi_buffers=sch.epilogue.buffers, epi_swizzle=chunks.swizzle,
        epi_bytes=chunks.nbytes, epi_store=sch.epilogue.store, epi_chunks_m=chunks_m, epi_chunks_n=chunks_n,
        epi_n8=chunks.cols // 8, epi_row_bytes=chunks.cols * dims.osz,
        epi_swizzle_mask=chunks.swizzle // 16 - 1 if chunks.swizzle else 0, epi_pending=sch.epilogue.buffers - 1,
        epi_uneven=chunks_m * chunks_n % sch.epilogue.buffers != 0, wg_n8=wg.wtn // 8,
        epilogue=code.statements, epilogue_roles=code.roles, identity_epilogue=code.identity, ragged=tile.ragged,
        tiles_m=cl.tiles_m, tiles_n=cl.tiles_n, cluster_tiles_m=cl.tiles_m // cl.cm, cluster_tiles_n=cl.tiles_n // cl.cn,
        num_tiles=loop.num_tiles, k_iters=pipe.k_iters,
        tile_order=sch.persistent.tile_order, minor_dim=sch.persistent.minor_dim,
        tile_width=sch.persistent.tile_width,
        num_blocks=loop.clusters * cl.csize, auto_blocks=loop.auto, blocks_per_sm=1,
        threads=regs.threads, producer_regs=regs.preg, consumer_regs=regs.creg, block_regs=regs.block,
        smem_buffers=smem.buffers, smem_bytes=smem.nbytes, full_arrivals=smem.full_arrivals,
        empty_arrivals=smem.empty_arrivals, stage_tx_bytes=smem.a_stage + smem.b_stage, kernel_args=args,
        approx_math=sch.compiler_params.approx_math, lowering_semantics=sch.compiler_params.lowering_semantics,
        profile_space=sch.compiler_params.profile_space, flops=2 * dims.batch * dims.m * dims.n * dims.k,
        bytes_moved=sum(math.prod(o.shape) * o.itemsize for o in inputs + outputs),
    )


def _names(expr) -> frozenset[str]:
    return expr.names


def tile_from_block_specs(op, sch, out_name: str, problems: Problems) -> tuple[int, int, int]:
    """tile_m, tile_n, tile_k from the lhs/rhs/out BlockSpecs (each written in its stored order); they must agree."""
    got: dict[str, list[tuple[int, tuple]]] = {"m": [], "n": [], "k": []}
    for nm, dims in ((op.lhs, ("k", "m") if op.transpose_lhs else ("m", "k")),
                     (op.rhs, ("n", "k") if op.transpose_rhs else ("k", "n"))):
        bs = sch.in_specs.get(nm)
        if bs is None:
            continue
        shape = bs.block_shape
        path = ("schedule", "in_specs", nm, "block_shape")
        if len(shape) == 3 and shape[0] == 1:
            shape = shape[1:]
        elif len(shape) != 2:
            problems.add(path, f"a matmul block is 2-D ({' x '.join(d.upper() for d in dims)}), or 3-D with a leading 1 "
                               f"for the batch; got {len(shape)} dimensions")
            continue
        for d, v, i in zip(dims, shape, (len(bs.block_shape) - 2, len(bs.block_shape) - 1)):
            got[d].append((v, (*path, i)))
    bs = sch.out_specs.get(out_name)
    if bs is not None:
        shape = bs.block_shape[-2:]
        if len(bs.block_shape) not in (2, 3) or (len(bs.block_shape) == 3 and bs.block_shape[0] != 1):
            problems.add(("schedule", "out_specs", out_name, "block_shape"), "the output block is [tile_m, tile_n]")
        else:
            for d, v, i in zip(("m", "n"), shape, (len(bs.block_shape) - 2, len(bs.block_shape) - 1)):
                got[d].append((v, ("schedule", "out_specs", out_name, "block_shape", i)))
    out = []
    for d, default in zip(("m", "n", "k"), DEFAULT_TILE):
        vals = got[d]
        if not vals:
            out.append(default)
            continue
        v0 = vals[0][0]
        for v, path in vals[1:]:
            if v != v0:
                problems.add(path, f"tile_{d} is {v0} in one BlockSpec and {v} here; the blocks must agree")
        out.append(v0)
    return tuple(out)


def _pallas_limits(op, sch, ragged: bool, extras, batch: int, problems: Problems) -> None:
    """What the Pallas (Mosaic GPU) rendering of this family cannot express; each names the way out."""
    hint = "; or set schedule.backends: [cuda]"
    if ragged:
        problems.add(("schedule", "backends"), "the Pallas matmul needs M, N, K multiples of the tile" + hint)
    if batch > 1:
        problems.add(("schedule", "backends"), "the Pallas matmul is not batched" + hint)
    # emit_pipeline_warp_specialized (jax 0.11.2) takes only the producer's budget and gives each consumer
    # min(256, (512 - memory_registers) / num_compute_wgs) rounded down to 8 (pipeline._compute_registers).
    pipe = sch.pipeline
    nc = min(pipe.num_compute_wgs, 2)
    preg = pipe.memory_registers or (40 if nc == 2 else 56)
    pallas_creg = int(min(256, (512 - preg) // nc) // 8 * 8)
    if pipe.compute_registers is not None and pipe.compute_registers != pallas_creg:
        problems.add(("schedule", "pipeline", "compute_registers"),
                     f"Pallas's emit_pipeline_warp_specialized derives the consumers' budget from memory_registers: "
                     f"min(256, (512 - {preg}) / {nc}) rounded down to 8 = {pallas_creg}; set compute_registers: "
                     f"{pallas_creg} or omit it" + hint)
    # its full / empty barriers are its own: one arrival per input TMA, one per consumer warpgroup (per CTA)
    for bname, bar in sch.barriers.items():
        default = 1 if bname == "full" else nc * math.prod(sch.cluster)
        if bname in ("full", "empty") and bar.num_arrivals != default:
            problems.add(("schedule", "barriers", bname, "num_arrivals"),
                         f"Pallas's emit_pipeline_warp_specialized allocates and counts its own '{bname}' barriers; "
                         f"leave num_arrivals at {default}" + hint)
    if sch.compiler_params.unsafe_no_auto_barriers:
        problems.add(("schedule", "compiler_params", "unsafe_no_auto_barriers"),
                     "the Pallas matmul's epilogue relies on Mosaic GPU's automatic warpgroup barriers between "
                     "register reads of SMEM and the TMA that overwrites it; remove unsafe_no_auto_barriers" + hint)
