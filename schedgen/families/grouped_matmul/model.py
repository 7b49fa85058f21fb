"""The grouped_matmul family's op: G matrix products with per-group row counts (MoE experts)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ...frontend.model import Float32, GemmSchedule, Ident, Model, Operand, Sizes

MAX_GROUPS = 1024


class GroupedMatmulOp(Model):
    """`out[rows of g] = epilogue(x[rows of g] @ w[g])` for every group g (the experts of a mixture-of-experts layer):
    one activation `x` [T, K] whose rows are sorted by group (contiguous token layout: group g's tokens are rows
    start(g) .. end(g) - 1), one weight per group `w` [G, K, N] (or [G, N, K], torch.nn.Linear's layout per expert,
    with `transpose_rhs`), one output [T, N]. Where each group's rows are is known only at the call: the kernel takes
    an int32 operand named by `group_offsets` after the inputs, in the layout `offsets_format` says. T is usually a
    dynamic size. bf16 / f16 in, f32 accumulation, bf16 / f16 / f32 out; the epilogue reads the accumulator and
    constants."""
    kind: Literal["grouped_matmul"] = Field(description="grouped (MoE) matrix products over contiguous row groups")
    sizes: Sizes = Field(default_factory=dict)
    constants: dict[Ident, Float32] = Field(default_factory=dict, description=(
        "named float32 constants the epilogue may use"), examples=[{"alpha": 1.0}])
    groups: Annotated[int, Field(ge=1, le=MAX_GROUPS)] = Field(description=(
        f"G, the number of groups (experts), 1..{MAX_GROUPS}; the weight's leading dimension"), examples=[8, 64])
    ragged: Literal["m", "k"] = Field(default="m", description=(
        "which dimension the groups split. m (the default): the rows of x and of the output, `out[rows of g] = "
        "epilogue(x[rows of g] @ w[g])`, one weight per group. k: the contraction, `out[g] = epilogue(x[rows of "
        "g]^T @ w[rows of g])` with x [T, M], w [T, N] and the output [G, M, N] (a transposed ragged dot: the "
        "weight gradient of a grouped product; a group with no rows gets epilogue(0) in its whole block)"))
    inputs: dict[Ident, Operand] = Field(min_length=2, max_length=2, description=(
        "the activations lhs [T, K] (rows sorted by group) and the weights rhs [G, K, N] ([G, N, K] with "
        "transpose_rhs); with ragged: k, lhs [T, M] and rhs [T, N], both with rows sorted by group"))
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=2, description=(
        "the output [T, N]: row r holds the product of x's row r with its group's weight (rows in no group, "
        "before the first group's start or from the last group's end to T, are zeros in every output); with ragged: k, [G, M, N]. A second output of the output's shape is a value the "
        "epilogue assigns, kept for a backward (the pre-activation: `pre = acc`)"))
    lhs: Ident = Field(default="x", description="the name of the activation input [T, K] (default x)")
    rhs: Ident = Field(default="w", description="the name of the per-group weight input [G, K, N] (default w)")
    transpose_rhs: bool = Field(default=False, description=(
        "rhs is stored [G, N, K] (each expert's torch.nn.Linear weight); default [G, K, N]"))
    group_offsets: Ident = Field(default="offsets", description=(
        "the name of the int32 operand that says where each group's rows are; the kernel takes it after the "
        "inputs (its layout: offsets_format)"), examples=["offsets", "offs"])
    offsets_format: Literal["offsets", "ends", "counts"] = Field(default="offsets", description=(
        "the group operand's layout: offsets [G + 1] (group g is rows offsets[g] .. offsets[g + 1] - 1), ends [G] "
        "(cumulative ends, group 0 starting at row 0: torch._grouped_mm's offs) or counts [G] (rows per group, "
        "groups back to back from row 0). Values must be non-decreasing and at most T; rows outside every group are "
        "zeros in the output (ragged: m); with ragged: k they never reach a sum"))
    epilogue: str | None = Field(default=None, min_length=1, max_length=4000, description=(
        "statements like a map body reading the f32 accumulator as `acc` and the constants, and assigning the "
        "output. Default (absent): `<output> = acc`, cast to the output dtype"),
        examples=["out = acc", "out = silu(acc)", "out = gelu(acc) * alpha"])


# --------------------------------------------------------------------------- schedule: the fields only the grouped matmul kernel read


class GroupedMatmulSchedule(GemmSchedule):
    """The grouped matmul's schedule: one group's product is the matmul family's wgmma kernel (its producer / consumer warpgroups, planar_snake bands, epilogue)."""
