"""The operand phases of the map planner: each input's and output's block, BlockSpec checks, index map (proved for
every grid point, by its affine structure or exhaustively), TMA descriptor and record."""
from __future__ import annotations

import ast
import dataclasses
import functools
import math
import operator
from typing import TYPE_CHECKING, Mapping, NamedTuple

import numpy as np

from ...frontend import expr as ex
from ...frontend import intmath
from ...frontend.model import ITEMSIZE, BlockSpec
from ...plan import dims
from ...plan.dims import DimLike, SizeRange
from ...plan.common import (
    CTYPE,
    Problems,
    SmemMap,
    TmaBox,
    cdiv,
    tma_box,
)
from ...plan.exprs import PlanExpr
from ...plan.hardware import Hardware
from ...plan.legality import (
    tma_stride_problem,
)

from .records import MapOperand, Space, cname

if TYPE_CHECKING:
    pass


# Index maps that are not affine in the grid names are checked at every grid point, up to this many points.
MAX_EXHAUSTIVE_POINTS = 1 << 26


CHUNK_POINTS = 1 << 20


def broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    return all(s == t or s == 1 for s, t in zip(reversed(shape), reversed(target)))


def dim_prod(values) -> DimLike:
    """The product of extents (1 for none); an int when all are."""
    return functools.reduce(operator.mul, values, 1)


def max_sizes_shape(shape, ranges: Mapping[str, SizeRange]) -> tuple[int, ...]:
    """A shape with every dynamic dimension at its max."""
    return tuple(dims.upper(x, ranges) for x in shape)


def size_values_grid(ranges: Mapping[str, SizeRange], names) -> tuple[dict[str, np.ndarray], int]:
    """Every legal combination of the dynamic sizes `names` as flat int64 arrays {name: values}, and their count."""
    axes = []
    for n in names:
        r = ranges[n]
        start = cdiv(r.min, r.multiple_of) * r.multiple_of
        axes.append(np.arange(start, r.max + 1, r.multiple_of, dtype=np.int64))
    count = math.prod(len(a) for a in axes)
    if not names or count > MAX_EXHAUSTIVE_POINTS:
        return {}, count
    mesh = np.meshgrid(*axes, indexing="ij")
    return {n: m.ravel() for n, m in zip(names, mesh)}, count


def eval_dim_array(d: DimLike, env: Mapping[str, np.ndarray]) -> np.ndarray:
    """An extent evaluated over arrays of size values (int64, the semantics of dims.evaluate)."""
    if isinstance(d, int):
        return np.int64(d)
    if d.op == "size":
        return env[d.args[0]]
    a, b = (eval_dim_array(x, env) for x in d.args)
    ops = {"+": np.add, "*": np.multiply, "//": np.floor_divide, "%": np.mod, "min": np.minimum, "max": np.maximum,
           "cdiv": lambda x, y: -np.floor_divide(-x, y)}
    return ops[d.op](a, b)


def check_grid(exprs, grid, sizes, ranges: Mapping[str, SizeRange], problems: Problems) -> None:
    """schedule.grid must give the output's block counts; an entry over a dynamic size (or along a dynamic
    dimension) is checked at every legal value of the sizes it involves."""
    if len(exprs) != len(grid):
        problems.add(("schedule", "grid"), f"the output blocks form a grid of {len(grid)} dimensions "
                                           f"{tuple(map(str, grid))}, got {len(exprs)} entries")
        return
    for d, (e, want) in enumerate(zip(exprs, grid)):
        try:
            tree = None if isinstance(e, int) else ex.parse_int_expr(e, names=list(sizes))
        except ex.ExprError as err:
            problems.add(("schedule", "grid", d), err.message, (err.line, err.col))
            continue
        used = set() if tree is None else {n.id for n in ast.walk(tree.tree) if isinstance(n, ast.Name)}
        names = [n for n in ranges if n in used or n in dims.sizes_of(want)]
        if not names:
            got = e if tree is None else ex.eval_int(tree, sizes)
            if got != want:
                problems.add(("schedule", "grid", d), f"grid size {got} does not match the {want} output blocks "
                                                      f"along dimension {d}")
            continue
        _check_grid_dynamic(d, e, tree, want, names, sizes, ranges, problems)


def _check_grid_dynamic(d, e, tree, want, names, sizes, ranges, problems: Problems) -> None:
    where = ", ".join(ranges[n].name + " " + ranges[n].describe() for n in names)
    env, count = size_values_grid(ranges, names)
    if not env:
        problems.add(("schedule", "grid", d), f"grid entry {e!r} involves the dynamic size(s) {where}: "
                                              f"{count} combinations, more than the {MAX_EXHAUSTIVE_POINTS} "
                                              f"checked one by one; write it as cdiv of the output dimension by "
                                              f"the block, or leave schedule.grid out")
        return
    static = {n: v for n, v in sizes.items() if isinstance(v, int)}
    if tree is not None:
        bounds = {n: (v, v) for n, v in static.items()} | {n: (r.min, r.max) for n, r in ranges.items()}
        if (err := intmath.check_int32(tree, bounds, over="the sizes' ranges")) is not None:
            problems.add(("schedule", "grid", d), err.message, (err.line, err.col))
            return
    n = len(next(iter(env.values())))
    got = np.broadcast_to(np.int64(e) if tree is None else intmath.eval_int_array(tree, static | env, (n,)), (n,))
    bad = got != np.broadcast_to(eval_dim_array(want, env), (n,))
    if bad.any():
        at = int(np.argmax(bad))
        point = ", ".join(f"{k}={int(v[at])}" for k, v in env.items())
        problems.add(("schedule", "grid", d), f"grid size {int(got[at])} does not match the {want} output blocks "
                                              f"along dimension {d} at {point} ({where}); the grid follows the "
                                              f"output at every size in range")


class Block(NamedTuple):
    """One operand's block against the iteration block: `off` leading iteration dims it does not have."""
    block: tuple[int, ...]
    spec: BlockSpec
    off: int


def plan_operand(name: str, role: str, dtype: str, shape: tuple[int, ...], bs: BlockSpec | None, path: tuple,
                  space: Space, problems: Problems, hw: Hardware, smem: SmemMap) -> MapOperand | None:
    """Block, index map, TMA boxes and SMEM buffer of one operand; None (reported) when any of them is wrong."""
    before = len(problems)
    blk = _operand_block(name, role, shape, bs, path, space, problems)
    if blk is None:
        return None
    parsed = _operand_index_map(name, shape, blk, path, space, problems, check=len(problems) == before)
    if parsed is None:
        return None
    text, imap = parsed
    tma = _operand_tma(name, role, dtype, shape, blk, path, hw, problems, space.ranges)
    if len(problems) != before:
        return None
    return _operand(name, role, dtype, shape, blk, text, imap, tma, space, smem)


def _operand_block(name: str, role: str, shape: tuple[int, ...], bs: BlockSpec | None, path: tuple, space: Space,
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
    if role == "out" and bs.out_of_bounds == "nan":
        problems.add((*path, "out_of_bounds"), "an output block is stored, never loaded: the TMA store clips a partial "
                                               "block at the array's edge and nothing is filled; use zero (a partial "
                                               "last block) or reject")
    for d in range(rank):
        if bs.out_of_bounds != "reject" or dims.divisible(shape[d], block[d], space.ranges):
            continue
        if isinstance(shape[d], int):
            problems.add((*path, "block_shape", d),
                         f"dimension {d} of '{name}' ({shape[d]}) is not a multiple of the block ({block[d]}); use a "
                         f"divisor of {shape[d]}, or set out_of_bounds: zero to let TMA pad the last block")
        else:
            problems.add((*path, "block_shape", d), _ragged_message(name, d, shape[d], block[d], space.ranges))
    return Block(block, bs, off)


def _ragged_message(name: str, d: int, extent: DimLike, block: int, ranges: Mapping[str, SizeRange]) -> str:
    """Why a dynamic dimension may end in a partial block: its size's multiple_of is not a multiple of the tile."""
    names = sorted(dims.sizes_of(extent))
    step = ", ".join(f"{n} in {ranges[n].min}..{ranges[n].max}, multiple_of {ranges[n].multiple_of}" for n in names)
    return (f"dimension {d} of '{name}' (the dynamic {extent}: {step}) is not always a multiple of the block "
            f"({block}), so the last block may be partial; set out_of_bounds: zero to let TMA pad it (and clip the "
            f"store), or declare multiple_of: {block} (or a multiple of it)")


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
        parts = ["0" if block[d] == 1 and shape[d] == 1 else grid_names[off + d]
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
        _check_index_map(IndexMapCheck(name, imap, text, shape, block, space.block, space.grid, grid_names,
                                       space.sizes, path, space.ranges), problems)
    return text, imap


class Tma(NamedTuple):
    box: TmaBox
    dims: tuple[int, ...]       # array dims the tensor map keeps (-1: the leading extent-1 dim of a vector)
    shape: tuple[int, ...]
    strides: tuple[int, ...]    # bytes
    swizzle: int
    tiling: tuple[int, ...] | None


def _operand_tma(name: str, role: str, dtype: str, shape: tuple[DimLike, ...], blk: Block, path: tuple,
                 hw: Hardware, problems: Problems, ranges: Mapping[str, SizeRange]) -> Tma:
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
    tma_strides = tuple(dim_prod(shape[d + 1:]) * isz for d in kept)
    if len(kept) == 1:
        # The driver rejects rank-1 tiled tensor maps (empty stride list): describe a vector as one row of a
        # 2-D tensor. The leading dimension has extent 1 and coordinate 0 (tma_dims entry -1).
        lead_stride = dims.round_up(tma_shape[0] * isz, 16)
        tma_shape, tma_strides, kept = (1,) + tma_shape, (lead_stride,) + tma_strides, (-1,) + kept
        box = TmaBox((1,) + box.box, box.n_boxes, box.box_bytes, box.swizzle)
    for d, stride in zip(kept[:-1], tma_strides[:-1]):
        what = f"rows of '{name}' along dimension {d}"
        if isinstance(stride, int):
            message = tma_stride_problem(what, stride, isz)
        elif dims.divisible(stride, 16, ranges):
            message = None
        else:
            minor = " x ".join(str(x) for x in shape[d + 1:])
            names = sorted(set().union(*(dims.sizes_of(x) for x in shape[d + 1:])))
            step = ", ".join(f"{n} in {ranges[n].min}..{ranges[n].max}, multiple_of {ranges[n].multiple_of}"
                             for n in names)
            message = (f"{what} are {minor} elements of {isz} B apart ({step}): TMA needs a multiple of 16 B at "
                       f"every size in range; declare a multiple_of that makes the row one (a multiple of "
                       f"{16 // math.gcd(16, isz)} elements)")
        if message is not None:
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
    ranges = _index_ranges(space.grid, space.grid_names, space.sizes, space.ranges)
    return MapOperand(
        name=name, cname=cname(role, name), role=role, dtype=dtype, ctype=CTYPE[dtype], itemsize=isz, shape=shape,
        block=block, tma=tma.box, tma_dims=tma.dims, tma_shape=tma.shape, tma_strides=tma.strides,
        block_bytes=block_bytes, smem=buf,
        index_map=text, block_index=tuple(PlanExpr(e, ranges) for e in imap),
        row_strides=tuple(strides), minor_bcast=(block[-1] == 1 and iblock[-1] != 1), rows=rows,
        oob_fill="nan" if bs.out_of_bounds == "nan" else "zero", delay_release=bs.delay_release, tiling=tma.tiling,
        transpose=None,
    )


def _index_ranges(grid, grid_names, sizes, ranges: Mapping[str, SizeRange]) -> dict[str, tuple[int, int]]:
    """What each name of an index map ranges over: a grid name [0, g - 1] (g at its max), a fixed size exactly its
    value, a dynamic size its range."""
    out = {g: (0, dims.upper(n, ranges) - 1) for g, n in zip(grid_names, grid)}
    return out | {s: (v, v) if isinstance(v, int) else (ranges[s].min, ranges[s].max) for s, v in sizes.items()}


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
    ranges: Mapping[str, SizeRange]     # the dynamic sizes

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


def _check_index_map(c: IndexMapCheck, problems: Problems) -> None:
    """The index map must pick, at every grid point, the block the body's broadcasting reads.

    Proved for every point, never sampled: first every intermediate is bounded to the kernels' 32-bit int math
    (interval arithmetic over the whole grid and every dynamic size's range); then a map whose components are
    affine in the grid names and dynamic sizes (+, -, products with constants; // and % of constants only) is
    compared exactly as affine forms, any grid size; anything else is evaluated exhaustively (numpy int64, in
    chunks) up to MAX_EXHAUSTIVE_POINTS grid points (summed over every legal value of the dynamic sizes the map or
    the grid depends on), and rejected above that with a message saying what to write instead."""
    ranges = _index_ranges(c.grid, c.grid_names, c.sizes, c.ranges)
    for e in c.imap:
        if (err := intmath.check_int32(e, ranges)) is not None:
            problems.add((*c.path, "index_map"), err.message, (err.line, err.col))
            return
    if _check_affine(c, problems):
        return
    used = {n.id for e in c.imap for n in ast.walk(e.tree) if isinstance(n, ast.Name)}
    names = [n for n in c.ranges if n in used or any(n in dims.sizes_of(g) for g in c.grid)]
    values, count = size_values_grid(c.ranges, names)
    total = count * dims.upper(dim_prod(c.grid), c.ranges)
    if total > MAX_EXHAUSTIVE_POINTS:
        rank, off = len(c.shape), c.off
        dyn = (f" (over every legal value of the dynamic size(s) {', '.join(names)})" if names else "")
        problems.add((*c.path, "index_map"),
                     f"index_map {c.text} is not affine in the grid names (it uses // or %, or multiplies grid names), "
                     f"and the grid has up to {total} points{dyn}, more than the {MAX_EXHAUSTIVE_POINTS} this check "
                     f"evaluates one by one: it cannot be proved to pick the right block everywhere; write each block "
                     f"index as the grid name itself (or 0 for a broadcast dimension), e.g. "
                     f"{_default_map_text(c.grid_names, off, rank)}")
        return
    if not names:
        _check_exhaustively(c, problems)
        return
    for i in range(count):      # one static check per legal value of the sizes involved
        at = {n: int(v[i]) for n, v in values.items()}
        sizes = {n: v if isinstance(v, int) else at.get(n, c.ranges[n].max) for n, v in c.sizes.items()}
        grid = tuple(dims.evaluate(g, sizes) for g in c.grid)
        before = len(problems)
        _check_exhaustively(c._replace(grid=grid, sizes=sizes), problems)
        if len(problems) != before:
            where = ", ".join(f"{n}={v}" for n, v in at.items())
            problems[-1] = dataclasses.replace(problems[-1], message=f"{problems[-1].message} (with {where})")
            return


def _check_affine(c: IndexMapCheck, problems: Problems) -> bool:
    """Whether the comparison as affine forms settled it: proved, or a mismatch found (reported) on a grid too
    large to evaluate point by point."""
    rank, off = len(c.shape), c.off
    # The block the body reads, as an affine form: the grid name itself (block == iblock), or 0 (broadcast).
    # Grid dimensions of extent 1 are the constant 0.
    fixed = {g: 0 for g, n in zip(c.grid_names, c.grid) if n == 1} | {s: v for s, v in c.sizes.items()
                                                                     if isinstance(v, int)}
    affine = all(c.block[d] == c.iblock[off + d] or c.broadcast(d) for d in range(rank))
    want_forms = [{"": 0} if c.broadcast(d) or c.grid_names[off + d] in fixed else {c.grid_names[off + d]: 1, "": 0}
                  for d in range(rank)]
    forms = [intmath.affine_form(e, fixed) for e in c.imap]
    if not affine or any(f is None for f in forms):
        return False
    if [_nonzero(f) for f in forms] == [_nonzero(f) for f in want_forms]:
        return True  # proved for every grid point (and every value of the dynamic sizes)
    if c.ranges:
        return _affine_counterexample(c, problems)
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


def _affine_counterexample(c: IndexMapCheck, problems: Problems) -> bool:
    """Two different affine forms over the grid names and dynamic sizes differ at one of: the origin with every
    dynamic size at its max, a unit point of a grid dimension there, or the origin with one size at its min.
    Reports the first such legal point found (True); False when none is (then the exhaustive check decides)."""
    top = {n: v if isinstance(v, int) else c.ranges[n].max for n, v in c.sizes.items()}
    trials = [top] + [top | {n: r.min} for n, r in c.ranges.items() if r.min < r.max]
    for k, sizes in enumerate(trials):
        grid = tuple(dims.evaluate(g, sizes) for g in c.grid)
        origin = tuple(0 for _ in grid)
        units = [tuple(int(j == d) for j in range(len(grid))) for d in range(len(grid)) if grid[d] > 1] if k == 0 else []
        for point in [origin] + units:
            got = tuple(ex.eval_int(e, dict(zip(c.grid_names, point)) | sizes) for e in c.imap)
            if got != c.want_at(point):
                c.mismatch(point, got, problems)
                where = ", ".join(f"{n}={sizes[n]}" for n in c.ranges)
                problems[-1] = dataclasses.replace(problems[-1], message=f"{problems[-1].message} (with {where})")
                return True
    return False


def _nonzero(form: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in form.items() if v or k == ""}


def _check_exhaustively(c: IndexMapCheck, problems: Problems) -> None:
    """Every grid point, in chunks in row-major (itertools.product) order; the first wrong one reported."""
    total = math.prod(c.grid)
    env_sizes = dict(c.sizes)
    for start in range(0, total, CHUNK_POINTS):
        flat = np.arange(start, min(start + CHUNK_POINTS, total), dtype=np.int64)
        coords = np.unravel_index(flat, c.grid)
        env = dict(zip(c.grid_names, coords)) | env_sizes
        try:
            got = [intmath.eval_int_array(e, env, flat.shape) for e in c.imap]
        except intmath.GridZeroDivision as err:
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
