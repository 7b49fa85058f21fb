"""The map family: N-ary elementwise body with numpy broadcasting."""
from __future__ import annotations

from pathlib import Path

from ...registry import Family, register, template_folder
from .model import MapOp, MapSchedule

FAMILY = register(Family(
    package=__package__,
    kind="map",
    op_model=MapOp,
    schedule_model=MapSchedule,
    plan=".plan:plan_map",
    defaults=".defaults:map_defaults",
    reference=".reference:map_reference",
    explain=".explain:explain_map",
    small_sizes=".reference:small_sizes",
    tune_aliases=".tune:map_aliases",
    tune_space=".tune:map_space",
    summary="N-ary elementwise body with numpy broadcasting",
    draw=".draw:HOOKS",
    templates=template_folder("map"),
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="gbps",
    elementwise=lambda op: op.body,
    report=".report:REPORT",
    backward=".backward:map_backward",
))
