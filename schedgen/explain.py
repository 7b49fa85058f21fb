"""A readable account of a plan: grid, blocks, SMEM map, barriers, and the traffic floor."""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from . import registry as families
from .build import _step_source, cached_verdicts, derived_specs
from .errors import Problem
from .plan import dims, plan_with_picks
from .plan.defaults import explain_picks
from .plan.hardware import COPY_GBPS, PEAK_TFLOPS  # noqa: F401 (the families' explain hooks read them here)
from .plan.launch import KernelLaunch


def explain(plan, picks=(), at: Mapping[str, int] | None = None) -> str:
    """The family's account of the plan, then what the planner picked for fields the spec does not write. `at`
    (explain --at): a dynamic plan's counts at those sizes (the others at their max) instead of at the max."""
    head = ""
    if at is not None and plan.launch.dynamic_sizes:
        head = at_header(plan, at) + "\n"
        plan = plan_at(plan, at)
    text = head + families.of(plan).explain(plan)
    picked = explain_picks(picks)
    return f"{text.rstrip(chr(10))}\n\n{picked}\n" if picked else text


def call_sizes_at(plan, at: Mapping[str, int] | None) -> dict[str, int]:
    """Every dynamic size of `plan` at one call: as `at` names it, else at its max."""
    at = at or {}
    return {r.name: int(at.get(r.name, r.max)) for r in plan.launch.dynamic_sizes}


def plan_at(plan, at: Mapping[str, int] | None):
    """The same plan (the package the build makes: its form, tiles and registers unchanged) with every extent
    evaluated at one call's sizes (`call_sizes_at`), read as a fixed-size plan by the families' explain text. A
    fixed-size plan, or `at` None: the plan itself."""
    if at is None or not plan.launch.dynamic_sizes:
        return plan

    sizes = call_sizes_at(plan, at)
    top = {r.name: r.max for r in plan.launch.dynamic_sizes}
    own = getattr(plan, "at", None)       # a family's own evaluation (its FLOP count's formula at the call)
    p = own(sizes) if callable(own) else plan
    p = dims.evaluated(p, sizes)

    def moved(q, where):
        return sum(math.prod(dims.evaluate(d, where) for d in o.shape) * o.itemsize for o in (*q.inputs, *q.outputs))

    changes = {}
    try:   # a traffic count the planner made at the max from the operands' shapes: the same count at the call
        if getattr(plan, "bytes_moved", None) == moved(plan, top):
            changes["bytes_moved"] = moved(plan, sizes)
    except (AttributeError, TypeError, KeyError):
        pass
    return _as_call(dataclasses.replace(p, **changes), sizes)


def _as_call(record, sizes: Mapping[str, int]):
    """`record` and the records it holds (a composed plan's inner plan too) read as one call's: no dynamic sizes
    in their launch headers, the spec's size entries at the call's values."""
    if isinstance(record, KernelLaunch):
        return dataclasses.replace(record, dynamic_sizes=()) if record.dynamic_sizes else record
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        return record
    changes = {}
    for f in dataclasses.fields(record):
        if not f.init:
            continue
        value = getattr(record, f.name)
        if f.name == "sizes" and isinstance(value, dict):
            changes["sizes"] = {**value, **{k: v for k, v in sizes.items() if k in value}}
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            new = _as_call(value, sizes)
            if new is not value:
                changes[f.name] = new
    return dataclasses.replace(record, **changes) if changes else record


def at_header(plan, at: Mapping[str, int]) -> str:
    sizes = call_sizes_at(plan, at)
    ranges = "; ".join(f"{r.name}: {r.describe()}" for r in plan.launch.dynamic_sizes)
    return (f"at {', '.join(f'{k}={v}' for k, v in sizes.items())}: one call of the package built for {ranges} "
            f"(its form as built; the counts below at these sizes)")


def check_at(plan, at: Mapping[str, str]) -> tuple[dict[str, int], list]:
    """`explain --at NAME=VALUE` against the plan's dynamic sizes: (the sizes as ints, the problems: an unknown
    name, a fixed size, a value that is not an integer or out of its range), each a Problem located at the size in
    op.sizes (at op.sizes for a name that is none) that says what is legal."""
    ranges = {r.name: r for r in plan.launch.dynamic_sizes}
    legal = ("; ".join(f"{r.name}: {r.describe()}" for r in ranges.values()) if ranges else
             "none: every size of this spec is fixed (-D NAME=VALUE plans it at another)")
    out, problems = {}, []
    for name, raw in at.items():
        where = ("op", "sizes", name) if name in plan.sizes else ("op", "sizes")
        if name not in ranges:
            fixed = plan.sizes.get(name)
            what = (f"{name} is a fixed size ({name} = {fixed})" if isinstance(fixed, int) else
                    f"'{name}' is no size of this spec")
            problems.append(Problem(where, f"--at {name}={raw}: {what}; the dynamic sizes --at takes: {legal}"))
            continue
        try:
            value = int(str(raw).strip(), 10)
        except ValueError:
            problems.append(Problem(where, f"--at {name}={raw}: not an integer; {name}: {ranges[name].describe()}"))
            continue
        bad = ranges[name].check(value)
        if bad is not None:
            problems.append(Problem(where, f"--at {name}={raw}: {name} {bad}"))
            continue
        out[name] = value
    return out, problems


def explain_backward(spec, src, at: Mapping[str, int] | None = None) -> str:
    """The backward pass a spec's `backward` section builds (issue 19): the inputs that get gradients, what the
    forward saves for it, each step (its kernel, what it computes, what it reads and where its outputs go, and its
    own plan as `schedgen build` plans it: the form, tiles, registers, warps and why the planner chose them, the
    compiler's verdicts where the step was built) and the family's notes. `at`: the steps' plans at those dynamic
    sizes (explain --at). '' for a spec without a backward section."""
    derived = derived_specs(spec, src)
    if derived is None:
        return ""
    graph, _, step_specs = derived
    lines = ["", "backward pass (torch autograd, jax.grad):", f"  gradients of: {', '.join(graph.grads) or '(none)'}"]
    if graph.saved:
        lines.append(f"  saved by the forward (extra outputs): {', '.join(graph.saved)}; the call returns "
                     f"{', '.join(spec.op.outputs)} only")
    else:
        lines.append("  saved by the forward: nothing (the steps read the inputs and outputs as they are)")
    lines += _passthrough_lines(graph)
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
        lines.extend(step_plan_lines(s.name, step_specs[s.name], src, at))
    written = set(graph.passthrough) | {t[5:] for s in graph.steps for t in s.outputs.values() if t[:5] == "grad:"}
    zero = [g for g in graph.grads if g not in written]
    if zero:
        lines.append(f"  zero gradients (no step writes them): {', '.join(zero)}")
    if graph.notes:
        lines.append("  notes:")
        lines.extend(f"    {n}" for n in graph.notes)
    return "\n".join(lines) + "\n"


def _passthrough_lines(graph) -> list[str]:
    """The gradients passed through (issue 43), then the steps' heading."""
    lines = [f"  d{inp} = d{ref[5:]}: passed through, no kernel (the upstream gradient of {ref[5:]} itself, the "
             f"same shape and dtype as {inp})" for inp, ref in graph.passthrough.items()]
    return lines + [f"  steps ({len(graph.steps)}, in order):" if graph.steps else
                    "  steps: none (every gradient is passed through or zero: the backward launches no kernel)"]


def step_plan(step_spec, src, name: str):
    """(plan, picks) of one backward step: the planner's own call that `build` makes for it (plan() is
    plan_with_picks()[0]), so the form explain states is the form the build renders."""
    return plan_with_picks(step_spec, _step_source(src, f"step {name}"))


def step_plan_lines(name: str, step_spec, src, at: Mapping[str, int] | None, indent: str = "       ") -> list[str]:
    """A backward step's plan as explain prints it under the step: the family's account of the plan (its form,
    tiles, registers and warps; at `at` where dynamic), what the planner picked and why (the slower form's
    reason among them), and the compiler's verdicts on its cached build (a spill) or that it was not built yet."""
    plan, picks = step_plan(step_spec, src, name)
    where = f" at {', '.join(f'{k}={v}' for k, v in call_sizes_at(plan, at).items())}" \
        if at is not None and plan.launch.dynamic_sizes else ""
    out = [f"{indent}plan ({plan.launch.kernel_name}{where}):"]
    body = families.of(plan).explain(plan_at(plan, at) if at is not None else plan)
    out += [f"{indent}  {ln}" if ln.strip() else "" for ln in body.rstrip("\n").splitlines()]
    picked = explain_picks(picks)
    if picked:
        out += [f"{indent}  {ln}" for ln in picked.splitlines()]
    verdicts = cached_verdicts(plan) if "cuda" in plan.launch.backends else []
    advice = getattr(plan, "spill_advice", None)
    if verdicts is None:
        out.append(f"{indent}  compiler: not built yet with this schedgen and toolchain (`schedgen build` reports "
                   f"ptxas's spills and serialized wgmmas as warnings; explain then shows them here)")
    elif verdicts:
        why = advice[1].lstrip("; ") if advice is not None else ""
        out += [f"{indent}  compiler (its cached build): warning: {v}" + (f"; {why}" if why else "")
                for v in verdicts]
    elif "cuda" in plan.launch.backends:
        out.append(f"{indent}  compiler (its cached build): no spill, no serialized wgmma")
    return out
