"""A knob of the tune space and the fields it sets (shared by the space and the family aliases)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    """One field a knob sets: the whole value at `path`, or its list entry `index` (negative: from the end).

    With `values` (pairs of knob value, field value) the field follows the knob rather than taking its value: it
    is set to the field value paired with the knob's, and left as it is for a knob value not listed (the matmul's
    `cluster_m` sets the rhs `collective_axes` to [cluster] at 2 and [] at 1). Such a field is set only where the
    spec has it and no other knob sets it."""
    path: tuple[str, ...]
    index: int | None = None
    values: tuple[tuple[Any, Any], ...] | None = None

    def __str__(self) -> str:
        return ".".join(self.path) + ("" if self.index is None else f"[{self.index}]")

    @property
    def follows(self) -> bool:
        """Whether the field follows the knob through `values` (rather than taking the knob's value)."""
        return self.values is not None

    def value_for(self, knob_value: Any) -> tuple[bool, Any]:
        """(whether this target sets its field at `knob_value`, the value it sets): a copy, never shared."""
        if self.values is None:
            return True, knob_value
        for k, v in self.values:
            if type(k) is type(knob_value) and k == knob_value:     # 1 and true stay apart
                return True, _thawed(v)
        return False, None


def frozen(value: Any) -> Any:
    """A field value held by a Target (hashable: lists as tuples)."""
    return tuple(frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def _thawed(value: Any) -> Any:
    """A held field value as a spec holds it: a new list (never shared between candidates)."""
    return [_thawed(v) for v in value] if isinstance(value, tuple) else value


@dataclass(frozen=True)
class Knob:
    key: str                    # as written under tune.params
    name: str                   # how constraints (and tables) refer to it
    values: tuple
    targets: tuple[Target, ...]
    alias: bool

    @property
    def kind(self) -> str:
        """'int', 'str' or 'other': which constraints can use it."""
        if all(isinstance(v, (int, bool)) for v in self.values):
            return "int"
        if all(isinstance(v, str) for v in self.values):
            return "str"
        return "other"
