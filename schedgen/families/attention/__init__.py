"""The attention family: flash-attention forward: causal or not, GQA, head_dim 64/128/256, optional log-sum-exp."""
from __future__ import annotations

from pathlib import Path

from ...registry import Family, register, template_folder
from .model import AttentionOp, AttentionSchedule

FAMILY = register(Family(
    package=__package__,
    kind="attention",
    op_model=AttentionOp,
    schedule_model=AttentionSchedule,
    plan=".plan:plan_attention",
    defaults=".defaults:attention_defaults",
    reference=".reference:attention_reference",
    explain=".explain:explain_attention",
    small_sizes=".reference:small_sizes",
    summary="flash-attention forward: causal or not, GQA, head_dim 64/128/256, optional log-sum-exp",
    draw=".draw:HOOKS",
    templates=template_folder("attention"),
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="tflops",
    report=".report:REPORT",
    backward=".backward:attention_backward_graph",
    targets=("sm_90a", "sm_100a"),
))
