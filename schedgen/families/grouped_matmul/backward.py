"""The grouped_matmul family's backward (issue 19): `out[rows of g] = epilogue(acc)`, `acc = x[rows of g] @ w[g]`
(w[g] as stored, [K, N], or transposed from [N, K]), with upstream gradient `g_out`. The steps are kernels of the
families, as the matmul family's backward (schedgen/families/matmul/backward.py, whose helpers build the epilogue's
derivative and the saved forward here too):

- `acc` (only with `backward.save: recompute` and an epilogue whose derivative reads acc): a grouped matmul
  recomputing acc, in the output's dtype;
- `dacc` (a map kernel): the epilogue's derivative (`autodiff.derive.vjp`) -> gacc [T, N] in the inputs' dtype. Left
  out when the epilogue is `out = acc` and the output has the inputs' dtype: gacc is the upstream gradient;
- `dx`: dx[rows of g] = gacc[rows of g] @ w[g]^T, a grouped matmul (ragged: m) with transpose_rhs flipped: it reads
  w as stored (no copy) and the same group operand. Rows of x in no group get zeros: the forward writes zeros in
  those rows of its output (they do not depend on x), and so does this step, a forward of the family;
- `dw`: dw[g] = x[rows of g]^T @ gacc[rows of g] (w stored [G, K, N]) or gacc[rows of g]^T @ x[rows of g] (w stored
  [G, N, K]), a grouped matmul with `ragged: k` (the reduction runs over each group's rows; a group with no rows
  gets a zero block), f32 accumulation, written in w's dtype.

The group operand is an input of every step that reads rows by group and gets no gradient. What the forward keeps
(`backward.save`) is the matmul family's rule: `acc` by default when the epilogue is nonlinear in it (the forward
writes it as a second output `pre` in the output's dtype), an epilogue temporary, or nothing (`recompute`, or a
linear epilogue).
"""
from __future__ import annotations

from ...autodiff.graph import BackwardGraph, Step
from ...autodiff.spec import fresh, wrt_names
from ...frontend import expr as ex
from ...plan.common import Problems
from ...autodiff.gemm_epilogue import (PRE, Context, Names, base, choose_saving, dacc_step, forward_with_saved,
                                      split_upstream, operand, recompute_step, renamed, sizes)


def grouped_backward(spec, src=None) -> tuple[BackwardGraph | None, Problems]:
    problems = Problems()
    ctx = _context(spec, problems)
    if ctx is None:
        return None, problems
    op, out_name, names, pre = spec.op, ctx.out_name, ctx.names, ctx.pre
    saving = choose_saving(spec, ctx, problems, "grouped matmul")
    if saving is None:
        return None, problems
    saved, kept, derived = saving.saved, saving.kept, saving.derived

    off = op.group_offsets
    notes: list[str] = []
    steps: list[Step] = []
    forward, saved_names, pre_ref = None, (), None
    out_dtype = op.outputs[out_name].dtype
    if saved:
        forward, saved_out = forward_with_saved(spec, out_name, saved[0], pre)
        notes.append(f"saved {saved[0]} (the grouped forward writes it as a second output '{saved_out}' in "
                     f"{out_dtype}, the output's dtype, from registers beside the output"
                     + ("; the default: the epilogue is nonlinear in acc"
                        if spec.backward is None or spec.backward.save is None else "") + ")")
        pre_ref, saved_names = f"out:{saved_out}", (saved_out,)
    elif pre in derived.inputs:
        step = recompute_step(spec, out_name, pre)
        steps.append(Step(step.name, step.spec, {**step.inputs, off: f"in:{off}"}, step.outputs, step.why))
        pre_ref = f"step:acc.{pre}"
        notes.append(f"save: recompute: the backward recomputes acc = {op.lhs}[rows of g] @ {op.rhs}[g] with a "
                     f"grouped matmul (step acc, in {out_dtype}) before the epilogue's derivative")
    else:
        notes.append("saves nothing: the epilogue's derivative reads no forward value (linear in acc)")
    upstream = split_upstream(spec, ctx, derived, notes)     # gacc only: the epilogue reads acc and constants
    derived, gacc_ref = upstream.derived, upstream.gacc_ref
    if ctx.wrt and gacc_ref is None and names.gacc not in derived.zero:
        step = dacc_step(spec, derived, names, pre, pre_ref, kept, out_name, ctx.grad_of, "map")
        if step is None:
            problems.add(("backward",), "the derived epilogue derivative is not a legal body; write save: recompute "
                                        "or report this as a schedgen bug")
            return None, problems
        steps.append(step)
        gacc_ref = f"step:dacc.{names.gacc}"
    if gacc_ref is None:
        notes += [f"{w} gets a zero gradient (the output does not depend on acc)" for w in ctx.wrt]
    else:
        if op.lhs in ctx.wrt:
            steps.append(_dx_step(spec, out_name, names, gacc_ref))
        if op.rhs in ctx.wrt:
            steps.append(_dw_step(spec, out_name, names, gacc_ref))
    notes.append(f"the group operand '{off}' is read by every step that walks rows by group and gets no gradient")
    return BackwardGraph(forward, saved_names, tuple(steps), ctx.wrt, tuple(notes)), problems


def _context(spec, problems: Problems) -> Context | None:
    """What every step needs (the matmul backward's context: the epilogue reads acc and constants only), after the
    checks of what has no backward."""
    op = spec.op
    out_name = next(iter(op.outputs))
    if op.ragged == "k":
        problems.add(("op", "ragged"), "no backward for ragged: k yet (it is itself the weight gradient of a grouped "
                                       "product): remove the backward section, or use ragged: m")
        return None
    if len(op.outputs) > 1:
        problems.add(("op", "outputs"), "the backward of a grouped matmul with a second output is not supported: "
                                        "remove the second output (backward.save keeps a value for the backward)")
        return None
    text = op.epilogue or f"{out_name} = acc"
    try:
        body = ex.parse_body(text, inputs=["acc"], outputs=[out_name], constants=list(op.constants))
    except ex.ExprError as e:
        problems.add(("op", "epilogue"), e.message, (e.line, e.col))
        return None
    wrt = wrt_names(spec, problems, differentiable=[op.lhs, op.rhs])
    if problems:
        return None
    taken = set(op.inputs) | set(op.outputs) | set(op.constants) | set(op.sizes) | {"acc", op.group_offsets}
    taken |= {t for t, _ in body.statements}
    pre = fresh(PRE, taken)
    names = Names(spec, taken, wrt, out_name)
    return Context(out_name, (), body, renamed(text, "acc", pre, (), out_name, list(op.constants)),
                    tuple(t for t, _ in body.statements if t != out_name), wrt, wrt, names, pre,
                    {pre: names.gacc} if wrt else {}, frozenset(taken))


def _grouped(spec, step: str, description: str, inputs: dict, lhs: str, rhs: str, out: tuple[str, dict], *,
             ragged: str, transpose_rhs: bool = False) -> dict:
    """A grouped_matmul step's spec: the forward's groups and group operand (name and layout), the identity
    epilogue, the planner's schedule on the user's backends."""
    op = spec.op
    data = base(spec, step, description)
    data["op"] = {"kind": "grouped_matmul", "ragged": ragged, "groups": op.groups,
                  "sizes": sizes(spec, {**inputs, out[0]: out[1]}), "inputs": inputs,
                  "outputs": {out[0]: out[1]}, "lhs": lhs, "rhs": rhs, "transpose_rhs": transpose_rhs,
                  "group_offsets": op.group_offsets, "offsets_format": op.offsets_format,
                  "epilogue": f"{out[0]} = acc"}
    return data


def _dx_step(spec, out_name: str, names: Names, gacc_ref: str) -> Step:
    """dx[rows of g] = gacc[rows of g] @ w[g]^T: w stored [G, K, N] is [G, N', K'] for the product (transpose_rhs),
    stored [G, N, K] is [G, K', N'] (no transpose)."""
    op = spec.op
    x, w, off = op.lhs, op.rhs, op.group_offsets
    gacc = {"shape": list(op.outputs[out_name].shape), "dtype": op.inputs[x].dtype}
    grad = names.grad[x]
    data = _grouped(spec, "dx", f"the backward of {spec.name}: d{x} = gacc @ {w}[g]^T per group",
                    {names.gacc: gacc, w: operand(spec, w)}, names.gacc, w, (grad, operand(spec, x)),
                    ragged="m", transpose_rhs=not op.transpose_rhs)
    return Step("dx", data, {names.gacc: gacc_ref, w: f"in:{w}", off: f"in:{off}"}, {grad: f"grad:{x}"},
                why=f"d{x}[rows of g] = gacc[rows of g] @ {w}[g]^T (a grouped matmul, transpose_rhs "
                    f"{'off' if op.transpose_rhs else 'on'}: {w} read as stored)")


def _dw_step(spec, out_name: str, names: Names, gacc_ref: str) -> Step:
    """dw[g] = x_g^T @ gacc_g ([G, K, N]) or gacc_g^T @ x_g ([G, N, K]): ragged: k over each group's rows."""
    op = spec.op
    x, w, off = op.lhs, op.rhs, op.group_offsets
    gacc = {"shape": list(op.outputs[out_name].shape), "dtype": op.inputs[x].dtype}
    grad = names.grad[w]
    operands = {x: operand(spec, x), names.gacc: gacc}
    lhs, rhs = (names.gacc, x) if op.transpose_rhs else (x, names.gacc)
    data = _grouped(spec, "dw", f"the backward of {spec.name}: d{w}[g] = {lhs}_g^T @ {rhs}_g over each group's rows",
                    operands, lhs, rhs, (grad, operand(spec, w)), ragged="k")
    lay = "[G, N, K]" if op.transpose_rhs else "[G, K, N]"
    return Step("dw", data, {x: f"in:{x}", names.gacc: gacc_ref, off: f"in:{off}"}, {grad: f"grad:{w}"},
                why=f"d{w}[g] {lay} = {lhs}[rows of g]^T @ {rhs}[rows of g] (a grouped matmul with ragged: k; a "
                    f"group with no rows gets zeros)")
