"""The map family: N-ary elementwise body with numpy broadcasting."""
from __future__ import annotations

from pathlib import Path

from .. import Family, register
from .backward import map_backward
from .draw import HOOKS as DRAW_HOOKS
from .explain import explain_map
from .model import MapOp
from .report import REPORT
from .defaults import map_defaults
from .plan import plan_map
from .tune import map_aliases, map_space
from .reference import map_reference, small_sizes

FAMILY = register(Family(
    kind="map",
    op_model=MapOp,
    plan=plan_map,
    defaults=map_defaults,
    reference=map_reference,
    explain=explain_map,
    small_sizes=small_sizes,
    tune_aliases=map_aliases,
    tune_space=map_space,
    summary="N-ary elementwise body with numpy broadcasting",
    draw=DRAW_HOOKS,
    templates=Path(__file__).resolve().parent / "templates",
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="gbps",
    elementwise=lambda op: op.body,
    report=REPORT,
    backward=map_backward,
    own_schedule_fields=(("pipeline", "data_path"),),   # the CUDA kernel's TMA ring or register path
))
