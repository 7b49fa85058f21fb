"""The attention family: flash-attention forward: causal or not, GQA, head_dim 64/128/256, optional log-sum-exp."""
from __future__ import annotations

from pathlib import Path

from .. import Family, register
from .draw import HOOKS as DRAW_HOOKS
from .explain import explain_attention
from .model import AttentionOp
from .report import REPORT
from .backward import attention_backward_graph
from .defaults import attention_defaults
from .plan import plan_attention
from .reference import attention_reference, small_sizes

FAMILY = register(Family(
    kind="attention",
    op_model=AttentionOp,
    plan=plan_attention,
    defaults=attention_defaults,
    reference=attention_reference,
    explain=explain_attention,
    small_sizes=small_sizes,
    summary="flash-attention forward: causal or not, GQA, head_dim 64/128/256, optional log-sum-exp",
    draw=DRAW_HOOKS,
    templates=Path(__file__).resolve().parent / "templates",
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="tflops",
    report=REPORT,
    backward=attention_backward_graph,
    targets=("sm_90a", "sm_100a"),
))
