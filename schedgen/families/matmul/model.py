"""The matmul family's op: a (batched) matrix product with an elementwise epilogue."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...frontend.model import Sizes, Float32, Ident, Model, Operand


class MatmulOp(Model):
    """`out = epilogue(lhs @ rhs)`: a (batched) matrix product with f32 accumulation and an elementwise epilogue.

    `lhs` and `rhs` name the two matrix inputs; every other input is an epilogue operand (a scalar `[1]`, a
    bias row `[N]`, a column `[M, 1]`, or a full `[M, N]` / `[B, M, N]` matrix such as C). The epilogue body reads
    the accumulator as `acc` and assigns the single output, e.g. `out = gelu(acc + bias)` or
    `out = alpha * acc + beta * c`. `transpose_lhs` stores lhs as [K, M]; `transpose_rhs` stores rhs as [N, K].
    fp8 inputs (f8e4m3 / f8e5m2, both the same) take lhs [M, K] and rhs [N, K] (`transpose_rhs: true`), their
    scales as epilogue operands: `out = acc * sa * sb` (per-tensor, [1] each) or `out = acc * sa * sb + bias`
    (per-row [M, 1] and per-column [N]).
    """
    kind: Literal["matmul"] = Field(description="a (batched) matrix product with an elementwise epilogue")
    sizes: Sizes = Field(default_factory=dict)
    constants: dict[Ident, Float32] = Field(default_factory=dict, description=(
        "named float32 constants the epilogue may use"), examples=[{"alpha": 1.0, "beta": 0.5}])
    inputs: dict[Ident, Operand] = Field(min_length=2, max_length=8, description=(
        "lhs and rhs ([M, K] and [K, N] as stored, [B, ...] when batched) and the epilogue's operands (a scalar [1], "
        "a bias row [N], a column [M, 1], a full [M, N] / [B, M, N] matrix)"))
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=1, description="the one output, [M, N] "
                                                                                  "([B, M, N] when batched)")
    lhs: Ident = Field(default="a", description="the name of the left matrix input (default a)")
    rhs: Ident = Field(default="b", description="the name of the right matrix input (default b)")
    transpose_lhs: bool = Field(default=False, description="lhs is stored [K, M] (column-major A); default [M, K]")
    transpose_rhs: bool = Field(default=False, description=(
        "rhs is stored [N, K] (torch.nn.Linear's weight layout); default [K, N]"))
    epilogue: str | None = Field(default=None, min_length=1, max_length=4000, description=(
        "statements like a map body reading the f32 accumulator as `acc`, the epilogue operands and constants, "
        "and assigning the output. Default (absent): `<output> = acc`, cast to the output dtype"),
        examples=["out = acc", "out = gelu(acc + bias)", "out = alpha * acc + beta * c"])
