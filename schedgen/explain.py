"""A readable account of a plan: grid, blocks, SMEM map, barriers, and the traffic floor."""
from __future__ import annotations

from . import registry as families
from .plan.hardware import COPY_GBPS, PEAK_TFLOPS  # noqa: F401 (the families' explain hooks read them here)


def explain(plan, picks=()) -> str:
    """The family's account of the plan, then what the planner picked for fields the spec does not write."""
    from .plan.defaults import explain_picks
    text = families.of(plan).explain(plan)
    picked = explain_picks(picks)
    return f"{text.rstrip(chr(10))}\n\n{picked}\n" if picked else text


def explain_backward(spec, src) -> str:
    """The backward pass a spec's `backward` section builds (issue 19): the inputs that get gradients, what the
    forward saves for it, each step (its kernel, what it computes, what it reads and where its outputs go) and the
    family's notes. '' for a spec without a backward section."""
    from .build import _backward_graph
    graph = _backward_graph(spec, src)
    if graph is None:
        return ""
    lines = ["", "backward pass (torch autograd, jax.grad):", f"  gradients of: {', '.join(graph.grads) or '(none)'}"]
    if graph.saved:
        lines.append(f"  saved by the forward (extra outputs): {', '.join(graph.saved)}; the call returns "
                     f"{', '.join(spec.op.outputs)} only")
    else:
        lines.append("  saved by the forward: nothing (the steps read the inputs and outputs as they are)")
    lines.append(f"  steps ({len(graph.steps)}, in order):")
    for i, s in enumerate(graph.steps, 1):
        op = s.spec.get("op", {}) if isinstance(s.spec, dict) else {}
        lines.append(f"    {i}. {s.name} ({op.get('kind', '?')}): {s.why or 'no description'}")
        body = op.get("body")
        if isinstance(body, str) and body.strip():
            lines.append(f"       computes: {'; '.join(t.strip() for t in body.strip().splitlines())}")
        lines.append(f"       reads: {', '.join(f'{k} <- {v}' for k, v in s.inputs.items())}")
        outs = []
        for k, tgt in s.outputs.items():
            text = f"{k} -> {tgt}"
            if tgt.startswith("grad:") and tgt[5:] in spec.op.inputs:
                want = list(spec.op.inputs[tgt[5:]].shape)
                got = list(op.get("outputs", {}).get(k, {}).get("shape", want))
                if got != want:
                    text += f" (summed to [{', '.join(map(str, want))}])"
            outs.append(text)
        lines.append(f"       writes: {', '.join(outs)}")
    zero = [g for g in graph.grads if not any(t == f"grad:{g}" for s in graph.steps for t in s.outputs.values())]
    if zero:
        lines.append(f"  zero gradients (no step writes them): {', '.join(zero)}")
    if graph.notes:
        lines.append("  notes:")
        lines.extend(f"    {n}" for n in graph.notes)
    return "\n".join(lines) + "\n"
