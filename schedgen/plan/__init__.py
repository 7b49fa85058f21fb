"""The plan stage: a validated spec -> a frozen plan holding every number the templates need.

Each family has one planner (its folder's plan.py, found through the registry); all legality checks run here,
before anything is rendered or compiled, and every failure is a located `Problem`.
"""
from __future__ import annotations

import dataclasses
import json
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
    result, problems = family.plan(spec, hw)
    if problems or result is None:
        raise SpecErrors(problems, src)
    return result


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
