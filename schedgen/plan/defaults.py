"""Fields the user did not write: the family's planner picks them for the shapes, and says so.

A field counts as written when it is in the file (or set by `-D` or a tune point): pydantic's `model_fields_set`
at every level of its path. A family's `defaults` hook returns `Pick`s (a path, a value, why) for fields that are
not written; `complete` applies them to the spec, keeping `model_fields_set` as the user wrote it, so a later
stage still tells a picked value from a written one, and an explicit value is never replaced (it is planned as
written, and a wrong one gets its located error).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pydantic import BaseModel

Path = tuple  # of field names (str) and, inside dicts, keys


@dataclass(frozen=True)
class Pick:
    """One field the planner chose: where (the spec path), what, and why."""
    path: Path
    value: Any
    why: str

    @property
    def dotted(self) -> str:
        return ".".join(str(p) for p in self.path)

    def shown(self) -> str:
        return f"{self.dotted} = {_flow(self.value)}"


def _flow(value: Any) -> str:
    """A value as the user would write it in YAML flow style (a model: the fields it does not leave at their
    default)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_defaults=True)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return str(value)


def written(node: Any, path: Sequence) -> bool:
    """Whether the field at `path` below `node` was written (every model on the way has it in model_fields_set;
    every dict on the way has the key)."""
    for part in path:
        if isinstance(node, BaseModel):
            if part not in node.model_fields_set:
                return False
            node = getattr(node, part)
        elif isinstance(node, dict):
            if part not in node:
                return False
            node = node[part]
        elif isinstance(node, (list, tuple)) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return False
    return True


def _replace(node: Any, path: Sequence, value: Any) -> Any:
    """A copy of `node` with the field at `path` set to `value`; models keep their fields_set (a pick is not
    written)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, BaseModel):
        new = node.model_copy(update={head: _replace(getattr(node, head), rest, value)})
        object.__setattr__(new, "__pydantic_fields_set__", set(node.model_fields_set))
        return new
    if isinstance(node, dict):
        if rest and head not in node:
            raise KeyError(f"no entry {head!r} to set {'.'.join(map(str, rest))} in")
        return {**node, head: _replace(node.get(head), rest, value)}
    if isinstance(node, list) and isinstance(head, int):
        out = list(node)
        out[head] = _replace(out[head], rest, value)
        return out
    raise TypeError(f"cannot set {head!r} in a {type(node).__name__}")


def apply(spec, picks: Sequence[Pick]) -> tuple[Any, tuple[Pick, ...]]:
    """The spec with every pick whose field is not written applied; the picks applied, in order."""
    done = []
    for pick in picks:
        if written(spec, pick.path):
            continue
        spec = _replace(spec, pick.path, pick.value)
        done.append(pick)
    return spec, tuple(done)


def explain_picks(picks: Sequence[Pick]) -> str:
    """The explain section that lists what the planner picked (empty when it picked nothing)."""
    if not picks:
        return ""
    width = max(len(p.shown()) for p in picks)
    lines = ["picked by the planner (not written in the spec; write a field to choose it yourself):"]
    lines += [f"  {p.shown():{width}}  {p.why}" for p in picks]
    return "\n".join(lines)
