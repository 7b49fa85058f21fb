"""The matmul family's backward (issue 19): `out = epilogue(acc)`, `acc = A @ B` (per batch, A and B as stored or
transposed), with upstream gradient `g_out`:

- `acc` (only with `backward.save: recompute` and an epilogue whose derivative reads acc): a matmul recomputing
  acc = A @ B, written in the output's dtype (what a saved acc is written in, so both modes give one result);
- `dacc` (a map kernel): the epilogue's derivative (`autodiff.derive.vjp`) -> gacc, the gradient of acc, in the
  inputs' dtype (the next two GEMMs read it), and the epilogue operands' gradients (a broadcast operand's at the
  output's shape in f32, summed back by the runtime). Left out when the epilogue is `out = acc` and the output has
  the inputs' dtype: gacc is then the upstream gradient itself;
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

import ast
from dataclasses import dataclass

from ...autodiff import derive
from ...autodiff.graph import BackwardGraph, Step
from ...autodiff.spec import fresh, save_names, written, wrt_names
from ...frontend import expr as ex
from ...plan.common import Problems
from .blockscale import block_scale_names
from .records import FP8_DTYPES

PRE = "pre"          # the name acc is kept or recomputed as (acc itself is the epilogue's reserved name)


def matmul_backward(spec, src=None) -> tuple[BackwardGraph | None, Problems]:
    problems = Problems()
    ctx = _context(spec, problems)
    if ctx is None:
        return None, problems
    op, out_name, names, pre = spec.op, ctx.out_name, ctx.names, ctx.pre
    # the derivative keeping nothing: does it read acc (the epilogue is nonlinear in acc)? then keep acc by default
    nonlinear = pre in derive.vjp(ctx.renamed, wrt=ctx.grad_of, cotangents={out_name: names.g_out}).inputs
    saved = save_names(spec, problems, ["acc", *ctx.temporaries], default=("acc",) if nonlinear else ())
    if len(saved) > 1:
        problems.add(("backward", "save"), f"the matmul forward keeps one value for the backward, not "
                                           f"{len(saved)} ({', '.join(saved)}): list one")
    if problems:
        return None, problems
    kept = [pre if s == "acc" else s for s in saved]
    derived = derive.vjp(ctx.renamed, wrt=ctx.grad_of, cotangents={out_name: names.g_out},
                         saved=[s for s in kept if s != pre])
    if saved and saved[0] != "acc" and pre in derived.inputs:
        problems.add(("backward", "save", 0), f"the epilogue's derivative also reads acc, which save: [{saved[0]}] "
                                              f"does not keep: write save: [acc], or save: recompute")
        return None, problems

    notes: list[str] = []
    steps: list[Step] = []
    forward, saved_names, pre_ref = None, (), None
    out_dtype = op.outputs[out_name].dtype
    if saved:
        forward, saved_out = _forward_with_saved(spec, out_name, saved[0], pre)
        notes.append(f"saved {saved[0]} (the forward writes it as a second output '{saved_out}' in {out_dtype}, the "
                     f"output's dtype" + (", as torch autocast keeps a pre-activation" if saved[0] == "acc" else "")
                     + ("; the default: the epilogue is nonlinear in acc"
                        if spec.backward is None or spec.backward.save is None else "") + ")")
        pre_ref, saved_names = f"out:{saved_out}", (saved_out,)
    elif pre in derived.inputs:
        steps.append(_recompute_step(spec, out_name, pre))
        pre_ref = f"step:acc.{pre}"
        notes.append(f"save: recompute: the backward recomputes acc = {op.lhs} @ {op.rhs} with a matmul (step acc, in "
                     f"{out_dtype}) before the epilogue's derivative")
    else:
        notes.append("saves nothing: the epilogue's derivative reads no forward value (linear in acc)")
    notes += [f"{w} gets a zero gradient (the output does not depend on it)"
              for w in ctx.wrt if w in ctx.extras and names.grad[w] in derived.zero]
    gacc_ref = _gacc_from_upstream(ctx, derived, notes)
    if gacc_ref is None and any(g not in derived.zero for g in ctx.grad_of.values()):
        step = _dacc_step(spec, derived, names, pre, pre_ref, kept, out_name, ctx.grad_of)
        if step is None:
            problems.add(("backward",), "the derived epilogue derivative is not a legal body; write save: recompute "
                                        "or report this as a schedgen bug")
            return None, problems
        steps.append(step)
        if names.gacc in step.outputs:
            gacc_ref = f"step:dacc.{names.gacc}"
    steps += _matrix_steps(spec, ctx, gacc_ref, notes)
    _dynamic_contraction_note(spec, notes)
    return BackwardGraph(forward, saved_names, tuple(steps), ctx.wrt, tuple(notes)), problems


@dataclass(frozen=True)
class _Context:
    out_name: str
    extras: tuple[str, ...]          # the epilogue operands
    body: ex.Body                    # the epilogue as written
    renamed: ex.Body                 # ... reading acc as `pre` (a map input: no input may be named acc)
    temporaries: tuple[str, ...]
    wrt: tuple[str, ...]
    matrices: tuple[str, ...]        # lhs / rhs among wrt
    names: "_Names"
    pre: str
    grad_of: dict                    # derive's wrt: pre -> gacc (when a matrix gets a gradient), operand -> grad_<op>


def _context(spec, problems: Problems) -> _Context | None:
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
    names = _Names(spec, taken, wrt, out_name)
    grad_of = {w: names.grad[w] for w in wrt if w in extras}
    if matrices:
        grad_of = {pre: names.gacc, **grad_of}
    return _Context(out_name, extras, body, _renamed(text, "acc", pre, extras, out_name, list(op.constants)),
                    tuple(t for t, _ in body.statements if t != out_name), wrt, matrices, names, pre, grad_of)


def _gacc_from_upstream(ctx: _Context, derived, notes: list[str]) -> str | None:
    """gacc is the upstream gradient itself when the epilogue is `out = acc` and the output has the inputs' dtype
    (no dacc step): its reference, else None."""
    op_out_dtype, in_dtype = ctx.names.out_dtype, ctx.names.in_dtype
    if not ctx.matrices or ctx.names.gacc in derived.zero or not _identity(ctx.body) or op_out_dtype != in_dtype \
            or any(w in ctx.extras for w in ctx.wrt):
        return None
    notes.append(f"the epilogue is {ctx.out_name} = acc: gacc is the upstream gradient itself (no dacc step)")
    return f"grad:{ctx.out_name}"


def _matrix_steps(spec, ctx: _Context, gacc_ref: str | None, notes: list[str]) -> list[Step]:
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


# ------------------------------------------------------------------------------------------------ names


class _Names:
    """The step-local names: gradients, the upstream gradient, gacc (none collides with a forward name)."""

    def __init__(self, spec, taken: set[str], wrt, out_name: str):
        self.in_dtype = spec.op.inputs[spec.op.lhs].dtype
        self.out_dtype = spec.op.outputs[out_name].dtype
        self.grad = {w: fresh(f"grad_{w}", taken) for w in wrt}
        self.g_out = fresh(f"g_{out_name}", taken)
        self.gacc = fresh("gacc", taken)


def _renamed(text: str, old: str, new: str, extras, out_name: str, constants) -> ex.Body:
    """The epilogue (validated) with the name `old` read as `new` (the accumulator as a map input: no input may be
    named `acc`)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == old:
            node.id = new
    return ex.parse_body(ast.unparse(tree), inputs=[new, *extras], outputs=[out_name], constants=constants)


def _identity(body) -> bool:
    if len(body.statements) != 1:
        return False
    tree = body.statements[0][1].tree
    while isinstance(tree, ast.UnaryOp) and isinstance(tree.op, ast.UAdd):
        tree = tree.operand
    return isinstance(tree, ast.Name) and tree.id == "acc"


# ------------------------------------------------------------------------------------------------ the specs


def _base(spec, step: str, description: str) -> dict:
    """A step spec's frame: its name, description and the backends the user chose (the planner picks the rest)."""
    data = written(spec)
    backends = data.get("schedule", {}).get("backends")
    return {"name": f"{spec.name}_{step}", "description": description,
            "schedule": {"backends": backends} if backends else {}}


def _sizes(spec, operands: dict) -> dict:
    """The forward's sizes that the step's shapes name (a size no shape names is an error in any spec)."""
    used = {d for o in operands.values() for d in o["shape"] if isinstance(d, str)}
    sizes = written(spec)["op"].get("sizes", {})
    return {k: v for k, v in sizes.items() if k in used}


def _operand(spec, name: str) -> dict:
    o = spec.op.inputs.get(name) or spec.op.outputs[name]
    return {"shape": list(o.shape), "dtype": o.dtype}


def _forward_with_saved(spec, out_name: str, saved: str, pre: str) -> tuple[dict, str]:
    """The forward spec with the kept value a second output (the output's shape and dtype): acc as `pre` (a
    statement `pre = acc` appended to the epilogue), or an epilogue temporary under its own name."""
    data = written(spec)
    data.pop("backward", None)
    data.pop("tune", None)
    op = data["op"]
    name = pre if saved == "acc" else saved
    op["outputs"][name] = dict(op["outputs"][out_name])
    text = spec.op.epilogue or f"{out_name} = acc"
    if saved == "acc":
        text = text.rstrip() + f"\n{pre} = acc"
    op["epilogue"] = text
    return data, name


def _recompute_step(spec, out_name: str, pre: str) -> Step:
    """acc = lhs @ rhs again (save: recompute), in the output's dtype, with the forward's schedule (the same GEMM)."""
    op = spec.op
    data = written(spec)
    data.pop("backward", None)
    data.pop("tune", None)
    data["name"] = f"{spec.name}_acc"
    data["description"] = f"the backward of {spec.name}: acc = {op.lhs} @ {op.rhs} recomputed"
    d = data["op"]
    d["inputs"] = {n: v for n, v in d["inputs"].items() if n in (op.lhs, op.rhs)}
    d["outputs"] = {pre: dict(d["outputs"][out_name])}
    d["epilogue"] = f"{pre} = acc"
    d.pop("constants", None)
    sch = data.get("schedule", {})
    if out_name in sch.get("out_specs", {}):
        sch["out_specs"] = {pre: sch["out_specs"][out_name]}
    for n in list(sch.get("in_specs", {})):
        if n not in (op.lhs, op.rhs):
            del sch["in_specs"][n]
    d["sizes"] = _sizes(spec, {**d["inputs"], **d["outputs"]})
    return Step("acc", data, {op.lhs: f"in:{op.lhs}", op.rhs: f"in:{op.rhs}"}, {pre: "value"},
                why=f"acc = {op.lhs} @ {op.rhs} recomputed (save: recompute)")


def _dacc_step(spec, derived, names: _Names, pre: str, pre_ref, kept, out_name: str, grad_of: dict) -> Step | None:
    """The epilogue's derivative as a map kernel: gacc (the inputs' dtype) and the epilogue operands' gradients."""
    op = spec.op
    out = _operand(spec, out_name)
    nonzero = [(n, g) for n, g in grad_of.items() if g not in derived.zero]
    reads = [n for n in derived.inputs if n not in op.constants]
    inputs: dict[str, dict] = {}
    refs: dict[str, str] = {}
    for n in reads:
        if n == names.g_out:
            inputs[n], refs[n] = dict(out), f"grad:{out_name}"
        elif n == pre:
            inputs[n], refs[n] = dict(out), pre_ref
        elif n in kept:                                      # a kept epilogue temporary
            inputs[n], refs[n] = dict(out), f"out:{n}"
        else:                                                # an epilogue operand
            inputs[n], refs[n] = _operand(spec, n), f"in:{n}"
    outputs, targets = {}, {}
    for n, g in nonzero:
        if n == pre:
            dtype, target = names.in_dtype, "value"
        else:
            full = list(op.inputs[n].shape) == out["shape"]
            dtype, target = (op.inputs[n].dtype if full else "f32"), f"grad:{n}"
        outputs[g] = {"shape": list(out["shape"]), "dtype": dtype}
        targets[g] = target
    try:   # a derived body is re-validated like a user's
        ex.parse_body(derived.text, inputs=list(inputs), outputs=list(outputs), constants=list(op.constants))
    except ex.ExprError:
        return None
    data = _base(spec, "dacc", f"the backward of {spec.name}: the epilogue's derivative")
    constants = {c: v for c, v in op.constants.items() if c in derived.inputs}
    data["op"] = {"kind": "map", "sizes": _sizes(spec, {**inputs, **outputs}), **({"constants": constants} if constants else {}),
                  "inputs": inputs, "outputs": outputs, "body": derived.text}
    return Step("dacc", data, refs, targets,
                why="the epilogue's derivative: " + "; ".join(derived.text.splitlines()))


def _matmul_step(spec, step: str, description: str, lhs: tuple[str, dict], rhs: tuple[str, dict],
                 transpose_lhs: bool, transpose_rhs: bool, out: tuple[str, dict]) -> dict:
    data = _base(spec, step, description)
    operands = {lhs[0]: lhs[1], rhs[0]: rhs[1], out[0]: out[1]}
    data["op"] = {"kind": "matmul", "sizes": _sizes(spec, operands), "inputs": {lhs[0]: lhs[1], rhs[0]: rhs[1]},
                  "outputs": {out[0]: out[1]}, "lhs": lhs[0], "rhs": rhs[0], "transpose_lhs": transpose_lhs,
                  "transpose_rhs": transpose_rhs, "epilogue": f"{out[0]} = acc"}
    return data


def _dlhs_step(spec, out_name: str, names: _Names, gacc_ref: str) -> Step:
    """dA = gacc @ B^T in A's stored layout: [M, K] = gacc [M, N] @ (B as [N, K]); [K, M] = (B as [K, N]) @ gacc^T."""
    op = spec.op
    a, b = op.lhs, op.rhs
    gacc = (names.gacc, {"shape": list(op.outputs[out_name].shape), "dtype": op.inputs[a].dtype})
    grad = (names.grad[a], _operand(spec, a))
    if not op.transpose_lhs:
        # rhs = B read as [N, K]: stored [K, N] is that transposed (transpose_rhs), stored [N, K] is it
        data = _matmul_step(spec, "dlhs", f"the backward of {spec.name}: d{a} = gacc @ {b}^T", gacc,
                            (b, _operand(spec, b)), False, not op.transpose_rhs, grad)
        why = f"d{a} [M, K] = gacc [M, N] @ {b}^T"
    else:
        # dA^T [K, M] = B_kn @ gacc^T: lhs = B as [K, N] (stored [N, K]: transpose_lhs), rhs = gacc as [N, M]
        data = _matmul_step(spec, "dlhs", f"the backward of {spec.name}: d{a}^T = {b} @ gacc^T",
                            (b, _operand(spec, b)), gacc, op.transpose_rhs, True, grad)
        why = f"d{a} stored [K, M] = {b} [K, N] @ gacc^T"
    return Step("dlhs", data, {names.gacc: gacc_ref, b: f"in:{b}"}, {grad[0]: f"grad:{a}"}, why=why)


def _drhs_step(spec, out_name: str, names: _Names, gacc_ref: str) -> tuple[Step, str]:
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
                            (a, _operand(spec, a)), gacc, not op.transpose_lhs, False, grad)
        why = f"d{b} [K, N] = {a}^T @ gacc [M, N]"
    else:
        # dB^T [N, K] = gacc^T @ A_mk: lhs = gacc as [N, M] (transpose_lhs), rhs = A as [M, K]
        data = _matmul_step(spec, "drhs", f"the backward of {spec.name}: d{b}^T = gacc^T @ {a}", gacc,
                            (a, _operand(spec, a)), True, op.transpose_lhs, grad)
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
