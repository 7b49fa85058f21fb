"""The backward of a spec as a graph of kernels of the families (issue 19): what every family's `backward` hook
returns, what the build packages (backward.json + one sub-package a step) and what the runtime runs under
torch autograd and `jax.custom_vjp`.

A `BackwardGraph` says, for one forward spec:
- `forward`: the forward spec to build instead of the one written, as plain spec data (None: the spec as written).
  A family rewrites it when the backward needs a value the forward computes anyway (the pre-activation of a fused
  GEMM epilogue, a map body's temporary, a row's mean and rstd): that value becomes an extra output of the forward
  kernel, named in `saved`. The package's call still returns only the outputs the user wrote.
- `saved`: the extra forward outputs kept for the backward (saved, not recomputed): what `backward.save` asked for
  or the family's default.
- `steps`: kernels of the families, in order. Each step is a spec in the same vocabulary (plain data: it goes
  through validate -> plan -> render -> compile like any spec file, so every check a user spec gets, it gets),
  and binds each of its inputs to a value (`Ref`) and each of its outputs to a gradient or a value later steps
  read (`Out`).
- `grads`: the forward inputs that get a gradient (`backward.wrt`, or every floating input); an input no step
  writes has a zero gradient.
- `passthrough`: input -> "grad:<output>": the gradient of a forward input that IS the upstream gradient of an
  output, unchanged (a map body's `y = x + r`, a GEMM epilogue's `out = acc + r`: same shape, no broadcast, same
  dtype). No kernel computes it: the runtime hands the upstream gradient itself on (torch: the grad_output tensor,
  jax: the cotangent), and a step whose every gradient passes through is not in `steps` at all. A gradient that
  needs a cast or a sum (another dtype, a broadcast operand) stays a step output.
- `notes`: one line each on what was saved or recomputed and why, for explain and the closing record.

References are strings, checked by `check()`:
  "in:<name>"    a forward input        "out:<name>"   a forward output (the user's or a saved one)
  "grad:<name>"  the upstream gradient of forward output <name> (same shape and dtype as the output)
  "step:<step>.<output>"  an output of an earlier step
  "arange:<n>"   the column indices 0 .. n-1 as an f32 vector [n] (a rowwise step's one-hot of take()'s column)
Targets of a step output:
  "grad:<input>"  adds into the gradient of forward input <input> (two steps may add into one); an output of
                  another shape than the input (a gradient of an operand broadcast in the forward: [N] over [M, N])
                  is summed back to the input's shape first (`sum_dims`: numpy broadcasting read backwards)
  "value"         read by later steps only (as "step:<step>.<output>")

`evaluate()` runs a graph with any per-step runner; with the families' float64 references it is the backward's
float64 reference, which the tests hold against finite differences of the forward reference.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

_REF = re.compile(r"\A(in|out|grad):([A-Za-z][A-Za-z0-9_]*)\Z|\Astep:([A-Za-z][A-Za-z0-9_]*)\.([A-Za-z][A-Za-z0-9_]*)\Z"
                  r"|\Aarange:([1-9][0-9]{0,9})\Z")
_TARGET = re.compile(r"\Agrad:([A-Za-z][A-Za-z0-9_]*)\Z|\Avalue\Z")


@dataclass(frozen=True)
class Step:
    name: str                        # an identifier: the sub-package backward/<name>/ and the step's kernel name
    spec: Mapping[str, Any]          # the step's spec as plain data (name, op, schedule), validated like a file
    inputs: Mapping[str, str]        # step input name -> Ref
    outputs: Mapping[str, str]       # step output name -> Target
    why: str = ""                    # what it computes, one line (explain)


@dataclass(frozen=True)
class BackwardGraph:
    forward: Mapping[str, Any] | None
    saved: tuple[str, ...]
    steps: tuple[Step, ...]
    grads: tuple[str, ...]
    notes: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)   # family data the runtime needs (e.g. scale factors)
    passthrough: Mapping[str, str] = field(default_factory=dict)   # input -> "grad:<output>" (no kernel)

    def to_json(self) -> dict:
        return {"forward": self.forward, "saved": list(self.saved), "grads": list(self.grads),
                "notes": list(self.notes), "meta": dict(self.meta), "passthrough": dict(self.passthrough),
                "steps": [{"name": s.name, "spec": s.spec, "inputs": dict(s.inputs), "outputs": dict(s.outputs),
                           "why": s.why} for s in self.steps]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "BackwardGraph":
        return cls(forward=data["forward"], saved=tuple(data["saved"]), grads=tuple(data["grads"]),
                   notes=tuple(data.get("notes", ())), meta=dict(data.get("meta", {})),
                   passthrough=dict(data.get("passthrough", {})),
                   steps=tuple(Step(s["name"], s["spec"], dict(s["inputs"]), dict(s["outputs"]), s.get("why", ""))
                               for s in data["steps"]))


def check(graph: BackwardGraph, inputs: set[str], outputs: set[str]) -> list[str]:
    """What is wrong with a graph (a family bug, not a user error): [] when every reference resolves.
    `inputs` / `outputs`: the forward's input names and its output names (the user's and the saved ones)."""
    problems, seen = [], {}
    for s in graph.steps:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", s.name) or s.name in seen:
            problems.append(f"step {s.name!r}: not an identifier, or a second step of that name")
        for k, ref in s.inputs.items():
            m = _REF.match(ref)
            if not m:
                problems.append(f"step {s.name}: input {k} = {ref!r} is not a reference")
            elif m.group(1) == "in" and m.group(2) not in inputs:
                problems.append(f"step {s.name}: {ref} names no forward input")
            elif m.group(1) in ("out", "grad") and m.group(2) not in outputs:
                problems.append(f"step {s.name}: {ref} names no forward output")
            elif m.group(3) is not None and m.group(4) not in seen.get(m.group(3), ()):
                problems.append(f"step {s.name}: {ref} names no output of an earlier step")
        for k, tgt in s.outputs.items():
            m = _TARGET.match(tgt)
            if not m or (m.group(1) is not None and m.group(1) not in graph.grads):
                problems.append(f"step {s.name}: output {k} -> {tgt!r} is neither 'value' nor grad:<an input in grads>")
        seen[s.name] = set(s.outputs)
    return problems + _passthrough_problems(graph, outputs)


def _passthrough_problems(graph: BackwardGraph, outputs: set[str]) -> list[str]:
    """What is wrong with `graph.passthrough`: each key an input in grads, each value grad:<a forward output>."""
    if not isinstance(graph.passthrough, Mapping):
        return ["passthrough is not a mapping of input -> grad:<output>"]
    problems = []
    for inp, ref in graph.passthrough.items():
        m = _REF.match(ref) if isinstance(ref, str) else None
        if not isinstance(inp, str) or inp not in graph.grads:
            problems.append(f"passthrough: {inp!r} is not an input in grads")
        elif m is None or m.group(1) != "grad" or m.group(2) not in outputs:
            problems.append(f"passthrough: {inp} = {ref!r} is not grad:<a forward output>")
    return problems


def passed_through(graph: BackwardGraph) -> dict[str, str]:
    """Each input whose gradient is an upstream gradient unchanged -> that output's name."""
    return {inp: ref[5:] for inp, ref in graph.passthrough.items()}


Runner = Callable[[Step, Mapping[str, Any]], Mapping[str, Any]]


def sum_dims(shape: tuple, to: tuple) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """How a gradient of shape `shape` is summed back to an operand of shape `to` that numpy broadcasting stretched
    to `shape`: (the leading dims to sum away, the dims of size 1 in `to` to sum keeping them), both as dims of
    `shape`. ValueError when `to` does not broadcast to `shape` (a family bug)."""
    shape, to = tuple(shape), tuple(to)
    lead = len(shape) - len(to)
    if lead < 0 or any(t not in (1, s) for t, s in zip(to, shape[lead:])):
        raise ValueError(f"a gradient of shape {shape} cannot be summed to {to}: {to} does not broadcast to it")
    return tuple(range(lead)), tuple(lead + i for i, (t, s) in enumerate(zip(to, shape[lead:])) if t == 1 and s != 1)


def sum_to(value: Any, to: tuple) -> Any:
    """numpy: `value` summed back to the shape `to` (itself when the shapes agree)."""
    if tuple(np.shape(value)) == tuple(to):
        return value
    lead, keep = sum_dims(np.shape(value), to)
    if keep:
        value = np.sum(value, axis=keep, keepdims=True)
    return np.sum(value, axis=lead) if lead else value


def _arange(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.float64)


def evaluate(graph: BackwardGraph, inputs: Mapping[str, Any], outputs: Mapping[str, Any],
             grads_out: Mapping[str, Any], run: Runner, add: Callable[[Any, Any], Any] = np.add,
             reduce: Callable[[Any, tuple], Any] = sum_to, arange: Callable[[int], Any] = _arange) -> dict[str, Any]:
    """The gradients of the forward inputs in `graph.grads` (absent: no step writes it, a zero gradient).
    `outputs`: the forward outputs, saved ones included; `grads_out`: upstream gradients by output name;
    `run(step, values) -> {output: value}` runs one step (a kernel, or a family's float64 reference);
    `reduce(value, shape)` sums a step output bound to grad:<input> back to the input's shape (numpy's `sum_to`
    by default; the runtime passes torch's and jax's). A gradient in `graph.passthrough` is the upstream gradient
    itself, the very object of `grads_out` (torch's grad_output tensor as autograd gave it, jax's cotangent), added
    to what steps write into it (nothing, as the families derive it)."""
    values: dict[str, Any] = {}
    grads: dict[str, Any] = {}
    for s in graph.steps:
        args = {}
        for k, ref in s.inputs.items():
            kind, _, name = ref.partition(":")
            if kind == "arange":
                args[k] = arange(int(name))
                continue
            args[k] = {"in": inputs, "out": outputs, "grad": grads_out, "step": values}[kind][name]
        result = run(s, args)
        for k, tgt in s.outputs.items():
            values[f"{s.name}.{k}"] = result[k]
            if tgt.startswith("grad:"):
                g = tgt[5:]
                v = reduce(result[k], tuple(np.shape(inputs[g])))
                grads[g] = v if g not in grads else add(grads[g], v)
    for g, out in passed_through(graph).items():
        v = grads_out[out]
        grads[g] = v if g not in grads else add(grads[g], v)
    return grads
