"""The rowwise family's op: a body over each row of [M, N] arrays, with reductions along the row."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...frontend.model import DType, Float32, Ident, IndexDType, Model, Operand, Sizes


class RowInput(Operand):
    """An input array of a rowwise kernel: an Operand whose dtype may also be an integer one (i32 / i64) for
    class indices of one value a row (cross-entropy's targets, as F.cross_entropy takes them)."""
    dtype: DType | IndexDType = Field(description=(
        "element type: bf16, f16 or f32 (computed in f32); or i32 / i64 (int32 / int64 / long) for class indices, "
        "an input of one value a row [M] (take()'s column): a row equal to op.ignore_index is ignored; the body "
        "reads the index as an f32, exact where it is a column of the row (0 <= i < N) and -1 (no column) "
        "anywhere else, so an index out of range reads nothing (take() gives 0; never an out-of-bounds load) and "
        "gets no gradient"))


class RowwiseOp(Model):
    """A kernel over rows: `body` computes every output of a row from that row of the inputs, reducing along it
    (sum, mean, max, min, logsumexp, take) where it asks: softmax, layer / RMS norm, row sums, cross-entropy."""
    kind: Literal["rowwise"] = Field(description="a kernel over the rows of [M, N] arrays with reductions along N")
    sizes: Sizes = Field(default_factory=dict, description=(
        "the sizes the shapes name: the row count (M; may be dynamic) and the row length (N, fixed)"))
    constants: dict[Ident, Float32] = Field(default_factory=dict, description=(
        "named float32 constants the body may use (compiled in as literals), e.g. a norm's epsilon"),
        examples=[{"eps": 1e-5}])
    inputs: dict[Ident, RowInput] = Field(min_length=1, max_length=16, description=(
        "the input arrays by name (the package function's positional arguments, in this order): rows [M, N], a "
        "vector along the row [N] (a norm's weight or bias), or one value a row [M] / [M, 1] (e.g. cross-entropy's "
        "target class indices: i32 / i64, or as a float); bf16, f16 or f32, computed in f32"))
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=8, description=(
        "the output arrays by name (returned in this order): rows [M, N] or one value a row [M] / [M, 1] (a "
        "row sum, a log-sum-exp, a loss); bf16, f16 or f32; [1] in f32 with op.reduction mean or sum (the rows' "
        "values reduced to one); or [P, N] in f32 (P >= 2 a literal): the value "
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
    ignore_index: int = Field(default=-100, ge=-(1 << 63), lt=1 << 63, description=(
        "a row whose integer (i32 / i64) input equals this is ignored (torch's F.cross_entropy ignore_index): every "
        "output of the row is 0 (its loss and its gradient) and op.reduction mean does not count it"))
    reduction: Literal["none", "mean", "sum"] = Field(default="none", description=(
        "how the rows' values of the one-value-a-row outputs combine (torch's F.cross_entropy reduction): none, "
        "one value a row ([M]); sum or mean, one value in all ([1], f32), the sum over the rows not ignored, mean "
        "divided by their count (0 rows: nan, as torch). An input of shape [1] (a reduced output's gradient, in a "
        "derived backward) reaches every row as that adjoint: as it is (sum), divided by the count of rows not "
        "ignored (mean), 0 on ignored rows. CUDA: each block sums its rows, the last block to finish adds the "
        "blocks' sums in block order (deterministic for a grid); Pallas: the kernel writes the rows' values and "
        "the package's jax function sums them"))
