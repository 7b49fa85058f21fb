"""The GEMM planner's phases every MMA generation runs: the block tile, the cluster, the pipeline's depth, the
loop over tiles and what the Pallas renderings take; and the plan record of the tiles (TileGrid). The
operands' layout, boxes and tensor maps are operands.py's; the warpgroups, registers, epilogue chunks and SMEM map of
the sm_90a kernel are sm90.py's."""
from __future__ import annotations

import math

from ...frontend.model import ITEMSIZE
from .. import dims as D
from ..common import Problems
from ..dims import DimLike
from ..hardware import Hardware, for_target
from ..legality import check_profiler, check_sizes_int32
from .operands import pallas_swizzles
from .records import (
    DEFAULT_TILE,
    Cluster,
    Dims,
    Layout,
    Pipeline,
    Tile,
    TileGrid,
    TileLoop,
)

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
        if bs.memory_space == "tmem" and for_target(sch.target).tmem_columns:
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
    # a CTA pair's MMA tile (sm_100a: a 256-row tile on a [2, 1] cluster) is one tile a cluster: any count divides
    gm = 1 if tile.tm == for_target(sch.target).pair_tile_m else cm
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


def backend_limits(op, sch, tile: Tile, dims: Dims, problems: Problems, layout: Layout | None = None,
                   kernel: str = "GEMM") -> None:
    """32-bit coordinates (a dynamic size at its max); what the Pallas rendering can take (`kernel` names it in the
    messages)."""
    check_sizes_int32({nm: v if isinstance(v, int) else v.max for nm, v in op.sizes.items()}, problems)
    if sch.compiler_params.lowering_semantics == "lane" and "pallas" in sch.backends:
        problems.add(("schedule", "compiler_params", "lowering_semantics"),
                     f"the Pallas matmul uses warpgroup semantics ({for_target(sch.target).mma_instruction}); "
                     f"remove lowering_semantics: lane")
    check_profiler(sch.compiler_params, sch.backends, problems)
    if "pallas" in sch.backends and for_target(sch.target).mma == "wgmma":   # (sm_100a's: sm100_pallas.py)
        _pallas_limits(op, sch, tile.ragged_dims, dims, problems)
        if layout is not None:
            pallas_swizzles(op.lhs, op.rhs, layout.swz_a, layout.swz_b, tile.a_spec, tile.b_spec, kernel, problems)


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
    renderings (sm_90a's, and sm_100a's: sm100_pallas.py) copy blocks past the edge by TMA alike."""
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


def tile_grid(sch, tile: Tile, cl: Cluster, loop: TileLoop, pipe: Pipeline) -> TileGrid:
    """The plan's record of the tile and the walk over the tiles."""
    pers = sch.persistent
    return TileGrid(tile_m=tile.tm, tile_n=tile.tn, tile_k=tile.tk, tiles_m=cl.tiles_m, tiles_n=cl.tiles_n,
                    cluster_tiles_m=cl.tiles_m // cl.cm, cluster_tiles_n=cl.tiles_n // cl.cn,
                    num_tiles=loop.num_tiles, k_iters=pipe.k_iters, tile_order=pers.tile_order,
                    minor_dim=pers.minor_dim, tile_width=pers.tile_width, ragged=tile.ragged)
