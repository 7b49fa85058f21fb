"""The plan stage: a validated spec -> a frozen plan holding every number the templates need.

Each family has one planner; all legality checks run here, before anything is rendered or compiled,
and every failure is a located `Problem`.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..errors import SourceMap, SpecErrors
from ..spec.model import SpecFile
from .hardware import H200, Hardware
from .map import MapPlan, plan_map
from .attention import AttentionPlan, plan_attention
from .matmul import MatmulPlan, plan_matmul
from .collective_matmul import CollectiveMatmulPlan, plan_collective_matmul
from .common import Problems

PLANNERS = {"map": plan_map, "matmul": plan_matmul, "attention": plan_attention,
            "collective_matmul": plan_collective_matmul}
MULTI_DEVICE = frozenset({"collective_matmul"})


def plan(spec: SpecFile, src: SourceMap, hw: Hardware = H200):
    """Plan one spec or raise SpecErrors listing every problem."""
    planner = PLANNERS[spec.op.kind]
    if spec.op.kind not in MULTI_DEVICE and spec.schedule.collective is not None:
        problems = Problems()
        problems.add(("schedule", "collective"), f"schedule.collective describes a multi-device kernel; the "
                                                 f"{spec.op.kind} family runs on one GPU (multi-device: "
                                                 f"{', '.join(sorted(MULTI_DEVICE))}): remove it")
        raise SpecErrors(problems, src)
    result, problems = planner(spec, hw)
    if problems or result is None:
        raise SpecErrors(problems, src)
    return result


def to_dict(obj: Any) -> Any:
    """A plan as plain JSON-able data (for explain, manifests and tests)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def to_json(obj: Any) -> str:
    return json.dumps(to_dict(obj), indent=1, sort_keys=True)


__all__ = ["plan", "to_dict", "to_json", "MapPlan", "MatmulPlan", "AttentionPlan", "CollectiveMatmulPlan", "H200",
           "Hardware"]
