"""Planner of the `map` family: N-ary elementwise kernels over blocked 1-D to 3-D arrays.

The iteration space is the output shape cut into `block_shape` tiles; each input block is the
numpy-broadcast of the output block (block dims equal, or 1 for a broadcast dimension). Tiles stream
through a `max_concurrent_steps`-deep ring of SMEM stages filled by TMA, are computed by all threads
with 16-byte vector accesses, staged in a double-buffered SMEM output and stored back by TMA.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ...frontend import expr as ex
from ...frontend.model import ITEMSIZE, BlockSpec
from ...plan.common import (
    CTYPE,
    KernelArg,
    Problems,
    SmemBuffer,
    SmemMap,
    TmaBox,
    cdiv,
    occupancy,
    resolve_shape,
    tma_box,
)
from ...plan.exprs import PlanExpr
from ...plan.hardware import Hardware
from ...plan.legality import (
    check_no_cluster,
    check_reserved_names,
    check_sizes_int32,
    check_smem_fit,
    check_unique_names,
    tma_stride_problem,
)

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

# Default grid names: the first of these the spec does not use for something else.
DEFAULT_GRID_NAMES = ("i", "j", "k", "l", "m", "n", "p", "q")
# Index maps that are not affine in the grid names are checked at every grid point, up to this many points.
MAX_EXHAUSTIVE_POINTS = 1 << 26
CHUNK_POINTS = 1 << 20


@dataclass(frozen=True)
class MapOperand:
    name: str                 # the user's (validated) name
    cname: str                # identifier in generated code
    role: str                 # "in" | "out"
    dtype: str
    ctype: str
    itemsize: int
    shape: tuple[int, ...]
    block: tuple[int, ...]
    tma: TmaBox
    tma_dims: tuple[int, ...]      # array dims the tensor map keeps (extent-1 dims dropped)
    tma_shape: tuple[int, ...]
    tma_strides: tuple[int, ...]   # bytes, numpy order
    block_bytes: int
    smem: SmemBuffer
    index_map: str                 # as written (or defaulted); for people, never pasted into code
    block_index: tuple[PlanExpr, ...]  # the index map's validated components over the grid names and sizes (with
                                       # the ranges they were proved to fit 32 bits over; roles: MapPlan.index_roles)
    row_strides: tuple[int, ...]   # per iteration dim except the minor: element-row stride in this block (0 = broadcast)
    minor_bcast: bool              # the minor dim is broadcast: one value per row, splatted
    rows: int                      # rows of the SMEM block (product of the non-minor block dims)
    oob_fill: str                  # "zero" | "nan": what TMA loads beyond the array's end
    delay_release: int             # pipeline steps a stage stays alive after its step
    tiling: tuple[int, ...] | None
    transpose: tuple[int, ...] | None


@dataclass(frozen=True)
class MapPlan:
    family: str
    name: str
    kernel_name: str
    sizes: dict
    constants: dict
    backends: tuple[str, ...]
    grid: tuple[int, ...]
    grid_names: tuple[str, ...]
    grid_vars: tuple[str, ...]                 # the identifiers generated code uses for them (g_<name>)
    num_tiles: int
    block: tuple[int, ...]
    tile_order: str
    minor_dim: int
    tile_width: int
    num_blocks: int
    blocks_per_sm: int
    threads: int
    num_warpgroups: int
    stages: int
    vec: int
    inputs: tuple[MapOperand, ...]
    outputs: tuple[MapOperand, ...]
    smem_buffers: tuple[SmemBuffer, ...]
    smem_bytes: int
    full_barrier: SmemBuffer
    full_arrivals: int
    delay_release: int                          # CUDA: a stage is refilled this many steps after its tile (max over inputs)
    tx_bytes: int
    body: tuple[tuple[str, PlanExpr], ...]     # (target, value) statements over the spec's names, in order
    body_roles: dict                           # every name the body reads or writes -> operand | constant |
                                               # temporary | output (the templates spell roles: filter `spelled`)
    index_roles: dict                          # every name an index map may read -> grid | size
    approx_math: bool
    lowering_semantics: str
    unsafe_no_auto_barriers: bool
    profile_space: int
    persistent: bool
    bytes_moved: int
    kernel_args: tuple[KernelArg, ...]          # one tensor map per operand, inputs then outputs
    cluster_dims: tuple[int, int, int] = (1, 1, 1)
    auto_blocks: bool = False                            # the minimum GMEM traffic: each input read once, each output written once

    @property
    def operands(self) -> tuple[MapOperand, ...]:
        return self.inputs + self.outputs

    @property
    def tma_ranks(self) -> list[int]:
        return sorted({len(o.tma_dims) for o in self.operands})


def cname(role: str, name: str) -> str:
    return f"{role}_{name}"


class Space(NamedTuple):
    """The iteration space: the output cut into blocks, and what every operand's block follows."""
    iter_shape: tuple[int, ...]
    block: tuple[int, ...]
    grid: tuple[int, ...]
    grid_names: tuple[str, ...]
    sizes: dict
    stages: int


class Sync(NamedTuple):
    full: SmemBuffer       # one mbarrier per stage: the TMA loads landed
    arrivals: int
    smem_bytes: int        # with the 1 KiB alignment slack


class Body(NamedTuple):
    """The body's validated statements over the spec's names, and the role of every name in them."""
    statements: tuple[tuple[str, PlanExpr], ...]
    roles: dict


def plan_map(spec: SpecFile, hw: Hardware) -> tuple[MapPlan | None, Problems]:
    """Phases: names, the body, schedule fields that need no shapes, shapes, the iteration space, operands, the
    vector width, barriers and SMEM, 32-bit limits, backend limits, the launch; each reports located problems."""
    op, sch = spec.op, spec.schedule
    problems = Problems()
    seen = _check_names(op, problems)
    body = _parse_body(op, problems)
    _check_schedule(op, sch, problems)
    shapes = _resolve_shapes(op, problems)
    if shapes is None or next(iter(op.outputs)) not in sch.out_specs:
        return None, problems
    iter_shape = _check_broadcasts(op, shapes, problems)
    space = _plan_space(spec, iter_shape, seen, problems)
    if space is None:
        return None, problems
    smem = SmemMap()
    operands = _plan_operands(op, sch, shapes, space, hw, smem, problems)
    vec = _vector_width(op, sch, space.block, problems)
    sync = _plan_sync(sch, space.stages, smem, hw, problems)
    _check_int32(op, sch, space.grid, problems)
    _backend_limits(op, sch, body, operands, space.block, problems)
    if problems or body is None or len(operands) != len(op.inputs) + len(op.outputs):
        return None, problems
    return _assemble(spec, space, operands, vec, smem, sync, _body_code(op, body), hw), problems


def _check_names(op, problems: Problems) -> dict[str, str]:
    """One namespace for sizes, constants and operands; returns name -> the group that uses it."""
    return check_unique_names((("sizes", op.sizes), ("constants", op.constants), ("inputs", op.inputs),
                               ("outputs", op.outputs)), problems)


def _parse_body(op, problems: Problems):
    try:
        return ex.parse_body(op.body, inputs=list(op.inputs), outputs=list(op.outputs), constants=list(op.constants))
    except ex.ExprError as err:
        problems.add(("op", "body"), err.message, (err.line, err.col))
        return None


def _check_schedule(op, sch, problems: Problems) -> None:
    """Schedule checks that do not depend on shapes or blocks."""
    out_names = list(op.outputs)
    for n in sch.in_specs:
        if n not in op.inputs:
            problems.add(("schedule", "in_specs", n), f"no input named '{n}'; inputs are: {', '.join(op.inputs)}")
    for n in sch.out_specs:
        if n not in op.outputs:
            problems.add(("schedule", "out_specs", n), f"no output named '{n}'; outputs are: {', '.join(op.outputs)}")
    if out_names[0] not in sch.out_specs:
        problems.add(("schedule", "out_specs"), f"give a BlockSpec for output '{out_names[0]}' (its block_shape is the tile "
                                                f"every other operand follows), e.g. out_specs: {{{out_names[0]}: {{block_shape: [...]}}}}")
    check_no_cluster(sch.cluster, "the map family shares no operand between blocks, so there is nothing to multicast",
                     problems)
    if sch.pipeline.kind == "warp_specialized":
        problems.add(("schedule", "pipeline", "kind"), "the map family has no MMA for a producer warpgroup to overlap with; "
                                                      "use emit_pipeline (or none)")
    if sch.persistent.loop == "dynamic":
        problems.add(("schedule", "persistent", "loop"), "dynamic work claiming pays where tiles differ in length "
                                                        "(the attention family's causal tiles); map tiles are all "
                                                        "alike: use nd_loop or none")


def _resolve_shapes(op, problems: Problems) -> dict | None:
    """Every operand's shape in numbers; None when a size is unknown (nothing below could be checked meaningfully)."""
    before = len(problems)
    sizes = dict(op.sizes)
    shapes = {n: resolve_shape(o.shape, sizes, ("op", "inputs", n, "shape"), problems) for n, o in op.inputs.items()}
    shapes.update({n: resolve_shape(o.shape, sizes, ("op", "outputs", n, "shape"), problems) for n, o in op.outputs.items()})
    return None if len(problems) != before else shapes


def _check_broadcasts(op, shapes: dict, problems: Problems) -> tuple[int, ...]:
    """The first output's shape is the iteration shape: every output has it, every input broadcasts to it."""
    out_names = list(op.outputs)
    iter_shape = shapes[out_names[0]]
    for n in out_names[1:]:
        if shapes[n] != iter_shape:
            problems.add(("op", "outputs", n, "shape"), f"all outputs must have one shape {iter_shape}, got {shapes[n]}")
    for n in op.inputs:
        if not _broadcasts(shapes[n], iter_shape):
            problems.add(("op", "inputs", n, "shape"),
                         f"shape {shapes[n]} does not broadcast to the output shape {iter_shape} (numpy rules: trailing "
                         f"dimensions equal or 1)")
    if len(iter_shape) > 3:
        problems.add(("op", "outputs", out_names[0], "shape"),
                     f"the map family handles 1-D to 3-D arrays, got rank {len(iter_shape)}")
    return iter_shape


def _plan_space(spec: SpecFile, iter_shape: tuple[int, ...], seen: dict, problems: Problems) -> Space | None:
    """The output block, the grid of blocks and its names, the tile order; None when the block's rank is wrong."""
    op, sch = spec.op, spec.schedule
    rank, out0 = len(iter_shape), next(iter(op.outputs))
    stages = 1 if sch.pipeline.kind == "none" else sch.pipeline.max_concurrent_steps
    iblock = tuple(sch.out_specs[out0].block_shape)
    if len(iblock) != rank:
        problems.add(("schedule", "out_specs", out0, "block_shape"),
                     f"block_shape has {len(iblock)} dimensions but the output has {rank}")
        return None
    grid = tuple(cdiv(s, b) for s, b in zip(iter_shape, iblock))
    grid_names = _grid_names(sch, rank, seen, problems)
    check_reserved_names(spec, problems)
    sizes = dict(op.sizes)
    if sch.grid is not None:
        _check_grid(sch.grid, grid, sizes, problems)
    if sch.persistent.tile_order == "lpt":
        problems.add(("schedule", "persistent", "tile_order"), "lpt (longest tiles first) orders attention tiles; map "
                                                               "tiles are all alike: use row_major or planar_snake")
    if sch.persistent.tile_order == "planar_snake" and rank != 2:
        problems.add(("schedule", "persistent", "tile_order"), f"planar_snake orders a 2-D grid; this grid has {rank} dimensions")
    return Space(iter_shape, iblock, grid, grid_names, sizes, stages)


def _grid_names(sch, rank: int, seen: dict, problems: Problems) -> tuple[str, ...]:
    """The given grid names (one per output dimension, new names), else the first free DEFAULT_GRID_NAMES."""
    free = [g for g in DEFAULT_GRID_NAMES if g not in seen]
    grid_names = tuple(sch.grid_names) if sch.grid_names else tuple(free[:rank])
    if len(grid_names) != rank:
        problems.add(("schedule", "grid_names"), f"give {rank} grid names (one per output dimension), got {len(grid_names)}")
        grid_names = tuple(free[:rank])
    for d, g in enumerate(grid_names):
        if g in seen:
            problems.add(("schedule", "grid_names"), f"grid name '{g}' is already used in op.{seen[g]}")
        elif g in grid_names[:d]:
            problems.add(("schedule", "grid_names", d), f"grid name '{g}' is given twice; each dimension needs its own")
    return grid_names


def _plan_operands(op, sch, shapes: dict, space: Space, hw: Hardware, smem: SmemMap,
                   problems: Problems) -> dict[str, MapOperand]:
    """Each operand's block, index map, TMA boxes and SMEM buffer, inputs then outputs (None ones reported)."""
    specs: dict[str, tuple[str, BlockSpec | None]] = {}
    for n in op.inputs:
        specs[n] = ("in", sch.in_specs.get(n))
    for n in op.outputs:
        specs[n] = ("out", sch.out_specs.get(n))
    operands: dict[str, MapOperand] = {}
    for n, (role, bs) in specs.items():
        operand = op.inputs[n] if role == "in" else op.outputs[n]
        path = ("schedule", "in_specs" if role == "in" else "out_specs", n)
        planned = _plan_operand(n, role, operand.dtype, shapes[n], bs, path, space, problems, hw, smem)
        if planned is not None:
            operands[n] = planned
    return operands


def _vector_width(op, sch, iblock: tuple[int, ...], problems: Problems) -> int:
    """Elements a thread moves per access: 16 B of the narrowest dtype; the minor block dimension a multiple."""
    min_isz = min(ITEMSIZE[o.dtype] for o in list(op.inputs.values()) + list(op.outputs.values()))
    vec = 16 // min_isz
    if iblock[-1] % vec:
        out0 = next(iter(op.outputs))
        problems.add(("schedule", "out_specs", out0, "block_shape", len(iblock) - 1),
                     f"each thread moves {vec} elements (16 B of the narrowest dtype); the minor block dimension "
                     f"{iblock[-1]} must be a multiple of {vec}")
    return vec


def _plan_sync(sch, stages: int, smem: SmemMap, hw: Hardware, problems: Problems) -> Sync:
    """The 'full' mbarrier array (one a stage) after the operands' buffers, and the SMEM total against the limit."""
    full = smem.alloc("full", 8, stages, align=8, note="mbarrier per stage: TMA loads landed")
    full_arrivals = 1
    for bname, bar in sch.barriers.items():
        if bname != "full":
            problems.add(("schedule", "barriers", bname), f"the map family has one barrier array, 'full'; got '{bname}'")
            continue
        if bar.num_barriers != stages:
            problems.add(("schedule", "barriers", "full", "num_barriers"),
                         f"'full' has one barrier per pipeline stage: {stages}, got {bar.num_barriers}")
        full_arrivals = bar.num_arrivals
    smem_bytes = check_smem_fit(smem, hw, ("schedule", "pipeline", "max_concurrent_steps"), problems,
                                "use fewer stages or smaller blocks")
    return Sync(full, full_arrivals, smem_bytes)


def _check_int32(op, sch, grid: tuple[int, ...], problems: Problems) -> None:
    """Sizes and the tile count fit the kernels' 32-bit int index math."""
    check_sizes_int32(op.sizes, problems, f"the kernel's 32-bit int index math (at most {ex.MAX_INT})")
    if math.prod(grid) > ex.MAX_INT:
        problems.add(("schedule", "out_specs", next(iter(op.outputs)), "block_shape"),
                     f"the output is cut into {math.prod(grid)} tiles; the kernel counts tiles in a 32-bit int "
                     f"(at most {ex.MAX_INT}); use larger blocks")


def _backend_limits(op, sch, body, operands: dict, iblock: tuple[int, ...], problems: Problems) -> None:
    if "pallas" in sch.backends and body is not None:
        _pallas_limits(op, sch, body, operands, iblock, problems)
    if "cuda" in sch.backends and sch.compiler_params.profile_space:
        problems.add(("schedule", "compiler_params", "profile_space"),
                     "in-kernel profiling is a Pallas (Mosaic GPU) feature; set schedule.backends: [pallas] to use it")


def _body_code(op, body) -> Body:
    """The body's validated statements and the role of every name in them: inputs are operands, then constants,
    and each target an output or a temporary (the templates spell the roles: v_<name>, c_<name> / _c_<name>,
    r_<name>, t_<name>)."""
    roles = {n: "operand" for n in op.inputs} | {c: "constant" for c in op.constants}
    roles.update({target: "output" if target in op.outputs else "temporary" for target, _ in body.statements})
    return Body(tuple((target, PlanExpr(value)) for target, value in body.statements), roles)


def _launch(sch, num_tiles: int, smem_bytes: int, threads: int, hw: Hardware) -> tuple[int, int]:
    """(blocks launched, blocks per SM): one a tile, or a persistent grid of all SMs (or num_blocks)."""
    per_sm = occupancy(smem_bytes, threads, hw)
    if sch.persistent.loop == "none":
        return num_tiles, per_sm
    if sch.persistent.num_blocks == "auto":
        return min(num_tiles, hw.sm_count * per_sm), per_sm
    return min(num_tiles, sch.persistent.num_blocks), per_sm


def _assemble(spec: SpecFile, space: Space, operands: dict, vec: int, smem: SmemMap, sync: Sync, body: Body,
              hw: Hardware) -> MapPlan:
    """The plan: every number the templates print."""
    op, sch = spec.op, spec.schedule
    iblock, grid, stages = space.block, space.grid, space.stages
    threads = 128 * sch.num_warpgroups
    num_tiles = math.prod(grid)
    num_blocks, per_sm = _launch(sch, num_tiles, sync.smem_bytes, threads, hw)
    inputs = tuple(operands[n] for n in op.inputs)
    outputs = tuple(operands[n] for n in op.outputs)
    tx = sum(o.tma.box_bytes * o.tma.n_boxes for o in inputs)
    bytes_moved = sum(math.prod(o.shape) * o.itemsize for o in inputs + outputs)
    kname = "map_{}_{}_s{}_wg{}".format(spec.name, "x".join(map(str, iblock)), stages, sch.num_warpgroups)
    cp = sch.compiler_params
    return MapPlan(
        family="map", name=spec.name, kernel_name=kname, sizes=space.sizes, constants=dict(op.constants),
        backends=tuple(sch.backends), grid=grid, grid_names=space.grid_names, grid_vars=_grid_vars(space.grid_names),
        num_tiles=num_tiles, block=iblock,
        tile_order=sch.persistent.tile_order, minor_dim=sch.persistent.minor_dim, tile_width=sch.persistent.tile_width,
        num_blocks=num_blocks, blocks_per_sm=per_sm, threads=threads, num_warpgroups=sch.num_warpgroups, stages=stages,
        vec=vec, inputs=inputs, outputs=outputs, smem_buffers=tuple(smem.buffers), smem_bytes=sync.smem_bytes,
        full_barrier=sync.full, full_arrivals=sync.arrivals, delay_release=max(o.delay_release for o in inputs),
        tx_bytes=tx, body=body.statements, body_roles=body.roles,
        index_roles={g: "grid" for g in space.grid_names} | {s: "size" for s in space.sizes},
        approx_math=cp.approx_math, lowering_semantics=cp.lowering_semantics,
        unsafe_no_auto_barriers=cp.unsafe_no_auto_barriers, profile_space=cp.profile_space,
        persistent=sch.persistent.loop != "none", bytes_moved=bytes_moved,
        kernel_args=tuple(KernelArg("tmap", i, o.dtype, o.tma_shape, o.tma_strides, o.tma.box, o.tma.swizzle,
                                    o.oob_fill == "nan") for i, o in enumerate(inputs + outputs)),
    )


def _pallas_limits(op, sch, body, operands, iblock, problems: Problems) -> None:
    """What jax 0.11.2's Mosaic GPU lowering cannot do with these kernels, reported before rendering."""
    hint = "or set schedule.backends: [cuda]"
    used = {n.func.id for _, e in body.statements for n in ast.walk(e.tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    if "gelu_erf" in used:
        problems.add(("op", "body"), f"gelu_erf needs erf, which Mosaic GPU (jax 0.11.2) cannot lower; use gelu (the "
                                     f"tanh form) {hint}")
    for o in operands.values():
        path = ("schedule", "in_specs" if o.role == "in" else "out_specs", o.name)
        if o.minor_bcast:
            problems.add((*path, "block_shape"), f"'{o.name}' broadcasts along the minor dimension (a column); the "
                                                 f"Pallas backend cannot load such blocks by TMA {hint}")
        broadcast = len(o.block) < len(iblock) or any(s == 0 for s in o.row_strides[len(iblock) - 1 - len(o.block) + 1:])
        if broadcast and sch.compiler_params.lowering_semantics == "lane":
            problems.add(("schedule", "compiler_params", "lowering_semantics"),
                         f"'{o.name}' is broadcast, which Mosaic GPU's lane semantics cannot lay out; use warpgroup {hint}")


def _grid_vars(grid_names) -> tuple[str, ...]:
    return tuple(f"g_{g}" for g in grid_names)


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    return all(s == t or s == 1 for s, t in zip(reversed(shape), reversed(target)))


def _check_grid(exprs, grid, sizes, problems: Problems) -> None:
    if len(exprs) != len(grid):
        problems.add(("schedule", "grid"), f"the output blocks form a grid of {len(grid)} dimensions {grid}, "
                                           f"got {len(exprs)} entries")
        return
    for d, (e, want) in enumerate(zip(exprs, grid)):
        try:
            got = e if isinstance(e, int) else ex.eval_int(ex.parse_int_expr(e, names=list(sizes)), sizes)
        except ex.ExprError as err:
            problems.add(("schedule", "grid", d), err.message, (err.line, err.col))
            continue
        if got != want:
            problems.add(("schedule", "grid", d), f"grid size {got} does not match the {want} output blocks along "
                                                  f"dimension {d}")


class Block(NamedTuple):
    """One operand's block against the iteration block: `off` leading iteration dims it does not have."""
    block: tuple[int, ...]
    spec: BlockSpec
    off: int


def _plan_operand(name: str, role: str, dtype: str, shape: tuple[int, ...], bs: BlockSpec | None, path: tuple,
                  space: Space, problems: Problems, hw: Hardware, smem: SmemMap) -> MapOperand | None:
    """Block, index map, TMA boxes and SMEM buffer of one operand; None (reported) when any of them is wrong."""
    before = len(problems)
    blk = _operand_block(name, shape, bs, path, space, problems)
    if blk is None:
        return None
    parsed = _operand_index_map(name, shape, blk, path, space, problems, check=len(problems) == before)
    if parsed is None:
        return None
    text, imap = parsed
    tma = _operand_tma(name, role, dtype, shape, blk, path, hw, problems)
    if len(problems) != before:
        return None
    return _operand(name, role, dtype, shape, blk, text, imap, tma, space, smem)


def _operand_block(name: str, shape: tuple[int, ...], bs: BlockSpec | None, path: tuple, space: Space,
                   problems: Problems) -> Block | None:
    """The block (default: the broadcast of the output block) and the BlockSpec fields elementwise blocks allow."""
    iblock, rank = space.block, len(shape)
    off = len(iblock) - rank  # leading iteration dims this operand does not have
    if bs is None:  # default: the broadcast of the output block
        block = tuple(1 if shape[d] == 1 and space.iter_shape[off + d] != 1 else iblock[off + d] for d in range(rank))
        bs = BlockSpec(block_shape=list(block))
    block = tuple(bs.block_shape)
    if len(block) != rank:
        problems.add((*path, "block_shape"), f"'{name}' has {rank} dimensions, block_shape has {len(block)}")
        return None
    for d in range(rank):
        want = iblock[off + d]
        if block[d] != want and not (block[d] == 1 and shape[d] == 1):
            legal = f"{want}" + (" (or 1 to broadcast, if the array's dimension is 1)" if shape[d] == 1 else "")
            problems.add((*path, "block_shape", d),
                         f"block dimension {d} of '{name}' is {block[d]}; elementwise blocks follow the output block: {legal}")
    _check_block_spec(bs, path, space.stages, problems)
    for d in range(rank):
        if shape[d] % block[d] and bs.out_of_bounds == "reject":
            problems.add((*path, "block_shape", d),
                         f"dimension {d} of '{name}' ({shape[d]}) is not a multiple of the block ({block[d]}); use a "
                         f"divisor of {shape[d]}, or set out_of_bounds: zero to let TMA pad the last block")
    return Block(block, bs, off)


def _check_block_spec(bs: BlockSpec, path: tuple, stages: int, problems: Problems) -> None:
    if bs.memory_space == "tmem":
        problems.add((*path, "memory_space"), "tensor memory (TMEM) exists on Blackwell (sm_100a) only; the H200 "
                                              "has none (use smem)")
    elif bs.memory_space != "smem":
        problems.add((*path, "memory_space"), f"the map family streams every operand through SMEM with TMA; "
                                              f"memory_space '{bs.memory_space}' is not supported here (use smem)")
    if bs.collective_axes:
        problems.add((*path, "collective_axes"), "collective_axes multicast a shared operand over a cluster; the map "
                                                 "family has none (remove it)")
    if bs.delay_release >= stages:
        problems.add((*path, "delay_release"), f"delay_release {bs.delay_release} must be less than the pipeline's "
                                               f"max_concurrent_steps ({stages})")
    if bs.transforms.transpose is not None:
        problems.add((*path, "transforms", "transpose"), "transposed SMEM layouts are for MMA operands; elementwise "
                                                         "blocks are read in row-major order (remove transpose)")


def _operand_index_map(name: str, shape: tuple[int, ...], blk: Block, path: tuple, space: Space,
                       problems: Problems, check: bool) -> tuple[str, list] | None:
    """(text, parsed map): as written, or the default (broadcast dims index block 0); proved right at every grid
    point when `check` (nothing else wrong with the operand)."""
    block, off, rank, grid_names = blk.block, blk.off, len(shape), space.grid_names
    default_map = "(" + ", ".join(grid_names[off:]) + ("," if rank == 1 else "") + ")"
    if blk.spec.index_map is None:
        # broadcast dims index block 0
        parts = [grid_names[off + d] if block[d] == space.block[off + d] or shape[d] != 1 else "0"
                 for d in range(rank)]
        text = "(" + ", ".join(parts) + ("," if rank == 1 else "") + ")"
    else:
        text = blk.spec.index_map
    try:
        imap = ex.parse_index_map(text, grid_names=list(grid_names), sizes=list(space.sizes))
    except ex.ExprError as err:
        problems.add((*path, "index_map"), err.message, (err.line, err.col))
        return None
    if len(imap) != rank:
        problems.add((*path, "index_map"), f"index_map gives {len(imap)} block indices; '{name}' has {rank} dimensions, "
                                           f"e.g. {default_map}")
        return None
    if check:
        _check_index_map(name, imap, text, shape, block, space.block, space.grid, grid_names, space.sizes, path,
                         problems)
    return text, imap


class Tma(NamedTuple):
    box: TmaBox
    dims: tuple[int, ...]       # array dims the tensor map keeps (-1: the leading extent-1 dim of a vector)
    shape: tuple[int, ...]
    strides: tuple[int, ...]    # bytes
    swizzle: int
    tiling: tuple[int, ...] | None


def _operand_tma(name: str, role: str, dtype: str, shape: tuple[int, ...], blk: Block, path: tuple, hw: Hardware,
                 problems: Problems) -> Tma:
    """Swizzle and tiling, the TMA boxes and the tensor map's shape and strides (extent-1 dims dropped)."""
    block, bs, rank = blk.block, blk.spec, len(shape)
    isz = ITEMSIZE[dtype]
    swz = bs.transforms.swizzle
    swizzle = 0 if swz == "auto" else swz  # elementwise access is row-contiguous: no bank conflicts to avoid
    tiling = tuple(bs.transforms.tiling) if bs.transforms.tiling else None
    if tiling is not None:
        want = swizzle // isz if swizzle else None
        if len(tiling) > rank or (want and tiling[-1] != want) or any(block[rank - len(tiling) + i] % t for i, t in enumerate(tiling)):
            hint = f"({8}, {want})" if want else "a tiling that divides the block"
            problems.add((*path, "transforms", "tiling"),
                         f"tiling {list(tiling)} does not fit block {list(block)} with swizzle {swizzle}; use {hint}")
    # TMA sees the array without its extent-1 dimensions (a (M, 1) column is a (M,) vector to the copy engine)
    kept = tuple(d for d in range(rank) if shape[d] != 1) or (rank - 1,)
    box = tma_box(tuple(block[d] for d in kept), dtype, swizzle, path, problems, hw, dims=kept)
    tma_shape = tuple(shape[d] for d in kept)
    tma_strides = tuple(math.prod(shape[d + 1:]) * isz for d in kept)
    if len(kept) == 1:
        # The driver rejects rank-1 tiled tensor maps (empty stride list): describe a vector as one row of a
        # 2-D tensor. The leading dimension has extent 1 and coordinate 0 (tma_dims entry -1).
        lead_stride = cdiv(tma_shape[0] * isz, 16) * 16
        tma_shape, tma_strides, kept = (1,) + tma_shape, (lead_stride,) + tma_strides, (-1,) + kept
        box = TmaBox((1,) + box.box, box.n_boxes, box.box_bytes, box.swizzle)
    for d, stride in zip(kept[:-1], tma_strides[:-1]):
        if (message := tma_stride_problem(f"rows of '{name}' along dimension {d}", stride, isz)) is not None:
            problems.add(("op", "inputs" if role == "in" else "outputs", name, "shape"), message)
    if tiling is None and swizzle:
        tiling = (8, swizzle // isz)  # the tiling a swizzled SMEM ref needs (Pallas TilingTransform)
    return Tma(box, kept, tma_shape, tma_strides, swizzle, tiling)


def _operand(name: str, role: str, dtype: str, shape: tuple[int, ...], blk: Block, text: str, imap: list, tma: Tma,
             space: Space, smem: SmemMap) -> MapOperand:
    """The operand's SMEM buffer (stages for an input, a double buffer for an output), its element-row strides and
    its index map's validated components (with the ranges they were proved over)."""
    block, bs, off, rank, iblock = blk.block, blk.spec, blk.off, len(shape), space.block
    isz = ITEMSIZE[dtype]
    block_bytes = math.prod(block) * isz
    count = space.stages if role == "in" else 2
    align = 1024 if tma.swizzle else 128  # TMA destinations: 128 B, and the swizzle atom repeats every 1 KiB
    buf = smem.alloc(cname(role, name), cdiv(block_bytes, align) * align, count,
                     note=("stage" if role == "in" else "double buffer"))
    # element-row strides in SMEM for each iteration dim except the minor (0 when broadcast)
    strides = [0] * (len(iblock) - 1)
    rows = math.prod(block[:-1]) if rank > 1 else 1
    row = 1
    for d in range(rank - 2, -1, -1):
        strides[off + d] = row if block[d] != 1 or iblock[off + d] == 1 else 0
        row *= block[d]
    ranges = _index_ranges(space.grid, space.grid_names, space.sizes)
    return MapOperand(
        name=name, cname=cname(role, name), role=role, dtype=dtype, ctype=CTYPE[dtype], itemsize=isz, shape=shape,
        block=block, tma=tma.box, tma_dims=tma.dims, tma_shape=tma.shape, tma_strides=tma.strides,
        block_bytes=block_bytes, smem=buf,
        index_map=text, block_index=tuple(PlanExpr(e, ranges) for e in imap),
        row_strides=tuple(strides), minor_bcast=(block[-1] == 1 and iblock[-1] != 1), rows=rows,
        oob_fill="nan" if bs.out_of_bounds == "nan" else "zero", delay_release=bs.delay_release, tiling=tma.tiling,
        transpose=None,
    )


def _index_ranges(grid, grid_names, sizes) -> dict[str, tuple[int, int]]:
    """What each name of an index map ranges over: a grid name [0, g - 1], a size exactly its value."""
    return {g: (0, n - 1) for g, n in zip(grid_names, grid)} | {s: (v, v) for s, v in sizes.items()}


class IndexMapCheck(NamedTuple):
    """One operand's index map against the block the body's broadcasting reads at each grid point."""
    name: str
    imap: list
    text: str
    shape: tuple[int, ...]
    block: tuple[int, ...]
    iblock: tuple[int, ...]
    grid: tuple[int, ...]
    grid_names: tuple[str, ...]
    sizes: dict
    path: tuple

    @property
    def off(self) -> int:
        return len(self.iblock) - len(self.shape)

    def broadcast(self, d: int) -> bool:
        return self.block[d] == 1 and self.shape[d] == 1

    def want_at(self, point) -> tuple[int, ...]:
        return tuple(point[self.off + d] * self.iblock[self.off + d] // self.block[d] if not self.broadcast(d) else 0
                     for d in range(len(self.shape)))

    def mismatch(self, point, got, problems: Problems) -> None:
        problems.add((*self.path, "index_map"),
                     f"index_map {self.text} sends grid point {point} to block {got} of '{self.name}', but the "
                     f"elementwise body reads block {self.want_at(point)} there (numpy broadcasting of the output "
                     f"block)")


def _check_index_map(name, imap, text, shape, block, iblock, grid, grid_names, sizes, path, problems: Problems) -> None:
    """The index map must pick, at every grid point, the block the body's broadcasting reads.

    Proved for every point, never sampled: first every intermediate is bounded to the kernels' 32-bit int math
    (interval arithmetic over the whole grid); then a map whose components are affine in the grid names (+, -,
    products with constants; // and % of constants only) is compared exactly as affine forms, any grid size;
    anything else is evaluated exhaustively (numpy int64, in chunks) up to MAX_EXHAUSTIVE_POINTS grid points, and
    rejected above that with a message saying what to write instead."""
    c = IndexMapCheck(name, imap, text, shape, block, iblock, grid, grid_names, sizes, path)
    ranges = _index_ranges(grid, grid_names, sizes)
    for e in imap:
        if (err := ex.check_int32(e, ranges)) is not None:
            problems.add((*path, "index_map"), err.message, (err.line, err.col))
            return
    if _check_affine(c, problems):
        return
    total = math.prod(grid)
    if total > MAX_EXHAUSTIVE_POINTS:
        rank, off = len(shape), c.off
        problems.add((*path, "index_map"),
                     f"index_map {text} is not affine in the grid names (it uses // or %, or multiplies grid names), "
                     f"and the grid has {total} points, more than the {MAX_EXHAUSTIVE_POINTS} this check evaluates "
                     f"one by one: it cannot be proved to pick the right block everywhere; write each block index as "
                     f"the grid name itself (or 0 for a broadcast dimension), e.g. {_default_map_text(grid_names, off, rank)}")
        return
    _check_exhaustively(c, problems)


def _check_affine(c: IndexMapCheck, problems: Problems) -> bool:
    """Whether the comparison as affine forms settled it: proved, or a mismatch found (reported) on a grid too
    large to evaluate point by point."""
    rank, off = len(c.shape), c.off
    # The block the body reads, as an affine form: the grid name itself (block == iblock), or 0 (broadcast).
    # Grid dimensions of extent 1 are the constant 0.
    fixed = {g: 0 for g, n in zip(c.grid_names, c.grid) if n == 1} | dict(c.sizes)
    affine = all(c.block[d] == c.iblock[off + d] or c.broadcast(d) for d in range(rank))
    want_forms = [{"": 0} if c.broadcast(d) or c.grid_names[off + d] in fixed else {c.grid_names[off + d]: 1, "": 0}
                  for d in range(rank)]
    forms = [ex.affine_form(e, fixed) for e in c.imap]
    if not affine or any(f is None for f in forms):
        return False
    if forms == want_forms:
        return True  # proved for every grid point
    if math.prod(c.grid) > MAX_EXHAUSTIVE_POINTS:
        # two different affine forms differ at the origin or at a unit point of a dimension they weigh apart
        grid = c.grid
        for point in [tuple(0 for _ in grid)] + [tuple(int(k == d) for k in range(len(grid)))
                                                   for d in range(len(grid)) if grid[d] > 1]:
            got = tuple(ex.eval_int(e, dict(zip(c.grid_names, point)) | dict(c.sizes)) for e in c.imap)
            if got != c.want_at(point):
                c.mismatch(point, got, problems)
                return True
    return False


def _check_exhaustively(c: IndexMapCheck, problems: Problems) -> None:
    """Every grid point, in chunks in row-major (itertools.product) order; the first wrong one reported."""
    total = math.prod(c.grid)
    env_sizes = dict(c.sizes)
    for start in range(0, total, CHUNK_POINTS):
        flat = np.arange(start, min(start + CHUNK_POINTS, total), dtype=np.int64)
        coords = np.unravel_index(flat, c.grid)
        env = dict(zip(c.grid_names, coords)) | env_sizes
        try:
            got = [ex.eval_int_array(e, env, flat.shape) for e in c.imap]
        except ex.GridZeroDivision as err:
            point = tuple(int(x[err.index]) for x in coords)
            problems.add((*c.path, "index_map"), f"{err.message} at grid point {point}")
            return
        bad = np.zeros(flat.shape, dtype=bool)
        for d in range(len(c.shape)):
            want = 0 if c.broadcast(d) else coords[c.off + d] * c.iblock[c.off + d] // c.block[d]
            bad |= got[d] != want
        if bad.any():
            at = int(np.argmax(bad))
            point = tuple(int(x[at]) for x in coords)
            c.mismatch(point, tuple(int(g[at]) for g in got), problems)
            return


def _default_map_text(grid_names, off, rank) -> str:
    return "(" + ", ".join(grid_names[off:off + rank]) + ("," if rank == 1 else "") + ")"
