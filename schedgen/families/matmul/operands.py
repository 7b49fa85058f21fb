"""The operand phases of the matmul planner (the shared GEMM ones are schedgen/plan/gemm/operands.py): names, the epilogue, the problem's dims, dtypes, ranks, batch and extra
operands, the operand records and the epilogue's code trees."""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ...frontend import expr as ex
from ...plan.common import (
    Problems,
    dynamic_ranges,
    resolve_shape,
    size_values,
)
from ...plan.hardware import for_target
from ...plan.legality import (
    check_reserved_names,
    check_unique_names,
)
from ...plan import dims as D
from ...plan.exprs import PlanExpr
from .blockscale import block_scale_names, block_scale_operand, check_block_scale_names
from ...plan.gemm import (FP8_DTYPES, MMA_DTYPES, OUT_DTYPES, Dims, EpilogueCode, MatOperand, broadcast_kind,
                          check_operand_roles, mat_operand)

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile


def check_names(spec: SpecFile, problems: Problems) -> tuple[str, tuple[str, ...]]:
    """One namespace, no reserved names, lhs / rhs among the inputs. Returns the output's name and the inputs the
    epilogue reads (neither lhs nor rhs)."""
    op = spec.op
    check_unique_names((("sizes", op.sizes), ("constants", op.constants), ("inputs", op.inputs),
                        ("outputs", op.outputs)), problems)
    for nm in list(op.outputs) + list(op.constants):
        if nm == "acc":   # the epilogue reads the accumulator as `acc`
            problems.add(("op", "outputs" if nm in op.outputs else "constants", nm),
                         f"'{nm}' is reserved (the accumulator); choose another name")
    check_reserved_names(spec, problems)
    check_operand_roles(op, problems)
    check_block_scale_names(op, problems)
    out_name = next(iter(op.outputs))
    scales = block_scale_names(op)        # block scales are read by the k-loop, never by the epilogue
    return out_name, tuple(nm for nm in op.inputs if nm not in (op.lhs, op.rhs) and nm not in scales)


def parse_epilogue(op, out_name: str, extras: tuple[str, ...], problems: Problems):
    """op.epilogue parsed over acc, the epilogue operands and the constants (None where it does not parse); every
    epilogue operand must be read by it."""
    body = None
    text = op.epilogue or f"{out_name} = acc"
    saved = saved_outputs(op)
    if saved and op.epilogue is None:
        problems.add(("op", "outputs", saved[0]), f"a second output '{saved[0]}' needs an epilogue that assigns it "
                                                  f"(e.g. '{out_name} = gelu(acc); {saved[0]} = acc'): write "
                                                  f"op.epilogue, or remove the output")
        return None
    try:
        body = ex.parse_body(text, inputs=["acc", *extras], outputs=[out_name, *saved], constants=list(op.constants))
    except ex.ExprError as err:
        problems.add(("op", "epilogue"), err.message, (err.line, err.col))
    for nm in extras:
        if body is not None and not any(nm in _names(v) for _, v in body.statements):
            problems.add(("op", "inputs", nm), f"input '{nm}' is neither lhs, rhs nor read by op.epilogue; "
                                               f"use it in the epilogue or remove it")
    return body


def saved_outputs(op) -> tuple[str, ...]:
    """The outputs after the first: values the epilogue computes on the way, kept for a backward pass (written from
    the same tile as the output, in its shape and dtype)."""
    return tuple(op.outputs)[1:]


def check_saved_outputs(op, out_name: str, shapes: dict, problems: Problems, ranges=None) -> None:
    """A second output has the first one's shape and dtype (both backends write it from the tile the output is
    written from: the Pallas kernel through the output's SMEM chunks, the CUDA kernel by pair stores from registers,
    which need an even N)."""
    out = op.outputs[out_name]
    for nm in saved_outputs(op):
        o = op.outputs[nm]
        if list(o.shape) != list(out.shape):
            problems.add(("op", "outputs", nm, "shape"), f"the second output '{nm}' must have the output's shape "
                                                         f"{list(out.shape)}, got {list(o.shape)}")
        if o.dtype != out.dtype:
            problems.add(("op", "outputs", nm, "dtype"), f"the second output '{nm}' must have the output's dtype "
                                                         f"{out.dtype}, got {o.dtype} (it is written through the "
                                                         f"output's SMEM chunks)")
        n = shapes[out_name][-1] if shapes.get(out_name) else None
        if n is not None and not D.divisible(n, 2, ranges or {}):
            problems.add(("op", "outputs", nm), f"a second output needs an even N (the CUDA kernel stores it two "
                                                f"columns a thread from registers); N = {n}"
                                                + ("" if isinstance(n, int) else ": declare multiple_of: 2"))


def problem_dims(op, out_name: str, extras: tuple[str, ...], problems: Problems, target: str = "sm_90a") -> Dims | None:
    """Shapes, dtypes, M / N / K and the batch; None (the problems said why) where the later phases cannot run."""
    before = len(problems)
    sizes = size_values(op.sizes)      # a dynamic size is the extent size(name): shapes and M, N, K may be Dims
    shapes = {nm: resolve_shape(o.shape, sizes, ("op", "inputs", nm, "shape"), problems) for nm, o in op.inputs.items()}
    shapes[out_name] = resolve_shape(op.outputs[out_name].shape, sizes, ("op", "outputs", out_name, "shape"), problems)
    if len(problems) != before:
        return None
    check_dtypes(op, out_name, problems, target)
    check_ranks(op, out_name, shapes, problems)
    check_saved_outputs(op, out_name, shapes, problems, dynamic_ranges(op.sizes))
    if len(problems) != before:
        return None
    a_shape, b_shape, o_shape = shapes[op.lhs], shapes[op.rhs], shapes[out_name]
    m, n, k = contraction(op, a_shape, b_shape, problems)
    batch = check_batch(op, out_name, a_shape, b_shape, o_shape, m, n, problems)
    extra_ops = tuple(extra_operand(op, nm, shapes[nm], batch, m, n, problems) if nm in extras else
                      block_scale_operand(op, nm, shapes[nm], m, n, k, problems)
                      for nm in op.inputs if nm not in (op.lhs, op.rhs) and (nm in extras or nm in block_scale_names(op)))
    if len(problems) != before:
        return None
    return Dims(a_shape, b_shape, o_shape, op.inputs[op.lhs].dtype, op.outputs[out_name].dtype, m, n, k, batch,
                dynamic_ranges(op.sizes), len(a_shape) == 3, len(b_shape) == 3, extra_ops)


def check_dtypes(op, out_name: str, problems: Problems, target: str = "sm_90a") -> None:
    """lhs and rhs: one MMA input type; the output: one the epilogue stores."""
    in_dtype = op.inputs[op.lhs].dtype
    for role, nm in (("lhs", op.lhs), ("rhs", op.rhs)):
        dt = op.inputs[nm].dtype
        if dt not in MMA_DTYPES:
            problems.add(("op", "inputs", nm, "dtype"),
                         f"{role} dtype {dt} is not supported by this family yet; legal: {', '.join(MMA_DTYPES)} "
                         f"(f32 accumulation)")
    if op.inputs[op.rhs].dtype != in_dtype:
        problems.add(("op", "inputs", op.rhs, "dtype"), f"lhs is {in_dtype} but rhs is {op.inputs[op.rhs].dtype}; "
                                                       f"{for_target(target).mma_instruction} takes one input "
                                                       f"type: make them equal"
                     + (" (convert the 16-bit operand to fp8 with a scale, or the fp8 one to bf16)"
                        if (in_dtype in FP8_DTYPES) != (op.inputs[op.rhs].dtype in FP8_DTYPES) else ""))
    if in_dtype in FP8_DTYPES:
        check_fp8_layout(op, problems, target)
    out_dtype = op.outputs[out_name].dtype
    if out_dtype not in OUT_DTYPES:
        problems.add(("op", "outputs", out_name, "dtype"), f"output dtype {out_dtype} is not supported; legal: "
                                                            f"{', '.join(OUT_DTYPES)}")


# why fp8 operands are read K-major only, per MMA generation (Hardware.mma)
FP8_K_MAJOR_WHY = {
    "wgmma": "fp8 wgmma reads {} K-major only (no transpose for 8-bit inputs)",
    "tcgen05": "the sm_100a kernel's fp8 tcgen05.mma (kind::f8f6f4) reads {} K-major only (its SMEM descriptors are "
               "rendered for K-major 8-bit operands only)",
}


def check_fp8_layout(op, problems: Problems, target: str = "sm_90a") -> None:
    """Both fp8 operands K-major in SMEM: lhs [M, K], rhs [N, K]. On sm_90a 8-bit wgmma has no transpose operands
    for e4m3 / e5m2 (and there is no 8-bit SMEM transpose on the way); the sm_100a kernel keeps the same rule (its
    kind::f8f6f4 descriptors are K-major), each message naming its target's instruction."""
    mma = for_target(target).mma
    why = FP8_K_MAJOR_WHY[mma]
    # tcgen05: its planner (schedgen/plan/gemm/sm100.py) refuses transpose_lhs for every input type (one error at the
    # field, not two)
    if op.transpose_lhs and mma != "tcgen05":
        problems.add(("op", "transpose_lhs"),
                     f"{why.format('lhs')}: store lhs [M, K] and remove transpose_lhs (transpose it beforehand, e.g. "
                     f"a.T.contiguous())")
    if not op.transpose_rhs:
        problems.add(("op", "transpose_rhs"),
                     f"{why.format('rhs')}: store rhs [N, K] (torch.nn.Linear's weight layout, what torch._scaled_mm "
                     f"takes as b.T) with shape [N, K] and write transpose_rhs: true (a [K, N] rhs: b.T.contiguous() "
                     f"first)")


def check_ranks(op, out_name: str, shapes: dict, problems: Problems) -> None:
    for role, nm in (("lhs", op.lhs), ("rhs", op.rhs)):
        if len(shapes[nm]) not in (2, 3):
            problems.add(("op", "inputs", nm, "shape"), f"{role} must be 2-D, or 3-D with a leading batch dimension; "
                                                       f"got {len(shapes[nm])} dimensions")
    if len(shapes[out_name]) not in (2, 3):
        problems.add(("op", "outputs", out_name, "shape"), "the output must be [M, N] or [B, M, N]")


def contraction(op, a_shape: tuple[int, ...], b_shape: tuple[int, ...], problems: Problems) -> tuple[int, int, int]:
    """M, N, K from lhs and rhs as stored (op.transpose_lhs / op.transpose_rhs); their K must agree."""
    m, ka = (a_shape[-1], a_shape[-2]) if op.transpose_lhs else (a_shape[-2], a_shape[-1])
    kb, n = (b_shape[-1], b_shape[-2]) if op.transpose_rhs else (b_shape[-2], b_shape[-1])
    a_lay = "[K, M]" if op.transpose_lhs else "[M, K]"
    b_lay = "[N, K]" if op.transpose_rhs else "[K, N]"
    if ka != kb:
        problems.add(("op", "inputs", op.rhs, "shape"),
                     f"contraction sizes differ: lhs {a_lay} = {list(a_shape[-2:])} has K = {ka}, rhs {b_lay} = "
                     f"{list(b_shape[-2:])} has K = {kb}" + ("" if op.transpose_rhs else
                                                           " (set op.transpose_rhs: true if rhs is stored [N, K])"))
    return m, n, ka


def check_batch(op, out_name: str, a_shape, b_shape, o_shape, m: int, n: int, problems: Problems) -> int:
    """The output is [M, N] or [B, M, N]; a batched operand needs a batched output of its batch. Returns B."""
    batch = o_shape[0] if len(o_shape) == 3 else 1
    lhs_batched, rhs_batched = len(a_shape) == 3, len(b_shape) == 3
    if tuple(o_shape[-2:]) != (m, n):
        problems.add(("op", "outputs", out_name, "shape"), f"the output must be [M, N] = [{m}, {n}], got {list(o_shape)}")
    if len(o_shape) == 2 and (lhs_batched or rhs_batched):
        problems.add(("op", "outputs", out_name, "shape"), "a batched lhs or rhs needs a batched output [B, M, N]")
    for role, nm, shp in (("lhs", op.lhs, a_shape), ("rhs", op.rhs, b_shape)):
        if len(shp) == 3 and shp[0] != batch:
            problems.add(("op", "inputs", nm, "shape", 0), f"{role} batch is {shp[0]} but the output's is {batch}")
    if len(o_shape) == 3 and not lhs_batched:
        problems.add(("op", "inputs", op.lhs, "shape"), "a batched output needs a batched lhs [B, M, K]")
    return batch


def extra_operand(op, nm: str, shape: tuple[int, ...], batch: int, m: int, n: int, problems: Problems) -> MatOperand:
    """An epilogue operand: a row, a column or a full (batched) output-shaped array of a float dtype."""
    kind = broadcast_kind(shape, batch, m, n)
    if kind is None:
        col_hint = (" (a 1-D [M] broadcasts along the rows under numpy's rules, as a row would: write a per-row "
                    "column as [M, 1])" if tuple(shape) == (m,) else "")
        problems.add(("op", "inputs", nm, "shape"),
                     f"epilogue operand shape {list(shape)} is not one the epilogue reads: a scalar [1] (a per-tensor "
                     f"scale), a row [N] = [{n}], a column [M, 1] = [{m}, 1], or a full [M, N] = [{m}, {n}]"
                     + ("" if batch == 1 else " or [B, M, N]") + col_hint)
        kind = "row"
    dt = op.inputs[nm].dtype
    if dt not in ("bf16", "f16", "f32"):
        problems.add(("op", "inputs", nm, "dtype"), f"epilogue operands are bf16, f16 or f32, got {dt}")
    return mat_operand(nm, "extra", dt, shape, kind)


def epilogue_code(op, body, out_name: str, extras: tuple[str, ...]) -> EpilogueCode:
    """The epilogue's validated statements and the role of every name in them (the templates spell the roles)."""
    roles = {"acc": "accumulator", **{nm: "operand" for nm in extras}, **{c: "constant" for c in op.constants}}
    # a second output is spelled as a temporary (it is read like one); the templates store it from that name
    roles.update({target: "output" if target == out_name else "temporary" for target, _ in body.statements})
    statements = tuple((target, PlanExpr(value)) for target, value in body.statements)
    tree = body.statements[0][1].tree
    while isinstance(tree, ast.UnaryOp) and isinstance(tree.op, ast.UAdd):   # `out = +acc` is a plain store too
        tree = tree.operand
    identity = len(statements) == 1 and isinstance(tree, ast.Name) and tree.id == "acc"
    return EpilogueCode(statements, roles, identity)


def mat_operands(op, out_name: str, dims: Dims) -> tuple[tuple[MatOperand, ...], tuple[MatOperand, ...]]:
    """The inputs in op.inputs order (lhs, rhs and the epilogue operands) and the output."""
    inputs = []
    for nm in op.inputs:
        if nm == op.lhs:
            inputs.append(mat_operand(nm, "lhs", dims.in_dtype, dims.a_shape))
        elif nm == op.rhs:
            inputs.append(mat_operand(nm, "rhs", dims.in_dtype, dims.b_shape))
        else:
            inputs.append(next(e for e in dims.extra_ops if e.name == nm))
    saved = tuple(mat_operand(nm, "saved", dims.out_dtype, dims.o_shape) for nm in saved_outputs(op))
    return tuple(inputs), (mat_operand(out_name, "out", dims.out_dtype, dims.o_shape), *saved)


def _names(expr) -> frozenset[str]:
    return expr.names
