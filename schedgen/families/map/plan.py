"""Planner of the `map` family: N-ary elementwise kernels over blocked 1-D to 3-D arrays.

The iteration space is the output shape cut into `block_shape` tiles; each input block is the
numpy-broadcast of the output block (block dims equal, or 1 for a broadcast dimension). Tiles stream
through a `max_concurrent_steps`-deep ring of SMEM stages filled by TMA, are computed by all threads
with 16-byte vector accesses, staged in a double-buffered SMEM output and stored back by TMA. With
schedule.pipeline.data_path: registers the CUDA kernel walks the same tiles with 16-byte global loads and stores
instead, no SMEM (registers.py: its checks and numbers).
"""
from __future__ import annotations

import ast
import math
from typing import TYPE_CHECKING


from ...frontend import expr as ex
from ...frontend.model import ITEMSIZE, BlockSpec
from ...plan import dims
from ...plan.common import (
    KernelArg,
    Problems,
    SmemMap,
    dynamic_ranges,
    max_sizes,
    occupancy,
    resolve_shape,
    size_values,
)
from ...plan.dims import DimLike
from ...plan.exprs import PlanExpr
from ...plan.hardware import Hardware
from ...plan.launch import KernelLaunch
from ...plan.legality import (
    check_no_cluster,
    check_profiler,
    profiler_smem_bytes,
    check_reserved_names,
    check_sizes_int32,
    check_smem_fit,
    check_unique_names,
)

from .columns import plan_columns
from .registers import check_registers, plan_registers
from .operands import broadcasts, check_grid, dim_prod, max_sizes_shape, plan_operand
from .unread import check_unread
from .records import Body, MapOperand, MapPlan, Space, Sync

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

# Default grid names: the first of these the spec does not use for something else.
DEFAULT_GRID_NAMES = ("i", "j", "k", "l", "m", "n", "p", "q")


def plan_map(spec: SpecFile, hw: Hardware) -> tuple[MapPlan | None, Problems]:
    """Phases: names, the body, schedule fields that need no shapes, shapes, the iteration space, operands, the
    vector width, barriers and SMEM, 32-bit limits, backend limits, the launch; each reports located problems."""
    problems = Problems()
    op, sch = spec.op, spec.schedule
    seen = _check_names(op, problems)
    body = _parse_body(op, problems)
    _check_schedule(op, sch, problems)
    check_unread(op, sch, problems)
    shapes = _resolve_shapes(op, problems)
    if shapes is None:
        return None, problems
    iter_shape = _check_broadcasts(op, shapes, problems)   # (needs no block: reported with a missing out_specs too)
    if next(iter(op.outputs)) not in sch.out_specs:
        return None, problems
    space = _plan_space(spec, iter_shape, seen, problems)
    if space is None or any(len(shape) > len(iter_shape) for shape in shapes.values()):
        return None, problems   # an operand of a higher rank than the iteration space: located above, no operands
    check_registers(op, sch, iter_shape, space, problems)
    smem = SmemMap()
    operands = _plan_operands(op, sch, shapes, space, hw, smem, problems)
    vec = _vector_width(op, sch, space.block, problems)
    sync = _plan_sync(sch, space.stages, smem, hw, problems)
    _check_int32(op, space, problems)
    _backend_limits(op, sch, body, operands, problems)
    registers = plan_columns(op, sch, operands, space, problems)
    if "pallas" in sch.backends:
        _pallas_gmem_strides(operands, space, problems)
        if registers is None:
            _pallas_lane_widths(sch, operands, problems)
    if problems or body is None or len(operands) != len(op.inputs) + len(op.outputs):
        return None, problems
    return _assemble(spec, space, operands, vec, smem, sync, _body_code(op, body), hw, registers), problems


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
    sizes = size_values(op.sizes)   # a dynamic size is the extent dims.size(name)
    shapes = {n: resolve_shape(o.shape, sizes, ("op", "inputs", n, "shape"), problems) for n, o in op.inputs.items()}
    shapes.update({n: resolve_shape(o.shape, sizes, ("op", "outputs", n, "shape"), problems) for n, o in op.outputs.items()})
    known = len(problems) == before
    bound = {x.args[0] for n in op.inputs for x in shapes[n] if isinstance(x, dims.Dim)}
    for n in op.sizes:
        if not isinstance(op.sizes[n], int) and n not in bound:
            problems.add(("op", "sizes", n), f"the dynamic size {n} is no input's dimension, so a call's inputs "
                                             f"cannot give its value; use it in an input's shape, or give it a "
                                             f"fixed value")
    return shapes if known else None   # (planning goes on past an unbound size: its problems are reported too)


def _check_broadcasts(op, shapes: dict, problems: Problems) -> tuple[int, ...]:
    """The first output's shape is the iteration shape: every output has it, every input broadcasts to it."""
    out_names = list(op.outputs)
    iter_shape = shapes[out_names[0]]
    for n in out_names[1:]:
        if shapes[n] != iter_shape:
            problems.add(("op", "outputs", n, "shape"), f"all outputs must have one shape {iter_shape}, got {shapes[n]}")
    for n in op.inputs:
        if not broadcasts(shapes[n], iter_shape):
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
    grid = tuple(dims.cdiv(s, b) for s, b in zip(iter_shape, iblock))
    grid_names = _grid_names(sch, rank, seen, problems)
    check_reserved_names(spec, problems)
    sizes, ranges = size_values(op.sizes), dynamic_ranges(op.sizes)
    if sch.grid is not None:
        check_grid(sch.grid, grid, sizes, ranges, problems)
    if sch.persistent.tile_order == "lpt":
        problems.add(("schedule", "persistent", "tile_order"), "lpt (longest tiles first) orders attention tiles; map "
                                                               "tiles are all alike: use row_major or planar_snake")
    if sch.persistent.tile_order == "planar_snake" and rank != 2:
        problems.add(("schedule", "persistent", "tile_order"), f"planar_snake orders a 2-D grid; this grid has {rank} dimensions")
    return Space(iter_shape, iblock, grid, grid_names, sizes, stages, ranges)


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
        planned = plan_operand(n, role, operand.dtype, shapes[n], bs, path, space, problems, hw, smem)
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
        if bar.num_arrivals != 1 and "pallas" in sch.backends:
            problems.add(("schedule", "barriers", "full", "num_arrivals"),
                         "the Pallas map kernel's 'full' barriers are emit_pipeline's own (one arrival: the TMA "
                         "load's), so num_arrivals changes the CUDA kernel only; leave it at 1, or set "
                         "schedule.backends: [cuda]")
    profile = profiler_smem_bytes(sch.compiler_params.profile_space, 1)   # the Pallas map: one warpgroup
    if profile:
        smem.alloc("profile", profile, note="Mosaic GPU's profiler events (compiler_params.profile_space)")
    if sch.pipeline.data_path == "registers":   # the CUDA kernel only (Pallas refused): no SMEM at all
        return Sync(full, full_arrivals, 0)
    smem_bytes = check_smem_fit(smem, hw, ("schedule", "pipeline", "max_concurrent_steps"), problems,
                                "use fewer stages or smaller blocks" + (", or a smaller profile_space" if profile else ""))
    return Sync(full, full_arrivals, smem_bytes)


def _check_int32(op, space: Space, problems: Problems) -> None:
    """Sizes and the tile count fit the kernels' 32-bit int index math (a dynamic size at its max)."""
    check_sizes_int32(max_sizes(op.sizes), problems, f"the kernel's 32-bit int index math (at most {ex.MAX_INT})")
    for d, (extent, blk) in enumerate(zip(space.iter_shape, space.block)):
        if isinstance(extent, dims.Dim) and dims.upper(extent, space.ranges) + blk - 1 > ex.MAX_INT:
            problems.add(("op", "sizes", *sorted(dims.sizes_of(extent))[:1]),
                         f"dimension {d} ({extent}) is up to {dims.upper(extent, space.ranges)}; the kernel rounds it "
                         f"up to whole blocks of {blk} in 32-bit int math (at most {ex.MAX_INT}): lower its max")
    tiles = dims.upper(dim_prod(space.grid), space.ranges)
    if tiles > ex.MAX_INT:
        at_max = " (at the max of its dynamic sizes)" if space.ranges else ""
        problems.add(("schedule", "out_specs", next(iter(op.outputs)), "block_shape"),
                     f"the output is cut into {tiles} tiles{at_max}; the kernel counts tiles in a 32-bit int "
                     f"(at most {ex.MAX_INT}); use larger blocks")


def _backend_limits(op, sch, body, operands: dict, problems: Problems) -> None:
    if "pallas" in sch.backends and body is not None:
        _pallas_limits(op, sch, body, operands, problems)
    check_profiler(sch.compiler_params, sch.backends, problems)
    if "cuda" in sch.backends:
        _cuda_limits(op, operands, problems)


def _cuda_limits(op, operands: dict, problems: Problems) -> None:
    """The CUDA kernel refills one stage, holding a block of every input, at once: a single delay_release."""
    delays = {n: operands[n].delay_release for n in op.inputs if n in operands}
    late = max(delays.values(), default=0)
    for n, d in delays.items():
        if d != late:
            problems.add(("schedule", "in_specs", n, "delay_release"),
                         f"the CUDA map kernel refills a stage (a block of every input) at once, so it would hold "
                         f"'{n}' for {late} step{'s' if late != 1 else ''} like {', '.join(repr(m) for m, x in delays.items() if x == late)}, "
                         f"not {d}: give every input the same delay_release, or set schedule.backends: [pallas]")


def _body_code(op, body) -> Body:
    """The body's validated statements and the role of every name in them: inputs are operands, then constants,
    and each target an output or a temporary (the templates spell the roles: v_<name>, c_<name> / _c_<name>,
    r_<name>, t_<name>)."""
    roles = {n: "operand" for n in op.inputs} | {c: "constant" for c in op.constants}
    roles.update({target: "output" if target in op.outputs else "temporary" for target, _ in body.statements})
    return Body(tuple((target, PlanExpr(value)) for target, value in body.statements), roles)


def _launch(sch, num_tiles: DimLike, smem_bytes: int, threads: int, hw: Hardware,
            per_sm: int | None = None) -> tuple[DimLike, int]:
    """(blocks launched, blocks per SM): one a tile, or a persistent grid of all SMs (or num_blocks); an extent
    evaluated at the call when the tile count depends on a dynamic size. `per_sm`: the register path's bound
    (its __launch_bounds__), else the SMEM's and the threads' occupancy."""
    per_sm = per_sm or occupancy(smem_bytes, threads, hw)
    if sch.persistent.loop == "none":
        return num_tiles, per_sm
    if sch.persistent.num_blocks == "auto":
        return dims.dmin(num_tiles, hw.sm_count * per_sm), per_sm
    return dims.dmin(num_tiles, sch.persistent.num_blocks), per_sm


def _assemble(spec: SpecFile, space: Space, operands: dict, vec: int, smem: SmemMap, sync: Sync, body: Body,
              hw: Hardware, registers) -> MapPlan:
    """The plan: every number the templates print."""
    op, sch = spec.op, spec.schedule
    iblock, grid, stages = space.block, space.grid, space.stages
    threads = 128 * sch.num_warpgroups
    num_tiles = dim_prod(grid)
    inputs = tuple(operands[n] for n in op.inputs)
    outputs = tuple(operands[n] for n in op.outputs)
    regs = plan_registers(op, sch, space, inputs + outputs, vec, threads, hw) \
        if sch.pipeline.data_path == "registers" else None
    num_blocks, per_sm = _launch(sch, num_tiles, sync.smem_bytes, threads, hw,
                                 regs.min_blocks if regs is not None else None)
    tx = sum(o.tma.box_bytes * o.tma.n_boxes for o in inputs)
    # at the max of every dynamic size (explain's traffic line and the copy peer take it as a number)
    bytes_moved = sum(math.prod(max_sizes_shape(o.shape, space.ranges)) * o.itemsize for o in inputs + outputs)
    kname = "map_{}_{}_{}_wg{}".format(spec.name, "x".join(map(str, iblock)),
                                       f"s{stages}" if regs is None else f"regs_u{regs.unroll}", sch.num_warpgroups)
    cp = sch.compiler_params
    return MapPlan(
        launch=KernelLaunch(name=spec.name, family="map", kernel_name=kname, backends=tuple(sch.backends),
                            threads=threads, smem_bytes=sync.smem_bytes, num_blocks=num_blocks, blocks_per_sm=per_sm,
                            kernel_args=_kernel_args(inputs + outputs, space.ranges, regs is not None),
                            dynamic_sizes=tuple(space.ranges.values())),
        sizes=space.sizes, constants=dict(op.constants),
        grid=grid, grid_names=space.grid_names, grid_vars=_grid_vars(space.grid_names),
        num_tiles=num_tiles, block=iblock,
        tile_order=sch.persistent.tile_order, minor_dim=sch.persistent.minor_dim, tile_width=sch.persistent.tile_width,
        num_warpgroups=sch.num_warpgroups, stages=stages,
        vec=vec, inputs=inputs, outputs=outputs, smem_buffers=tuple(smem.buffers) if regs is None else (),
        full_barrier=sync.full, full_arrivals=sync.arrivals, delay_release=max(o.delay_release for o in inputs),
        tx_bytes=tx, body=body.statements, body_roles=body.roles,
        index_roles={g: "grid" for g in space.grid_names} | {s: "size" for s in space.sizes},
        approx_math=cp.approx_math, lowering_semantics=cp.lowering_semantics,
        unsafe_no_auto_barriers=cp.unsafe_no_auto_barriers, profile_space=cp.profile_space,
        profile_dir=cp.profile_dir,
        persistent=sch.persistent.loop != "none", bytes_moved=bytes_moved,
        registers=registers, data_path=sch.pipeline.data_path, regs=regs,
    )


def _kernel_args(operands, ranges, pointers: bool = False) -> tuple[KernelArg, ...]:
    """One tensor map per operand (inputs then outputs; extents in its shape and strides), or its device pointer on
    the register path, then one `int sz_<name>` per dynamic size in spec order (the CUDA kernel's tile counts and
    loop bounds come from them)."""
    if pointers:
        tmaps = tuple(KernelArg("ptr", i, o.dtype, o.shape) for i, o in enumerate(operands))
    else:
        tmaps = tuple(KernelArg("tmap", i, o.dtype, o.tma_shape, o.tma_strides, o.tma.box, o.tma.swizzle,
                                o.oob_fill == "nan") for i, o in enumerate(operands))
    return tmaps + tuple(KernelArg("i32", -1, value=dims.size(n)) for n in ranges)


def _pallas_limits(op, sch, body, operands, problems: Problems) -> None:
    """What jax 0.11.2's Mosaic GPU lowering cannot do with these kernels, reported before rendering."""
    hint = "or set schedule.backends: [cuda]"
    used = {n.func.id for _, e in body.statements for n in ast.walk(e.tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    for fn in sorted({"gelu_erf", "erf"} & set(used)):
        problems.add(("op", "body"), f"{fn} needs erf, which Mosaic GPU (jax 0.11.2) cannot lower; use gelu (the "
                                     f"tanh form) {hint}")
    for o in operands.values():
        path = ("schedule", "in_specs" if o.role == "in" else "out_specs", o.name)
        _pallas_transforms(o, path, hint, problems)
        if o.role == "in" and o.oob_fill == "nan":
            problems.add((*path, "out_of_bounds"), f"the Pallas map kernel's TMA loads pad a partial block with zeros "
                                                   f"(Mosaic GPU has no NaN fill), so nan changes the CUDA kernel "
                                                   f"only; use zero {hint}")


def _pallas_lane_widths(sch, operands, problems: Problems) -> None:
    """Under lane semantics, and without a named register layout (a column or a row in the body gives one:
    columns.py), every input block is loaded in its own dtype's layout: inputs of one width only."""
    widths = sorted({o.itemsize for o in operands.values() if o.role == "in"})
    if sch.compiler_params.lowering_semantics == "lane" and len(widths) > 1:
        # found by lowering legal field values together on the CPU (2026-12-06): 'Incompatible FragmentedArray
        # layouts' for an f32 or f8 input beside bf16 ones; inputs of one width (bf16 and f16) lower, and so do
        # bf16 and f32 ones beside a column (tests/families/map/test_map_columns.py)
        problems.add(("schedule", "compiler_params", "lowering_semantics"),
                     f"under lane semantics the Pallas map kernel loads each input block in its own dtype's strided "
                     f"layout (16 B a thread), and inputs of {' and '.join(f'{w} B' for w in widths)} elements get "
                     f"layouts that Mosaic GPU (jax 0.11.2) cannot combine; use warpgroup (the default: layouts "
                     f"inferred), or inputs of one width (a Pallas field: the CUDA kernel has no lowering modes)")


def _pallas_gmem_strides(operands, space: Space, problems: Problems) -> None:
    """Mosaic GPU's TMA copies an operand over its whole shape (the CUDA kernel's tensor map drops extent-1
    dimensions), and needs every GMEM stride but the last to be a multiple of 16 B: an [M, 1] array in blocks wider
    than 1 ('async_copy requires all GMEM strides except the last one to be a multiple of 16 bytes'; found by
    lowering legal field values on the CPU, 2026-12-06). A column in blocks of one column is read from GMEM
    instead (columns.py) and is not checked here."""
    for o in operands.values():
        if o.minor_bcast:
            continue
        for d in range(len(o.shape) - 1):
            stride = dim_prod(o.shape[d + 1:]) * o.itemsize
            if not dims.divisible(stride, 16, space.ranges):
                group = "inputs" if o.role == "in" else "outputs"
                problems.add(("op", group, o.name, "shape"),
                             f"the Pallas map kernel copies '{o.name}' by TMA over its whole shape "
                             f"{list(o.shape)}, whose dimension {d} steps {stride} B: Mosaic GPU (jax 0.11.2) needs "
                             f"every stride but the last to be a multiple of 16 B; use a block of 1 along the "
                             f"extent-1 dimensions (a broadcast), or set schedule.backends: [cuda]")
                break


def _pallas_transforms(o, path: tuple, hint: str, problems: Problems) -> None:
    """The SMEM transforms jax 0.11.2's layout inference takes in the map kernel (each refusal below fails to lower
    with 'Failed to infer a possible set of layouts'; found by lowering legal field values on the CPU, 2026-12-06):
    a tiling only with a swizzle, and a swizzled block only of whole 64-row groups (64 and 128 rows lower, 8 and 32
    do not, at every swizzle)."""
    if o.tiling and not o.tma.swizzle:
        problems.add((*path, "transforms", "tiling"),
                     f"the Pallas map kernel's SMEM block of '{o.name}' can be tiled only with a swizzle (Mosaic GPU "
                     f"in jax 0.11.2 finds no layouts for a tiled, unswizzled block); add swizzle: "
                     f"{o.tiling[-1] * o.itemsize if o.tiling[-1] * o.itemsize in (32, 64, 128) else 128}, or leave "
                     f"the tiling out (a Pallas field: the CUDA kernel reads no tiling)")
    elif o.tma.swizzle and len(o.block) >= 2 and o.block[-2] % 64:
        problems.add((*path, "transforms", "swizzle"),
                     f"the Pallas map kernel reads a swizzled SMEM block in 64-row groups (Mosaic GPU in jax 0.11.2 "
                     f"finds no layouts for {o.block[-2]} rows); use a multiple of 64 rows, or leave the transforms "
                     f"out, {hint}")


def _grid_vars(grid_names) -> tuple[str, ...]:
    return tuple(f"g_{g}" for g in grid_names)


