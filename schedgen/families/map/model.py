"""The map family's op: what `op:` of an N-ary elementwise kernel."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...frontend.model import Float32, Ident, Model, Operand, Pipeline, Schedule, SnakePersistent, Sizes


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


# --------------------------------------------------------------------------- schedule: the fields only the map kernels read


class MapPipeline(Pipeline):
    """The map kernels' pipeline: the core fields and the CUDA kernel's data path."""
    data_path: Literal["tma", "registers"] = Field(default="tma", description=(
        "map's CUDA kernel only: how a tile's data moves. tma (the default): every tile streams through the "
        "max_concurrent_steps-deep SMEM ring by TMA loads and leaves by TMA stores; registers: no SMEM and no TMA, "
        "each thread loads 16-byte vectors of every input straight from global memory for several chunks of the "
        "tile at once (all loads before any arithmetic), computes in registers and stores 16-byte vectors "
        "(torch's vectorized elementwise kernel's form; many resident blocks hide the latency). registers takes "
        "schedule.backends: [cuda] (the Pallas map kernel is emit_pipeline's TMA ring), an output row of a "
        "multiple of 16 bytes' elements, and none of the ring's fields (max_concurrent_steps, barriers, swizzle, "
        "delay_release, out_of_bounds: nan); other ops: a located error"),
        examples=["tma", "registers"])


class MapSchedule(Schedule):
    """The map family's schedule: the core fields, the grid's names, the data path, planar_snake's shape."""
    grid_names: list[Ident] | None = Field(default=None, min_length=1, max_length=5, description=(
        "map: the names of the grid dimensions that index maps use, one per output dimension. Default "
        "(absent): the first free of i, j, k, l, m, n, p, q. attention takes none"),
        examples=[["i", "j"], ["b", "i", "j"]])
    pipeline: MapPipeline = Field(default=MapPipeline(), description="how blocks stream through SMEM (or, with data_path: registers, straight into registers)")
    persistent: SnakePersistent = Field(default=SnakePersistent(), description="the loop over output tiles and its order")
