"""The whole spec file: name, op (one of the registered families' op models, by `kind`), schedule and tune.

The op union is built from the family registry, so a family's op model lives in its folder."""
from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from .. import families
from .model import Ident, Model, Schedule, Tune

Op = Annotated[Union[tuple(f.op_model for f in families.all_families())], Field(discriminator="kind")]


class SpecFile(Model):
    name: Ident
    description: str = Field(default="", max_length=2000)
    op: Op
    schedule: Schedule = Schedule()
    tune: Tune | None = None
