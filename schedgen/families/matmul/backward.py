"""The matmul family's backward (issue 19): `out = epilogue(acc)`, `acc = A @ B` (per batch, A and B as stored or
transposed), with upstream gradient `g_out`:

- `acc` (only with `backward.save: recompute` and an epilogue whose derivative reads acc): a matmul recomputing
  acc = A @ B, written in the output's dtype (what a saved acc is written in, so both modes give one result);
- `dacc` (a map kernel): the epilogue's derivative (`autodiff.derive.vjp`) -> gacc, the gradient of acc, in the
  inputs' dtype (the next two GEMMs read it), and the epilogue operands' gradients (a broadcast operand's at the
  output's shape in f32, summed back by the runtime). A gradient that is the upstream gradient unchanged is no
  output of it (issue 43): gacc where the output has the inputs' dtype (`out = acc`, `out = acc + r`: the GEMMs read
  grad:out), an operand's where it has the output's shape and dtype (the residual of `out = acc + r`: a graph
  pass-through, the runtime returns the upstream gradient itself). The step is left out when nothing is left;
- `dlhs`: dA = gacc @ B^T and `drhs`: dB = A^T @ gacc, two matmuls of the family reading A, B and gacc as stored
  (the transpose bits say how: no copies), written in the dtype and layout A and B are stored in, f32 accumulation.
  An unbatched rhs of a batched product (a weight shared over the batch) gets one f32 product per batch, summed by
  the runtime.

What the forward keeps (`backward.save`): `acc` (the default when the epilogue's derivative reads it, i.e. the
epilogue is nonlinear in acc: written by the forward kernel as a second output, `pre`, in the output's dtype, as
torch autocast keeps a bf16 pre-activation: half the bytes of f32 to write and read back), an epilogue temporary
(`h` of `h = acc + bias; out = gelu(h)`: that output is `h`), or nothing (`recompute`, or a linear epilogue, whose
derivative needs no forward value).
"""
from __future__ import annotations

from ...autodiff.graph import BackwardGraph, Step
from ...autodiff.spec import fresh, wrt_names
from ...frontend import expr as ex
from ...plan.common import Problems
from .blockscale import block_scale_names
from ...autodiff.gemm_epilogue import (PRE, Context, Names, base, choose_saving, dacc_step, forward_with_saved,
                                      split_upstream, operand, recompute_step, renamed, sizes)
from ...plan.gemm import FP8_DTYPES


def matmul_backward(spec, src=None) -> tuple[BackwardGraph | None, Problems]:
    problems = Problems()
    ctx = _context(spec, problems)
    if ctx is None:
        return None, problems
    op, out_name, names, pre = spec.op, ctx.out_name, ctx.names, ctx.pre
    saving = choose_saving(spec, ctx, problems, "matmul")
    if saving is None:
        return None, problems
    saved, kept, derived = saving.saved, saving.kept, saving.derived

    notes: list[str] = []
    steps: list[Step] = []
    forward, saved_names, pre_ref = None, (), None
    out_dtype = op.outputs[out_name].dtype
    if saved:
        forward, saved_out = forward_with_saved(spec, out_name, saved[0], pre)
        notes.append(f"saved {saved[0]} (the forward writes it as a second output '{saved_out}' in {out_dtype}, the "
                     f"output's dtype" + (", as torch autocast keeps a pre-activation" if saved[0] == "acc" else "")
                     + ("; the default: the epilogue is nonlinear in acc"
                        if spec.backward is None or spec.backward.save is None else "") + ")")
        pre_ref, saved_names = f"out:{saved_out}", (saved_out,)
    elif pre in derived.inputs:
        steps.append(recompute_step(spec, out_name, pre))
        pre_ref = f"step:acc.{pre}"
        notes.append(f"save: recompute: the backward recomputes acc = {op.lhs} @ {op.rhs} with a matmul (step acc, in "
                     f"{out_dtype}) before the epilogue's derivative")
    else:
        notes.append("saves nothing: the epilogue's derivative reads no forward value (linear in acc)")
    notes += [f"{w} gets a zero gradient (the output does not depend on it)"
              for w in ctx.wrt if w in ctx.extras and names.grad[w] in derived.zero]
    upstream = split_upstream(spec, ctx, derived, notes)
    derived, gacc_ref = upstream.derived, upstream.gacc_ref
    if any(g not in derived.zero for g in upstream.grad_of.values()):
        step = dacc_step(spec, derived, names, pre, pre_ref, kept, out_name, upstream.grad_of, "map")
        if step is None:
            problems.add(("backward",), "the derived epilogue derivative is not a legal body; write save: recompute "
                                        "or report this as a schedgen bug")
            return None, problems
        steps.append(step)
        if names.gacc in step.outputs:
            gacc_ref = f"step:dacc.{names.gacc}"
    steps += _matrix_steps(spec, ctx, gacc_ref, notes)
    _dynamic_contraction_note(spec, notes)
    return BackwardGraph(forward, saved_names, tuple(steps), ctx.wrt, tuple(notes),
                         passthrough=upstream.passthrough), problems


def _context(spec, problems: Problems) -> Context | None:
    """What every step needs, after the checks of what has no backward (a second output, fp8, backward.wrt)."""
    op = spec.op
    out_name = next(iter(op.outputs))
    if len(op.outputs) > 1:
        problems.add(("op", "outputs"), "the backward of a matmul with a second output is not supported: remove the "
                                        "second output (backward.save keeps a value for the backward)")
        return None
    if op.inputs[op.lhs].dtype in FP8_DTYPES or op.block_scales is not None:
        problems.add(("backward",), f"no backward for fp8 GEMMs yet (lhs is {op.inputs[op.lhs].dtype}): remove the "
                                    f"backward section, or use bf16 / f16 inputs")
        return None
    scales = block_scale_names(op)
    extras = tuple(n for n in op.inputs if n not in (op.lhs, op.rhs) and n not in scales)
    text = op.epilogue or f"{out_name} = acc"
    try:
        body = ex.parse_body(text, inputs=["acc", *extras], outputs=[out_name], constants=list(op.constants))
    except ex.ExprError as e:
        problems.add(("op", "epilogue"), e.message, (e.line, e.col))
        return None
    wrt = wrt_names(spec, problems, differentiable=[op.lhs, op.rhs, *extras])
    if problems:
        return None
    matrices = tuple(w for w in wrt if w in (op.lhs, op.rhs))
    if op.lhs in wrt and op.transpose_lhs and len(op.outputs[out_name].shape) == 3 and len(op.inputs[op.rhs].shape) == 2:
        problems.add(("op", "transpose_lhs"), "no backward yet for a batched lhs stored [B, K, M] with an unbatched "
                                              "rhs (its gradient would be a product with an unbatched lhs): store lhs "
                                              "[B, M, K], or list only the rhs in backward.wrt")
        return None
    taken = set(op.inputs) | set(op.outputs) | set(op.constants) | set(op.sizes) | {"acc"}
    taken |= {t for t, _ in body.statements}
    pre = fresh(PRE, taken)
    names = Names(spec, taken, wrt, out_name)
    grad_of = {w: names.grad[w] for w in wrt if w in extras}
    if matrices:
        grad_of = {pre: names.gacc, **grad_of}
    return Context(out_name, extras, body, renamed(text, "acc", pre, extras, out_name, list(op.constants)),
                    tuple(t for t, _ in body.statements if t != out_name), wrt, matrices, names, pre, grad_of,
                    frozenset(taken))


def _matrix_steps(spec, ctx: Context, gacc_ref: str | None, notes: list[str]) -> list[Step]:
    op = spec.op
    if gacc_ref is None:
        notes += [f"{w} gets a zero gradient (the output does not depend on acc)" for w in ctx.matrices]
        return []
    steps = []
    if op.lhs in ctx.wrt:
        steps.append(_dlhs_step(spec, ctx.out_name, ctx.names, gacc_ref))
    if op.rhs in ctx.wrt:
        step, note = _drhs_step(spec, ctx.out_name, ctx.names, gacc_ref)
        steps.append(step)
        notes += [note] if note else []
    return steps


# ------------------------------------------------------------------------------------------------ the specs


def _matmul_step(spec, step: str, description: str, lhs: tuple[str, dict], rhs: tuple[str, dict],
                 transpose_lhs: bool, transpose_rhs: bool, out: tuple[str, dict]) -> dict:
    data = base(spec, step, description)
    operands = {lhs[0]: lhs[1], rhs[0]: rhs[1], out[0]: out[1]}
    data["op"] = {"kind": "matmul", "sizes": sizes(spec, operands), "inputs": {lhs[0]: lhs[1], rhs[0]: rhs[1]},
                  "outputs": {out[0]: out[1]}, "lhs": lhs[0], "rhs": rhs[0], "transpose_lhs": transpose_lhs,
                  "transpose_rhs": transpose_rhs, "epilogue": f"{out[0]} = acc"}
    return data


def _dlhs_step(spec, out_name: str, names: Names, gacc_ref: str) -> Step:
    """dA = gacc @ B^T in A's stored layout: [M, K] = gacc [M, N] @ (B as [N, K]); [K, M] = (B as [K, N]) @ gacc^T."""
    op = spec.op
    a, b = op.lhs, op.rhs
    gacc = (names.gacc, {"shape": list(op.outputs[out_name].shape), "dtype": op.inputs[a].dtype})
    grad = (names.grad[a], operand(spec, a))
    if not op.transpose_lhs:
        # rhs = B read as [N, K]: stored [K, N] is that transposed (transpose_rhs), stored [N, K] is it
        data = _matmul_step(spec, "dlhs", f"the backward of {spec.name}: d{a} = gacc @ {b}^T", gacc,
                            (b, operand(spec, b)), False, not op.transpose_rhs, grad)
        why = f"d{a} [M, K] = gacc [M, N] @ {b}^T"
    else:
        # dA^T [K, M] = B_kn @ gacc^T: lhs = B as [K, N] (stored [N, K]: transpose_lhs), rhs = gacc as [N, M]
        data = _matmul_step(spec, "dlhs", f"the backward of {spec.name}: d{a}^T = {b} @ gacc^T",
                            (b, operand(spec, b)), gacc, op.transpose_rhs, True, grad)
        why = f"d{a} stored [K, M] = {b} [K, N] @ gacc^T"
    return Step("dlhs", data, {names.gacc: gacc_ref, b: f"in:{b}"}, {grad[0]: f"grad:{a}"}, why=why)


def _drhs_step(spec, out_name: str, names: Names, gacc_ref: str) -> tuple[Step, str]:
    """dB = A^T @ gacc in B's stored layout: [K, N] = (A as [K, M]) @ gacc; [N, K] = gacc^T @ (A as [M, K])."""
    op = spec.op
    a, b = op.lhs, op.rhs
    out_shape = list(op.outputs[out_name].shape)
    gacc = (names.gacc, {"shape": out_shape, "dtype": op.inputs[a].dtype})
    grad_shape, grad_dtype, note = list(op.inputs[b].shape), op.inputs[b].dtype, ""
    if len(out_shape) == 3 and len(grad_shape) == 2:
        # a weight shared over the batch: one product a batch, in f32, summed over the batch by the runtime
        grad_shape, grad_dtype = [out_shape[0], *grad_shape], "f32"
        note = (f"{b} is shared over the batch: its gradient is one f32 product a batch ({out_shape[0]} x "
                f"{grad_shape[1:]}) summed by the runtime")
    grad = (names.grad[b], {"shape": grad_shape, "dtype": grad_dtype})
    if not op.transpose_rhs:
        # lhs = A read as [K, M]: stored [M, K] is that transposed (transpose_lhs), stored [K, M] is it
        data = _matmul_step(spec, "drhs", f"the backward of {spec.name}: d{b} = {a}^T @ gacc",
                            (a, operand(spec, a)), gacc, not op.transpose_lhs, False, grad)
        why = f"d{b} [K, N] = {a}^T @ gacc [M, N]"
    else:
        # dB^T [N, K] = gacc^T @ A_mk: lhs = gacc as [N, M] (transpose_lhs), rhs = A as [M, K]
        data = _matmul_step(spec, "drhs", f"the backward of {spec.name}: d{b}^T = gacc^T @ {a}", gacc,
                            (a, operand(spec, a)), True, op.transpose_lhs, grad)
        why = f"d{b} stored [N, K] = gacc^T @ {a} [M, K]"
    return Step("drhs", data, {names.gacc: gacc_ref, a: f"in:{a}"}, {grad[0]: f"grad:{b}"}, why=why), note


def _dynamic_contraction_note(spec, notes: list[str]) -> None:
    """A dynamic M is the contraction (K) of the rhs gradient's GEMM: say so (the family takes a dynamic K)."""
    a = spec.op.inputs[spec.op.lhs].shape
    m = a[-1] if spec.op.transpose_lhs else a[-2]
    size = spec.op.sizes.get(m) if isinstance(m, str) else None
    wrt = spec.backward.wrt if spec.backward is not None else None
    if size is not None and not isinstance(size, int) and spec.op.rhs in (wrt or [spec.op.rhs]):
        notes.append(f"{m} is dynamic: it is the contraction length of the {spec.op.rhs} gradient's GEMM (drhs), "
                     f"whose k-loop runs cdiv({m}, tile_k) steps at each call")
