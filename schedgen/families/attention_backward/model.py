"""The attention_backward family's op: the gradients of flash attention (FlashAttention-2/3's backward)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...frontend.model import Float32, Ident, Model, Operand, Schedule, Sizes, WarpSpecializedPipeline
from ..attention.model import AttentionOp

_CAUSAL = AttentionOp.model_fields["causal"]


class AttentionBackwardOp(Model):
    """The backward of `o = softmax(scale * q k^T [+ causal mask]) v`: given the forward's inputs, its output `o`,
    the upstream gradient `do` and the forward's log-sum-exp `lse`, the gradients `dq`, `dk`, `dv`.

    `q`, `o`, `do`, `dq` [B, Sq, Hq, D]; `k`, `v`, `dk`, `dv` [B, Skv, Hkv, D] (layout bshd; bhsd puts the heads before
    the sequence); `lse` [B, Hq, Sq] f32 (natural log, what the attention family writes as its second output).
    Hq a multiple of Hkv (grouped-query attention: dk and dv summed over the q heads of a group). `causal` and
    `scale` as the forward's (the attention family): they must be the forward's values.
    """
    kind: Literal["attention_backward"] = Field(description="flash-attention backward: dq, dk, dv")
    sizes: Sizes = Field(default_factory=dict)
    inputs: dict[Ident, Operand] = Field(min_length=6, max_length=6, description=(
        "q, k, v, o, do, lse in that order (any names): q, o and do [B, Sq, Hq, D], k and v [B, Skv, Hkv, D] in "
        "layout bshd, lse [B, Hq, Sq] f32 (the forward's natural-log log-sum-exp)"))
    outputs: dict[Ident, Operand] = Field(min_length=3, max_length=3, description=(
        "dq, dk, dv in that order (any names): dq like q, dk and dv like k and v (the inputs' dtype)"))
    layout: Literal["bshd", "bhsd"] = Field(default="bshd", description=(
        "the dimension order of q, k, v, o, do and the gradients: bshd (the default: batch, sequence, heads, "
        "head_dim) or bhsd (heads before the sequence, torch SDPA's order)"))
    causal: bool | Literal["top_left", "bottom_right"] = Field(
        _CAUSAL.default, description="as the attention family's (the forward's mask): " + _CAUSAL.description,
        examples=_CAUSAL.examples)
    scale: Float32 | None = Field(default=None, description=(
        "the forward's factor on q k^T, positive. Default (absent): 1/sqrt(head_dim)"), examples=[0.125])


# --------------------------------------------------------------------------- schedule: the fields only the attention backward kernels read


class AttentionBackwardPipeline(WarpSpecializedPipeline):
    """The attention backward's pipeline: its consumer warpgroups and where its wgmma kernel's delta comes from."""
    delta: Literal["in_kernel", "preprocess"] = Field(default="in_kernel", description=(
        "attention_backward's warp-specialized CUDA (wgmma) kernel only: where delta = rowsum(dO * O) (f32, a query "
        "row) comes from. in_kernel (the default): each key block's producer warps compute it from every streamed "
        "step's O tile (a stage holds Q, dO, O and lse); preprocess (FlashAttention-3's): the launch's first blocks "
        "compute it once into the workspace (16-byte loads of dO and O) and zero the dQ sums there (no memset of "
        "them), and a stage holds Q, dO, lse and delta (one tile less: more stages fit the SMEM). The Pallas "
        "backward always computes delta before its kernel(s) (a jnp step), so it reads no value of this; "
        "preprocess elsewhere (the mma.sync CUDA kernel, other ops) is a located error"),
        examples=["in_kernel", "preprocess"])


class AttentionBackwardSchedule(Schedule):
    """The attention backward's schedule: the core fields and its pipeline."""
    pipeline: AttentionBackwardPipeline = Field(default=AttentionBackwardPipeline(), description=(
        "how blocks stream through SMEM and which warpgroups do what"))
