"""What every family's backward hook does with the user's spec: its written data (a step spec starts from it), the
inputs that get gradients (`backward.wrt`) and the forward values kept (`backward.save`), checked and located."""
from __future__ import annotations

from typing import Any, Collection, Sequence

from ..errors import SourceMap, SpecErrors
from ..frontend.validate import validate_data
from ..plan import plan
from ..plan.common import Problems
from ..reserved import INPUT_NAME
from . import names

FLOATING = ("bf16", "f16", "f32")


def written(model) -> dict[str, Any]:
    """A validated spec (or part of one) as the plain data the user wrote: fields left out stay out (the planner
    picks them again for a derived spec), so a step spec made from it validates like a file."""
    return model.model_dump(mode="json", exclude_unset=True, by_alias=True)


def value_at(data: Any, path: Sequence) -> tuple[bool, Any]:
    """(found, value) of `path` in plain spec data (dicts and lists)."""
    for key in path:
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
            data = data[key]
        else:
            return False, None
    return True, data


def wrt_names(spec, problems: Problems, differentiable: Collection[str] | None = None) -> tuple[str, ...]:
    """The inputs that get gradients: `backward.wrt` as written (each checked: an input of a floating dtype, and
    one the family can differentiate), or every such input."""
    inputs = spec.op.inputs
    legal = [n for n, o in inputs.items() if o.dtype in FLOATING and (differentiable is None or n in differentiable)]
    wrt = spec.backward.wrt if spec.backward is not None else None
    if wrt is None:
        return tuple(legal)
    for i, name in enumerate(wrt):
        if name not in legal:
            why = ("is not an input" if name not in inputs else
                   f"has dtype {inputs[name].dtype}: only {'/'.join(FLOATING)} inputs get gradients"
                   if inputs[name].dtype not in FLOATING else "gets no gradient from this family")
            problems.add(("backward", "wrt", i), f"{name!r} {why}; inputs that can get one: {', '.join(legal)}")
        elif name in wrt[:i]:
            problems.add(("backward", "wrt", i), f"{name!r} is listed twice")
    return tuple(n for n in legal if n in wrt)           # in the inputs' order


def save_names(spec, problems: Problems, savable: Sequence[str], default: Sequence[str] = ()) -> tuple[str, ...]:
    """The forward values kept for the backward: `backward.save` as written (each one of `savable`), nothing for
    `recompute`, the family's `default` when not written."""
    save = spec.backward.save if spec.backward is not None else None
    if save is None:
        return tuple(default)
    if save == "recompute":
        return ()
    op = spec.op
    for i, name in enumerate(save):
        if name not in savable:
            why = (f" (an {'input' if name in op.inputs else 'output'}: the backward reads it as it is)"
                   if name in op.inputs or name in op.outputs else "")
            problems.add(("backward", "save", i), f"{name!r} cannot be saved{why}: the values this spec can keep for its "
                                                  f"backward are {', '.join(savable) or '(none)'}, or write "
                                                  f"save: recompute")
        elif name in save[:i]:
            problems.add(("backward", "save", i), f"{name!r} is listed twice")
    return tuple(dict.fromkeys(n for n in save if n in savable))


def fresh(base: str, taken: set[str]) -> str:
    """`base`, or `base2`, `base3`, ... : the first legal name not in `taken` (which it joins), cut to fit 63
    characters (names.fresh). A step's operand: never a name generated code keeps from inputs (reserved.py)."""
    return names.fresh(base, taken, legal=lambda n: n not in INPUT_NAME)


def read_as(saved: Sequence[str], taken: set[str]) -> dict[str, str]:
    """Each saved temporary -> the name a backward step reads it as: its own, or `saved_<name>` (joining `taken`)
    for a name generated code keeps from inputs (a temporary may be named `out`, an input may not: reserved.py)."""
    return {s: fresh(f"saved_{s}", taken) if s in INPUT_NAME else s for s in saved}


def fitting(data: dict) -> tuple[dict, str]:
    """The forward with its saved outputs, planned: as written when it fits, else with fewer pipeline stages, else
    with the whole schedule left to the planner (and a note saying which)."""
    sch = data.get("schedule") or {}
    tries = [(data, "")]
    depth = (sch.get("pipeline") or {}).get("max_concurrent_steps")
    for d in range(depth - 1, 0, -1) if isinstance(depth, int) else ():
        fewer = {**data, "schedule": {**sch, "pipeline": {**sch["pipeline"], "max_concurrent_steps": d}}}
        tries.append((fewer, f"the forward that saves them runs {d} pipeline stage(s), not the {depth} written: "
                             f"{depth} do not fit in SMEM with the saved output(s)"))
    if sch:
        bare = {**data, "schedule": {"backends": sch["backends"]} if "backends" in sch else {}}
        tries.append((bare, "the forward's schedule could not hold the saved output(s) too: the planner picked "
                            "the schedule of the forward that saves them"))
    for candidate, why in tries:
        try:
            plan(validate_data(candidate, SourceMap("<forward>")), SourceMap("<forward>"))
            return candidate, why
        except SpecErrors:
            continue
    return data, ""          # the build reports the first form's problems
