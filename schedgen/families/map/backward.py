"""The map family's backward (issue 19): one map kernel whose body is the symbolic derivative of the forward body.

For `h = x * w + b; y = gelu(h)` with upstream gradient `g_y`, the step's body is derived by `autodiff.derive.vjp`
(recomputing `h`, or reading it when `backward.save: [h]` had the forward write it) and assigns `grad_x`,
`grad_w`, `grad_b`. Every gradient has the outputs' shape (a map's outputs share one shape); one of an input that
the forward broadcast (a bias row [N] over [M, N]) is summed back to the input's shape after the step (the graph's
`sum_to`), and is written in f32 so that sum adds f32 terms. A full-shape input's gradient has the input's dtype.
A gradient that is an output's upstream gradient unchanged (`y = x + r`: both; the same shape and dtype) is no
output of the step but a pass-through of the graph (issue 43), and with nothing else to write there is no step.

Default: save nothing. An elementwise kernel is bound by memory, and recomputing a temporary costs arithmetic the
kernel has to spare, while saving one costs a write in the forward and a read in the backward.
"""
from __future__ import annotations

import ast

from ...autodiff import derive
from ...autodiff.graph import BackwardGraph, Step
from ...autodiff.names import suffixed
from ...autodiff.spec import fitting, fresh, read_as, save_names, written, wrt_names
from ...frontend import expr as ex
from ...plan.common import Problems

STEP = "grad"
MAX_INPUTS, MAX_OUTPUTS = 16, 8        # the map op's limits (model.py)


def map_backward(spec, src=None) -> tuple[BackwardGraph | None, Problems]:
    problems = Problems()
    op = spec.op
    body = ex.parse_body(op.body, inputs=list(op.inputs), outputs=list(op.outputs), constants=list(op.constants))
    out_names = list(op.outputs)
    temporaries = [t for t, _ in body.statements if t not in op.outputs]
    wrt = wrt_names(spec, problems)
    saved = save_names(spec, problems, temporaries)
    if problems:
        return None, problems
    taken = set(op.sizes) | set(op.inputs) | set(op.outputs) | set(op.constants) | {t for t, _ in body.statements}
    grad_of = {w: fresh(f"grad_{w}", taken) for w in wrt}
    cot_of = {o: fresh(f"g_{o}", taken) for o in out_names}
    as_in = read_as(saved, taken)
    derived = derive.renamed(derive.vjp(body, wrt=grad_of, cotangents=cot_of, saved=saved, taken=taken), as_in)
    nonzero = [w for w in wrt if grad_of[w] not in derived.zero]
    derived, passthrough = _passthrough(op, derived, nonzero, grad_of, cot_of)
    notes = [f"saved {', '.join(saved)} (written by the forward as extra output(s) in {op.outputs[out_names[0]].dtype})"
             if saved else "saves nothing: the backward recomputes the body's temporaries (cheaper than a write "
                           "and a read of each for a memory-bound kernel)"]
    notes += [f"{w} gets a zero gradient (the outputs do not depend on it)" for w in wrt if w not in nonzero]
    nonzero = [w for w in nonzero if w not in passthrough]
    if not nonzero:
        return BackwardGraph(None, (), (), wrt, tuple(_kernel_free(notes, saved)), passthrough=passthrough), problems
    reads = [n for n in derived.inputs if n not in op.constants]
    reads_in = [n for n in reads if n in op.inputs]
    reads_cot = [o for o in out_names if cot_of[o] in reads]
    reads_saved = [s for s in saved if as_in[s] in reads]
    n_in = len(reads_in) + len(reads_cot) + len(reads_saved)
    if n_in > MAX_INPUTS or len(nonzero) > MAX_OUTPUTS:
        problems.add(("backward",), f"the backward kernel would read {n_in} arrays and write {len(nonzero)} "
                                    f"gradients; a map kernel takes at most {MAX_INPUTS} and {MAX_OUTPUTS}: list "
                                    f"fewer inputs in backward.wrt")
        return None, problems
    try:   # a derived body is re-validated like a user's (a family bug if it fails: say so, located at backward)
        ex.parse_body(derived.text, inputs=reads, outputs=[grad_of[w] for w in nonzero], constants=list(op.constants))
    except ex.ExprError as e:
        problems.add(("backward",), f"the derived backward body is not a legal body ({e.message}); write "
                                    f"save: recompute or report this as a schedgen bug")
        return None, problems
    forward = None
    if saved:
        forward, why = fitting(_forward_with_saved(spec, saved))
        notes += [why] if why else []
    step_spec = _step_spec(spec, derived.text, reads_in, [(cot_of[o], o) for o in reads_cot],
                           [as_in[s] for s in reads_saved],
                           [(grad_of[w], w) for w in nonzero])
    inputs = {n: f"in:{n}" for n in reads_in} | {cot_of[o]: f"grad:{o}" for o in reads_cot} \
        | {as_in[s]: f"out:{s}" for s in reads_saved}
    step = Step(STEP, step_spec, inputs, {grad_of[w]: f"grad:{w}" for w in nonzero},
                why="the derivative of the body: " + "; ".join(derived.text.splitlines()))
    return BackwardGraph(forward, tuple(saved), (step,), wrt, tuple(notes), passthrough=passthrough), problems


def _passthrough(op, derived, nonzero: list, grad_of: dict, cot_of: dict):
    """The gradients that are an output's upstream gradient itself (the same shape, no broadcast, the same dtype),
    taken out of the step (issue 43): (the derivative without them, input -> grad:<output>)."""
    input_of = {grad_of[w]: w for w in nonzero}

    def may_pass(g: str, out: str) -> bool:
        i, o = op.inputs[input_of[g]], op.outputs[out]
        return list(i.shape) == list(o.shape) and i.dtype == o.dtype

    derived, passed = derive.split_passthrough(derived, list(input_of), cot_of, may_pass)
    return derived, {input_of[g]: f"grad:{o}" for g, o in passed.items()}


def _kernel_free(notes: list[str], saved) -> list[str]:
    """The notes of a backward with no step (every gradient zero or passed through): nothing is kept for it."""
    return ["saves nothing: the backward runs no kernel" + (f" ({', '.join(saved)} not kept: nothing reads it)"
                                                          if saved else ""), *notes[1:]]


def _full_shape(op, name: str) -> bool:
    out = op.outputs[next(iter(op.outputs))]
    return list(op.inputs[name].shape) == list(out.shape)


def _forward_with_saved(spec, saved) -> dict:
    """The forward spec with each saved temporary an extra output (the outputs' shape and dtype, the first output's
    block spec)."""
    data = written(spec)
    data.pop("backward", None)
    first = next(iter(spec.op.outputs))
    out = data["op"]["outputs"]
    for s in saved:
        out[s] = dict(out[first])
    specs = data.get("schedule", {}).get("out_specs")
    if specs and first in specs:
        for s in saved:
            specs[s] = dict(specs[first])
    return data


def _step_spec(spec, body: str, inputs, cotangents, saved, grads) -> dict:
    """The backward step as a map spec: the forward's sizes and constants, the schedule the planner picks."""
    data = written(spec)
    data.pop("backward", None)
    data.pop("tune", None)
    op = data["op"]
    first = next(iter(spec.op.outputs))
    out_operand = op["outputs"][first]
    new_inputs = {n: op["inputs"][n] for n in inputs}
    new_inputs |= {c: dict(op["outputs"][o]) for c, o in cotangents}
    new_inputs |= {s: dict(out_operand) for s in saved}
    new_outputs = {}
    for g, w in grads:
        dtype = spec.op.inputs[w].dtype if _full_shape(spec.op, w) else "f32"
        new_outputs[g] = {"shape": list(out_operand["shape"]), "dtype": dtype}
    data["name"] = suffixed(spec.name, f"_{STEP}")
    data["description"] = f"the backward of {spec.name}: gradients of {', '.join(w for _, w in grads)}"
    op.update(inputs=new_inputs, outputs=new_outputs, body=body)
    # The step reads and writes other arrays than the forward (more of them: its block specs and pipeline depth
    # would not fit the same SMEM), so the planner picks its schedule; only the backends the user chose carry over.
    # Dropping the forward's index maps is sound: a map index map is proved to pick the block numpy broadcasting
    # reads (operands._check_index_map), which is the step's default map too, so each gradient lands where its
    # input was read. An index map that moved data (a partner block) would have to be carried over here.
    backends = data.get("schedule", {}).get("backends")
    data["schedule"] = {"backends": backends} if backends else {}
    return data


def step_reads(body_text: str) -> set[str]:
    """The names a derived body reads (tests and explain)."""
    return {n.id for n in ast.walk(ast.parse(body_text)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
