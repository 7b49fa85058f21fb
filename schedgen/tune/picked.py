"""The default tune space: a spec with no tune section is tuned around the planner's picks.

The planner picks the schedule fields such a spec leaves out (`plan.plan_with_picks`; `schedgen explain` lists them),
but a pick is not in the spec, and an alias over an absent field (a BlockSpec the planner picked) has nothing to set.
So the picks are written into the spec first, as overrides of the file, one per leaf field
(`schedule.in_specs.b.block_shape`, `schedule.in_specs.b.out_of_bounds`, ...), read back from the completed spec;
the family's `tune_space` hook (`families.TuneSpace`) chooses the knobs and constraints from that completed spec; and
each candidate is the file with the picks, then the knobs' values, applied: a knob's value replaces the picked one,
every other pick stays (a ragged shape's out_of_bounds: zero, a 2-CTA cluster's collective_axes on the shared
operand unless the cluster knob moves it). Because the picks are part of every candidate's overrides, a candidate
rebuilds from the file alone: the compile pool, `--export` and `build --tuned` need nothing else.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from pydantic import BaseModel

from .. import registry as families
from ..errors import Problem, SourceMap, SpecErrors
from ..frontend.specfile import SpecFile
from ..frontend.validate import apply_overrides, validate_data
from .aliases import aliases_for


class NothingToTune(SpecErrors):
    """The spec has no tune section (or no params in it) and its family no default space to search for it."""


def nothing_to_tune(spec: SpecFile, src: SourceMap, why: str) -> NothingToTune:
    """The located error: what is missing, why there is no default space, and a tune section to start from."""
    example = ("tune: {params: {stages: [3, 4]}}" if "stages" in aliases_for(spec)
               else "tune: {params: {schedule.pipeline.max_concurrent_steps: [2, 3]}}")
    where = ("tune",) if spec.tune is not None else ()
    return NothingToTune([Problem(where, f"nothing to tune: {why}; add a tune section, e.g. {example} "
                                         f"(docs/tuning.md)")], src)


def picked_overrides(spec: SpecFile, src: SourceMap) -> dict[str, Any]:
    """The planner's picks for this spec as whole-field overrides of its file, one per leaf field, in the order they
    were picked (raises the located SpecErrors of a spec that does not plan)."""
    from .. import plan as planner
    from ..plan.defaults import apply
    _, picks = planner.plan_with_picks(spec, src)
    done, _ = apply(spec, picks)
    out: dict[str, Any] = {}
    for path in dict.fromkeys(tuple(p.path) for p in picks):
        _leaves(path, _plain(_read(done, path)), out)
    return out


def default_space(spec: SpecFile, data: dict, src: SourceMap, overrides: Mapping[str, Any]
                  ) -> tuple[SpecFile, dict[str, Any], families.TuneSpace]:
    """For a validated spec with no tune section: the spec completed with the picks and the family's default
    space written as its tune section, the picks as overrides, and the space; NothingToTune where the family
    has no default space (or none for this spec)."""
    family = families.of(spec)
    if family.tune_space is None:
        why = ("no tune aliases" if family.tune_aliases is None else "no default space of its own")
        raise nothing_to_tune(spec, src, f"the {spec.op.kind} family has {why}, so there is no default space to "
                                         f"search around the planner's picks")
    picked = picked_overrides(spec, src)
    done, problems = apply_overrides(data, {**overrides, **picked}, src)
    if problems:
        raise SpecErrors(problems, src)
    space = family.tune_space(validate_data(done, src))
    if not space.params:
        raise nothing_to_tune(spec, src, f"the {spec.op.kind} family has no default space for this spec"
                                         + (f" ({space.why})" if space.why else ""))
    section = {"params": {k: list(v) for k, v in space.params.items()}, "constraints": list(space.constraints)}
    return validate_data({**done, "tune": section}, src), picked, space


def section_text(space: families.TuneSpace) -> str:
    """The default space as the tune section a user would write (YAML flow style)."""
    params = ", ".join(f"{k}: [{', '.join(_scalar(v) for v in vals)}]" for k, vals in space.params.items())
    cons = ", ".join(f'"{c}"' for c in space.constraints)
    return "tune: {params: {" + params + "}" + (f", constraints: [{cons}]" if cons else "") + "}"


def _scalar(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _read(node: Any, path: Sequence) -> Any:
    """The value at a pick's path in the completed spec (models by attribute, dicts by key)."""
    for part in path:
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def _plain(value: Any) -> Any:
    """A picked value as a file would hold it: models as the fields they do not leave at their default."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _leaves(path: tuple, value: Any, out: dict[str, Any]) -> None:
    """One override per leaf of a mapping (an empty mapping is a leaf: it still writes the field)."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _leaves((*path, k), v, out)
    else:
        out[".".join(str(p) for p in path)] = value
