"""The whole spec file: name, op (one of the registered families' op models, by `kind`), schedule and tune.

A spec is a union discriminated on `op.kind`: each family's spec model is `SpecFile` with that family's op model and
schedule model (the core `Schedule`, or the family's subclass of it in its folder). Both come from the registry, so
no model of a family lives here, and a schedule field written under a family that does not have it is an unknown key
at its location."""
from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Discriminator, Field, Tag, TypeAdapter, create_model

from .. import registry as families
from .model import Backward, Ident, Model, Schedule, Tune

Op = Annotated[Union[tuple(f.op_model for f in families.all_families())], Field(discriminator="kind")]

_SCHEDULE_HELP = ("how the kernel runs; may be left out (the planner picks the schedule for the shapes: the shortest "
                  "spec is name + op), and what a family cannot honour is a located error. Its fields are the core "
                  "schedule's plus those of op.kind's family")


class SpecFile(Model):
    """A spec file: what the kernel computes (`op`), how (`schedule`) and what `schedgen tune` may vary (`tune`)."""
    name: Ident = Field(description=(
        "the kernel's name: the package's module and function name (build/<name>/, k.<name>(...)) and part of "
        "the CUDA kernel's name"), examples=["add_bf16", "linear_gelu"])
    description: str = Field(default="", max_length=2000, description="free text for people (the planner does "
                                                                      "not read it)")
    op: Op = Field(description="what the kernel computes; op.kind picks the family and so the other op fields")
    schedule: Schedule = Field(default=Schedule(), description=_SCHEDULE_HELP)
    tune: Tune | None = Field(default=None, description=(
        "the search space of `schedgen tune`; `schedgen build` builds the schedule as written (with --tuned: the "
        "best point tune recorded)"))
    backward: Backward | None = Field(default=None, description=(
        "build a backward pass too (torch autograd, jax.grad): which inputs get gradients and what the forward "
        "saves for it; a family without a backward is a located error"))


def schedule_model(family: families.Family) -> type[Schedule]:
    """The family's schedule model (the core `Schedule` when it adds no field)."""
    return family.schedule_model or Schedule


def _camel(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_"))


# each family's spec: SpecFile with its op model and its schedule model (op.kind -> model)
SPEC_MODELS: dict[str, type[SpecFile]] = {
    f.kind: create_model(
        f"{_camel(f.kind)}Spec", __base__=SpecFile, __module__=__name__,
        __doc__=f"A spec of the {f.kind} family: its op and its schedule.",
        op=(f.op_model, Field(description=SpecFile.model_fields["op"].description)),
        schedule=(schedule_model(f), Field(default=schedule_model(f)(), description=_SCHEDULE_HELP)))
    for f in families.all_families()}
globals().update({model.__name__: model for model in SPEC_MODELS.values()})   # found by name (pickle, copy)

# The tag of a spec whose op.kind is no family's: its op union reports the kind where it stands (op.kind: unknown
# kind, the legal ones); its schedule is not read (which fields it may hold depends on the kind)
NO_FAMILY = "no-family"


class _NoFamilySpec(SpecFile):
    schedule: Any = None


def spec_tag(value: Any) -> str:
    """The union's tag of a spec (plain data or a model): its op.kind when that is a family's, else NO_FAMILY."""
    op = value.get("op") if isinstance(value, dict) else getattr(value, "op", None)
    kind = op.get("kind") if isinstance(op, dict) else getattr(op, "kind", None)
    return kind if isinstance(kind, str) and kind in SPEC_MODELS else NO_FAMILY


Spec = Annotated[Union[tuple(Annotated[m, Tag(k)] for k, m in SPEC_MODELS.items())
                       + (Annotated[_NoFamilySpec, Tag(NO_FAMILY)],)], Discriminator(spec_tag)]
SPEC = TypeAdapter(Spec)
