"""The rowwise family's backward (issue 19): one rowwise kernel whose body is the symbolic derivative of the forward
body, reductions included.

`autodiff.derive.vjp` walks the body with the reductions' rules added: the adjoint `g` of `sum(e)` reaches every
element of `e` as `g` (one value a row, broadcast back), of `mean(e)` as `g / N`, of `logsumexp(e)` as
`g * exp(e - logsumexp(e))` (the softmax), of `max(e)` / `min(e)` as `g` where `e` is the extreme (a tie gives
`g` to each tied element). For a layernorm `y = (x - mean(x)) * rsqrt(var + eps) * w + b` this yields the usual
two-reduction backward (the row sums of `g w` and of `g w xhat`) without anyone writing it.

Shapes: a row input's ([M, N]) gradient has its dtype; a vector's along the row ([N]: a norm's weight or bias)
is summed over the rows in the kernel: each of its P blocks (`partial_rows`: 256, or M // 2 for a small fixed M)
writes one f32 row of partial sums, [P, N], and the graph's `sum_to` adds the P rows after the step (one
deterministic pass over P x N, not M x N; a second in-kernel pass would need a grid-wide barrier or atomics); a
per-row input's ([M])
gradient is the row sum of its contributions, one value a row. `take(e, i)`'s gradient is `g` at the column it
read: the step reads the column indices as a [N] input (`arange:N`, filled by the runtime) and compares them with
i; the class index itself gets no gradient. Cross-entropy's backward comes out as g (softmax(x) - onehot(t)).
Integer class indices (i32 / i64) get no gradient at all (backward.wrt naming one is a located error); the step
copies op.ignore_index and op.reduction and always reads them: an ignored row's gradient is 0, and a reduced [1]
output's cotangent reaches the rows as the reduction's adjoint (mean: divided by the rows not ignored).

Default: save nothing. The backward reads the row again anyway, so recomputing a reduction costs a sweep of data on
chip, not a read from memory; `backward.save` can keep a temporary (a per-row one such as a norm's rstd is [M]).
"""
from __future__ import annotations

import ast
import copy
from typing import NamedTuple

from ...autodiff import derive
from ...autodiff.graph import BackwardGraph, Step
from ...autodiff.names import suffixed
from ...autodiff.spec import fitting, fresh, read_as, save_names, written, wrt_names
from ...frontend import expr as ex
from ...plan.common import Problems
from . import body as rb
from .plan import _shapes, index_inputs

STEP = "grad"
MAX_INPUTS, MAX_OUTPUTS = 16, 8        # the rowwise op's limits (model.py)


def _reduction_rules(inv_n: str, cols: str) -> dict[str, derive.Rule]:
    def extreme(sign: float):
        # g where e equals the reduction (max: heaviside(max(e) - e) is 0 exactly there), 0 elsewhere
        def rule(args, node, g):
            gap = derive.sub(derive._cp(node), derive._cp(args[0])) if sign > 0 else \
                derive.sub(derive._cp(args[0]), derive._cp(node))
            return [derive.mul(g, derive.sub(derive._c(1.0), derive._call("heaviside", gap)))]
        return rule

    def take(args, node, g):
        # g at the column take() read: trunc(i) == col, i.e. 0 <= i - col < 1 (col the column index, a [N] input
        # of the step that the runtime fills with 0 .. N-1); the class index itself gets no gradient
        col, i = derive._name(cols), args[1]
        hit = derive.mul(derive.sub(derive._c(1.0), derive._call("heaviside", derive.sub(col, derive._cp(i)))),
                         derive._call("heaviside", derive.sub(derive.add(derive._name(cols), derive._c(1.0)),
                                                              derive._cp(i))))
        return [derive.mul(g, hit), None]

    return {
        "sum": lambda args, node, g: [g],
        "mean": lambda args, node, g: [derive.mul(g, derive._name(inv_n))],
        "logsumexp": lambda args, node, g: [derive.mul(g, derive._call("exp", derive.sub(derive._cp(args[0]),
                                                                                         derive._cp(node))))],
        "max": extreme(1.0),
        "min": extreme(-1.0),
        "take": take,
    }


class _Names(NamedTuple):
    """What the backward's phases share: the forward's body, the gradients asked for and the fresh names."""
    kinds: dict                 # input -> row | col | per_row
    body: ex.Body
    row: rb.RowBody
    wrt: tuple
    saved: tuple
    taken: set
    grad_of: dict               # wrt input -> its gradient's name
    cot_of: dict                # output -> its cotangent's name
    inv_n: str
    cols: str


class _Reads(NamedTuple):
    """What the derivative reads: forward inputs, cotangents, saved temporaries."""
    inputs: list
    cotangents: list
    saved: list


def rowwise_backward(spec, src=None) -> tuple[BackwardGraph | None, Problems]:
    problems = Problems()
    op = spec.op
    names = _names(spec, problems)
    if problems:
        return None, problems
    found = _derive(op, names, problems)
    if found is None:
        return None, problems
    derived, as_in = found
    nonzero = [w for w in names.wrt if names.grad_of[w] not in derived.zero]
    derived, passthrough = _passthrough(op, names, derived, nonzero)
    notes = _notes(names, nonzero)
    nonzero = [w for w in nonzero if w not in passthrough]
    if not nonzero:
        return BackwardGraph(None, (), (), names.wrt, tuple(_kernel_free(notes, names.saved)),
                             passthrough=passthrough), problems
    constants = {**op.constants, names.inv_n: 1.0 / _row_length(op)}
    reads = _reads_of(op, names, derived, constants, as_in)
    n_in = len(reads.inputs) + len(reads.cotangents) + len(reads.saved)
    if n_in > MAX_INPUTS or len(nonzero) > MAX_OUTPUTS:
        problems.add(("backward",), f"the backward kernel would read {n_in} arrays and write {len(nonzero)} "
                                    f"gradients; a rowwise kernel takes at most {MAX_INPUTS} and {MAX_OUTPUTS}: list "
                                    f"fewer inputs in backward.wrt")
        return None, problems
    shape_of = _shapes_of(spec, names.row, names.saved)
    forward = None
    if names.saved:
        forward, why = fitting(_forward_with_saved(spec, names.saved, shape_of))
        notes += [why] if why else []
    data = _step_data(spec, names, derived, nonzero, reads, constants, as_in, shape_of)
    cols = names.cols
    refs = {n: f"in:{n}" for n in reads.inputs} | {names.cot_of[o]: f"grad:{o}" for o in reads.cotangents} \
        | {as_in[s]: f"out:{s}" for s in reads.saved} \
        | ({cols: f"arange:{_row_length(op)}"} if cols in derived.inputs else {})
    step = Step(STEP, data, refs, {names.grad_of[w]: f"grad:{w}" for w in nonzero},
                why="the derivative of the body: " + "; ".join(derived.text.splitlines()))
    return BackwardGraph(forward, tuple(names.saved), (step,), names.wrt, tuple(notes),
                         passthrough=passthrough), problems


def _notes(names: _Names, nonzero: list) -> list[str]:
    notes = [f"saved {', '.join(names.saved)} (written by the forward as extra output(s))" if names.saved else
             "saves nothing: the backward reads each row again and recomputes the reductions on chip"]
    return notes + [f"{w} gets a zero gradient (the outputs do not depend on it)" for w in names.wrt
                    if w not in nonzero]


def _kernel_free(notes: list[str], saved) -> list[str]:
    """The notes of a backward with no step (every gradient zero or passed through): nothing is kept for it."""
    return ["saves nothing: the backward runs no kernel" + (f" ({', '.join(saved)} not kept: nothing reads it)"
                                                          if saved else ""), *notes[1:]]


def _passthrough(op, names: _Names, derived, nonzero: list):
    """The gradients that are an output's upstream gradient unchanged (`y = x + r` over rows: the same shape and
    dtype), taken out of the step (issue 43): (the derivative without them, input -> grad:<output>). Not where the
    op reads class indices: an ignored row's gradient is 0 and op.reduction scales the cotangent, both in the
    kernel."""
    if index_inputs(op) or op.reduction != "none":
        return derived, {}
    input_of = {names.grad_of[w]: w for w in nonzero}

    def may_pass(g: str, out: str) -> bool:
        i, o = op.inputs[input_of[g]], op.outputs[out]
        return list(i.shape) == list(o.shape) and i.dtype == o.dtype

    derived, passed = derive.split_passthrough(derived, list(input_of), names.cot_of, may_pass)
    return derived, {input_of[g]: f"grad:{o}" for g, o in passed.items()}


def _names(spec, problems: Problems) -> _Names:
    """The forward body parsed twice (the expression language's statements, the rowwise body's rows), the inputs
    to differentiate (not a take()'s column index), the temporaries to save, and fresh names for the gradients,
    the cotangents, 1 / N and the column index."""
    op = spec.op
    kinds, _, _ = _shapes(op, Problems())
    kinds = kinds or {}
    assigned, outs, _ = ex.check_statements(op.body, inputs=list(op.inputs), outputs=list(op.outputs),
                                            constants=list(op.constants), checker=rb._Checker)
    body = ex.Body(tuple(assigned.items()), op.body, outs)
    index_only = _index_only_inputs(body, op.inputs)
    wrt = wrt_names(spec, problems, differentiable=[n for n in op.inputs if n not in index_only])
    row = rb.parse(op.body, inputs=list(op.inputs), outputs=list(op.outputs), constants=list(op.constants),
                   row_inputs=[n for n in op.inputs if kinds.get(n) in ("row", "col")])
    temporaries = [t for t in assigned if t not in op.outputs]
    saved = save_names(spec, problems, temporaries)
    taken = set(op.sizes) | set(op.inputs) | set(op.outputs) | set(op.constants) | set(assigned)
    grad_of = {w: fresh(f"grad_{w}", taken) for w in wrt}
    cot_of = {o: fresh(f"g_{o}", taken) for o in op.outputs}
    inv_n = fresh("inv_n", taken)
    cols = fresh("col", taken)
    return _Names(kinds, body, row, wrt, saved, taken, grad_of, cot_of, inv_n, cols)


def _derive(op, names: _Names, problems: Problems):
    """(the body's derivative, each saved temporary's name as the step reads it), or None with a problem."""
    try:
        varying = {n for n in op.inputs if names.kinds.get(n) in ("row", "col")} | {names.cols}
        varying |= {names.cot_of[o] for o in op.outputs if names.row.varies.get(o, True)}
        axis = derive.Axis(varying, frozenset(rb.REDUCTIONS))
        as_in = read_as(names.saved, names.taken)
        derived = derive.renamed(derive.vjp(names.body, wrt=names.grad_of, cotangents=names.cot_of,
                                            saved=names.saved, axis=axis,
                                            calls=_reduction_rules(names.inv_n, names.cols), taken=names.taken),
                                 as_in)
    except ValueError as e:     # a call with no rule: a family bug (every call of the language has one)
        problems.add(("op", "body"), f"no backward for this body: {e}")
        return None
    return derived, as_in


def _reads_of(op, names: _Names, derived, constants: dict, as_in: dict) -> _Reads:
    reads = [n for n in derived.inputs if n not in constants and n != names.cols]
    # the class indices (i32 / i64) always: a row equal to ignore_index gets a zero gradient, and the mean's
    # adjoint divides by the rows not ignored (the step masks and counts them as the forward does)
    reads += [n for n in index_inputs(op) if n not in reads]
    return _Reads([n for n in reads if n in op.inputs], [o for o in op.outputs if names.cot_of[o] in reads],
                  [s for s in names.saved if as_in[s] in reads])


def _step_data(spec, names: _Names, derived, nonzero: list, reads: _Reads, constants: dict, as_in: dict,
               shape_of: dict) -> dict:
    """The step's spec: the forward's as written, its schedule's backends only, the derivative as its body, the
    arrays it reads as inputs and the gradients as outputs."""
    op = spec.op
    data = written(spec)
    for key in ("backward", "tune"):
        data.pop(key, None)
    backends = data.get("schedule", {}).get("backends")
    data["schedule"] = {"backends": backends} if backends else {}
    data["name"] = suffixed(spec.name, f"_{STEP}")
    data["description"] = f"the backward of {spec.name}: gradients of {', '.join(nonzero)}"
    step_inputs = {n: data["op"]["inputs"][n] for n in reads.inputs}
    step_inputs |= {names.cot_of[o]: data["op"]["outputs"][o] for o in reads.cotangents}
    step_inputs |= {as_in[s]: shape_of[s] for s in reads.saved}
    row_dim = next(o for o in op.inputs.values() if len(o.shape) == 2).shape[1]
    if names.cols in derived.inputs:
        step_inputs[names.cols] = {"shape": [row_dim], "dtype": "f32"}
    step_outputs = {names.grad_of[w]: _grad_operand(spec, w, names.kinds.get(w), partial_rows(op)) for w in nonzero}
    data["op"].update(inputs=step_inputs, outputs=step_outputs, body=derived.text, constants=constants)
    return data


def _index_only_inputs(body: ex.Body, inputs) -> set[str]:
    """Inputs read only as take()'s column index (a class id: no gradient)."""
    as_index, elsewhere = set(), set()
    for _, e in body.statements:
        for node in ast.walk(e.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "take":
                as_index |= derive._free_names(node.args[1])
        elsewhere |= derive._free_names(_strip_take_index(e.tree))
    return {n for n in as_index if n in inputs and n not in elsewhere}


def _strip_take_index(tree: ast.expr) -> ast.expr:
    """The tree with every take(e, i) read as take(e): the names it reads other than as a column index."""
    class Strip(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if isinstance(node.func, ast.Name) and node.func.id == "take":
                node.args = node.args[:1]
            return node
    return Strip().visit(copy.deepcopy(tree))


def _row_length(op) -> int:
    """N: the (fixed) length of the rows."""
    first = next(o for o in op.inputs.values() if len(o.shape) == 2)
    n = first.shape[1]
    return int(n if isinstance(n, int) else op.sizes[n])


def _shapes_of(spec, row: rb.RowBody, saved) -> dict[str, dict]:
    """A saved temporary's operand: [M, N] in f32 where it varies along the row, else [M] (one value a row)."""
    op = spec.op
    first = next(o for o in op.inputs.values() if len(o.shape) == 2)
    m, n = first.shape
    return {s: {"shape": [m, n] if row.varies.get(s, True) else [m], "dtype": "f32"} for s in saved}


def _forward_with_saved(spec, saved, shape_of) -> dict:
    data = written(spec)
    data.pop("backward", None)
    data["op"]["outputs"] |= {s: shape_of[s] for s in saved}
    return data


PARTIALS = 256      # the step's blocks when it sums a vector's gradient over the rows: [P, N] partial sums


def partial_rows(op) -> int:
    """P, the rows of partial column sums a vector's gradient is written in: PARTIALS, or M // 2 for a fixed M
    below 2 x PARTIALS (so P < M: an [M, N] shape stays rows); 0 (write [M, N]) when that is under 2."""
    m = next(o for o in op.inputs.values() if len(o.shape) == 2).shape[0]
    m = op.sizes.get(m, m) if isinstance(m, str) else m
    p = min(PARTIALS, m // 2) if isinstance(m, int) else PARTIALS
    return p if p >= 2 else 0


def _grad_operand(spec, name: str, kind: str | None, partials: int) -> dict:
    o = spec.op.inputs[name]
    if kind == "col":      # a vector along the row: its per-row terms summed in the kernel, P rows of partial sums
        first = next(i for i in spec.op.inputs.values() if len(i.shape) == 2)
        return {"shape": [partials, first.shape[1]] if partials else list(first.shape), "dtype": "f32"}
    return {"shape": list(o.shape), "dtype": o.dtype}
