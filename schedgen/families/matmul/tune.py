"""The matmul family's tune aliases: short knob names for fields that move together. Each alias maps to the
(field path, list index or None[, values]) targets it sets; `schedgen.tune.aliases` turns them into knobs. And
its default tune space (`matmul_space`): what `schedgen tune` searches for a spec with no tune section."""
from __future__ import annotations

from ...registry import TuneSpace
from ...plan import dims as D
from ...plan.common import Problems
from ...plan.hardware import for_target
from .operands import check_names, problem_dims
from ...plan.gemm import CLUSTER_AXIS, WGMMA_M, tile_from_block_specs


def _bs(*parts: str) -> tuple[str, ...]:
    return ("schedule", *parts)


def target(path: tuple[str, ...], index: int | None = None, values: tuple | None = None) -> tuple:
    """One field an alias sets (plain data; the tuner makes a `Target` of it); with `values`, (knob value, field
    value) pairs: the field follows the knob (knobs.Target)."""
    return (path, index) if values is None else (path, index, values)


# the operand a 2-CTA cluster shares is multicast (collective_axes: [cluster]); on a 1-CTA launch nothing is
SHARED = ((1, []), (2, [CLUSTER_AXIS]))


def matmul_aliases(spec) -> dict[str, tuple]:
    """The matmul family's knobs that tie several fields (absent BlockSpecs are skipped when resolving)."""
    op, sch = spec.op, spec.schedule
    out = next(iter(op.outputs))
    a, b, o = _bs("in_specs", op.lhs, "block_shape"), _bs("in_specs", op.rhs, "block_shape"), \
        _bs("out_specs", out, "block_shape")
    m_a, k_a = (-1, -2) if op.transpose_lhs else (-2, -1)
    k_b, n_b = (-1, -2) if op.transpose_rhs else (-2, -1)
    stages = (target(_bs("pipeline", "max_concurrent_steps")),) + tuple(
        target(_bs("barriers", nm, "num_barriers")) for nm in ("full", "empty") if nm in sch.barriers)
    return {
        "tile_m": (target(a, m_a), target(o, -2)),
        "tile_n": (target(b, n_b), target(o, -1)),
        "tile_k": (target(a, k_a), target(b, k_b)),
        "stages": stages,
        "consumers": (target(_bs("pipeline", "num_compute_wgs")),),
        "wg_axis": (target(_bs("pipeline", "wg_axis")),),
        "consumer_schedule": (target(_bs("pipeline", "consumer_schedule")),),
        "cluster_m": (target(_bs("cluster"), 0), target(_bs("in_specs", op.rhs, "collective_axes"), None, SHARED)),
        "cluster_n": (target(_bs("cluster"), 1), target(_bs("in_specs", op.lhs, "collective_axes"), None, SHARED)),
        "split_k": (target(_bs("cluster"), 2),),
        "partial_sums": (target(_bs("pipeline", "partial_sums")),),
        "scale_prefetch": (target(_bs("pipeline", "scale_prefetch")),),
        "delay_release": (target(_bs("in_specs", op.lhs, "delay_release")),
                          target(_bs("in_specs", op.rhs, "delay_release"))),
        "epilogue_m": (target(_bs("epilogue", "tile"), 0),),
        "epilogue_n": (target(_bs("epilogue", "tile"), 1),),
        "epilogue_buffers": (target(_bs("epilogue", "buffers")),),
        "epilogue_store": (target(_bs("epilogue", "store")),),
        # operands in SMEM are the CUDA kernel's alone: its points build backends: [cuda] (global keeps the spec's)
        "epilogue_operands": (target(_bs("epilogue", "operands")),
                              target(_bs("backends"), None, (("global", list(sch.backends)), ("smem", ["cuda"])))),
        "tile_order": (target(_bs("persistent", "tile_order")),),
        "minor_dim": (target(_bs("persistent", "minor_dim")),),
        "tile_width": (target(_bs("persistent", "tile_width")),),
        "num_blocks": (target(_bs("persistent", "num_blocks")),),
        # stream_k is the CUDA kernel's alone: its points build backends: [cuda] (data_parallel keeps the spec's)
        "decomposition": (target(_bs("persistent", "decomposition")),
                          target(_bs("backends"), None, (("data_parallel", list(sch.backends)),
                                                         ("stream_k", ["cuda"])))),
    }


# ============================================================================================== the default space
# `schedgen tune SPEC` on a spec without a tune section searches these around the planner's picks (the picked
# value of each knob is always among its values).
TILE_M = (128, 256)
TILE_N = (128, 192, 256)
SKINNY_TILE_K = (64, 128, 256)
STAGES = (3, 4, 5, 6)
TILE_WIDTH = (4, 8, 16)
SKINNY_M = 64              # an M this small takes 64-row tiles: the skinny (decode) space
ACC_LIMIT = 32768          # tile_m * tile_n: each consumer's f32 accumulators fit its registers (128 x 256 / 2)


def matmul_space(spec) -> TuneSpace:
    """The default tune space of a matmul spec (the spec completed with the planner's picks), from its sizes.

    Large problems: tile_m in {128, 256}, tile_n in {128, 192, 256} with tile_m * tile_n <= 32768 (each consumer's
    f32 accumulators fit its registers), stages in {3, 4, 5, 6}, cluster_m in {1, 2} (where M has two tile rows to
    pair at every size) and tile_width among {4, 8, 16}: only the widths that give different tile orders at this M
    (the planar snake walks bands of tile_width tile rows; a band at least as wide as the grid is the whole grid,
    so one such width stands for all wider ones). All three widths stay where they differ rather than a subset:
    the 4096^3 winner of docs/tuning.md's 3-minute run had width 4, the planner picks 8, and 16 was measured at the
    issue-17 shapes; the space is still 144 points, 96 after the accumulator constraint and 54 that plan at 3000 x
    5000 x 1000 (SMEM drops the deep rings of the large tiles, the cluster's half-rhs swizzle rule the 2-CTA
    192-wide ones): about 5 s on the H200 and a minute of CPU compiles. On sm_90a with static sizes and cooperative
    consumers each point also comes data_parallel or stream_k (persistent.decomposition; stream_k on 1-CTA
    launches only, building the CUDA backend alone), doubling the space.
    Skinny problems (M <= 64, or one the planner gave 64-row tiles because larger ones would leave SMs idle, e.g.
    decode at M = 128): tile_m 64 as picked, tile_n as above, tile_k in {64, 128, 256} (the K a stage loads: the
    weight bytes in flight) and stages; no cluster (the planner's 2-CTA clusters pair 128-row tiles) and no
    tile_width (one or two tile rows: one band). Every knob also takes the planner's own pick; a tile past the
    problem (the next smaller one already covers it) is left out, and where the picked BlockSpecs reject ragged
    edges (the tile divides the sizes) only values that divide are tried. A written consumer_schedule other than
    cooperative (ping-pong: each consumer holds a whole tile) drops the accumulator constraint: the planner's
    register check prunes those tiles, saying why."""
    op, sch = spec.op, spec.schedule
    problems = Problems()
    out_name, extras = check_names(spec, problems)
    dims = None if problems else problem_dims(op, out_name, extras, problems)
    if dims is None or problems:
        return TuneSpace(why="the op has problems to fix first (schedgen validate)")
    tm, tn, tk = tile_from_block_specs(op, sch, out_name, Problems())
    r = dims.ranges
    m, n, k = (D.upper(x, r) for x in (dims.m, dims.n, dims.k))
    padded = any(bs is not None and bs.out_of_bounds == "zero"
                 for bs in (sch.in_specs.get(op.lhs), sch.in_specs.get(op.rhs)))

    def values(candidates: tuple[int, ...], picked: int, extent: int, dim) -> tuple[int, ...]:
        """The pick, and the candidates that are not past the problem and keep to the picked edge rule."""
        out, prev = [], 0
        for v in sorted(set(candidates) | {picked}):
            if v == picked or (prev < extent and (padded or D.divisible(dim, v, r))):
                out.append(v)
            prev = v
        return tuple(out)

    stages = tuple(sorted(set(STAGES) | {sch.pipeline.max_concurrent_steps}))
    if m <= SKINNY_M or tm < 2 * WGMMA_M:
        params = {"tile_n": values(TILE_N, tn, n, dims.n), "tile_k": values(SKINNY_TILE_K, tk, k, dims.k),
                  "stages": stages}
        return TuneSpace(params, (), f"M = {m}, N = {n}, K = {k} is skinny ({tm}-row tiles): tile_n, the K a "
                                     f"stage loads and the ring depth")
    params = {"tile_m": values(TILE_M, tm, m, dims.m), "tile_n": values(TILE_N, tn, n, dims.n), "stages": stages}
    rows = -(-m // min(params["tile_m"]))
    if rows >= 2 and (D.is_static(dims.m) or D.divisible(dims.m, 2 * min(params["tile_m"]), r)):
        params["cluster_m"] = (1, 2)
    if sch.persistent.tile_order == "planar_snake":
        band = rows if sch.persistent.minor_dim == 0 else -(-n // min(params["tile_n"]))
        widths = _distinct_widths(band, sch.persistent.tile_width)
        if len(widths) > 1:
            params["tile_width"] = widths
    if getattr(op, "block_scales", None) is not None:
        # the k-loop's promotion: one or two partial-sum sets (two are pruned where they do not fit the registers),
        # the scales read while a block's wgmmas run or a step ahead
        params["partial_sums"] = (1, 2)
        params["scale_prefetch"] = (False, True)
    # ping-pong consumers each hold a whole tile: the planner's register check prunes there (its located error)
    cooperative = sch.pipeline.consumer_schedule == "cooperative"
    constraints = (f"tile_m * tile_n <= {ACC_LIMIT}",) if cooperative else ()
    if _stream_k_applies(op, sch, dims, cooperative):
        # data-parallel waves or a stream-K tail (1-CTA launches only: stream_k.py)
        params["decomposition"] = ("data_parallel", "stream_k")
        if "cluster_m" in params:
            constraints += ("decomposition == 'data_parallel' or cluster_m == 1",)
    what = ["the tile", "the ring depth"] + ["the 2-CTA cluster"] * ("cluster_m" in params) + \
        ["the band width"] * ("tile_width" in params) + ["the promotion"] * ("partial_sums" in params) + \
        ["the decomposition"] * ("decomposition" in params)
    return TuneSpace(params, constraints, f"M, N, K = {m}, {n}, {k}: {', '.join(what[:-1])} and {what[-1]}")


def _stream_k_applies(op, sch, dims, cooperative: bool) -> bool:
    """Stream-K is a knob where the planner could take it: the Hopper kernel, static sizes, cooperative consumers,
    no block scales, a persistent grid (stream_k.check_stream_k's rules; the knob sets backends: [cuda])."""
    return (cooperative and for_target(sch.target).mma == "wgmma" and not dims.ranges
            and getattr(op, "block_scales", None) is None and sch.persistent.loop == "nd_loop")


def _distinct_widths(band: int, picked: int) -> tuple[int, ...]:
    """The planar snake's band widths of TILE_WIDTH (and the pick) that give different tile orders over `band` tile
    rows: every width below it, and one that covers it (the pick when it does, else the narrowest)."""
    widths = sorted(set(TILE_WIDTH) | {picked})
    below = [w for w in widths if w < band]
    covering = [w for w in widths if w >= band]
    return tuple(below + ([picked if picked >= band else covering[0]] if covering else []))
