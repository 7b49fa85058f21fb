"""The schedule phases of the matmul planner: the block tile, warpgroups, SMEM layouts and swizzles, the cluster,
epilogue chunks, registers, the pipeline, the SMEM map, barriers, the tile loop, backend limits and kernel
arguments."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...frontend.model import ITEMSIZE
from ...plan import dims as D
from ...plan.common import (
    KernelArg,
    Problems,
    SmemMap,
)
from ...plan.dims import DimLike
from ...plan.hardware import Hardware, for_target
from ...plan.legality import (
    check_profiler,
    profiler_smem_bytes,
    check_setmaxnreg,
    check_sizes_int32,
    check_smem_fit,
    check_tma_box_extent,
    choose_swizzle,
    register_budget_problem,
    stages_that_fit,
)
from .records import (
    DEFAULT_TILE,
    REG_OVERHEAD,
    WGMMA_K_BYTES,
    WGMMA_M,
    Cluster,
    Dims,
    EpilogueChunks,
    Layout,
    MatOperand,
    Pipeline,
    Registers,
    Smem,
    Tile,
    TileLoop,
    VectorSlots,
    Warpgroups,
)

if TYPE_CHECKING:
    pass

# why a BlockSpec's memory_space other than smem cannot be a matmul block
MEMORY_SPACE_WHY = {
    "gmem": "gmem would leave the block in global memory, which {mma} cannot read",
    "regs": "regs would load the block into registers, and the kernel's {mma} takes both operands from SMEM "
            "(only the accumulator lives in {acc})",
    "tmem": "tmem (tensor memory) exists on Blackwell (sm_100a) only: it needs schedule.target: sm_100a (this "
            "spec's target is sm_90a, a Hopper kernel)",
}
CLUSTER_AXIS = "cluster"       # the cluster's one axis name (plgpu.kernel(cluster_names=("cluster",)))
MAX_SPLIT_K = 4                # CTAs a split-K cluster gives one tile
GRID_X_MAX = (1 << 31) - 1     # a launch's gridDim.x
INT32_MAX = (1 << 31) - 1
TMA_STRIDE_BYTES = 16          # a tiled tensor map's global strides are multiples of this


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
        if bs.memory_space == "tmem" and sch.target == "sm_100a":
            if group == "in_specs":
                problems.add(("schedule", group, nm, "memory_space"),
                             "on sm_100a the lhs and rhs blocks are staged in smem (tcgen05.mma reads them through "
                             "SMEM descriptors; its A-from-TMEM form is not rendered); only the output's block may "
                             "say tmem (the accumulator tile in tensor memory); legal: smem (the default)")
        elif bs.memory_space != "smem":
            mma = for_target(sch.target).mma_instruction
            why = MEMORY_SPACE_WHY[bs.memory_space].format(mma=mma, acc="TMEM" if mma != "wgmma" else "registers")
            problems.add(("schedule", group, nm, "memory_space"),
                         f"matmul blocks are staged in smem ({mma} reads SMEM descriptors); {why}"
                         f"; legal: smem (the default)")
        if bs.index_map is not None:
            problems.add(("schedule", group, nm, "index_map"),
                         "the matmul family derives its index maps from the tile order (persistent.tile_order); "
                         "remove index_map")
    a_spec, b_spec = sch.in_specs.get(op.lhs), sch.in_specs.get(op.rhs)
    oob = {bs.out_of_bounds for bs in (a_spec, b_spec) if bs is not None}
    m, n, k = dims.m, dims.n, dims.k
    ragged_dims = frozenset(what for what, x, t in (("M", m, tm), ("N", n, tn), ("K", k, tk))
                            if not D.divisible(x, t, dims.ranges))
    ragged = bool(ragged_dims)
    if "nan" in oob:
        problems.add(("schedule", "in_specs", op.lhs if a_spec and a_spec.out_of_bounds == "nan" else op.rhs,
                      "out_of_bounds"), "NaN padding would poison whole output rows; use zero (K padding must add 0)")
    if a_spec is not None and b_spec is not None and a_spec.out_of_bounds != b_spec.out_of_bounds:
        problems.add(("schedule", "in_specs", op.rhs, "out_of_bounds"),
                     f"the lhs and rhs edges are padded together (a ragged K pads both): give '{op.lhs}' and "
                     f"'{op.rhs}' the same out_of_bounds (got {a_spec.out_of_bounds} and {b_spec.out_of_bounds})")
    if ragged and "zero" not in oob:
        problems.add(("schedule", "in_specs", op.lhs, "out_of_bounds"),
                     f"M, N, K = {m}, {n}, {k} are not all multiples of the tile {tm} x {tn} x {tk}"
                     + _dynamic_why(((m, tm, "tile_m"), (n, tn, "tile_n"), (k, tk, "tile_k")), dims.ranges)
                     + "; set out_of_bounds: zero on the lhs/rhs BlockSpecs (TMA zero-fills the edge) or use sizes "
                       "that divide")
    for x, t, what in ((m, tm, "M"), (n, tn, "N"), (k, tk, "K")):
        if isinstance(x, D.Dim) and D.upper(x, dims.ranges) + t - 1 > INT32_MAX:
            problems.add(("op", "sizes", x.args[0] if x.op == "size" else what),
                         f"{what} = {x} may be {D.upper(x, dims.ranges)}; the kernel's 32-bit tile math (the tile count "
                         f"cdiv({what}, {t})) needs max at most {INT32_MAX - t + 1}")
    return Tile(tm, tn, tk, a_spec, b_spec, ragged_dims)


def _dynamic_why(extents, ranges) -> str:
    """For a dynamic size that may not divide its tile: which, and why (its multiple_of)."""
    why = [f"{x} is dynamic, a multiple of {ranges[x.args[0]].multiple_of}, and {what} is {t}"
           for x, t, what in extents if isinstance(x, D.Dim) and x.op == "size" and not D.divisible(x, t, ranges)]
    return f" at every call ({'; '.join(why)})" if why else ""


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
    if pipe.consumer_schedule != "cooperative":
        return pingpong_warpgroups(op, pipe, tile, dims, problems)
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


def pingpong_warpgroups(op, pipe, tile: Tile, dims: Dims, problems: Problems) -> Warpgroups:
    """Ping-pong: two consumer warpgroups, each owning whole tiles (tile_m / 64 wgmma M-blocks of m64n<tile_n>),
    taking alternate tiles of the block's sequence; nothing splits the tile."""
    tm, tn, tk = tile.tm, tile.tn, tile.tk
    what = pipe.consumer_schedule
    if pipe.num_compute_wgs != 2:
        problems.add(("schedule", "pipeline", "num_compute_wgs"),
                     f"consumer_schedule: {what} alternates tiles between two consumer warpgroups; got "
                     f"{pipe.num_compute_wgs}: write num_compute_wgs: 2 (left out, the planner picks 1 for a 64-row "
                     f"tile), or use consumer_schedule: cooperative")
    if pipe.wg_axis is not None:
        problems.add(("schedule", "pipeline", "wg_axis"),
                     f"with consumer_schedule: {what} each consumer owns a whole {tm} x {tn} tile: nothing is split "
                     f"along an axis; leave wg_axis out")
    if tm % WGMMA_M:
        problems.add(("schedule", "in_specs", op.lhs, "block_shape"),
                     f"each consumer warpgroup takes the whole {tm}-row tile in wgmma M-blocks of {WGMMA_M} rows: "
                     f"tile_m must be a multiple of {WGMMA_M}")
    if tn % 8 or tn > 256 or tn < 8:
        problems.add(("schedule", "in_specs", op.rhs, "block_shape"),
                     f"each consumer's wgmma N is the tile's {tn} columns; it must be a multiple of 8 between 8 and 256")
    if tk % (WGMMA_K_BYTES // dims.isz):
        problems.add(("schedule", "in_specs", op.lhs, "block_shape"),
                     f"tile_k {tk} must be a multiple of wgmma's K ({WGMMA_K_BYTES // dims.isz} for {dims.in_dtype})")
    return Warpgroups(2, "m", tm, tn, what)


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
    # for a K-major lhs and either major order of rhs (blackwell.py refuses transpose_lhs)
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


def cluster_shape(op, sch, tile: Tile, dims: Dims, lay: Layout, problems: Problems) -> Cluster:
    """A 1x1, 2x1 or 1x2 cluster, the operand its CTAs share split between them and multicast; or a 1x1xS split-K
    cluster: S CTAs a tile, each running 1/S of its k-steps, their f32 partial tiles summed through DSMEM into rank
    0, which runs the epilogue."""
    cm, cn, ck = list(sch.cluster) + [1] * (3 - len(sch.cluster))
    if ck > 1 and cm * cn > 1:
        problems.add(("schedule", "cluster", 2),
                     f"a split-K cluster (third entry {ck}) gives each tile's k-steps to its CTAs; it cannot also "
                     f"multicast along M or N (got {list(sch.cluster)}): use [1, 1, {ck}], or [{cm}, {cn}] without "
                     f"the split")
        ck = 1
    if ck > MAX_SPLIT_K:
        problems.add(("schedule", "cluster", 2),
                     f"split-K over at most {MAX_SPLIT_K} CTAs (rank 0 reads each peer's {tile.tm} x {tile.tn} f32 "
                     f"partial tile through DSMEM before its epilogue), got {ck}")
        ck = 1
    if ck > 1:
        _check_split_k(op, sch, tile, dims, ck, problems)
    csize = cm * cn * ck
    if cm * cn > 2:
        problems.add(("schedule", "cluster"), f"clusters of 1x1, 2x1, 1x2 or 1x1xS (split-K) CTAs are supported, got "
                                              f"{list(sch.cluster)}")
        cm, cn, csize = 1, 1, ck
    multicast = "rhs" if cm == 2 else "lhs" if cn == 2 else ""
    tiles_m, tiles_n = D.cdiv(dims.m, tile.tm), D.cdiv(dims.n, tile.tn)
    # sm_100a's CTA pair (a 256-row tile on a [2, 1] cluster) is one tile a cluster: any count of them divides
    gm = 1 if sch.target == "sm_100a" and tile.tm == 256 else cm
    if D.is_static(tiles_m) and D.is_static(tiles_n):
        if tiles_m % gm or tiles_n % cn:
            problems.add(("schedule", "cluster"), f"a {cm}x{cn} cluster needs the tile grid ({tiles_m} x {tiles_n}) "
                                                  f"divisible by it")
    else:
        check_dynamic_cluster(gm, cn, dims, tile, problems)
    shared_spec = tile.b_spec if multicast == "rhs" else tile.a_spec if multicast == "lhs" else None
    for nm, bs in ((op.lhs, tile.a_spec), (op.rhs, tile.b_spec)):
        wrong = [a for a in (bs.collective_axes if bs is not None else ()) if a != CLUSTER_AXIS]
        if wrong or (bs is not None and len(bs.collective_axes) > 1):
            problems.add(("schedule", "in_specs", nm, "collective_axes"),
                         f"the cluster has one axis, '{CLUSTER_AXIS}'; got {list(bs.collective_axes)}: write "
                         f"collective_axes: [{CLUSTER_AXIS}] on the operand the cluster shares, or leave it out")
    if shared_spec is not None and "collective_axes" in shared_spec.model_fields_set and not shared_spec.collective_axes:
        nm = op.rhs if multicast == "rhs" else op.lhs
        problems.add(("schedule", "in_specs", nm, "collective_axes"),
                     f"collective_axes: [] says the {multicast} tile is not shared, but a {cm}x{cn} cluster's CTAs "
                     f"share it by multicast (each loads half); write collective_axes: [{CLUSTER_AXIS}] (or leave it "
                     f"out), or use cluster: [1, 1]")
    for nm, bs in ((op.lhs, tile.a_spec), (op.rhs, tile.b_spec)):
        if bs is not None and bs.collective_axes and (csize == 1 or bs is not shared_spec):
            problems.add(("schedule", "in_specs", nm, "collective_axes"),
                         "only the operand the cluster's CTAs share is multicast: rhs with cluster [2, 1], lhs with "
                         "[1, 2]" + ("; this launch has no cluster" if csize == 1 else
                                     "; a split-K cluster's CTAs share no operand (each loads its own K range)"
                                     if ck > 1 else ""))
    tm, tn = tile.tm, tile.tn
    if multicast == "rhs" and (tn // 2) % (1 if lay.k_major_b else lay.atom_b):
        problems.add(("schedule", "cluster"), f"each CTA loads half of the rhs tile ({tn // 2} columns); it must be a "
                                              f"multiple of the swizzle width {lay.atom_b}")
    if multicast == "lhs" and (tm // 2) % (8 if lay.k_major_a else lay.atom_a):
        problems.add(("schedule", "cluster"), f"each CTA loads half of the lhs tile ({tm // 2} rows); it must be a "
                                              f"multiple of {8 if lay.k_major_a else lay.atom_a}")
    return Cluster(cm, cn, csize, multicast, tiles_m, tiles_n, ck)


def _check_split_k(op, sch, tile: Tile, dims: Dims, ck: int, problems: Problems) -> None:
    """What a split-K cluster needs: a k-step for each CTA, one consumer schedule that shares the tile."""
    k_iters = D.cdiv(dims.k, tile.tk)
    if D.is_static(k_iters) and k_iters < ck:
        problems.add(("schedule", "cluster", 2),
                     f"split-K over {ck} CTAs needs at least {ck} k-steps; K = {dims.k} is {k_iters} step"
                     f"{'s' if k_iters > 1 else ''} of tile_k {tile.tk}: use a smaller split or tile_k")
    if sch.pipeline.consumer_schedule != "cooperative":
        problems.add(("schedule", "cluster", 2),
                     f"split-K sums the partial tiles of the cluster's CTAs tile by tile; consumer_schedule: "
                     f"{sch.pipeline.consumer_schedule} runs two tiles at once in each CTA: use consumer_schedule: "
                     f"cooperative, or no split")


def check_dynamic_cluster(cm: int, cn: int, dims: Dims, tile: Tile, problems: Problems) -> None:
    """A cluster along a dynamic M or N: the tile grid divides by it at every call only when the size is a multiple
    of tile x cluster."""
    for what, x, t, c in (("M", dims.m, tile.tm, cm), ("N", dims.n, tile.tn, cn)):
        if c > 1 and not D.divisible(D.cdiv(x, t) * t if D.is_static(x) else x, t * c, dims.ranges):
            how = (f"{what} = {x} is dynamic, so it must be a multiple of tile_{what.lower()} x {c} = {t * c} at every "
                   f"call: declare multiple_of: {t * c} (or a multiple of it) on {x}" if isinstance(x, D.Dim) else
                   f"{what} = {x} gives {D.cdiv(x, t)} tiles")
            problems.add(("schedule", "cluster"), f"a {cm}x{cn} cluster needs the tile grid divisible by it; {how}; "
                                                  f"or use cluster: [1]")


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
    if direct and not D.divisible(dims.n, 2, dims.ranges):
        problems.add(("schedule", "epilogue", "store"), f"direct stores write column pairs; N = {dims.n} is odd"
                     + (" at some calls (declare multiple_of: 2)" if isinstance(dims.n, D.Dim) else "")
                     + ": use store: tma")
    return EpilogueChunks(er, ec, direct, epi_swz, er * ec * osz)


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
        how = ("each consumer owns a whole tile in ping-pong: use a tile of at most "
               f"{(min(creg, 255) - REG_OVERHEAD) * 128} elements (128 x 128 or 64 x 256 fit), or "
               "consumer_schedule: cooperative") if wg.pingpong else "use a smaller tile or more consumers"
        problems.add(("schedule", "pipeline", "compute_registers"),
                     f"each consumer thread holds {acc_regs} f32 accumulators ({wg.wtm} x {wg.wtn} / 128) plus about "
                     f"{REG_OVERHEAD} working registers, over its budget of {min(creg, 255)}; {how}")
    return Registers(threads, preg, creg, acc_regs, hw.regs_per_block(threads))


def pipeline(op, pipe, tile: Tile, k: DimLike, problems: Problems) -> Pipeline:
    """The TMA ring's depth and how long a stage is held after its wgmma (delay_release)."""
    stages = pipe.max_concurrent_steps
    if stages < 2:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"), "the TMA ring needs at least 2 stages")
    specs = [bs for bs in (tile.a_spec, tile.b_spec) if bs is not None]
    delay = max((bs.delay_release for bs in specs), default=1)
    if len(specs) == 2 and specs[0].delay_release != specs[1].delay_release:
        problems.add(("schedule", "in_specs", op.rhs, "delay_release"),
                     f"one pipeline stage holds the lhs and the rhs block and is released once for both: give "
                     f"'{op.lhs}' and '{op.rhs}' the same delay_release (got {specs[0].delay_release} and "
                     f"{specs[1].delay_release})")
    if delay > 1:
        problems.add(("schedule", "in_specs", op.lhs, "delay_release"),
                     "the CUDA kernel keeps at most one wgmma group in flight (delay_release 0 or 1)")
    if delay >= stages:
        problems.add(("schedule", "in_specs", op.lhs, "delay_release"), f"delay_release {delay} must be below the "
                                                                          f"{stages} stages")
    return Pipeline(stages, D.cdiv(k, tile.tk), delay)


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


def smem_map(sch, tile: Tile, isz: int, stages: int, nc: int, cluster: Cluster, chunks: EpilogueChunks,
             hw: Hardware, problems: Problems, lay: Layout, a_rows: int, vecs: VectorSlots | None = None) -> Smem:
    """The lhs / rhs stage rings (`a_rows`: the lhs rows a stage loads, lhs_stage_rows; a compact lhs ring where a
    static M is below a one-block tile), the output staging buffers, a split-K cluster's partial tile, the epilogue
    operands' SMEM slots (`vecs`: epilogue.operands: smem) and the barriers; they must fit a block's SMEM."""
    vecs = vecs or VectorSlots()
    compact = compact_lhs(tile, a_rows)
    a_stage = (a_rows * tile.tk if compact else tile.tm * tile.tk) * isz
    b_stage = tile.tn * tile.tk * isz
    buffers = sch.epilogue.buffers
    smem = SmemMap()
    smem.alloc("a", a_stage, stages, note=f"lhs stage ring ({a_rows} of {tile.tm} rows a box: compact)" if compact
               else "lhs stage ring")
    tail = (tile.tm - a_rows) * lay.swz_a if compact else 0
    if tail:
        smem.alloc("a_tail", tail, align=1024, note="zeros: the last lhs box's 64-row window runs on into it")
    smem.alloc("b", b_stage, stages, note="rhs stage ring")
    if not chunks.direct:
        smem.alloc("epi", chunks.nbytes, buffers * nc, note="output staging per consumer")
    partial = tile.tm * tile.tn * 4 if cluster.ck > 1 else 0
    if partial:
        smem.alloc("red", partial, note="split-K: this CTA's f32 partial tile, read by rank 0 through DSMEM")
    if vecs.slots:
        smem.alloc("vec", vecs.slot_bytes, vecs.slots, align=16,
                   note=f"epilogue operands a tile ({', '.join(v.name for v in vecs.vectors)}), copied by producer warp 1")
    # consumers reading a stage: each multicast stage is read in every CTA of the cluster
    readers = (1 if sch.pipeline.consumer_schedule != "cooperative" else nc) * (cluster.csize if cluster.multicast
                                                                                else 1)
    full_arr, empty_arr = barrier_arrivals(sch, stages, readers, problems)
    smem.alloc("full", 8, stages, align=8, note="TMA landed (expect_tx)")
    smem.alloc("empty", 8, stages, align=8, note=f"stage free ({readers} consumer arrival{'s' if readers > 1 else ''})")
    if partial:
        smem.alloc("red_full", 8, align=8, note=f"rank 0: the peers' partials written ({(cluster.ck - 1) * nc * 128} "
                                                f"thread arrivals)")
        smem.alloc("red_empty", 8, align=8, note=f"a peer: rank 0 has read its partial ({nc * 128} thread arrivals)")
    if vecs.slots:
        smem.alloc("vec_full", 8, vecs.slots, align=8, note=f"operand slot copied ({vecs.fill_threads} cp.async arrivals)")
        smem.alloc("vec_empty", 8, vecs.slots, align=8, note=f"operand slot read ({vecs.readers * 128} thread arrivals)")
    profile = profiler_smem_bytes(sch.compiler_params.profile_space, nc + 1)
    if profile:
        smem.alloc("profile", profile, note="Mosaic GPU's profiler events (compiler_params.profile_space)")
    staging = (0 if chunks.direct else chunks.nbytes * buffers * nc) + partial
    fit = stages_that_fit(hw, staging + 16 * stages + profile + tail + vecs.nbytes, a_stage + b_stage)
    nbytes = check_smem_fit(smem, hw, ("schedule", "pipeline", "max_concurrent_steps"), problems,
                            f"at most {fit} stages fit this tile" + (" beside the profiler's "
                                                                      f"{profile} B" if profile else ""))
    return Smem(tuple(smem.buffers), nbytes, full_arr, empty_arr, a_stage, b_stage, a_rows)


def barrier_arrivals(sch, stages: int, consumers: int, problems: Problems) -> tuple[int, int]:
    """The 'full' and 'empty' rings: one barrier per stage; their arrivals (1 TMA, one per consumer warpgroup reading
    the stage, in each CTA of the cluster) unless schedule.barriers says otherwise."""
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


def tile_loop(pers, batch: DimLike, cluster: Cluster, hw: Hardware, problems: Problems, ranges=None) -> TileLoop:
    """A persistent nd_loop over the tiles (in cluster units) in row-major or planar-snake order, or a CTA a tile."""
    if pers.loop == "dynamic":
        problems.add(("schedule", "persistent", "loop"), "dynamic work claiming pays where tiles differ in "
                                                         "length (the attention family's causal tiles); matmul tiles "
                                                         "are all alike: use nd_loop (on schedule.target: sm_100a, "
                                                         "loop: dynamic claims tiles by cluster launch control)")
    csize = cluster.csize
    num_tiles = batch * (cluster.tiles_m // max(cluster.cm, 1)) * (cluster.tiles_n // max(cluster.cn, 1))
    auto = pers.loop == "nd_loop" and pers.num_blocks == "auto"
    if pers.loop == "none":
        clusters = num_tiles
    elif pers.num_blocks == "auto":
        clusters = D.dmin(num_tiles, hw.sm_count // csize)
    else:
        if pers.num_blocks % csize:
            problems.add(("schedule", "persistent", "num_blocks"), f"num_blocks must be a multiple of the cluster size {csize}")
        clusters = D.dmin(num_tiles, max(pers.num_blocks // csize, 1))
    if D.upper(clusters, ranges or {}) * csize > GRID_X_MAX:
        problems.add(("schedule", "persistent", "loop"),
                     f"a CTA a tile launches up to {D.upper(clusters, ranges or {}) * csize} blocks, over the grid's "
                     f"{GRID_X_MAX}; use loop: nd_loop (a persistent grid)")
    if pers.tile_order == "lpt":
        problems.add(("schedule", "persistent", "tile_order"), "lpt (longest tiles first) orders attention tiles; "
                                                               "matmul tiles are all alike: use row_major or planar_snake")
    return TileLoop(num_tiles, auto, clusters)


def backend_limits(op, sch, tile: Tile, dims: Dims, problems: Problems, layout: Layout | None = None) -> None:
    """32-bit coordinates (a dynamic size at its max); what the Pallas rendering can take."""
    check_sizes_int32({nm: v if isinstance(v, int) else v.max for nm, v in op.sizes.items()}, problems)
    if sch.compiler_params.lowering_semantics == "lane" and "pallas" in sch.backends:
        problems.add(("schedule", "compiler_params", "lowering_semantics"),
                     f"the Pallas matmul uses warpgroup semantics ({for_target(sch.target).mma_instruction}); "
                     f"remove lowering_semantics: lane")
    check_profiler(sch.compiler_params, sch.backends, problems)
    if "pallas" in sch.backends and sch.target != "sm_100a":   # the Hopper rendering's (sm_100a: tcgen05.py)
        _pallas_limits(op, sch, tile.ragged_dims, dims, problems)
        if layout is not None:
            pallas_swizzles(op.lhs, op.rhs, layout.swz_a, layout.swz_b, tile.a_spec, tile.b_spec, "matmul", problems)


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


def _tiling_quanta(op, dims: Dims) -> dict[str, int]:
    """The multiple each of M, N, K must be of for Mosaic GPU's tiled GMEM views: 8 where it is an operand's row
    dimension, 128 B of elements where it is the minor one (lhs [M, K] or [K, M], rhs [K, N] or [N, K], out
    [M, N]); the largest over the operands it spans."""
    rows, cols_in, cols_out = 8, 128 // ITEMSIZE[dims.in_dtype], 128 // ITEMSIZE[dims.out_dtype]
    lhs_minor, rhs_minor = ("M" if op.transpose_lhs else "K"), ("K" if op.transpose_rhs else "N")
    q = {"M": rows, "N": cols_out, "K": rows}
    for what in (lhs_minor, rhs_minor):
        q[what] = max(q[what], cols_in)
    return q


# the dimensions each kind of epilogue operand is indexed along (records.py: MatOperand.bcast)
_EXTRA_DIMS = {"row": {"N"}, "col": {"M"}, "full": {"M", "N"}, "batch": {"M", "N"}}


def _pallas_limits(op, sch, ragged: frozenset, dims: Dims, problems: Problems) -> None:
    """What the Pallas (Mosaic GPU) rendering of this family cannot express; each names the way out."""
    hint = "; or set schedule.backends: [cuda]"
    if sch.pipeline.consumer_schedule != "cooperative":
        problems.add(("schedule", "pipeline", "consumer_schedule"),
                     f"consumer_schedule: {sch.pipeline.consumer_schedule} gives each consumer warpgroup its own tiles; "
                     f"Pallas's emit_pipeline_warp_specialized (jax 0.11.2) hands every pipeline step to all "
                     f"num_compute_wgs consumers (each stage's consumed barrier counts num_compute_wgs arrivals, and "
                     f"every consumer runs the same grid steps), so consumers cannot take alternate tiles: use "
                     f"consumer_schedule: cooperative" + hint)
    if len(sch.cluster) == 3 and sch.cluster[2] > 1:
        problems.add(("schedule", "cluster", 2),
                     "split-K (cluster [1, 1, S]) is rendered for the CUDA backend only: the Pallas matmul's consumers "
                     "(plgpu.emit_pipeline_warp_specialized, jax 0.11.2) carry one CTA's accumulator from its k-loop "
                     "to its epilogue, and the hand-over of a partial tile to a cluster peer (plgpu.cluster_ref with "
                     "async_store_smem) is not rendered yet" + hint)
    if sch.epilogue.store == "direct":
        problems.add(("schedule", "epilogue", "store"), "the Pallas matmul stages its output through SMEM and stores "
                                                        "it by TMA (plgpu.copy_smem_to_gmem); store: direct is the "
                                                        "CUDA kernel's: use store: tma" + hint)
    if sch.epilogue.operands != "global":
        problems.add(("schedule", "epilogue", "operands"),
                     "the Pallas matmul's epilogue reads its operands with plgpu.load from global memory; operands: "
                     "smem (a producer warp staging them with cp.async) is the CUDA kernel's: use operands: global"
                     + hint)
    pallas_edge_limits(op, ragged, dims, problems)
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


def pallas_edge_limits(op, ragged: frozenset, dims: Dims, problems: Problems) -> None:
    """What a Pallas (Mosaic GPU, jax 0.11.2) matmul takes of partial tiles along the `ragged` dimensions: both
    renderings (sm_90a's, and sm_100a's: tcgen05.py) copy blocks past the edge by TMA alike."""
    hint = "; or set schedule.backends: [cuda]"
    # Ragged edges: TMA zero-fills the lhs / rhs blocks past M, N, K and skips the output's stores there, as on
    # CUDA. But Mosaic GPU (jax 0.11.2) views each GMEM operand through its SMEM tiling (8 rows x up to 128 B) and
    # cannot round a partial tile up (TileTransform: "When no rounding mode is specified, dimension d must have size
    # smaller or a multiple of its tiling"; Rounding.UP is NotImplemented: seen on the H200, 2026-12-04), so a
    # ragged dimension must still be a multiple of that tiling in every operand it spans
    quanta = _tiling_quanta(op, dims)
    sizes = {"M": dims.m, "N": dims.n, "K": dims.k}
    for what in sorted(ragged):
        q = quanta[what]
        if not D.divisible(sizes[what], q, dims.ranges):
            problems.add(("schedule", "backends"),
                         f"{what} = {sizes[what]} is not a multiple of the tile; the Pallas matmul takes that only "
                         f"for {what} a multiple of {q} (Mosaic GPU in jax 0.11.2 views each operand in GMEM through "
                         f"its SMEM tiling, 8 rows x 128 B, and cannot round a partial tile up); use {what} a "
                         f"multiple of {q}" + (" (multiple_of)" if isinstance(sizes[what], D.Dim) else "") + hint)
    # the epilogue operands are read by plgpu.load, which jax 0.11.2 has no masked form of, so an operand indexed
    # along a ragged dimension would be read past its end
    for e in dims.extra_ops:
        over = sorted(_EXTRA_DIMS.get(e.bcast, set()) & ragged)
        if over:
            problems.add(("op", "inputs", e.name, "shape"),
                         f"the Pallas epilogue reads '{e.name}' with plgpu.load, which has no masked form in jax "
                         f"0.11.2, and {' and '.join(over)} {'is' if len(over) == 1 else 'are'} not a multiple of the "
                         f"tile here, so the edge tiles would read past its end; use sizes the tile divides" + hint)
