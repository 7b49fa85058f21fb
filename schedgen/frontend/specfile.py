"""The whole spec file: name, op (one of the registered families' op models, by `kind`), schedule and tune.

The op union is built from the family registry, so a family's op model lives in its folder."""
from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from .. import registry as families
from .model import Backward, Ident, Model, Schedule, Tune

Op = Annotated[Union[tuple(f.op_model for f in families.all_families())], Field(discriminator="kind")]


class SpecFile(Model):
    """A spec file: what the kernel computes (`op`), how (`schedule`) and what `schedgen tune` may vary (`tune`)."""
    name: Ident = Field(description=(
        "the kernel's name: the package's module and function name (build/<name>/, k.<name>(...)) and part of "
        "the CUDA kernel's name"), examples=["add_bf16", "linear_gelu"])
    description: str = Field(default="", max_length=2000, description="free text for people (the planner does "
                                                                      "not read it)")
    op: Op = Field(description="what the kernel computes; op.kind picks the family and so the other op fields")
    schedule: Schedule = Field(default=Schedule(), description=(
        "how the kernel runs; may be left out (the planner picks the schedule for the shapes: the shortest spec "
        "is name + op), and what a family cannot honour is a located error"))
    tune: Tune | None = Field(default=None, description=(
        "the search space of `schedgen tune`; `schedgen build` builds the schedule as written (with --tuned: the "
        "best point tune recorded)"))
    backward: Backward | None = Field(default=None, description=(
        "build a backward pass too (torch autograd, jax.grad): which inputs get gradients and what the forward "
        "saves for it; a family without a backward is a located error"))
