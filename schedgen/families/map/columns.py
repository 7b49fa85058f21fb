"""The Pallas map kernel's named register layout, taken when an input is broadcast: a column (broadcast along the
minor dimension: an [M, 1] per-row scale, a [1] scalar), a row (along a leading one: an [N] bias against [M, N],
[B, 1, N]) or both.

jax 0.11.2's Mosaic GPU takes a column in neither of the ways the other inputs go:
- its TMA cannot load it: a tensor map of an [M, 1] array has a row stride of one element, and Mosaic GPU's
  async_copy rejects it ("async_copy requires all GMEM strides except the last one to be a multiple of 16 bytes"),
  even through a `.at[:, 0]` view or a reshape (no non-indexing transforms on GMEM refs);
- its layout inference finds no register layout for a broadcast along the minor dimension (the WG_STRIDED layout it
  picks for elementwise blocks broadcasts leading dimensions only).
A row it loads, but its layout inference lays a row out only by search: WG_STRIDED broadcasts a row of C columns
only in vectors of at most C / 128 elements, so the search walks the SMEM refs' candidate tilings before it settles
on that (37895 tries of its 100000 for `h = x * w + b; y = h * h` in f32 blocks of 32 x 128, ending at vectors of one
element), and with one more output (the autodiff's saving forward, which also writes h) spends them all and fails:
"Layout inference failed to find a solution" (found on the H200, 2026-12-06).
So the kernel reads a column straight from GMEM into registers (`plgpu.load`, no bounds handling: its dimensions must
divide into whole blocks; each step loads the next tile's into the pipeline's carry, so the load's latency hides under
a step's work) and names one TiledLayout for every value of the block whenever an input is broadcast: the
warpgroup's 4 warps split the rows, each warp's 32 lanes `lane_rows` rows by `lane_cols` vectors of `vec` elements, so
the block's rows must be a multiple of 4 * lane_rows. A column's value is that layout reduced along the minor
dimension (one value per row, replicated over the lanes of the row), a row's reduced along the rows, each read in
that reduced layout and broadcast in registers (broadcast_in_dim then a layout_cast to the named layout: lane
semantics takes the cast as the broadcast's layout, as it infers none); a full input is read from its SMEM stage in
the named layout. Layout inference is then left only the SMEM refs (a few tries), and lane semantics lowers too.
With that named layout, layout inference tiles an SMEM block of 8k rows by (8, 128 B) whatever the array's extents,
which a ragged array's TMA then refuses (_check_smem_tiling).
tests/build/test_pallas_lowers.py and tests/families/map/test_map_lowers.py lower such kernels for CUDA on the CPU
(the interpreter does not check layouts); tests/families/map/test_map_columns.py pins each jax limit named here.
"""
from __future__ import annotations

import math

from ...frontend.model import ITEMSIZE
from ...plan import dims
from ...plan.common import Problems
from .records import MapOperand, RegisterLayout, RegisterView, Space

WARPS, LANES = 4, 32
HINT = "or set schedule.backends: [cuda]"
NO_TMA = ("jax 0.11.2's TMA cannot load a column (Mosaic GPU: 'async_copy requires all GMEM strides except the last "
          "one to be a multiple of 16 bytes')")


def plan_columns(op, sch, operands: dict[str, MapOperand], space: Space, problems: Problems) -> RegisterLayout | None:
    """The register layout and each input's view when the Pallas kernel builds and an input is broadcast (a column
    or a row); None when none is (the kernel lets Mosaic GPU infer its layouts), or when a located problem says why
    it cannot be."""
    inputs = [operands[n] for n in op.inputs if n in operands]
    if "pallas" not in sch.backends or len(inputs) != len(op.inputs) or len(space.block) < 2:
        return None
    columns = [o for o in inputs if o.minor_bcast]
    broadcast = [o for o in inputs if _view(o, len(space.block)).reduced]
    if not broadcast:
        return None
    before = len(problems)
    iblock, out0 = space.block, next(iter(op.outputs))
    min_isz = min(ITEMSIZE[o.dtype] for o in list(op.inputs.values()) + list(op.outputs.values()))
    if not columns and (strided := _strided_for_ragged(operands, inputs, space, min_isz)) is not None:
        return strided
    vec = widest_vector(operands.values(), min_isz)
    layout = pick_layout(iblock[-2], iblock[-1], vec, min_isz)
    if layout is None:
        rows, cols = iblock[-2], iblock[-1]
        quantum, lc, v = min(candidates(cols, vec, min_isz))
        problems.add(("schedule", "out_specs", out0, "block_shape", len(iblock) - 2),
                     f"'{broadcast[0].name}' {_what(broadcast[0])}, which jax 0.11.2's Mosaic GPU cannot lay out by "
                     f"itself; the Pallas kernel names a register layout whose 4 warps "
                     f"split the block's rows, each warp {LANES // lc} row{'s' if lc < LANES else ''} of {cols} "
                     f"columns at a time ({lc} lanes x {v} elements), so the block's rows ({rows}) must be a multiple "
                     f"of {quantum}: use {_suggest(rows, quantum)} {HINT}")
    for o in columns:
        _check_column(o, space, problems)
    for o in operands.values():
        if not o.minor_bcast:
            _check_smem_tiling(o, space, problems)
    if len(problems) != before:
        return None
    views = tuple(_view(o, len(iblock)) for o in inputs)
    return _layout(len(iblock), *layout, views)


def _strided_for_ragged(operands: dict[str, MapOperand], inputs: list[MapOperand], space: Space,
                        min_isz: int) -> RegisterLayout | None:
    """Rows only, on arrays whose SMEM blocks the tiled layout's inferred tiling would not fit (_check_smem_tiling:
    a dynamic M of any multiple): the WG_STRIDED layout, which Mosaic GPU reads and writes from untiled SMEM and
    broadcasts along leading dimensions, in the widest vectors (16 B of the narrowest dtype at most) that split
    every value read over the warpgroup's 128 threads; None where the tiled layout fits, or this cannot be (a row
    that is not the trailing dimensions, a swizzled block, a row of fewer than 128 elements)."""
    ragged = Problems()
    for o in operands.values():
        _check_smem_tiling(o, space, ragged)
    rank = len(space.block)
    views = tuple(_view(o, rank) for o in inputs)
    trailing = all(v.kept == tuple(range(rank - len(v.kept), rank)) for v in views)
    if not ragged or not trailing or any(o.tma.swizzle or o.tiling for o in operands.values()):
        return None
    vec = 16 // min_isz
    while vec and any(math.prod(shape) % (WARPS * LANES * vec) for shape in [space.block, *(v.shape for v in views)]):
        vec //= 2
    if not vec:
        return None
    return RegisterLayout(space.block[-2], space.block[-1], 0, 0, vec, (), (), (), -1, views, strided=True)


def swizzle_of(o: MapOperand) -> int:
    """The swizzle (bytes) of an operand's SMEM block in the Pallas kernel: the one its transforms name, else the
    one Mosaic GPU's layout inference gives it (inferred_tiling); 0 for none (and for a column: no SMEM block)."""
    if o.minor_bcast:
        return 0
    if o.tma.swizzle:
        return int(o.tma.swizzle)
    tiling = inferred_tiling(o)
    return tiling[1] if tiling else 0


def widest_vector(operands, min_isz: int) -> int:
    """The longest vector (elements) a lane may move: 16 B of the narrowest dtype, and at most 16 B of every input
    whose SMEM block is swizzled. jax 0.11.2's swizzled transfer (FragmentedArray.transfer_tiled) counts in 16 B
    chunks (`swizzle_tile_transfers = 16 // transfer_bytes`) and loads a wider vector from wrong addresses, with no
    error: the H200 read an f32 block loaded 8 elements a lane (32 B) from a 128 B-swizzled stage right in row 0 of
    each 8 and wrong in the 7 others (col_row_full, 2026-12-04; tests/families/map/test_map_columns.py). Stores are
    not capped: the same run wrote the f32 output 'r' 8 elements a lane into its 128 B-swizzled stage right, at
    200 x 640 (40 x 128 blocks) and [3, 200, 640] (1 x 40 x 128)."""
    vec = 16 // min_isz
    for o in operands:
        if o.role == "in" and swizzle_of(o):
            vec = min(vec, 16 // o.itemsize)
    return vec


def candidates(cols: int, vec: int, min_isz: int) -> list[tuple[int, int, int]]:
    """(rows of the base tile, lanes along the columns, vector length) for each vector length from `vec` (16 B of
    the narrowest dtype) down to 4 B of it: as many lanes along the columns as the columns take (a power of two)."""
    out, v = [], vec
    while v >= max(1, 4 // min_isz):
        lc = LANES
        while cols % (lc * v):
            lc //= 2
        if lc:
            out.append((WARPS * LANES // lc, lc, v))
        v //= 2
    return out


def pick_layout(rows: int, cols: int, vec: int, min_isz: int) -> tuple[int, int] | None:
    """(lanes along the columns, vector length) of the widest vectors whose base tile divides the block."""
    for r, lc, v in candidates(cols, vec, min_isz):
        if rows % r == 0:
            return lc, v
    return None


def _what(o: MapOperand) -> str:
    return "broadcasts along the minor dimension (a column)" if o.minor_bcast else \
        "broadcasts along the rows (a row)"


def _suggest(rows: int, quantum: int) -> str:
    up = -(-rows // quantum) * quantum
    down = rows // quantum * quantum
    return f"{down} or {up} rows" if down and down != up else f"{up} rows"


def _check_column(o: MapOperand, space: Space, problems: Problems) -> None:
    """A column is read with plain loads (no TMA, so no bounds handling): every dimension it spans whole blocks, and
    no SMEM stage of its own, so nothing of its BlockSpec that shapes a stage."""
    path = ("schedule", "in_specs", o.name)
    for d, (extent, b) in enumerate(zip(o.shape, o.block)):
        if b == 1 or dims.divisible(extent, b, space.ranges):
            continue
        dynamic = not isinstance(extent, int)
        at = f"the dynamic {extent}, multiple_of " + ", ".join(
            str(space.ranges[n].multiple_of) for n in sorted(dims.sizes_of(extent))) if dynamic else f"{extent}"
        problems.add((*path, "block_shape", d),
                     f"{NO_TMA}, so the Pallas kernel reads '{o.name}' straight from GMEM into registers, with no "
                     f"bounds handling: its dimension {d} ({at}) must be a whole number of blocks of {b}; use a "
                     f"block that divides it{f' (or declare multiple_of: {b})' if dynamic else ''} {HINT}")
    if o.delay_release:
        problems.add((*path, "delay_release"), f"{NO_TMA}, so the Pallas kernel reads '{o.name}' straight from GMEM "
                                               f"(no SMEM stage to hold): delay_release changes the CUDA kernel only; "
                                               f"leave it at 0 {HINT}")
    if o.tma.swizzle or o.tiling:
        problems.add((*path, "transforms"), f"{NO_TMA}, so the Pallas kernel reads '{o.name}' straight from GMEM "
                                            f"(no SMEM block to tile or swizzle); leave transforms out {HINT}")


def inferred_tiling(o: MapOperand) -> tuple[int, int] | None:
    """(tiling's minor extent, swizzle) that jax 0.11.2's layout inference gives an SMEM block read or written in a
    named TiledLayout and left without transforms (layout_inference._conjure_transforms_for_smem_ref: rows a multiple
    of 8, the widest swizzle whose row of elements divides the block's columns); None where it leaves it untiled."""
    if len(o.block) < 2 or o.block[-2] % 8 or o.tma.swizzle or o.tiling:
        return None
    for swizzle in (128, 64, 32):
        if o.block[-1] % (swizzle // o.itemsize) == 0:
            return swizzle // o.itemsize, swizzle
    return None


def _check_smem_tiling(o: MapOperand, space: Space, problems: Problems) -> None:
    """Mosaic GPU tiles the SMEM block of an operand read or written in a named layout (inferred_tiling) whatever
    the array's extents, and its TMA then needs the array's last two dimensions to be whole numbers of tiles."""
    tiling = inferred_tiling(o)
    if tiling is None:
        return
    elems, swizzle = tiling
    rank = len(o.block)
    for d, quantum in ((rank - 2, 8), (rank - 1, elems)):
        extent = o.shape[d]
        if dims.divisible(extent, quantum, space.ranges):
            continue
        at = f"{extent}" if isinstance(extent, int) else f"the dynamic {extent}, multiple_of " + ", ".join(
            str(space.ranges[n].multiple_of) for n in sorted(dims.sizes_of(extent)))
        group = "in_specs" if o.role == "in" else "out_specs"
        problems.add(("schedule", group, o.name, "block_shape", rank - 2),
                     f"with a broadcast input in the body the Pallas kernel reads and writes blocks in a named register "
                     f"layout, and jax 0.11.2's Mosaic GPU then tiles the SMEM block of '{o.name}' ({o.block[-2]} "
                     f"rows, a multiple of 8) by (8, {elems}) with a {swizzle} B swizzle without looking at the "
                     f"array, whose dimension {d} ({at}) is not a multiple of {quantum}: lowering fails ('When no "
                     f"rounding mode is specified, dimension ... must have size smaller or a multiple of its tiling "
                     f"{quantum}'); use block rows that are not a multiple of 8 (Mosaic GPU leaves such a block "
                     f"untiled), or a dimension that is a multiple of {quantum}, {HINT}")


def _view(o: MapOperand, rank: int) -> RegisterView:
    """Which dimensions an input's value holds: its own, less the broadcast ones (block 1 against a larger output
    block), placed at the trailing iteration dimensions (numpy's rule)."""
    off = rank - len(o.block)
    squeezed = tuple(d for d in range(len(o.block)) if _broadcast(o, d, off))
    kept = tuple(off + d for d in range(len(o.block)) if d not in squeezed)
    shape = tuple(o.block[d] for d in range(len(o.block)) if d not in squeezed)
    return RegisterView(o.name, o.minor_bcast, squeezed, kept, tuple(d for d in range(rank) if d not in kept), shape)


def _broadcast(o: MapOperand, d: int, off: int) -> bool:
    """Operand dimension d is broadcast: block 1 against a larger output block (row_strides 0; the minor one:
    minor_bcast)."""
    if d == len(o.block) - 1:
        return o.minor_bcast
    return o.row_strides[off + d] == 0


def _layout(rank: int, lc: int, v: int, views: tuple[RegisterView, ...]) -> RegisterLayout:
    """The layout in jax's canonical form (TiledLayout checks it is; tests/families/map/test_map_columns.py compares
    it with jax's own canonicalize): tiles (rows, cols), then the warp's rows, then the lane's vector, each level left
    out where it would split nothing."""
    lr = LANES // lc
    rows, cols = WARPS * lr, lc * v
    base = (1,) * (rank - 2) + (rows, cols)
    if lc == 1:           # a lane a row, its vector the whole width
        tiles, warp, lanes = (base, (lr, cols)), (-4,), (-2,)
    elif lr == 1:         # a warp a row
        tiles, warp, lanes = (base, (v,)), (-3,), (-2,)
    else:
        tiles, warp, lanes = (base, (lr, cols), (v,)), (-5,), (-3, -2)
    return RegisterLayout(rows, cols, lr, lc, v, tiles, warp, lanes, -1, views)
