"""The attention family's op: flash-attention forward."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...frontend.model import Sizes, Float32, Ident, Model, Operand


class AttentionOp(Model):
    """Flash-attention forward: `o = softmax(scale * q k^T [+ causal mask]) v`, per batch and head.

    `q` [B, Sq, Hq, D], `k` and `v` [B, Skv, Hkv, D] (layout bshd; bhsd puts the heads before the sequence),
    `o` like `q`; Hq a multiple of Hkv (grouped-query attention). The optional second output holds the
    log-sum-exp of each score row, [B, Hq, Sq] in f32 (natural log). `scale` defaults to 1/sqrt(D).
    Causal masking aligns the last query with the last key (Sq <= Skv).
    """
    kind: Literal["attention"] = Field(description="flash-attention forward")
    sizes: Sizes = Field(default_factory=dict)
    inputs: dict[Ident, Operand] = Field(min_length=3, max_length=3, description=(
        "q, k, v in that order (any names): q [B, Sq, Hq, D], k and v [B, Skv, Hkv, D] in layout bshd"))
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=2, description=(
        "o (like q, the inputs' dtype) and optionally the log-sum-exp [B, Hq, Sq] in f32 (natural log)"))
    layout: Literal["bshd", "bhsd"] = Field(default="bshd", description=(
        "the operands' dimension order: bshd (the default: batch, sequence, heads, head_dim) or bhsd (heads "
        "before the sequence, torch SDPA's order)"))
    causal: bool = Field(default=False, description=(
        "mask keys after the query: bottom-right aligned, the last query sees the last key (query i sees keys "
        "up to i + Skv - Sq; Sq <= Skv). torch SDPA's is_causal and JAX's attention_mgpu align top-left"))
    scale: Float32 | None = Field(default=None, description=(
        "the factor on q k^T, positive. Default (absent): 1/sqrt(head_dim)"), examples=[0.125])
