"""The GEMM operands: lhs / rhs roles, their SMEM layout (major order, swizzle), how a stage is cut into TMA boxes,
the tensor maps and kernel arguments, and the plan's records of them (OperandLayout, ClusterShape: the multicast
operand's halves)."""
from __future__ import annotations

import math

from ...frontend.model import ITEMSIZE
from .. import dims as D
from ..common import KernelArg, Problems
from ..dims import DimLike
from ..hardware import Hardware
from ..legality import check_tma_box_extent, choose_swizzle
from .records import (
    WGMMA_M,
    Cluster,
    ClusterShape,
    EpilogueChunks,
    Layout,
    MatOperand,
    OperandLayout,
    Smem,
    Tile,
    Warpgroups,
)

TMA_STRIDE_BYTES = 16          # a tiled tensor map's global strides are multiples of this


def check_operand_roles(op, problems: Problems,
                        two: str = "A @ A^T style products need two inputs here") -> None:
    """op.lhs and op.rhs name two different inputs (every GEMM family's op; `two`: why they must differ, in the
    family's words)."""
    for role in ("lhs", "rhs"):
        nm = getattr(op, role)
        if nm not in op.inputs:
            problems.add(("op", role), f"op.{role} names input '{nm}', which is not among the inputs "
                                       f"({', '.join(op.inputs)}); set op.{role} to one of them")
    if op.lhs == op.rhs:
        problems.add(("op", "rhs"), f"lhs and rhs are both '{op.lhs}'; {two}")


def smem_layouts(op, tile: Tile, wg: Warpgroups, isz: int, hw: Hardware, problems: Problems) -> Layout:
    """K-major operands are cut into swizzle-wide K slabs, MN-major ones into swizzle-wide MN slabs."""
    k_major_a, k_major_b = not op.transpose_lhs, op.transpose_rhs
    swz_a = _swizzle(tile.a_spec, tile.tk if k_major_a else WGMMA_M, isz, ("schedule", "in_specs", op.lhs), problems, hw)
    swz_b = _swizzle(tile.b_spec, tile.tk if k_major_b else min(wg.wtn, 64), isz, ("schedule", "in_specs", op.rhs),
                     problems, hw)
    check_transforms(op, tile, swz_a, swz_b, isz, hw, problems)
    layout = Layout(k_major_a, k_major_b, swz_a, swz_b, max(swz_a // isz, 1), max(swz_b // isz, 1))
    check_swizzle_widths(op, tile, wg, layout, hw, problems)
    return layout


def _swizzle(bs, minor_elems: int, isz: int, path: tuple, problems: Problems, hw: Hardware) -> int:
    return choose_swizzle(None if bs is None else bs.transforms.swizzle, minor_elems * isz, hw,
                          (*path, "transforms", "swizzle"), problems, what="the swizzled dimension's bytes", none="none")


def check_transforms(op, tile: Tile, swz_a: int, swz_b: int, isz: int, hw: Hardware, problems: Problems) -> None:
    """No SMEM transpose (the MMA's descriptors say the major order); a tiling, if given, is the swizzle's."""
    # wgmma reads either major order of both operands; the sm_100a kernel's tcgen05.mma descriptors are rendered
    # for a K-major lhs and either major order of rhs (sm100.py refuses transpose_lhs)
    reads = ("wgmma reads either major order" if hw.mma == "wgmma" else
             f"{hw.mma_instruction} reads a K-major lhs and either major order of rhs")
    for bs, nm in ((tile.a_spec, op.lhs), (tile.b_spec, op.rhs)):
        if bs is not None and bs.transforms.transpose is not None:
            problems.add(("schedule", "in_specs", nm, "transforms", "transpose"),
                         f"say the stored layout with op.transpose_lhs / op.transpose_rhs; {reads} from SMEM, so "
                         f"no SMEM transpose is needed")
        if bs is not None and bs.transforms.tiling is not None:
            sw = swz_a if nm == op.lhs else swz_b
            want = [8, sw // isz] if sw else None
            if list(bs.transforms.tiling) != want:
                problems.add(("schedule", "in_specs", nm, "transforms", "tiling"),
                             f"with swizzle {sw} the tiling is {want} (8 rows of swizzle/itemsize elements); omit it "
                             f"or write {want}")


def check_swizzle_widths(op, tile: Tile, wg: Warpgroups, lay: Layout, hw: Hardware, problems: Problems) -> None:
    """The slabs tile the stage: the swizzled extent of each operand is a multiple of the swizzle width (on Hopper
    each consumer's share of the tile; on sm_100a one MMA thread issues the whole tile)."""
    tk = tile.tk
    hopper = hw.mma == "wgmma"
    whose = "each consumer's" if hopper else "the tile's"
    rows, cols = (wg.wtm, wg.wtn) if hopper else (tile.tm, tile.tn)
    if lay.k_major_a and tk % lay.atom_a:
        problems.add(("schedule", "in_specs", op.lhs, "transforms", "swizzle"),
                     f"tile_k {tk} must be a multiple of the swizzle width ({lay.swz_a} B = {lay.atom_a} elements)")
    if lay.k_major_b and tk % lay.atom_b:
        problems.add(("schedule", "in_specs", op.rhs, "transforms", "swizzle"),
                     f"tile_k {tk} must be a multiple of the swizzle width ({lay.swz_b} B = {lay.atom_b} elements)")
    if not lay.k_major_a and wg.wtm % lay.atom_a:
        problems.add(("schedule", "in_specs", op.lhs, "transforms", "swizzle"),
                     f"M-major lhs: {whose} {rows} rows must be a multiple of the swizzle width "
                     f"({lay.atom_a} elements)")
    if not lay.k_major_b and (wg.wtn % lay.atom_b or tile.tn % lay.atom_b):
        problems.add(("schedule", "in_specs", op.rhs, "transforms", "swizzle"),
                     f"N-major rhs: {whose} {cols} columns must be a multiple of the swizzle width "
                     f"({lay.swz_b} B = {lay.atom_b} elements); use a smaller swizzle or a wider tile_n")
    if lay.swz_a == 0 or lay.swz_b == 0:
        problems.add(("schedule", "in_specs", op.lhs if lay.swz_a == 0 else op.rhs, "transforms", "swizzle"),
                     "this family's SMEM descriptors use a swizzled layout; choose 32, 64 or 128 (or auto)")


def lhs_stage_rows(tile: Tile, lay: Layout, cluster: Cluster, m: DimLike) -> int:
    """The lhs rows a stage loads: tile_m, or, for a K-major lhs that is not multicast, a static M below the tile
    (decode: 16 tokens in a 64-row wgmma block) rounded up to 8, so TMA fills no rows past the edge (the H200 ran
    decode 16 x 8192 x 8192 at 0.68x cuBLAS with 48 of 64 rows zero-filled and 64 x 8192 x 8192 at 1.04x with the
    same kernel, 2026-12-04); the stage's other rows are zeroed once at kernel start."""
    if lay.k_major_a and cluster.multicast != "lhs" and D.is_static(m) and m < tile.tm:
        return min(tile.tm, -(-m // 8) * 8)
    return tile.tm


def compact_lhs(tile: Tile, a_rows: int) -> bool:
    """A one-M-block tile whose lhs box loads fewer rows than the block (a static M below 64: decode): each box's
    loaded rows follow the last box's in SMEM, 2048 B apart for 16 rows, and the 64-row window wgmma reads from a
    box runs on over the boxes after it. Its rows past M are another box's data, or the zeroed tail past the ring:
    they only ever meet output rows past M, which are never stored (an output row is its lhs row times the rhs)."""
    return tile.tm == WGMMA_M and a_rows < tile.tm


def tensor_map(operand: int, shape: tuple[DimLike, ...], dtype: str, rows: int, cols: int, swizzle: int) -> KernelArg:
    """A tensor map over a row-major [(B,) R, C] operand with (1,) rows x cols boxes (shape and strides are extents:
    a dynamic size is evaluated at each call)."""
    box = ((1,) if len(shape) == 3 else ()) + (rows, cols)
    return KernelArg("tmap", operand, dtype, tuple(shape), row_major_extent_strides(shape, ITEMSIZE[dtype]), box,
                     swizzle)


def row_major_extent_strides(shape: tuple[DimLike, ...], itemsize: int) -> tuple[DimLike, ...]:
    """Byte strides of a C-contiguous array, numpy order; extents where the shape has dynamic sizes."""
    out = []
    for d in range(len(shape)):
        stride: DimLike = itemsize
        for x in shape[d + 1:]:
            stride = stride * x
        out.append(stride)
    return tuple(out)


def kernel_args(op, out_name: str, operands: tuple[MatOperand, ...], tile: Tile, lay: Layout, cluster: Cluster,
                chunks: EpilogueChunks, hw: Hardware, problems: Problems, ranges=None,
                a_rows: int | None = None) -> tuple[KernelArg, ...]:
    """Tensor maps over lhs, rhs and the output (or its pointer: direct stores), pointers to the epilogue operands.
    Boxes as loaded: a multicast operand is loaded in halves, a K-major lhs in the `a_rows` a stage loads
    (lhs_stage_rows; default the tile's)."""
    idx = {o.name: i for i, o in enumerate(operands)}
    by_name = {o.name: o for o in operands}
    a, b, out = by_name[op.lhs], by_name[op.rhs], by_name[out_name]
    a_rows = (tile.tm // 2 if cluster.multicast == "lhs" else a_rows or tile.tm) if lay.k_major_a else tile.tk
    b_rows = (tile.tn // (2 if cluster.multicast == "rhs" else 1)) if lay.k_major_b else tile.tk
    args = [tensor_map(idx[op.lhs], a.shape, a.dtype, a_rows, lay.atom_a, lay.swz_a),
            tensor_map(idx[op.rhs], b.shape, b.dtype, b_rows, lay.atom_b, lay.swz_b),
            KernelArg("ptr", idx[out_name]) if chunks.direct else
            tensor_map(idx[out_name], out.shape, out.dtype, chunks.rows, chunks.cols, chunks.swizzle)]
    args += [KernelArg("ptr", idx[o.name]) for o in operands if o.role == "extra"]
    # a second output (a value kept for the backward): its pointer, stored from registers
    args += [KernelArg("ptr", idx[o.name]) for o in operands if o.role == "saved"]
    # one `int sz_<name>` parameter per dynamic size, in spec order: tile counts, loop bounds and the epilogue's
    # indexing come from the call
    args += [KernelArg("i32", -1, value=D.size(nm)) for nm, v in op.sizes.items() if not isinstance(v, int)]
    for nm, rows in ((op.lhs, a_rows), (op.rhs, b_rows)):
        check_tma_box_extent(rows, hw, ("schedule", "in_specs", nm, "block_shape"), problems,
                             f"a TMA box holds at most {hw.tma_max_box} rows; this tile loads {rows}")
    for arg in args:
        if arg.kind == "tmap":
            check_dynamic_strides(operands[arg.operand], arg, ranges or {}, problems)
    return tuple(args)


def check_dynamic_strides(o: MatOperand, arg: KernelArg, ranges, problems: Problems) -> None:
    """A tensor map's global strides are multiples of 16 B at every call: a static one is, or the sizes change; a
    stride over a dynamic size needs the size's multiple_of to make it one."""
    for d, stride in enumerate(arg.strides[:-1]):
        if isinstance(stride, int) and stride % TMA_STRIDE_BYTES:
            # a static size (regression, H200 2026-12-04: N = 3001 planned, then failed at the call with "tensor
            # map: strides[0] = 6002 B must be a positive multiple of 16 bytes")
            elems = TMA_STRIDE_BYTES // math.gcd(TMA_STRIDE_BYTES, o.itemsize)
            problems.add(("op", "sizes"),
                         f"{o.name} [{', '.join(map(str, o.shape))}] {o.dtype}: its dimension {d} steps {stride} B, and "
                         f"its TMA tensor map needs every step but the last a multiple of {TMA_STRIDE_BYTES} B: use "
                         f"sizes that make {' x '.join(map(str, o.shape[d + 1:]))} a multiple of {elems}"
                         + (" (an output with an even N may instead leave through epilogue.store: direct, which "
                            "needs no tensor map)" if o.role == "out" else ""))
            continue
        if isinstance(stride, D.Dim) and not D.divisible(stride, TMA_STRIDE_BYTES, ranges):
            fixed = math.prod(x for x in o.shape[d + 1:] if isinstance(x, int)) * o.itemsize
            need = TMA_STRIDE_BYTES // math.gcd(TMA_STRIDE_BYTES, fixed)
            names = sorted(D.sizes_of(stride))
            problems.add(("op", "sizes", names[0]),
                         f"{o.name}'s dimension {d} steps {stride} B ({' x '.join(map(str, o.shape[d + 1:]))} "
                         f"{o.dtype} elements), which TMA needs to be a multiple of {TMA_STRIDE_BYTES} B at every "
                         f"call; declare multiple_of: {need} (or a multiple of it) on {', '.join(names)}")


def pallas_swizzles(lhs: str, rhs: str, swz_a: int, swz_b: int, a_spec, b_spec, kernel: str,
                    problems: Problems) -> None:
    """Mosaic GPU's wgmma (jax 0.11.2) finds no layouts for operands of two different swizzles: 'Failed to infer a
    possible set of layouts' when lowering, for every pair of 32, 64 and 128 B that differ (found by lowering legal
    field values together on the CPU, 2026-12-06); equal ones lower. The rule of every Pallas wgmma kernel (this
    family's and the grouped matmul's: `kernel` names it). Reported at the operand whose swizzle is written (the
    rhs's when both are), so that a written one stays an error rather than a fallback to CUDA."""
    if swz_a == swz_b:
        return
    lhs_written = a_spec is not None and "swizzle" in a_spec.transforms.model_fields_set
    rhs_written = b_spec is not None and "swizzle" in b_spec.transforms.model_fields_set
    at = lhs if lhs_written and not rhs_written else rhs
    problems.add(("schedule", "in_specs", at, "transforms", "swizzle"),
                 f"the Pallas {kernel}'s wgmma needs one swizzle for both operands (Mosaic GPU in jax 0.11.2 finds "
                 f"no layouts otherwise): lhs '{lhs}' has {swz_a} B, rhs '{rhs}' {swz_b} B; write the same "
                 f"swizzle on both; or set schedule.backends: [cuda]")


TMA_STRIDE_BYTES = 16          # a tiled tensor map's global strides are multiples of this


# ------------------------------------------------------------------------------------------- the plan's records


def operand_layout(tile: Tile, lay: Layout, smem: Smem, stages: int, threads: int) -> OperandLayout:
    """The plan's record of the lhs / rhs layout: a stage cut into TMA boxes one swizzle row wide along its swizzled
    dimension (K, or M / N for MN-major), the descriptors' strides, and a short lhs's rows past the ones loaded."""
    tm, tn, tk = tile.tm, tile.tn, tile.tk
    a_rows = smem.a_rows                                  # the lhs rows a stage loads (a compact ring: fewer)
    compact = compact_lhs(tile, a_rows)
    a_sub = (a_rows if compact else tm if lay.k_major_a else tk) * lay.swz_a
    b_sub = (tn if lay.k_major_b else tk) * lay.swz_b
    a_boxes = tuple((i * a_sub, i * lay.atom_a) for i in range((tk if lay.k_major_a else tm) // lay.atom_a))
    b_boxes = tuple((i * b_sub, i * lay.atom_b) for i in range((tk if lay.k_major_b else tn) // lay.atom_b))
    return OperandLayout(
        swizzle_a=lay.swz_a, swizzle_b=lay.swz_b, atom_a=lay.atom_a, atom_b=lay.atom_b, k_major_a=lay.k_major_a,
        k_major_b=lay.k_major_b, a_stage_bytes=smem.a_stage, b_stage_bytes=smem.b_stage, a_sub_bytes=a_sub,
        b_sub_bytes=b_sub, a_boxes=a_boxes, b_boxes=b_boxes, a_lbo=1 if lay.k_major_a else a_sub,
        a_sbo=8 * lay.swz_a, b_lbo=1 if lay.k_major_b else b_sub, b_sbo=8 * lay.swz_b, a_box_rows=a_rows,
        a_compact=compact, a_zero_bytes=(tm - a_rows) * lay.swz_a, a_zero_offset=a_rows * lay.swz_a,
        a_zero_boxes=1 if compact else stages * len(a_boxes), zero_step=threads * 16)


def cluster_record(tile: Tile, cl: Cluster, layout: OperandLayout) -> ClusterShape:
    """The plan's record of the cluster: the multicast operand, each CTA loading half of its stage (K-major: a half
    of the rows / columns in every box; MN-major: half of the boxes)."""
    mc_tile, mc_swz, mc_boxes, mc_k_major = {
        "lhs": (tile.tm, layout.swizzle_a, layout.a_boxes, layout.k_major_a),
        "rhs": (tile.tn, layout.swizzle_b, layout.b_boxes, layout.k_major_b)}.get(cl.multicast, (0, 0, (), False))
    if not mc_k_major:
        mc_tile = 0
    elif cl.multicast:
        mc_boxes = ()
    return ClusterShape(cluster_m=cl.cm, cluster_n=cl.cn, cluster_size=cl.csize, multicast=cl.multicast,
                        mc_rank_bytes=mc_tile // 2 * mc_swz, mc_rank_elems=mc_tile // 2,
                        mc_rank_boxes=len(mc_boxes) // 2, split_k=cl.ck)
