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
    kind: Literal["attention"]
    sizes: Sizes = Field(default_factory=dict)
    inputs: dict[Ident, Operand] = Field(min_length=3, max_length=3)
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=2)
    layout: Literal["bshd", "bhsd"] = "bshd"
    causal: bool = False
    scale: Float32 | None = None
