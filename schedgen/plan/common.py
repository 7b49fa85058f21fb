"""Pieces every family's planner shares: problem collection, shapes, TMA boxes, swizzles, SMEM maps."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..errors import Problem
from ..frontend.model import ITEMSIZE
from . import dims
from .dims import DimLike, SizeRange
from .hardware import Hardware
from .legality import swizzle_problem, tma_box_fits, tma_inner_bytes_problem

# Storage type of each dtype in the header-free CUDA source, and its TMA element type.
CTYPE = {"bf16": "uint16_t", "f16": "uint16_t", "f32": "float", "f8e4m3": "uint8_t", "f8e5m2": "uint8_t",
         "i32": "int", "i64": "long long"}


@dataclass(frozen=True)
class KernelArg:
    """One CUDA kernel parameter, in order: a TMA descriptor over an operand, its raw device pointer, or a counter
    the runtime owns (two u32, zero before each launch: a dynamic persistent grid's tile claims), a zeroed scratch
    buffer of `value` bytes the runtime allocates for the launch ("workspace", plan/launch.py says how)."""
    kind: str                 # "tmap" | "ptr" | "counter" | "i32" | "workspace"
    operand: int              # index into inputs + outputs (-1: a counter, a workspace or a scalar)
    dtype: str = ""
    shape: tuple[DimLike, ...] = ()
    strides: tuple[DimLike, ...] = ()   # bytes, numpy order
    box: tuple[int, ...] = ()
    swizzle: int = 0
    oob_nan: bool = False
    value: DimLike = 0        # an "i32": the extent the runtime evaluates at each call; a "workspace": its bytes
    # a "workspace": the bytes zeroed from its start before each launch (-1: all of it); a kernel that writes
    # before it reads past them (stream-K's partial tiles after their flags) spares the launch that memset
    zero: int = field(default=-1, metadata={"omit_default": True})


def cxx_float(value: float) -> str:
    """The exact C++ literal of ``value`` rounded to float32 (the model checked it is finite and in range)."""
    value = float(np.float32(value))
    if not math.isfinite(value):
        raise ValueError("constants must be finite float32 values")
    return value.hex() + "f" if value != 0 else "0.0f"


class Problems(list):
    """Problems found while planning; the planner keeps going to report them all at once."""

    def add(self, path: Sequence, message: str, inner: tuple[int, int] = (0, 0)) -> None:
        self.append(Problem(tuple(path), message, inner_line=inner[0], inner_col=inner[1]))


def dynamic_ranges(sizes: Mapping) -> dict[str, SizeRange]:
    """The op's dynamic sizes (op.sizes entries written {dynamic: true, ...}) as ranges, in spec order."""
    return {n: SizeRange(n, v.lowest, v.max, v.multiple_of) for n, v in sizes.items() if not isinstance(v, int)}


def size_values(sizes: Mapping) -> dict[str, DimLike]:
    """op.sizes as extents: a fixed size is its int, a dynamic one `dims.size(name)`."""
    return {n: v if isinstance(v, int) else dims.size(n) for n, v in sizes.items()}


def max_sizes(sizes: Mapping) -> dict[str, int]:
    """op.sizes with every dynamic size at its max (the worst case of bounds checks)."""
    return {n: v if isinstance(v, int) else v.max for n, v in sizes.items()}


def shown_sizes(plan) -> dict:
    """A plan's sizes for tables and records: fixed ones as ints, dynamic ones as their range ("1..65536")."""
    ranges = {r.name: r for r in plan.launch.dynamic_sizes}
    return {n: (f"{ranges[n].min}..{ranges[n].max}" if n in ranges else v) for n, v in plan.sizes.items()}


def static_sizes_only(spec, problems: "Problems", family: str, message=None):
    """For a planner that does not take dynamic sizes: a located problem per dynamic size (`message(name)`, or the
    default sentence), and the spec with each at its max so that planning goes on to report everything else."""
    sizes = spec.op.sizes
    dyn = [n for n, v in sizes.items() if not isinstance(v, int)]
    for n in dyn:
        problems.add(("op", "sizes", n), message(n) if message else
                     f"the {family} family does not take dynamic sizes yet; give {n} a fixed value (one package per "
                     f"size)")
    if not dyn:
        return spec
    op = spec.op.model_copy(update={"sizes": max_sizes(sizes)})
    return spec.model_copy(update={"op": op})


def resolve_shape(dims: Sequence, sizes: Mapping[str, int], path: Sequence, problems: Problems) -> tuple[int, ...]:
    out = []
    for i, dim in enumerate(dims):
        if isinstance(dim, int):
            out.append(dim)
        elif dim in sizes:
            out.append(sizes[dim])
        else:
            known = ", ".join(sizes) or "none"
            problems.add((*path, i), f"unknown size '{dim}'; declare it under op.sizes (sizes: {known})")
            out.append(1)
    return tuple(out)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def row_major_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array, numpy order (what a tensor map's global strides come from)."""
    return tuple(int(math.prod(shape[d + 1:]) * itemsize) for d in range(len(shape)))


@dataclass(frozen=True)
class TmaBox:
    """How one block is moved by TMA: `n_boxes` boxes side by side along the minor dimension."""
    box: tuple[int, ...]
    n_boxes: int
    box_bytes: int
    swizzle: int


def tma_box(block: Sequence[int], dtype: str, swizzle: int, path: Sequence, problems: Problems, hw: Hardware,
            dims: Sequence[int] | None = None) -> TmaBox:
    """Split a block into TMA boxes and check the hardware rules for tiled tensor maps.

    `dims` gives, for each entry of `block`, its index in the spec's block_shape (for error paths)."""
    isz = ITEMSIZE[dtype]
    dims = list(dims) if dims is not None else list(range(len(block)))
    minor_bytes = block[-1] * isz
    if len(block) > hw.tma_max_rank:
        problems.add((*path, "block_shape"), f"TMA supports at most {hw.tma_max_rank} dimensions, got {len(block)}")
    if (message := tma_inner_bytes_problem(block[-1], isz)) is not None:
        problems.add((*path, "block_shape", dims[-1]), message)
    n_boxes, inner = 1, block[-1]
    if swizzle:
        if (message := swizzle_problem(swizzle, minor_bytes, hw)) is not None:
            problems.add((*path, "transforms", "swizzle"), message)
        else:
            inner = swizzle // isz
            n_boxes = block[-1] // inner
            rows = math.prod(block[:-1])
            if n_boxes > 1 and rows % 8:
                problems.add((*path, "block_shape"),
                             f"with swizzle {swizzle} the block is split into {n_boxes} TMA boxes; each must hold a multiple "
                             f"of 8 rows to keep the swizzle pattern aligned, got {rows}")
    box = tuple(block[:-1]) + (inner,)
    for d, extent in enumerate(box):
        if not tma_box_fits(extent, hw):
            problems.add((*path, "block_shape", dims[d]),
                         f"TMA boxes are at most {hw.tma_max_box} elements per dimension, got {extent}")
    return TmaBox(box, n_boxes, math.prod(box) * isz, swizzle)


@dataclass(frozen=True)
class SmemBuffer:
    name: str
    offset: int
    bytes: int
    count: int = 1      # slots (pipeline stages, double buffers)
    note: str = ""


@dataclass
class SmemMap:
    """A bump allocator over dynamic SMEM; every buffer aligned for TMA and the swizzle atom (1 KiB)."""
    buffers: list[SmemBuffer] = field(default_factory=list)
    top: int = 0

    def alloc(self, name: str, nbytes: int, count: int = 1, align: int = 1024, note: str = "") -> SmemBuffer:
        self.top = cdiv(self.top, align) * align
        buf = SmemBuffer(name, self.top, nbytes, count, note)
        self.top += nbytes * count
        self.buffers.append(buf)
        return buf


def occupancy(smem: int, threads: int, hw: Hardware) -> int:
    by_smem = hw.smem_per_sm // (smem + hw.smem_reserved_per_block) if smem else hw.max_blocks_per_sm
    return max(1, min(by_smem, hw.max_threads_per_sm // threads, hw.max_blocks_per_sm))


def planar_snake(lin: int, shape: tuple[int, int], minor_dim: int, tile_width: int) -> tuple[int, int]:
    """Linear tile index -> 2-D grid index in planar-snake order (the reference for the templates)."""
    major = shape[1 - minor_dim]
    minor = shape[minor_dim]
    tile_size = tile_width * major
    full_tiles = minor // tile_width
    tile = lin // tile_size
    pos = lin % tile_size
    width = tile_width
    if tile >= full_tiles:
        width = minor - full_tiles * tile_width
        pos = lin - full_tiles * tile_size
        tile = full_tiles
    minor_idx = tile * tile_width + pos % width
    major_idx = pos // width
    if tile % 2:
        major_idx = major - 1 - major_idx
    out = [0, 0]
    out[minor_dim] = minor_idx
    out[1 - minor_dim] = major_idx
    return out[0], out[1]


def tile_index(lin: int, grid: Sequence[int], order: str, minor_dim: int, tile_width: int) -> tuple[int, ...]:
    if order == "planar_snake":
        return planar_snake(lin, (grid[0], grid[1]), minor_dim, tile_width)
    out = []
    for g in reversed(grid):
        out.append(lin % g)
        lin //= g
    return tuple(reversed(out))
