"""The backward of a GEMM epilogue, shared by the matmul and grouped_matmul families' backward hooks: the context
of a backward (the epilogue as a body reading acc as `pre`, the step-local names), what the forward keeps
(`choose_saving`: acc, an epilogue temporary, or nothing), the forward rewritten to write it, the step that recomputes
acc, and the epilogue's derivative as a map step (dacc). Each family adds its own matrix steps."""
from __future__ import annotations

import ast
from dataclasses import dataclass

from . import derive
from .graph import Step
from .names import suffixed
from .spec import fresh, read_as, save_names, written
from ..frontend import expr as ex
from ..plan.common import Problems

PRE = "pre"          # the name acc is kept or recomputed as (acc itself is the epilogue's reserved name)


@dataclass(frozen=True)
class Context:
    out_name: str
    extras: tuple[str, ...]          # the epilogue operands
    body: ex.Body                    # the epilogue as written
    renamed: ex.Body                 # ... reading acc as `pre` (a map input: no input may be named acc)
    temporaries: tuple[str, ...]
    wrt: tuple[str, ...]
    matrices: tuple[str, ...]        # lhs / rhs among wrt
    names: "Names"
    pre: str
    grad_of: dict                    # derive's wrt: pre -> gacc (when a matrix gets a gradient), operand -> grad_<op>
    taken: frozenset = frozenset()   # every name of the spec and the step-local ones (no derived temporary takes one)



@dataclass(frozen=True)
class Upstream:
    """The epilogue's derivative with the gradients that are the upstream gradient unchanged taken out (issue 43)."""
    derived: object                  # what the dacc step still computes
    grad_of: dict                    # ... and the gradients it writes (ctx.grad_of less the passed ones)
    passthrough: dict                # an epilogue operand -> grad:<out> (its gradient is the upstream gradient)
    gacc_ref: str | None             # grad:<out> when gacc is the upstream gradient (the GEMMs read it as it is)


def split_upstream(spec, ctx: Context, derived, notes: list[str]) -> Upstream:
    """Which gradients of the epilogue's derivative are the upstream gradient itself: gacc where the output has
    the inputs' dtype (`out = acc`, `out = acc + r`), an operand's where it has the output's shape and dtype (the
    residual r of `out = acc + r`: no broadcast, no cast). None of them is a kernel's output: gacc is read by the
    GEMM steps as `grad:<out>`, an operand's gradient is a graph pass-through; the dacc step writes the rest, and
    is left out when nothing is left."""
    op, names = spec.op, ctx.names
    out = op.outputs[ctx.out_name]
    input_of = {g: n for n, g in ctx.grad_of.items()}

    def may_pass(g: str, _out: str) -> bool:
        n = input_of[g]
        if n == ctx.pre:
            return names.in_dtype == names.out_dtype
        return list(op.inputs[n].shape) == list(out.shape) and op.inputs[n].dtype == out.dtype

    nonzero = [g for g in ctx.grad_of.values() if g not in derived.zero]
    derived, passed = derive.split_passthrough(derived, nonzero, {ctx.out_name: names.g_out}, may_pass)
    gacc_ref = None
    if names.gacc in passed and ctx.pre in ctx.grad_of:
        gacc_ref = f"grad:{ctx.out_name}"
        notes.append(f"gacc = d{ctx.out_name}: the upstream gradient itself, which the GEMMs read as it is (no "
                     f"kernel writes it)")
    passthrough = {input_of[g]: f"grad:{ctx.out_name}" for g in passed if input_of[g] != ctx.pre}
    grad_of = {n: g for n, g in ctx.grad_of.items() if g not in passed}
    return Upstream(derived, grad_of, passthrough, gacc_ref)


# ------------------------------------------------------------------------------------------------ names


class Names:
    """The step-local names: gradients, the upstream gradient, gacc (none collides with a forward name)."""

    def __init__(self, spec, taken: set[str], wrt, out_name: str):
        self.in_dtype = spec.op.inputs[spec.op.lhs].dtype
        self.out_dtype = spec.op.outputs[out_name].dtype
        self.grad = {w: fresh(f"grad_{w}", taken) for w in wrt}
        self.g_out = fresh(f"g_{out_name}", taken)
        self.gacc = fresh("gacc", taken)


def renamed(text: str, old: str, new: str, extras, out_name: str, constants) -> ex.Body:
    """The epilogue (validated) with the name `old` read as `new` (the accumulator as a map input: no input may be
    named `acc`)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == old:
            node.id = new
    return ex.parse_body(ast.unparse(tree), inputs=[new, *extras], outputs=[out_name], constants=constants)


def base(spec, step: str, description: str) -> dict:
    """A step spec's frame: its name, description and the backends the user chose (the planner picks the rest)."""
    data = written(spec)
    backends = data.get("schedule", {}).get("backends")
    return {"name": suffixed(spec.name, f"_{step}"), "description": description,
            "schedule": {"backends": backends} if backends else {}}


def sizes(spec, operands: dict) -> dict:
    """The forward's sizes that the step's shapes name (a size no shape names is an error in any spec)."""
    used = {d for o in operands.values() for d in o["shape"] if isinstance(d, str)}
    sizes = written(spec)["op"].get("sizes", {})
    return {k: v for k, v in sizes.items() if k in used}


def operand(spec, name: str) -> dict:
    o = spec.op.inputs.get(name) or spec.op.outputs[name]
    return {"shape": list(o.shape), "dtype": o.dtype}


def forward_with_saved(spec, out_name: str, saved: str, pre: str) -> tuple[dict, str]:
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


def recompute_step(spec, out_name: str, pre: str) -> Step:
    """acc = lhs @ rhs again (save: recompute), in the output's dtype, with the forward's schedule (the same GEMM)."""
    op = spec.op
    data = written(spec)
    data.pop("backward", None)
    data.pop("tune", None)
    data["name"] = suffixed(spec.name, "_acc")
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
    d["sizes"] = sizes(spec, {**d["inputs"], **d["outputs"]})
    return Step("acc", data, {op.lhs: f"in:{op.lhs}", op.rhs: f"in:{op.rhs}"}, {pre: "value"},
                why=f"acc = {op.lhs} @ {op.rhs} recomputed (save: recompute)")


def dacc_step(spec, derived, names: Names, pre: str, pre_ref, kept, out_name: str, grad_of: dict,
              kind: str) -> Step | None:
    """The epilogue's derivative as an elementwise kernel of the family `kind` (the callers': map): gacc (the inputs'
    dtype) and the epilogue operands' gradients."""
    op = spec.op
    out = operand(spec, out_name)
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
            inputs[n], refs[n] = dict(out), f"out:{kept[n]}"
        else:                                                # an epilogue operand
            inputs[n], refs[n] = operand(spec, n), f"in:{n}"
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
    data = base(spec, "dacc", f"the backward of {spec.name}: the epilogue's derivative")
    constants = {c: v for c, v in op.constants.items() if c in derived.inputs}
    data["op"] = {"kind": kind, "sizes": sizes(spec, {**inputs, **outputs}), **({"constants": constants} if constants else {}),
                  "inputs": inputs, "outputs": outputs, "body": derived.text}
    return Step("dacc", data, refs, targets,
                why="the epilogue's derivative: " + "; ".join(derived.text.splitlines()))


@dataclass(frozen=True)
class Saving:
    """What the forward keeps for the backward and the epilogue's derivative given it."""
    saved: tuple[str, ...]           # backward.save resolved: ("acc",), (a temporary,) or ()
    kept: dict[str, str]             # the name the derivative reads each as (acc as `pre`) -> the forward's output
    derived: object                  # derive.vjp of the renamed epilogue, reading the kept values


def choose_saving(spec, ctx: Context, problems: Problems, forward: str) -> Saving | None:
    """`backward.save` checked against the epilogue (one value at most, and acc kept when the derivative reads it);
    by default acc when the epilogue is nonlinear in it (its derivative keeping nothing reads acc), else nothing.
    `forward` names the kernel in messages ("matmul", "grouped matmul")."""
    out_name, names, pre = ctx.out_name, ctx.names, ctx.pre
    nonlinear = pre in derive.vjp(ctx.renamed, wrt=ctx.grad_of, cotangents={out_name: names.g_out},
                                  taken=ctx.taken).inputs
    saved = save_names(spec, problems, ["acc", *ctx.temporaries], default=("acc",) if nonlinear else ())
    if len(saved) > 1:
        problems.add(("backward", "save"), f"the {forward} forward keeps one value for the backward, not "
                                           f"{len(saved)} ({', '.join(saved)}): list one")
    if problems:
        return None
    temporaries = [s for s in saved if s != "acc"]
    taken = set(ctx.taken)
    as_in = read_as(temporaries, taken)
    kept = ({pre: pre} if "acc" in saved else {}) | {as_in[s]: s for s in temporaries}
    derived = derive.renamed(derive.vjp(ctx.renamed, wrt=ctx.grad_of, cotangents={out_name: names.g_out},
                                        saved=temporaries, taken=taken), as_in)
    if saved and saved[0] != "acc" and pre in derived.inputs:
        problems.add(("backward", "save", 0), f"the epilogue's derivative also reads acc, which save: [{saved[0]}] "
                                              f"does not keep: write save: [acc], or save: recompute")
        return None
    return Saving(tuple(saved), kept, derived)
