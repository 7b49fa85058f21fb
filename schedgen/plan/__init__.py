"""The plan stage: a validated spec -> a frozen plan holding every number the templates need.

Each family has one planner (its folder's plan.py, found through the registry); all legality checks run here,
before anything is rendered or compiled, and every failure is a located `Problem`.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from ..errors import SourceMap, SpecErrors
from .. import registry as families
from . import dims
from .common import Problems
from .defaults import Pick, apply, written
from .hardware import H200, Hardware, for_target


def plan(spec, src: SourceMap, hw: Hardware | None = None):
    """Plan one spec or raise SpecErrors listing every problem."""
    return plan_with_picks(spec, src, hw)[0]


def complete(spec, hw: Hardware | None = None):
    """The spec with the family's picks for the fields the user did not write, and those picks."""
    family = families.of(spec)
    hw = hw or for_target(spec.schedule.target)
    if family.defaults is None:
        return spec, ()
    return apply(spec, family.defaults(spec, hw))


def plan_with_picks(spec, src: SourceMap, hw: Hardware | None = None):
    """(plan, the planner's picks for fields not written), or SpecErrors listing every problem. When `backends` is
    not written and only the Pallas rendering cannot take the spec for reasons the user did not write (the sizes,
    or fields the planner picked), the planner picks backends: [cuda] and says why, rather than failing; a schedule
    field the user wrote that the Pallas backend cannot render stays an error."""
    family = families.of(spec)
    target = spec.schedule.target
    hw = hw or for_target(target)
    if target not in family.targets:
        have = sorted(f.kind for f in families.all_families() if target in f.targets)
        problems = Problems()
        problems.add(("schedule", "target"), f"the {spec.op.kind} family plans for {', '.join(family.targets)} only; "
                                             f"the families that plan for {target}: {', '.join(have)} (write "
                                             f"target: {family.targets[0]}, or leave it out)")
        raise SpecErrors(problems, src)
    if getattr(spec, "backward", None) is not None and family.backward is None:
        have = sorted(f.kind for f in families.all_families() if f.backward is not None)
        problems = Problems()
        problems.add(("backward",), f"the {spec.op.kind} family has no backward pass yet (families with one: "
                                    f"{', '.join(have) or 'none yet'}): remove the backward section, or "
                                    f"differentiate a reference implementation instead")
        raise SpecErrors(problems, src)
    done, picks = complete(spec, hw)
    result, problems = family.plan(done, hw)
    if problems and len(done.schedule.backends) > 1 and not written(spec, ("schedule", "backends")):
        result, problems, picks = _without_pallas(family, spec, done, hw, result, problems, picks)
    _said_nothing(spec, problems)
    if problems or result is None:
        raise SpecErrors(problems, src)
    return result, picks


def _without_pallas(family, spec, done, hw: Hardware, result, problems, picks):
    """Plan again with the CUDA backend only; keep that when it has no problems and the problems it lost (the
    Pallas rendering's) are about the op or fields the user did not write."""
    cuda, _ = apply(done, [Pick(("schedule", "backends"), ["cuda"], "")])
    alt, alt_problems = family.plan(cuda, hw)
    if alt_problems or alt is None:
        return result, problems, picks
    lost = [p for p in problems if p not in alt_problems]
    if not lost or any(p.path[:1] != ("op",) and written(spec, p.path) for p in lost):
        return result, problems, picks
    why = re.sub(r"[;,]? *or set schedule\.backends.*$", "", lost[0].message)
    return alt, alt_problems, (*picks, Pick(("schedule", "backends"), ["cuda"],
                                            f"the Pallas backend cannot render this spec: {why}"))


def _said_nothing(spec, problems: Problems) -> None:
    """What no family's kernel can read: a backend listed twice, a size in no shape and no expression."""
    backends = spec.schedule.backends
    for i in (i for i, b in enumerate(backends) if b in backends[:i]):
        problems.add(("schedule", "backends", i), f"{backends[i]} is listed twice; each backend is built once: list "
                                                  f"it once")
    for n in unused_sizes(spec):
        if not any(tuple(p.path[:3]) == ("op", "sizes", n) for p in problems):   # (unless the family said why)
            problems.add(("op", "sizes", n), f"the size '{n}' is in no operand's shape and no expression, so it "
                                             f"changes nothing: remove it, or use it in a shape")


def unused_sizes(spec) -> list[str]:
    """op.sizes entries that no operand's shape names and no expression of the file (a body, an epilogue, an index
    map, a grid extent, a device id) mentions."""
    used = {d for group in ("inputs", "outputs") for o in getattr(spec.op, group, {}).values() for d in o.shape}
    texts = []

    def strings(node):
        if isinstance(node, str):
            texts.append(node)
        elif isinstance(node, dict):
            for v in node.values():
                strings(v)
        elif isinstance(node, (list, tuple)):
            for v in node:
                strings(v)

    strings(spec.op.model_dump(exclude={"sizes", "inputs", "outputs"}))
    strings(spec.schedule.model_dump())
    used |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", " ".join(texts)))
    return [n for n in spec.op.sizes if n not in used]


def to_dict(obj: Any) -> Any:
    """A plan as plain JSON-able data (for explain, manifests and tests); an extent known only at the call as its
    prefix-form list (plan/dims.py)."""
    if isinstance(obj, dims.Dim):
        return dims.to_json(obj)
    if hasattr(obj, "model_dump"):       # a spec model kept in a plan (a dynamic size's declaration)
        return obj.model_dump()
    if dataclasses.is_dataclass(obj):
        out: dict = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.metadata.get("inline"):          # a plan's launch header (launch.inline_field): its fields, here
                out.update(to_dict(value))
            elif not (f.metadata.get("omit_default") and value == f.default):
                out[f.name] = to_dict(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def to_json(obj: Any) -> str:
    return json.dumps(to_dict(obj), indent=1, sort_keys=True)


__all__ = ["plan", "plan_with_picks", "complete", "Pick", "to_dict", "to_json", "H200", "Hardware"]
