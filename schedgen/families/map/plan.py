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
from typing import TYPE_CHECKING

import numpy as np

from ... import reserved
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
    cxx_float,
    occupancy,
    resolve_shape,
    tma_box,
)
from ...plan.hardware import Hardware

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
    index_map_cxx: tuple[str, ...]
    index_map_py: tuple[str, ...]
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
    body_cxx: tuple[tuple[str, str], ...]      # (target, C++ float expression); targets are out_<name> or t_<name>
    body_jnp: tuple[tuple[str, str], ...]
    temporaries: tuple[str, ...]
    constants_cxx: tuple[tuple[str, str], ...]  # (identifier, exact float literal)
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


def plan_map(spec: SpecFile, hw: Hardware) -> tuple[MapPlan | None, Problems]:
    op, sch = spec.op, spec.schedule
    problems = Problems()
    sizes = dict(op.sizes)

    # --- names: one namespace for sizes, constants and operands
    seen: dict[str, tuple] = {}
    for group, names in (("sizes", op.sizes), ("constants", op.constants), ("inputs", op.inputs), ("outputs", op.outputs)):
        for n in names:
            if n in seen:
                problems.add(("op", group, n), f"name '{n}' is already used in op.{seen[n][1]}")
            seen[n] = (("op", group, n), group)

    # --- the body
    body = None
    try:
        body = ex.parse_body(op.body, inputs=list(op.inputs), outputs=list(op.outputs), constants=list(op.constants))
    except ex.ExprError as err:
        problems.add(("op", "body"), err.message, (err.line, err.col))

    # --- schedule checks that do not depend on shapes or blocks
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
    if any(c != 1 for c in sch.cluster):
        problems.add(("schedule", "cluster"), "the map family shares no operand between blocks, so there is nothing to "
                                              "multicast; use cluster: [1]")
    if sch.pipeline.kind == "warp_specialized":
        problems.add(("schedule", "pipeline", "kind"), "the map family has no MMA for a producer warpgroup to overlap with; "
                                                      "use emit_pipeline (or none)")
    if sch.persistent.loop == "dynamic":
        problems.add(("schedule", "persistent", "loop"), "dynamic work claiming pays where tiles differ in length "
                                                        "(the attention family's causal tiles); map tiles are all "
                                                        "alike: use nd_loop or none")

    # --- shapes (an unknown size leaves nothing below to check meaningfully)
    before = len(problems)
    shapes = {n: resolve_shape(o.shape, sizes, ("op", "inputs", n, "shape"), problems) for n, o in op.inputs.items()}
    shapes.update({n: resolve_shape(o.shape, sizes, ("op", "outputs", n, "shape"), problems) for n, o in op.outputs.items()})
    if len(problems) != before or out_names[0] not in sch.out_specs:
        return None, problems
    iter_shape = shapes[out_names[0]]
    for n in out_names[1:]:
        if shapes[n] != iter_shape:
            problems.add(("op", "outputs", n, "shape"), f"all outputs must have one shape {iter_shape}, got {shapes[n]}")
    for n in op.inputs:
        if not _broadcasts(shapes[n], iter_shape):
            problems.add(("op", "inputs", n, "shape"),
                         f"shape {shapes[n]} does not broadcast to the output shape {iter_shape} (numpy rules: trailing "
                         f"dimensions equal or 1)")
    rank = len(iter_shape)
    if rank > 3:
        problems.add(("op", "outputs", out_names[0], "shape"), f"the map family handles 1-D to 3-D arrays, got rank {rank}")

    stages = 1 if sch.pipeline.kind == "none" else sch.pipeline.max_concurrent_steps

    # --- the iteration block and grid
    out_spec = sch.out_specs[out_names[0]]
    iblock = tuple(out_spec.block_shape)
    if len(iblock) != rank:
        problems.add(("schedule", "out_specs", out_names[0], "block_shape"),
                     f"block_shape has {len(iblock)} dimensions but the output has {rank}")
        return None, problems
    grid = tuple(cdiv(s, b) for s, b in zip(iter_shape, iblock))
    free = [g for g in DEFAULT_GRID_NAMES if g not in seen]
    grid_names = tuple(sch.grid_names) if sch.grid_names else tuple(free[:rank])
    if len(grid_names) != rank:
        problems.add(("schedule", "grid_names"), f"give {rank} grid names (one per output dimension), got {len(grid_names)}")
        grid_names = tuple(free[:rank])
    for d, g in enumerate(grid_names):
        if g in seen:
            problems.add(("schedule", "grid_names"), f"grid name '{g}' is already used in op.{seen[g][1]}")
        elif g in grid_names[:d]:
            problems.add(("schedule", "grid_names", d), f"grid name '{g}' is given twice; each dimension needs its own")
    _check_module_names(spec, problems)
    if sch.grid is not None:
        _check_grid(sch.grid, grid, sizes, problems)
    if sch.persistent.tile_order == "lpt":
        problems.add(("schedule", "persistent", "tile_order"), "lpt (longest tiles first) orders attention tiles; map "
                                                               "tiles are all alike: use row_major or planar_snake")
    if sch.persistent.tile_order == "planar_snake" and rank != 2:
        problems.add(("schedule", "persistent", "tile_order"), f"planar_snake orders a 2-D grid; this grid has {rank} dimensions")

    # --- operands
    specs: dict[str, tuple[str, BlockSpec | None]] = {}
    for n in op.inputs:
        specs[n] = ("in", sch.in_specs.get(n))
    for n in op.outputs:
        specs[n] = ("out", sch.out_specs.get(n))
    min_isz = min(ITEMSIZE[o.dtype] for o in list(op.inputs.values()) + list(op.outputs.values()))
    vec = 16 // min_isz
    smem = SmemMap()
    operands: dict[str, MapOperand] = {}
    ins = [n for n in op.inputs]
    for n, (role, bs) in specs.items():
        operand = op.inputs[n] if role == "in" else op.outputs[n]
        path = ("schedule", "in_specs" if role == "in" else "out_specs", n)
        planned = _plan_operand(n, role, operand.dtype, shapes[n], bs, path, iblock, iter_shape, grid, grid_names,
                                sizes, stages, problems, hw, smem, vec)
        if planned is not None:
            operands[n] = planned

    if iblock[-1] % vec:
        problems.add(("schedule", "out_specs", out_names[0], "block_shape", rank - 1),
                     f"each thread moves {vec} elements (16 B of the narrowest dtype); the minor block dimension "
                     f"{iblock[-1]} must be a multiple of {vec}")

    # --- threads, barriers, SMEM
    threads = 128 * sch.num_warpgroups
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
    smem_bytes = smem.top + 1024  # slack to align the dynamic SMEM base to the 1 KiB swizzle atom
    if smem_bytes > hw.smem_per_block:
        detail = ", ".join(f"{b.name} {b.bytes * b.count} B" for b in smem.buffers)
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"SMEM needed is {smem_bytes} B ({detail}), over the {hw.name}'s {hw.smem_per_block} B per block; "
                     f"use fewer stages or smaller blocks")

    for n, v in sizes.items():
        if v > ex.MAX_INT:
            problems.add(("op", "sizes", n), f"size {v} does not fit the kernel's 32-bit int index math "
                                             f"(at most {ex.MAX_INT})")
    if math.prod(grid) > ex.MAX_INT:
        problems.add(("schedule", "out_specs", out_names[0], "block_shape"),
                     f"the output is cut into {math.prod(grid)} tiles; the kernel counts tiles in a 32-bit int "
                     f"(at most {ex.MAX_INT}); use larger blocks")
    if "pallas" in sch.backends and body is not None:
        _pallas_limits(op, sch, body, operands, iblock, problems)
    if "cuda" in sch.backends and sch.compiler_params.profile_space:
        problems.add(("schedule", "compiler_params", "profile_space"),
                     "in-kernel profiling is a Pallas (Mosaic GPU) feature; set schedule.backends: [pallas] to use it")
    if problems or body is None or len(operands) != len(specs):
        return None, problems

    num_tiles = math.prod(grid)
    per_sm = occupancy(smem_bytes, threads, hw)
    if sch.persistent.loop == "none":
        num_blocks = num_tiles
    elif sch.persistent.num_blocks == "auto":
        num_blocks = min(num_tiles, hw.sm_count * per_sm)
    else:
        num_blocks = min(num_tiles, sch.persistent.num_blocks)

    names_cxx = {n: f"v_{n}" for n in ins}
    names_cxx.update({n: f"c_{n}" for n in op.constants})
    names_jnp = {n: f"v_{n}" for n in ins}
    names_jnp.update({n: f"_c_{n}" for n in op.constants})
    body_cxx, body_jnp, temps = [], [], []
    for target, value in body.statements:
        tname = f"r_{target}" if target in op.outputs else f"t_{target}"
        if target not in op.outputs:
            temps.append(tname)
        body_cxx.append((tname, ex.render_cxx(value, names_cxx)))
        body_jnp.append((tname, ex.render_jnp(value, names_jnp)))
        names_cxx[target] = tname
        names_jnp[target] = tname

    inputs = tuple(operands[n] for n in op.inputs)
    outputs = tuple(operands[n] for n in op.outputs)
    tx = sum(o.tma.box_bytes * o.tma.n_boxes for o in inputs)
    bytes_moved = sum(math.prod(o.shape) * o.itemsize for o in inputs + outputs)
    kname = "map_{}_{}_s{}_wg{}".format(spec.name, "x".join(map(str, iblock)), stages, sch.num_warpgroups)
    plan = MapPlan(
        family="map", name=spec.name, kernel_name=kname, sizes=sizes, constants=dict(op.constants),
        backends=tuple(sch.backends), grid=grid, grid_names=grid_names, grid_vars=_grid_vars(grid_names),
        num_tiles=num_tiles, block=iblock,
        tile_order=sch.persistent.tile_order, minor_dim=sch.persistent.minor_dim, tile_width=sch.persistent.tile_width,
        num_blocks=num_blocks, blocks_per_sm=per_sm, threads=threads, num_warpgroups=sch.num_warpgroups, stages=stages,
        vec=vec, inputs=inputs, outputs=outputs, smem_buffers=tuple(smem.buffers), smem_bytes=smem_bytes,
        full_barrier=full, full_arrivals=full_arrivals, delay_release=max(o.delay_release for o in inputs), tx_bytes=tx, body_cxx=tuple(body_cxx), body_jnp=tuple(body_jnp),
        temporaries=tuple(temps),
        constants_cxx=tuple((f"c_{n}", cxx_float(v)) for n, v in op.constants.items()),
        approx_math=sch.compiler_params.approx_math, lowering_semantics=sch.compiler_params.lowering_semantics,
        unsafe_no_auto_barriers=sch.compiler_params.unsafe_no_auto_barriers,
        profile_space=sch.compiler_params.profile_space,
        persistent=sch.persistent.loop != "none", bytes_moved=bytes_moved,
        kernel_args=tuple(KernelArg("tmap", i, o.dtype, o.tma_shape, o.tma_strides, o.tma.box, o.tma.swizzle,
                                    o.oob_fill == "nan") for i, o in enumerate(inputs + outputs)),
    )
    return plan, problems


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


def _check_module_names(spec: SpecFile, problems: Problems) -> None:
    """The spec name and input names are written as-is into the Pallas module and the package (schedgen.reserved)."""
    for path, message in reserved.reserved_problems(spec):
        problems.add(path, message)


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


def _plan_operand(name, role, dtype, shape, bs, path, iblock, iter_shape, grid, grid_names, sizes, stages,
                  problems: Problems, hw: Hardware, smem: SmemMap, vec: int) -> MapOperand | None:
    rank, irank = len(shape), len(iblock)
    off = irank - rank  # leading iteration dims this operand does not have
    if bs is None:  # default: the broadcast of the output block
        block = tuple(1 if shape[d] == 1 and iter_shape[off + d] != 1 else iblock[off + d] for d in range(rank))
        bs = BlockSpec(block_shape=list(block))
    block = tuple(bs.block_shape)
    before = len(problems)
    if len(block) != rank:
        problems.add((*path, "block_shape"), f"'{name}' has {rank} dimensions, block_shape has {len(block)}")
        return None
    for d in range(rank):
        want = iblock[off + d]
        if block[d] != want and not (block[d] == 1 and shape[d] == 1):
            legal = f"{want}" + (" (or 1 to broadcast, if the array's dimension is 1)" if shape[d] == 1 else "")
            problems.add((*path, "block_shape", d),
                         f"block dimension {d} of '{name}' is {block[d]}; elementwise blocks follow the output block: {legal}")
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
    for d in range(rank):
        if shape[d] % block[d] and bs.out_of_bounds == "reject":
            problems.add((*path, "block_shape", d),
                         f"dimension {d} of '{name}' ({shape[d]}) is not a multiple of the block ({block[d]}); use a "
                         f"divisor of {shape[d]}, or set out_of_bounds: zero to let TMA pad the last block")
    # index map
    default_map = "(" + ", ".join(grid_names[off:]) + ("," if rank == 1 else "") + ")"
    if bs.index_map is None:
        # broadcast dims index block 0
        parts = [grid_names[off + d] if block[d] == iblock[off + d] or shape[d] != 1 else "0" for d in range(rank)]
        text = "(" + ", ".join(parts) + ("," if rank == 1 else "") + ")"
    else:
        text = bs.index_map
    try:
        imap = ex.parse_index_map(text, grid_names=list(grid_names), sizes=list(sizes))
    except ex.ExprError as err:
        problems.add((*path, "index_map"), err.message, (err.line, err.col))
        return None
    if len(imap) != rank:
        problems.add((*path, "index_map"), f"index_map gives {len(imap)} block indices; '{name}' has {rank} dimensions, "
                                           f"e.g. {default_map}")
        return None
    if len(problems) == before:
        _check_index_map(name, imap, text, shape, block, iblock, grid, grid_names, sizes, path, problems)
    # swizzle / TMA
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
        if stride % 16:
            problems.add(("op", "inputs" if role == "in" else "outputs", name, "shape"),
                         f"rows of '{name}' along dimension {d} are {stride} B apart; TMA needs a multiple of 16 B "
                         f"(pad the minor dimension to a multiple of {16 // math.gcd(16, isz)} elements)")
    if len(problems) != before:
        return None
    if tiling is None and swizzle:
        tiling = (8, swizzle // isz)  # the tiling a swizzled SMEM ref needs (Pallas TilingTransform)
    block_bytes = math.prod(block) * isz
    count = stages if role == "in" else 2
    align = 1024 if swizzle else 128  # TMA destinations: 128 B, and the swizzle atom repeats every 1 KiB
    buf = smem.alloc(cname(role, name), cdiv(block_bytes, align) * align, count,
                     note=("stage" if role == "in" else "double buffer"))
    # element-row strides in SMEM for each iteration dim except the minor (0 when broadcast)
    strides = [0] * (irank - 1)
    rows = math.prod(block[:-1]) if rank > 1 else 1
    row = 1
    for d in range(rank - 2, -1, -1):
        strides[off + d] = row if block[d] != 1 or iblock[off + d] == 1 else 0
        row *= block[d]
    return MapOperand(
        name=name, cname=cname(role, name), role=role, dtype=dtype, ctype=CTYPE[dtype], itemsize=isz, shape=shape,
        block=block, tma=box, tma_dims=kept, tma_shape=tma_shape, tma_strides=tma_strides,
        block_bytes=block_bytes, smem=buf,
        index_map=text,
        index_map_cxx=tuple(ex.render_cxx_int(e, dict(zip(grid_names, _grid_vars(grid_names))) |
                                              {s: f"S_{s}" for s in sizes},
                                              ranges=_index_ranges(grid, grid_names, sizes)) for e in imap),
        index_map_py=tuple(ex.render_py_int(e, dict(zip(grid_names, _grid_vars(grid_names))) |
                                            {s: str(sizes[s]) for s in sizes},
                                            ranges=_index_ranges(grid, grid_names, sizes)) for e in imap),
        row_strides=tuple(strides), minor_bcast=(block[-1] == 1 and iblock[-1] != 1), rows=rows,
        oob_fill="nan" if bs.out_of_bounds == "nan" else "zero", delay_release=bs.delay_release, tiling=tiling,
        transpose=None,
    )


def _index_ranges(grid, grid_names, sizes) -> dict[str, tuple[int, int]]:
    """What each name of an index map ranges over: a grid name [0, g - 1], a size exactly its value."""
    return {g: (0, n - 1) for g, n in zip(grid_names, grid)} | {s: (v, v) for s, v in sizes.items()}


def _check_index_map(name, imap, text, shape, block, iblock, grid, grid_names, sizes, path, problems: Problems) -> None:
    """The index map must pick, at every grid point, the block the body's broadcasting reads.

    Proved for every point, never sampled: first every intermediate is bounded to the kernels' 32-bit int math
    (interval arithmetic over the whole grid); then a map whose components are affine in the grid names (+, -,
    products with constants; // and % of constants only) is compared exactly as affine forms, any grid size;
    anything else is evaluated exhaustively (numpy int64, in chunks) up to MAX_EXHAUSTIVE_POINTS grid points, and
    rejected above that with a message saying what to write instead."""
    rank, off = len(shape), len(iblock) - len(shape)
    ranges = _index_ranges(grid, grid_names, sizes)
    for e in imap:
        if (err := ex.check_int32(e, ranges)) is not None:
            problems.add((*path, "index_map"), err.message, (err.line, err.col))
            return
    total = math.prod(grid)

    def want_at(point) -> tuple[int, ...]:
        return tuple(point[off + d] * iblock[off + d] // block[d] if not (block[d] == 1 and shape[d] == 1) else 0
                     for d in range(rank))

    def mismatch(point, got) -> None:
        problems.add((*path, "index_map"),
                     f"index_map {text} sends grid point {point} to block {got} of '{name}', but the elementwise "
                     f"body reads block {want_at(point)} there (numpy broadcasting of the output block)")

    # The block the body reads, as an affine form: the grid name itself (block == iblock), or 0 (broadcast).
    # Grid dimensions of extent 1 are the constant 0.
    fixed = {g: 0 for g, n in zip(grid_names, grid) if n == 1} | dict(sizes)
    want_forms = []
    affine = all(block[d] == iblock[off + d] or (block[d] == 1 and shape[d] == 1) for d in range(rank))
    for d in range(rank):
        g = grid_names[off + d]
        want_forms.append({"": 0} if (block[d] == 1 and shape[d] == 1) or g in fixed else {g: 1, "": 0})
    forms = [ex.affine_form(e, fixed) for e in imap]
    if affine and all(f is not None for f in forms):
        if forms == want_forms:
            return  # proved for every grid point
        if total > MAX_EXHAUSTIVE_POINTS:
            # two different affine forms differ at the origin or at a unit point of a dimension they weigh apart
            for point in [tuple(0 for _ in grid)] + [tuple(int(k == d) for k in range(len(grid)))
                                                       for d in range(len(grid)) if grid[d] > 1]:
                got = tuple(ex.eval_int(e, dict(zip(grid_names, point)) | dict(sizes)) for e in imap)
                if got != want_at(point):
                    mismatch(point, got)
                    return
    if total > MAX_EXHAUSTIVE_POINTS:
        problems.add((*path, "index_map"),
                     f"index_map {text} is not affine in the grid names (it uses // or %, or multiplies grid names), "
                     f"and the grid has {total} points, more than the {MAX_EXHAUSTIVE_POINTS} this check evaluates "
                     f"one by one: it cannot be proved to pick the right block everywhere; write each block index as "
                     f"the grid name itself (or 0 for a broadcast dimension), e.g. {_default_map_text(grid_names, off, rank)}")
        return
    # exhaustive, in chunks of grid points in row-major (itertools.product) order
    env_sizes = dict(sizes)
    for start in range(0, total, CHUNK_POINTS):
        flat = np.arange(start, min(start + CHUNK_POINTS, total), dtype=np.int64)
        coords = np.unravel_index(flat, grid)
        env = dict(zip(grid_names, coords)) | env_sizes
        try:
            got = [ex.eval_int_array(e, env, flat.shape) for e in imap]
        except ex.GridZeroDivision as err:
            point = tuple(int(c[err.index]) for c in coords)
            problems.add((*path, "index_map"), f"{err.message} at grid point {point}")
            return
        bad = np.zeros(flat.shape, dtype=bool)
        for d in range(rank):
            want = (0 if block[d] == 1 and shape[d] == 1 else coords[off + d] * iblock[off + d] // block[d])
            bad |= got[d] != want
        if bad.any():
            at = int(np.argmax(bad))
            point = tuple(int(c[at]) for c in coords)
            mismatch(point, tuple(int(g[at]) for g in got))
            return


def _default_map_text(grid_names, off, rank) -> str:
    return "(" + ", ".join(grid_names[off:off + rank]) + ("," if rank == 1 else "") + ")"
