"""The collective_matmul family's op: all_gather(lhs) @ rhs over a 1-D device mesh."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ...frontend.model import Sizes, Ident, Model, Operand


class Mesh(Model):
    """The devices a multi-GPU kernel runs on: a 1-D device mesh, as `jax.make_mesh((num_devices,), (axis_name,))`
    makes it. The kernel runs once per device (under `jax.shard_map` for Pallas, one launch per GPU for CUDA); each
    launch knows its index along the axis (`lax.axis_index(axis_name)`), and device ids in the schedule's
    expressions are indices along this axis."""
    axis_name: Ident = Field(description=(
        "the mesh axis name; the schedule's device-id expressions use it as this device's index"), examples=["x"])
    num_devices: Annotated[int, Field(ge=1, le=8)] = Field(description="devices on the axis (GPUs of one host)")


class CollectiveMatmulOp(Model):
    """`out = all_gather(lhs) @ rhs` on every device of a 1-D mesh: the all-gather of lhs over the mesh axis overlapped
    with the matmul (the pattern of JAX's collective_matmul_mgpu). Shapes are per device, as each device's kernel sees
    them: `lhs` [M, K] is this device's rows of the gathered matrix, `rhs` [K, N] this device's own right-hand side
    (e.g. its column shard of a weight), `out` [M_total, N] with M_total = num_devices x M, device d's rows at
    d x M. bf16/f16 in, f32 accumulation, bf16/f16/f32 out."""
    kind: Literal["collective_matmul"] = Field(description="all_gather(lhs) @ rhs over a 1-D device mesh")
    sizes: Sizes = Field(default_factory=dict)
    inputs: dict[Ident, Operand] = Field(min_length=2, max_length=2, description=(
        "lhs [M, K] (this device's rows of the gathered matrix) and rhs [K, N], per device"))
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=1, description=(
        "out [num_devices x M, N]: device d's rows at d x M"))
    lhs: Ident = Field(default="a", description="the name of the gathered input (default a)")
    rhs: Ident = Field(default="b", description="the name of the device's own right-hand side (default b)")
    mesh: Mesh = Field(description="the 1-D device mesh the kernel runs on")
