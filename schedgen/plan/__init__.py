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
from .. import families
from . import dims
from .common import Problems
from .hardware import H200, Hardware


def plan(spec, src: SourceMap, hw: Hardware = H200):
    """Plan one spec or raise SpecErrors listing every problem."""
    family = families.of(spec)
    if not family.multi_device and spec.schedule.collective is not None:
        multi = sorted(f.kind for f in families.all_families() if f.multi_device)
        problems = Problems()
        problems.add(("schedule", "collective"), f"schedule.collective describes a multi-device kernel; the "
                                                 f"{spec.op.kind} family runs on one GPU (multi-device: "
                                                 f"{', '.join(multi)}): remove it")
        raise SpecErrors(problems, src)
    twice = [i for i, b in enumerate(spec.schedule.backends) if b in spec.schedule.backends[:i]]
    result, problems = family.plan(spec, hw)
    for n in unused_sizes(spec):
        if any(tuple(p.path[:3]) == ("op", "sizes", n) for p in problems):
            continue   # the family said what is wrong with it already
        problems.add(("op", "sizes", n), f"the size '{n}' is in no operand's shape and no expression, so it changes "
                                         f"nothing: remove it, or use it in a shape")
    for i in twice:
        problems.add(("schedule", "backends", i), f"{spec.schedule.backends[i]} is listed twice; each backend is "
                                                  f"built once: list it once")
    if problems or result is None:
        raise SpecErrors(problems, src)
    return result


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
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def to_json(obj: Any) -> str:
    return json.dumps(to_dict(obj), indent=1, sort_keys=True)


__all__ = ["plan", "to_dict", "to_json", "H200", "Hardware"]
