"""The map family's op: what `op:` of an N-ary elementwise kernel."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...frontend.model import Sizes, Float32, Ident, Model, Operand


class MapOp(Model):
    """N-ary elementwise kernel: `body` assigns every output from the inputs (numpy broadcasting)."""
    kind: Literal["map"] = Field(description="an N-ary elementwise kernel")
    sizes: Sizes = Field(default_factory=dict)
    constants: dict[Ident, Float32] = Field(default_factory=dict, description=(
        "named float32 constants the body may use (compiled in as literals)"), examples=[{"scale": 2.5}])
    inputs: dict[Ident, Operand] = Field(min_length=1, max_length=16, description=(
        "the input arrays by name (the package function's positional arguments, in this order); each broadcasts "
        "to the outputs' shape by numpy's rules (e.g. a bias row [N] or a column [M, 1] over [M, N])"))
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=8, description=(
        "the output arrays by name (returned in this order); all of one shape"))
    body: str = Field(min_length=1, max_length=4000, description=(
        "statements `name = expression`, one a line, assigning every output (temporaries allowed) from inputs, "
        "constants, float literals, + - * /, ** 2 / 3 / 4, unary -, and abs exp exp2 log log2 sqrt rsqrt tanh sigmoid relu "
        "gelu (tanh form) gelu_erf silu square erf heaviside (1 where x > 0) sign minimum maximum clamp; "
        "evaluated in f32"),
        examples=["o = x + y", "h = x * w + b\ny = gelu(h)", "o = clamp(x * scale, -1.0, 1.0)"])
