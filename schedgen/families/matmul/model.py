"""The matmul family's op: a (batched) matrix product with an elementwise epilogue."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...frontend.model import Sizes, Float32, Ident, Model, Operand


class MatmulOp(Model):
    """`out = epilogue(lhs @ rhs)`: a (batched) matrix product with f32 accumulation and an elementwise epilogue.

    `lhs` and `rhs` name the two matrix inputs; every other input is an epilogue operand (a bias row `[N]`,
    a column `[M, 1]`, or a full `[M, N]` / `[B, M, N]` matrix such as C). The epilogue body reads the
    accumulator as `acc` and assigns the single output, e.g. `out = gelu(acc + bias)` or
    `out = alpha * acc + beta * c`. `transpose_lhs` stores lhs as [K, M]; `transpose_rhs` stores rhs as [N, K].
    """
    kind: Literal["matmul"]
    sizes: Sizes = Field(default_factory=dict)
    constants: dict[Ident, Float32] = Field(default_factory=dict)
    inputs: dict[Ident, Operand] = Field(min_length=2, max_length=8)
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=1)
    lhs: Ident = "a"
    rhs: Ident = "b"
    transpose_lhs: bool = False
    transpose_rhs: bool = False
    epilogue: str | None = Field(default=None, min_length=1, max_length=4000)
