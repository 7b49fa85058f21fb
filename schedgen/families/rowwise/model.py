"""The rowwise family's op: a body over each row of [M, N] arrays, with reductions along the row."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...frontend.model import Float32, Ident, Model, Operand, Sizes


class RowwiseOp(Model):
    """A kernel over rows: `body` computes every output of a row from that row of the inputs, reducing along it
    (sum, mean, max, min, logsumexp, take) where it asks: softmax, layer / RMS norm, row sums, cross-entropy."""
    kind: Literal["rowwise"] = Field(description="a kernel over the rows of [M, N] arrays with reductions along N")
    sizes: Sizes = Field(default_factory=dict, description=(
        "the sizes the shapes name: the row count (M; may be dynamic) and the row length (N, fixed)"))
    constants: dict[Ident, Float32] = Field(default_factory=dict, description=(
        "named float32 constants the body may use (compiled in as literals), e.g. a norm's epsilon"),
        examples=[{"eps": 1e-5}])
    inputs: dict[Ident, Operand] = Field(min_length=1, max_length=16, description=(
        "the input arrays by name (the package function's positional arguments, in this order): rows [M, N], a "
        "vector along the row [N] (a norm's weight or bias), or one value a row [M] / [M, 1] (e.g. cross-entropy's "
        "target class index, as a float); bf16, f16 or f32, computed in f32"))
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=8, description=(
        "the output arrays by name (returned in this order): rows [M, N] or one value a row [M] / [M, 1] (a "
        "row sum, a log-sum-exp, a loss); bf16, f16 or f32; or [P, N] in f32 (P >= 2 a literal): the value "
        "summed over the rows in P partial sums, one row a block of the kernel's exactly P (a norm's weight "
        "gradient; their sum over the P rows is the column sum)"))
    body: str = Field(min_length=1, max_length=4000, description=(
        "statements `name = expression`, one a line, assigning every output (temporaries allowed) from inputs, "
        "constants, float literals, the map family's operators and functions (+ - * /, ** 2 / 3 / 4, abs exp exp2 "
        "log log2 sqrt rsqrt tanh sigmoid relu gelu gelu_erf silu square erf heaviside sign minimum maximum clamp) and "
        "reductions over "
        "the row: sum(e), mean(e), max(e), min(e), logsumexp(e), take(e, i) (e at column i of the row, i one value "
        "a row); a reduction is one value a row that broadcasts back; reductions nest; evaluated in f32"),
        examples=["m = max(x)\ne = exp(x - m)\ny = e / sum(e)",
                  "xc = x - mean(x)\ny = xc * rsqrt(mean(xc * xc) + 1e-5) * w + b",
                  "loss = logsumexp(x) - take(x, t)"])
