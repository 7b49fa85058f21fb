"""The attention_backward family: the gradients dq, dk, dv of flash attention (FlashAttention-2's backward in two Pallas
kernels, or with pipeline.kind warp_specialized FlashAttention-3's in one: fused.py)."""
from __future__ import annotations

from pathlib import Path

from .. import Family, register
from ...plan.dims import dmax
from .defaults import attention_backward_defaults
from .explain import explain_attention_backward
from .model import AttentionBackwardOp
from .plan import plan_attention_backward
from .reference import attention_backward_reference, random_inputs, small_sizes

FAMILY = register(Family(
    kind="attention_backward",
    op_model=AttentionBackwardOp,
    plan=plan_attention_backward,
    defaults=attention_backward_defaults,
    reference=attention_backward_reference,
    explain=explain_attention_backward,
    small_sizes=small_sizes,
    random_inputs=random_inputs,
    summary="flash-attention backward: dq, dk, dv from q, k, v, o, do and the forward's log-sum-exp",
    templates=Path(__file__).resolve().parent / "templates",
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="tflops",
    accumulation=lambda plan: dmax(plan.seq_q, plan.seq_kv),   # a Dim with dynamic sizes (verify evaluates it)
    own_schedule_fields=(("pipeline", "delta"),),             # where the wgmma kernel's delta comes from
))
