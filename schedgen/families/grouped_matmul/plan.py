"""Planner of the `grouped_matmul` family: G products `x[rows of g] @ w[g]` over one activation whose rows are
sorted by group (the experts of a mixture-of-experts layer), each group's rows known only at the call.

The kernel is the matmul family's persistent warp-specialized GEMM (a TMA producer warpgroup, 1-2 wgmma consumer
warpgroups, a `max_concurrent_steps`-deep stage ring) walking a flattened tile space over the groups: group g has
cdiv(M_g, tile_m) x cdiv(N, tile_n) tiles, M_g = end(g) - start(g). At kernel entry every CTA reads the int32
group operand into SMEM and builds the prefix of the groups' tile counts there; tile t of the CTA's persistent
loop (t = blockIdx.x, + gridDim.x, ...) belongs to the group whose prefix range holds it (a cursor that only moves
forward: a CTA's tiles come in increasing order), and to (tile row, tile column) inside it in row-major or
planar-snake order. The producer loads x rows from start(g) + tile row x tile_m (rows past the group's end belong
to the next group, or are zero-filled past T: harmless, since their output rows are never stored) and the weight
tile from a 3-D tensor map over w [G, N, K] / [G, K, N]. The epilogue stores only the group's rows: a 64-row
block wholly inside the group leaves through the SMEM staging chunks and TMA stores (epilogue.store: tma), the
group's last partial block by masked stores from registers (with store: direct every block does).

The per-group product is planned by the matmul family: this planner builds the spec of one group's product
(x [T, K] @ w[g] [K, N] -> [T, N]) and plans it with that family's planner (its manifest's `plan`, on the shared GEMM
package schedgen/plan/gemm), so every tile, wgmma, swizzle, SMEM, register and epilogue rule (and its located
message) is the matmul family's own; the rules of the grouping (the group
operand, what the grouped kernel takes of the schedule, its SMEM tables) are here.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...frontend.model import BlockSpec, Operand, recast
from ...plan import dims as D
from ...plan.common import KernelArg, Problems, dynamic_ranges, resolve_shape, size_values
from ...plan.dims import DimLike
from ...plan.hardware import Hardware
from ...plan.launch import KernelLaunch, inline_field
from ...plan.legality import check_reserved_names, check_unique_names
from ...plan.gemm import (MatmulPlan, MatOperand, check_operand_roles, check_smem_operands, mat_operand,
                          pallas_swizzles, tensor_map, tile_from_block_specs)
from ...plan.unread import check_unread
from ...registry import get as family
from .unread import TABLE

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

# one group's product is a matmul: the matmul family's op model and planner (its manifest), its plan `mm` the GEMM
# package's MatmulPlan
STEP_KIND = "matmul"
TABLE_WORDS_PER_GROUP = 3      # SMEM int32 tables: a group's first row, its end, its first tile (+ the tile total)
# static SMEM the cubin reports beyond the tables (ptxas's resource usage, sm_90a: 1136 B for 8 groups' 100 B: 1 KiB
# plus each table rounded up to 16 B), kept free beside the dynamic SMEM
STATIC_SMEM_EXTRA = 1024 + 3 * 16


PALLAS_ACC = 128 * 128      # the Pallas kernels run one warpgroup a tile: its f32 accumulators, 128 a thread


@dataclass(frozen=True)
class GroupedMatmulPlan:
    launch: KernelLaunch = inline_field()   # the launch header (plan/launch.py; plan.json: its fields here)
    sizes: dict
    constants: dict
    # the problem
    groups: int
    t: DimLike                 # rows of x and out (all groups together); ragged k: the contraction
    n: int
    k: int                     # the contraction (ragged k: M, the rows of each group's output block)
    in_dtype: str
    out_dtype: str
    transpose_rhs: bool        # w stored [G, N, K] (K-major for wgmma)
    offsets_name: str
    offsets_format: str        # offsets [G + 1] | ends [G] | counts [G]
    offsets_len: int
    inputs: tuple[MatOperand, ...]     # x, w, the group operand (int32)
    outputs: tuple[MatOperand, ...]
    mm: MatmulPlan             # one group's product: tiles, wgmma, swizzles, SMEM ring, registers, epilogue code
    # the tile space
    tile_m: int
    tile_n: int
    tile_k: int
    tiles_n: int               # tile columns of every group
    tile_order: str            # inside a group: row_major | planar_snake
    max_tiles: DimLike         # tiles at most (every group a partial tile row more than T / tile_m)
    epi_store: str             # tma (masked direct stores for a group's last partial 64-row block) | direct
    table_bytes: int           # static SMEM of the group tables
    # launch
    producer_regs: int
    consumer_regs: int
    approx_math: bool
    lowering_semantics: str
    profile_space: int
    profile_dir: str
    flops: DimLike             # 2 T N K: every row in some group
    bytes_moved: DimLike
    ragged: str = "m"          # op.ragged: m (rows of x and out grouped) | k (the contraction grouped: ragged_k.py)
    m: DimLike = 0             # ragged k: the rows of each group's output block (M of out [G, M, N])
    # schedule.cluster [1, 2]: two CTAs a cluster on adjacent tile columns of one (group, tile row), the x tile
    # multicast to both (mm.cluster.multicast == "lhs"); left out of plan.json while absent, so plans read as before
    cluster_n: int = field(default=1, metadata={"omit_default": True})

    @property
    def cluster_tiles_n(self) -> int:
        """Tile columns of a group in cluster units (a cluster computes cluster_n adjacent columns at once)."""
        return self.tiles_n // self.cluster_n

    @property
    def operands(self) -> tuple[MatOperand, ...]:
        return self.inputs + self.outputs

    @property
    def identity_epilogue(self) -> bool:
        return self.mm.identity_epilogue


@dataclass(frozen=True)
class Shapes:
    """x [T, K], w [G, K, N] / [G, N, K], out [T, N] as extents."""
    t: DimLike
    n: DimLike
    k: DimLike
    x: tuple
    w: tuple
    out: tuple


def plan_grouped_matmul(spec: SpecFile, hw: Hardware) -> tuple[GroupedMatmulPlan | None, Problems]:
    """The `ragged: m` product (grouped rows); the family's planner (`ragged_k.plan_grouped`) sends `ragged: k`
    to `ragged_k.plan_ragged_k`."""
    problems = Problems()
    op, sch = spec.op, spec.schedule
    out_name = next(iter(op.outputs))
    check_names(spec, out_name, problems)
    if problems and (op.lhs not in op.inputs or op.rhs not in op.inputs):
        return None, problems
    shapes = group_shapes(op, out_name, problems)
    if shapes is None:
        return None, problems
    mm = plan_step(spec, out_name, problems, hw)
    check_schedule(op, sch, out_name, problems)
    if mm is None:
        return None, problems
    table = table_bytes(op, mm, hw, problems)
    check_tiles(spec, shapes, mm, problems)
    if "pallas" in sch.backends:
        check_pallas(spec, shapes.t, mm, (("N", shapes.n, mm.tiles.tile_n), ("K", shapes.k, mm.tiles.tile_k)), problems)
    if problems:
        return None, problems
    args = kernel_args(op, out_name, shapes, mm)
    if problems:
        return None, problems
    return launch_record(spec, out_name, shapes, mm, table, args, hw), problems


# ------------------------------------------------------------------------------------------- names and shapes


def check_names(spec: SpecFile, out_name: str, problems: Problems) -> None:
    """One namespace (the group operand's name included), no reserved names, lhs / rhs the two inputs."""
    op = spec.op
    check_unique_names((("sizes", op.sizes), ("constants", op.constants), ("inputs", op.inputs),
                        ("outputs", op.outputs)), problems)
    taken = {**{n: "sizes" for n in op.sizes}, **{n: "constants" for n in op.constants},
             **{n: "inputs" for n in op.inputs}, **{n: "outputs" for n in op.outputs}}
    if op.group_offsets in taken:
        problems.add(("op", "group_offsets"), f"'{op.group_offsets}' is already used in op.{taken[op.group_offsets]}; "
                                              f"the group operand needs a name of its own")
    for nm in list(op.outputs) + list(op.constants):
        if nm == "acc":
            problems.add(("op", "outputs" if nm in op.outputs else "constants", nm),
                         f"'{nm}' is reserved (the accumulator); choose another name")
    check_reserved_names(spec, problems)
    check_operand_roles(op, problems, "the activations and the weights are two inputs")


def group_shapes(op, out_name: str, problems: Problems) -> Shapes | None:
    """x [T, K], w [G, K, N] (or [G, N, K]) with G = op.groups, out [T, N]; None where the step cannot be planned."""
    before = len(problems)
    sizes = size_values(op.sizes)
    x = resolve_shape(op.inputs[op.lhs].shape, sizes, ("op", "inputs", op.lhs, "shape"), problems)
    w = resolve_shape(op.inputs[op.rhs].shape, sizes, ("op", "inputs", op.rhs, "shape"), problems)
    out = resolve_shape(op.outputs[out_name].shape, sizes, ("op", "outputs", out_name, "shape"), problems)
    if len(problems) != before:
        return None
    if len(x) != 2:
        problems.add(("op", "inputs", op.lhs, "shape"), f"the activations are 2-D [T, K] (every group's rows, "
                                                        f"sorted by group); got {len(x)} dimensions")
    w_lay = "[G, N, K]" if op.transpose_rhs else "[G, K, N]"
    if len(w) != 3:
        problems.add(("op", "inputs", op.rhs, "shape"), f"the weights are 3-D {w_lay}, one matrix per group; got "
                                                        f"{len(w)} dimensions")
    if len(out) != 2:
        problems.add(("op", "outputs", out_name, "shape"), f"the output is 2-D [T, N]; got {len(out)} dimensions")
    if len(problems) != before:
        return None
    g_dim = op.inputs[op.rhs].shape[0]
    if isinstance(w[0], D.Dim):
        problems.add(("op", "sizes", g_dim), f"the group count is fixed (op.groups = {op.groups}); give "
                                             f"'{g_dim}' the value {op.groups}")
    elif w[0] != op.groups:
        problems.add(("op", "inputs", op.rhs, "shape", 0), f"the weights hold {w[0]} groups but op.groups is "
                                                           f"{op.groups}; the leading dimension is G")
    t, k = x
    kw, n = (w[2], w[1]) if op.transpose_rhs else (w[1], w[2])
    if kw != k:
        problems.add(("op", "inputs", op.rhs, "shape", 2 if op.transpose_rhs else 1),
                     f"contraction sizes differ: x [T, K] has K = {k}, w {w_lay} has K = {kw}"
                     + ("" if op.transpose_rhs else " (set op.transpose_rhs: true if w is stored [G, N, K])"))
    for i, (got, want, what) in enumerate(zip(out, (t, n), ("T (x's rows)", "N (w's columns)"))):
        if got != want:
            problems.add(("op", "outputs", out_name, "shape", i), f"the output is [T, N]: dimension {i} must be "
                                                                  f"{what} = {want}, got {got}")
    for nm, d in (("N", n), ("K", k)):
        if isinstance(d, D.Dim):
            problems.add(("op", "inputs", op.rhs, "shape"), f"{nm} is dynamic; the weights' N and K are fixed "
                                                            f"(only T, the token count, is known at the call only)")
    if len(problems) != before:
        return None
    return Shapes(t, n, k, tuple(x), tuple(w), tuple(out))


# ---------------------------------------------------------------------------------------- one group's product


def step_op_of(op, out_name: str):
    """One group's product as a matmul op: x [T, K] @ w[g] ([K, N] or [N, K]) into [T, N]."""
    w = op.inputs[op.rhs]
    return family(STEP_KIND).op_model(kind=STEP_KIND, sizes=dict(op.sizes), constants=dict(op.constants),
                    inputs={op.lhs: op.inputs[op.lhs], op.rhs: Operand(shape=list(w.shape[1:]), dtype=w.dtype)},
                    outputs=dict(op.outputs), lhs=op.lhs, rhs=op.rhs, transpose_rhs=op.transpose_rhs,
                    epilogue=op.epilogue)


def step_spec_of(spec: SpecFile, out_name: str, step_op=None) -> SpecFile:
    """The spec of one group's product (`step_op`, default `step_op_of`): the grouped spec's schedule with the lhs /
    rhs edges zero-padded (a group's row tiles are ragged at every call: the rows past its end are loaded and never
    stored, or masked), on the CUDA backend, without ping-pong; with the grouped kernel's one cluster ([1, 2]: two
    tile columns of one group's tile row, x multicast) planned by the matmul family's cluster rules (the tile grid's
    columns divisible by 2, each CTA's half of the x tile, the collective_axes written), else without clusters."""
    op, sch = spec.op, spec.schedule
    step_op = step_op or step_op_of(op, out_name)
    paired = pairs_n(op, sch)
    in_specs = {nm: bs.model_copy(update={"out_of_bounds": "zero", **({} if paired else {"collective_axes": []})})
                for nm, bs in sch.in_specs.items()}
    out_specs = {nm: bs.model_copy(update={"block_shape": bs.block_shape[1:]})
                 if len(bs.block_shape) == 3 and bs.block_shape[0] == 1 and op.ragged == "k" else bs
                 for nm, bs in sch.out_specs.items()}     # ragged k: a [1, tm, tn] block of out [G, M, N]
    sch = sch.model_copy(update={"out_specs": out_specs})
    tm, tn, tk = tile_from_block_specs(step_op, sch, out_name, Problems())
    shapes = {op.lhs: [tk, tm] if step_op.transpose_lhs else [tm, tk],
              op.rhs: [tn, tk] if op.transpose_rhs else [tk, tn]}
    for nm in (op.lhs, op.rhs):
        if nm not in in_specs:
            in_specs[nm] = BlockSpec(block_shape=shapes[nm], out_of_bounds="zero")
    # what the grouped kernel does not take (clusters, ping-pong, other loops) is its own error (check_schedule): the
    # step is planned without it, so the matmul family's rules for those do not pile up beside it
    pipe = sch.pipeline.model_copy(update={"consumer_schedule": "cooperative"})
    pers = sch.persistent.model_copy(update={"loop": "nd_loop", **({"tile_order": "row_major"}
                                                                   if sch.persistent.tile_order == "lpt" else {})})
    step_sch = sch.model_copy(update={"in_specs": in_specs, "backends": ["cuda"], "cluster": [1, 2] if paired else [1],
                                      "pipeline": pipe, "persistent": pers})
    return spec.model_copy(update={"op": step_op, "schedule": recast(step_sch, family(STEP_KIND).schedule_model)})


def plan_step(spec: SpecFile, out_name: str, problems: Problems, hw: Hardware,
              step: SpecFile | None = None) -> MatmulPlan | None:
    """One group's product planned by the matmul family (`step`, default `step_spec_of`); its problems located in the
    grouped spec (the dimensions of the operand with the leading G shift by one)."""
    op = spec.op
    mm, mm_problems = family(STEP_KIND).plan(step or step_spec_of(spec, out_name), hw)
    grouped = out_name if op.ragged == "k" else op.rhs           # the operand with the leading G
    where = ("op", "outputs" if op.ragged == "k" else "inputs", grouped, "shape")
    for p in mm_problems:
        path = tuple(p.path)
        if path[:4] == where and len(path) > 4 and isinstance(path[4], int):
            path = (*path[:4], path[4] + 1, *path[5:])
        problems.append(dataclasses.replace(p, path=path))
    return mm


# ------------------------------------------------------------------------ what the grouped kernel takes of the schedule


def pairs_n(op, sch) -> bool:
    """schedule.cluster is the grouped kernel's one cluster, [1, 2] (or [1, 2, 1]), on ragged: m."""
    return op.ragged != "k" and list(sch.cluster) + [1] * (3 - len(sch.cluster)) == [1, 2, 1]


def check_schedule(op, sch, out_name: str, problems: Problems) -> None:
    """Clusters [1] or [1, 2] (ragged m, CUDA), cooperative consumers, a persistent nd_loop; fields it does not
    read."""
    check_unread(sch, TABLE, (op.lhs, op.rhs), (out_name,), problems)
    check_cluster(op, sch, problems)
    if sch.pipeline.consumer_schedule != "cooperative":
        problems.add(("schedule", "pipeline", "consumer_schedule"),
                     f"consumer_schedule: {sch.pipeline.consumer_schedule} is not rendered for the grouped matmul "
                     f"(its consumers split each tile); use cooperative (the default)")
    if sch.persistent.loop != "nd_loop":
        problems.add(("schedule", "persistent", "loop"),
                     f"loop: {sch.persistent.loop}: the grouped matmul's tile count depends on the group offsets, "
                     f"known on the device only, so its grid is persistent (each CTA walks the groups' tiles); "
                     f"use loop: nd_loop (the default)")
    if sch.persistent.tile_order == "lpt":
        problems.add(("schedule", "persistent", "tile_order"), "lpt (longest tiles first) orders attention tiles; "
                                                               "a group's tiles are all alike: use row_major or "
                                                               "planar_snake")
    check_smem_operands(sch, "the grouped matmul's epilogue reads its operands from global memory (a group's tiles "
                             "are found on the device, no producer warp stages them)", problems)


def check_cluster(op, sch, problems: Problems) -> None:
    """The grouped kernel's clusters: [1], or [1, 2] on ragged: m for the CUDA kernel. A [1, 2] cluster's CTAs take
    adjacent tile columns of the same tile row of one group, so both always work on one group (the pair shares the x
    tile, multicast; each loads its own weight tile); pairing along M ([2, 1], the weight tile shared) is not
    rendered: a group's tile-row count is known only at the call, so a pair of tile rows could straddle two groups
    (different weights). The matmul family's rules (the tile columns' count even, collective_axes on x only, the half
    x tile's rows) run on the step's plan."""
    if math.prod(sch.cluster) == 1:
        for nm, bs in sch.in_specs.items():
            if bs.collective_axes:
                problems.add(("schedule", "in_specs", nm, "collective_axes"),
                             "no cluster multicast without a cluster (cluster: [1]); remove collective_axes, or use "
                             "cluster: [1, 2] (x multicast between two tile columns of a group)")
        return
    if op.ragged == "k":
        problems.add(("schedule", "cluster"), f"ragged: k runs without clusters (its tiles are whole output blocks "
                                              f"of one group each, no pair rendered); use cluster: [1], got "
                                              f"{list(sch.cluster)}")
    elif not pairs_n(op, sch):
        problems.add(("schedule", "cluster"), f"the grouped matmul takes cluster [1] or [1, 2] (two CTAs on adjacent "
                                              f"tile columns of one group's tile row, x multicast to both); "
                                              f"{list(sch.cluster)} is not rendered: pairs along M ([2, 1]) could "
                                              f"straddle two groups (a group's tile rows are known only at the "
                                              f"call), and split-K ([1, 1, S]) is not rendered for grouped tiles")
    if "pallas" in sch.backends:
        problems.add(("schedule", "backends"), f"cluster {list(sch.cluster)}: the grouped matmul's Pallas kernel "
                                               f"runs without clusters; use backends: [cuda] for the 2-CTA cluster, "
                                               f"or cluster: [1]")


PALLAS_ROWS = 8                # the SMEM tiling's rows, through which Mosaic GPU views each GMEM operand


def check_pallas(spec, t: DimLike, mm: MatmulPlan, whole: tuple, problems: Problems) -> None:
    """The Pallas renderings: one warpgroup a tile (its f32 accumulators in that warpgroup's registers), whole tiles
    along `whole` ((name, extent, tile) each: the K steps and the stored columns have static extents), and T a
    multiple of the SMEM tiling's 8 rows (Mosaic GPU in jax 0.11.2 views x, and w with ragged: k, in GMEM through
    that tiling and cannot round a partial one up: "dimension 0 must have size smaller or a multiple of its tiling
    8")."""
    where = ("schedule", "backends")
    if not D.divisible(t, PALLAS_ROWS, dynamic_ranges(spec.op.sizes)):
        dyn = isinstance(t, D.Dim)
        problems.add(where, f"the grouped matmul's Pallas kernel takes T (the rows) a multiple of {PALLAS_ROWS}: Mosaic "
                            f"GPU in jax 0.11.2 views the row-major operands in GMEM through their SMEM tiling of "
                            f"{PALLAS_ROWS} rows and cannot round a partial one up; "
                            + (f"declare multiple_of: {PALLAS_ROWS} on T" if dyn else f"T = {t}: use a multiple of "
                                                                                     f"{PALLAS_ROWS}")
                            + ", or backends: [cuda]")
    if mm.tiles.tile_m * mm.tiles.tile_n > PALLAS_ACC:
        problems.add(where, f"the grouped matmul's Pallas kernel runs one warpgroup a tile, whose f32 accumulators "
                            f"must fit its registers: tile_m x tile_n at most {PALLAS_ACC} (e.g. 128 x 128), got "
                            f"{mm.tiles.tile_m} x {mm.tiles.tile_n}; write smaller blocks (the planner picks 128 x 128 when "
                            f"backends names pallas), or backends: [cuda]")
    for nm, d, t in whole:
        if d % t:
            problems.add(where, f"the grouped matmul's Pallas kernel takes whole tiles of {nm}: {nm} = {d} must be a "
                                f"multiple of its tile ({t}); pick a tile that divides it, or backends: [cuda]")
    ins = spec.schedule.in_specs
    pallas_swizzles(spec.op.lhs, spec.op.rhs, mm.layout.swizzle_a, mm.layout.swizzle_b, ins.get(spec.op.lhs),
                                    ins.get(spec.op.rhs), "grouped matmul", problems)


def table_bytes(op, mm: MatmulPlan, hw: Hardware, problems: Problems) -> int:
    """The group tables' static SMEM, beside the ring, the staging buffers and the barriers."""
    nbytes = 4 * (TABLE_WORDS_PER_GROUP * op.groups + 1)
    if mm.launch.smem_bytes + nbytes + STATIC_SMEM_EXTRA > hw.smem_per_block:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"SMEM needed is {mm.launch.smem_bytes} B for the ring and the epilogue plus {nbytes} B of group tables "
                     f"({op.groups} groups) and {STATIC_SMEM_EXTRA} B of the kernel's other static SMEM, over the {hw.name}'s {hw.smem_per_block} B per block; use fewer stages")
    return nbytes


def check_tiles(spec, s: Shapes, mm: MatmulPlan, problems: Problems) -> None:
    """The tile count in 32-bit ints. (The epilogue's 64-row chunks, which the masked stores of a group's last block
    rely on, are the matmul family's rule.)"""
    ranges = dynamic_ranges(spec.op.sizes)
    most = D.upper((D.cdiv(s.t, mm.tiles.tile_m) + spec.op.groups) * -(-s.n // mm.tiles.tile_n), ranges)
    if most > 2 ** 31 - 1:
        problems.add(("op", "sizes"), f"up to {most} tiles: the kernel's 32-bit tile indices need fewer; use a "
                                      f"smaller T max or larger tiles")


# ---------------------------------------------------------------------------------------- kernel args, the record


def kernel_args(op, out_name: str, s: Shapes, mm: MatmulPlan) -> tuple[KernelArg, ...]:
    """x's tensor map (the matmul's), w's 3-D one (a group a box), the output's tensor map (TMA stores) and its
    pointer (masked stores), the group operand's pointer, one i32 per dynamic size."""
    x_arg = mm.launch.kernel_args[0]
    b_rows = mm.tiles.tile_n if mm.layout.k_major_b else mm.tiles.tile_k
    w_arg = tensor_map(1, s.w, mm.in_dtype, b_rows, mm.layout.atom_b, mm.layout.swizzle_b)
    out_i, off_i = 3, 2
    args = [x_arg, w_arg]
    if mm.staging.epi_store != "direct":
        out_arg = mm.launch.kernel_args[2]
        args.append(KernelArg("tmap", out_i, out_arg.dtype, out_arg.shape, out_arg.strides, out_arg.box,
                              out_arg.swizzle))
    args += [KernelArg("ptr", out_i), KernelArg("ptr", off_i)]
    args += [KernelArg("ptr", out_i + 1 + i) for i, _ in enumerate(list(op.outputs)[1:])]   # kept for a backward
    args += [KernelArg("i32", -1, value=D.size(nm)) for nm, v in op.sizes.items() if not isinstance(v, int)]
    return tuple(args)


def launch_record(spec: SpecFile, out_name: str, s: Shapes, mm: MatmulPlan, table: int, args,
                  hw: Hardware) -> GroupedMatmulPlan:
    op, sch = spec.op, spec.schedule
    g = op.groups
    off_len = g + 1 if op.offsets_format == "offsets" else g
    inputs = (mat_operand(op.lhs, "lhs", mm.in_dtype, s.x), mat_operand(op.rhs, "rhs", mm.in_dtype, s.w),
              mat_operand(op.group_offsets, "offsets", "i32", (off_len,)))
    outputs = (mat_operand(out_name, "out", mm.out_dtype, s.out),
               *(mat_operand(nm, "saved", mm.out_dtype, s.out) for nm in list(op.outputs)[1:]))
    tiles_n = -(-s.n // mm.tiles.tile_n)
    max_tiles = (D.cdiv(s.t, mm.tiles.tile_m) + g) * tiles_n      # CTA tiles (a cluster takes cluster_n of them at once)
    pers = sch.persistent
    auto = pers.num_blocks == "auto"
    cn = mm.cluster.cluster_n
    blocks = (hw.sm_count // cn * cn) if auto else pers.num_blocks
    kname = "grouped_{}_{}_{}x{}x{}_s{}_wg{}_g{}".format(spec.name, mm.in_dtype, mm.tiles.tile_m, mm.tiles.tile_n,
                                                         mm.tiles.tile_k, mm.pipeline.stages, mm.warps.num_consumers,
                                                         g) + (f"_c1x{cn}" if cn > 1 else "")
    nbytes = sum((math.prod(o.shape) * o.itemsize for o in inputs + outputs), 0)
    return GroupedMatmulPlan(
        launch=KernelLaunch(name=spec.name, family="grouped_matmul", kernel_name=kname, backends=tuple(sch.backends),
                            threads=mm.launch.threads, smem_bytes=mm.launch.smem_bytes, num_blocks=blocks,
                            blocks_per_sm=1, kernel_args=args, auto_blocks=auto, cluster_dims=(cn, 1, 1),
                            dynamic_sizes=tuple(dynamic_ranges(op.sizes).values())),
        sizes=dict(op.sizes), constants=dict(op.constants), groups=g, t=s.t, n=s.n, k=s.k,
        in_dtype=mm.in_dtype, out_dtype=mm.out_dtype, transpose_rhs=op.transpose_rhs,
        offsets_name=op.group_offsets, offsets_format=op.offsets_format, offsets_len=off_len,
        inputs=inputs, outputs=outputs, mm=mm, tile_m=mm.tiles.tile_m, tile_n=mm.tiles.tile_n, tile_k=mm.tiles.tile_k,
        tiles_n=tiles_n, tile_order=pers.tile_order, max_tiles=max_tiles, epi_store=mm.staging.epi_store,
        table_bytes=table, producer_regs=mm.warps.producer_regs, consumer_regs=mm.warps.consumer_regs,
        approx_math=mm.approx_math,
        lowering_semantics=mm.lowering_semantics, profile_space=mm.profile_space, profile_dir=mm.profile_dir,
        flops=2 * s.t * s.n * s.k, bytes_moved=nbytes, cluster_n=cn)
