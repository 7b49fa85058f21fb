"""The grouped_matmul family with `ragged: k`: the groups split the contraction, `out[g] = epilogue(x[rows of g]^T @
w[rows of g])` with x [T, M], w [T, N] and out [G, M, N] (a transposed ragged dot: the weight gradient of a grouped
product, dW[g] = x_g^T @ dY_g).

The tile space is static: G x cdiv(M, tile_m) x cdiv(N, tile_n) tiles, group-major, each tile's k-loop running
over the tile_k-row blocks that hold the group's rows, from start(g) // tile_k to cdiv(end(g), tile_k) (none for
an empty group, whose block gets epilogue(0): zeros for the identity epilogue). The first and the last of those
blocks hold rows of the neighbouring groups (or rows in no group): the consumers zero those rows of both operands
in the stage before its wgmma, so nothing outside the group (not even a NaN) reaches the sum. Loads are the matmul
family's transposed-lhs GEMM (x M-major [T, M] as A, w N-major [T, N] as B, 2-D tensor maps over T rows); stores
are whole tiles into the group's block through a 3-D tensor map over [G, M, N] (TMA clips the M and N edges).

The product of one group is planned by the matmul family (its planner, of x [T, M]^T @ w [T, N] -> [M, N], a
dynamic contraction), as for `ragged: m`; what is specific to the ragged contraction is here.
"""
from __future__ import annotations

from ...frontend.model import ITEMSIZE, Operand
from ...plan import dims as D
from ...plan.common import KernelArg, Problems, dynamic_ranges, resolve_shape, size_values
from ...plan.hardware import Hardware
from ...plan.launch import KernelLaunch
from ...plan.gemm import MatmulPlan, mat_operand, tensor_map
from ...registry import get as family
from .plan import (STEP_KIND, GroupedMatmulPlan, Shapes, check_names, check_pallas, check_schedule,
                   plan_grouped_matmul, plan_step, step_spec_of, table_bytes)

# the operand layouts, as the messages name them
X_LAY, W_LAY, OUT_LAY = "[T, M]", "[T, N]", "[G, M, N]"


def plan_grouped(spec, hw: Hardware) -> tuple[GroupedMatmulPlan | None, Problems]:
    """The family's planner (the manifest's `plan`): by op.ragged, the grouped contraction here or the grouped rows
    (`plan.plan_grouped_matmul`, which this module builds on)."""
    return plan_ragged_k(spec, hw) if spec.op.ragged == "k" else plan_grouped_matmul(spec, hw)


def plan_ragged_k(spec, hw: Hardware) -> tuple[GroupedMatmulPlan | None, Problems]:
    problems = Problems()
    op, sch = spec.op, spec.schedule
    out_name = next(iter(op.outputs))
    check_names(spec, out_name, problems)
    if op.transpose_rhs:
        problems.add(("op", "transpose_rhs"), "with ragged: k both operands are stored with the group's rows "
                                              "leading (x [T, M], w [T, N]); remove transpose_rhs (for an output "
                                              "[G, N, M], swap lhs and rhs)")
    if len(op.outputs) > 1:
        problems.add(("op", "outputs"), f"with ragged: k the product has one output {OUT_LAY}, got "
                                        f"{len(op.outputs)}: remove '{list(op.outputs)[1]}'")
    if problems and (op.lhs not in op.inputs or op.rhs not in op.inputs):
        return None, problems
    shapes = shapes_k(op, out_name, problems)
    if shapes is None or problems:
        return None, problems
    mm = plan_step(spec, out_name, problems, hw, step_spec_of(spec, out_name, step_op_k(op, out_name)))
    check_schedule(op, sch, out_name, problems)
    if mm is None:
        return None, problems
    table = table_bytes(op, mm, hw, problems)
    if "pallas" in sch.backends:
        check_pallas(spec, shapes.t, mm, (("M", shapes.k, mm.tiles.tile_m), ("N", shapes.n, mm.tiles.tile_n)), problems)
    if problems:
        return None, problems
    return record_k(spec, out_name, shapes, mm, table, kernel_args_k(op, shapes, mm), hw), problems


def shapes_k(op, out_name: str, problems: Problems) -> Shapes | None:
    """x [T, M], w [T, N] (one T), out [G, M, N] with G = op.groups, M and N fixed; None where it cannot be planned."""
    before = len(problems)
    sizes = size_values(op.sizes)
    x = resolve_shape(op.inputs[op.lhs].shape, sizes, ("op", "inputs", op.lhs, "shape"), problems)
    w = resolve_shape(op.inputs[op.rhs].shape, sizes, ("op", "inputs", op.rhs, "shape"), problems)
    out = resolve_shape(op.outputs[out_name].shape, sizes, ("op", "outputs", out_name, "shape"), problems)
    if len(problems) != before:
        return None
    for nm, got, want, lay in ((op.lhs, x, 2, X_LAY), (op.rhs, w, 2, W_LAY)):
        if len(got) != want:
            problems.add(("op", "inputs", nm, "shape"), f"with ragged: k the operand is 2-D {lay} (every group's "
                                                        f"rows, sorted by group); got {len(got)} dimensions")
    if len(out) != 3:
        problems.add(("op", "outputs", out_name, "shape"), f"with ragged: k the output is 3-D {OUT_LAY}, one block "
                                                           f"per group; got {len(out)} dimensions")
    if len(problems) != before:
        return None
    if x[0] != w[0]:
        problems.add(("op", "inputs", op.rhs, "shape", 0), f"the contraction runs over the rows of both operands: "
                                                           f"{op.lhs} has T = {x[0]}, {op.rhs} has {w[0]}")
    g_dim = op.outputs[out_name].shape[0]
    if isinstance(out[0], D.Dim):
        problems.add(("op", "sizes", g_dim), f"the group count is fixed (op.groups = {op.groups}); give "
                                             f"'{g_dim}' the value {op.groups}")
    elif out[0] != op.groups:
        problems.add(("op", "outputs", out_name, "shape", 0), f"the output holds {out[0]} groups but op.groups is "
                                                              f"{op.groups}; the leading dimension is G")
    for i, (got, want, what) in enumerate(zip(out[1:], (x[1], w[1]), (f"M ({op.lhs}'s columns)",
                                                                       f"N ({op.rhs}'s columns)"))):
        if got != want:
            problems.add(("op", "outputs", out_name, "shape", i + 1),
                         f"the output is {OUT_LAY}: dimension {i + 1} must be {what} = {want}, got {got}")
    for nm, d, which in (("M", x[1], op.lhs), ("N", w[1], op.rhs)):
        if isinstance(d, D.Dim):
            problems.add(("op", "inputs", which, "shape", 1), f"{nm} is dynamic; with ragged: k only T (the rows, "
                                                              f"the contraction) is known at the call only")
    if len(problems) != before:
        return None
    return Shapes(x[0], w[1], x[1], tuple(x), tuple(w), tuple(out))


def step_op_k(op, out_name: str):
    """One group's product as a matmul op: x [T, M] read transposed (the matmul's transpose_lhs) @ w [T, N] ->
    [M, N]."""
    o = op.outputs[out_name]
    return family(STEP_KIND).op_model(kind=STEP_KIND, sizes=dict(op.sizes), constants=dict(op.constants),
                    inputs={op.lhs: op.inputs[op.lhs], op.rhs: op.inputs[op.rhs]},
                    outputs={out_name: Operand(shape=list(o.shape[1:]), dtype=o.dtype)}, lhs=op.lhs, rhs=op.rhs,
                    transpose_lhs=True, epilogue=op.epilogue)


def kernel_args_k(op, s: Shapes, mm: MatmulPlan) -> tuple[KernelArg, ...]:
    """x's and w's 2-D tensor maps (the matmul's), the output's 3-D one (a group a box; TMA stores) or its pointer
    (direct stores), the group operand's pointer, one i32 per dynamic size."""
    args = [mm.launch.kernel_args[0], mm.launch.kernel_args[1]]
    out_i, off_i = 3, 2
    if mm.staging.epi_store != "direct":
        o = mm.launch.kernel_args[2]
        args.append(tensor_map(out_i, s.out, mm.out_dtype, o.box[-2], o.box[-1], o.swizzle))
    args += [KernelArg("ptr", out_i), KernelArg("ptr", off_i)]
    args += [KernelArg("i32", -1, value=D.size(nm)) for nm, v in op.sizes.items() if not isinstance(v, int)]
    return tuple(args)


def record_k(spec, out_name: str, s: Shapes, mm: MatmulPlan, table: int, args, hw: Hardware) -> GroupedMatmulPlan:
    op, sch = spec.op, spec.schedule
    g = op.groups
    off_len = g + 1 if op.offsets_format == "offsets" else g
    inputs = (mat_operand(op.lhs, "lhs", mm.in_dtype, s.x), mat_operand(op.rhs, "rhs", mm.in_dtype, s.w),
              mat_operand(op.group_offsets, "offsets", "i32", (off_len,)))
    outputs = (mat_operand(out_name, "out", mm.out_dtype, s.out),)
    tiles_m, tiles_n = -(-s.k // mm.tiles.tile_m), -(-s.n // mm.tiles.tile_n)
    pers = sch.persistent
    auto = pers.num_blocks == "auto"
    kname = "grouped_k_{}_{}_{}x{}x{}_s{}_wg{}_g{}".format(spec.name, mm.in_dtype, mm.tiles.tile_m, mm.tiles.tile_n,
                                                           mm.tiles.tile_k, mm.pipeline.stages, mm.warps.num_consumers, g)
    nbytes = s.t * (s.k + s.n) * ITEMSIZE[mm.in_dtype] + g * s.k * s.n * ITEMSIZE[mm.out_dtype] + 4 * off_len
    return GroupedMatmulPlan(
        launch=KernelLaunch(name=spec.name, family="grouped_matmul", kernel_name=kname, backends=tuple(sch.backends),
                            threads=mm.launch.threads, smem_bytes=mm.launch.smem_bytes,
                            num_blocks=hw.sm_count if auto else pers.num_blocks, blocks_per_sm=1, kernel_args=args,
                            auto_blocks=auto, dynamic_sizes=tuple(dynamic_ranges(op.sizes).values())),
        sizes=dict(op.sizes), constants=dict(op.constants), groups=g, t=s.t, n=s.n, k=s.t,
        in_dtype=mm.in_dtype, out_dtype=mm.out_dtype, transpose_rhs=False,
        offsets_name=op.group_offsets, offsets_format=op.offsets_format, offsets_len=off_len,
        inputs=inputs, outputs=outputs, mm=mm, tile_m=mm.tiles.tile_m, tile_n=mm.tiles.tile_n, tile_k=mm.tiles.tile_k,
        tiles_n=tiles_n, tile_order=pers.tile_order, max_tiles=g * tiles_m * tiles_n, epi_store=mm.staging.epi_store,
        table_bytes=table, producer_regs=mm.warps.producer_regs,
        consumer_regs=mm.warps.consumer_regs, approx_math=mm.approx_math,
        lowering_semantics=mm.lowering_semantics, profile_space=mm.profile_space, profile_dir=mm.profile_dir,
        flops=2 * s.t * s.k * s.n, bytes_moved=nbytes, ragged="k", m=s.k)
