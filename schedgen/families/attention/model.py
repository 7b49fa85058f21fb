"""The attention family's op: flash-attention forward."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...frontend.model import Float32, Ident, Model, Operand, Schedule, Sizes, WarpSpecializedPipeline


class AttentionOp(Model):
    """Flash-attention forward: `o = softmax(scale * q k^T [+ causal mask]) v`, per batch and head.

    `q` [B, Sq, Hq, D], `k` and `v` [B, Skv, Hkv, D] (layout bshd; bhsd puts the heads before the sequence),
    `o` like `q`; Hq a multiple of Hkv (grouped-query attention). The optional second output holds the
    log-sum-exp of each score row, [B, Hq, Sq] in f32 (natural log). `scale` defaults to 1/sqrt(D).
    `causal` masks the scores of keys after each query; with Sq != Skv its alignment matters (the field says how).
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
    causal: bool | Literal["top_left", "bottom_right"] = Field(
        False,
        description="The causal mask, and how it aligns queries with keys when Sq != Skv. `false`: no mask. "
                    "`bottom_right` (what `true` means): query i sees keys j <= i + Skv - Sq, so the last query sees "
                    "the last key (a decode / chunked-prefill step appending Sq queries to a cache of Skv keys); it "
                    "needs Sq <= Skv. `top_left`: query i sees keys j <= i, the first query the first key (torch "
                    "SDPA's `is_causal=True`, JAX's attention_mgpu); Sq may exceed Skv, the rows from Skv on seeing "
                    "every key. The two agree when Sq = Skv. Both backends honour it.",
        examples=[True, "top_left"])
    scale: Float32 | None = Field(default=None, description=(
        "the factor on q k^T, positive. Default (absent): 1/sqrt(head_dim)"), examples=[0.125])


# --------------------------------------------------------------------------- schedule: the fields only the attention kernels read


class AttentionSchedule(Schedule):
    """The attention forward's schedule: the core fields and its consumer warpgroups."""
    pipeline: WarpSpecializedPipeline = Field(default=WarpSpecializedPipeline(), description=(
        "how K / V blocks stream through SMEM and which warpgroups do what"))
