"""The map family's op: what `op:` of an N-ary elementwise kernel."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...frontend.model import Sizes, Float32, Ident, Model, Operand


class MapOp(Model):
    """N-ary elementwise kernel: `body` assigns every output from the inputs (numpy broadcasting)."""
    kind: Literal["map"]
    sizes: Sizes = Field(default_factory=dict)
    constants: dict[Ident, Float32] = Field(default_factory=dict)
    inputs: dict[Ident, Operand] = Field(min_length=1, max_length=16)
    outputs: dict[Ident, Operand] = Field(min_length=1, max_length=8)
    body: str = Field(min_length=1, max_length=4000)
