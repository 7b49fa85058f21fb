"""The attention_backward family: the gradients dq, dk, dv of flash attention (FlashAttention-2's backward in two Pallas
kernels, or with pipeline.kind warp_specialized FlashAttention-3's in one: fused.py)."""
from __future__ import annotations

from pathlib import Path

from ...registry import Family, register, template_folder
from .model import AttentionBackwardOp, AttentionBackwardSchedule

FAMILY = register(Family(
    package=__package__,
    kind="attention_backward",
    op_model=AttentionBackwardOp,
    schedule_model=AttentionBackwardSchedule,
    plan=".plan:plan_attention_backward",
    defaults=".defaults:attention_backward_defaults",
    reference=".reference:attention_backward_reference",
    explain=".explain:explain_attention_backward",
    small_sizes=".reference:small_sizes",
    random_inputs=".reference:random_inputs",
    summary="flash-attention backward: dq, dk, dv from q, k, v, o, do and the forward's log-sum-exp",
    templates=template_folder("attention_backward"),
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="tflops",
    accumulation=".reference:accumulation",
))
