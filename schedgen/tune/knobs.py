"""A knob of the tune space and the fields it sets (shared by the space and the family aliases)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """One field a knob sets: the whole value at `path`, or its list entry `index` (negative: from the end)."""
    path: tuple[str, ...]
    index: int | None = None

    def __str__(self) -> str:
        return ".".join(self.path) + ("" if self.index is None else f"[{self.index}]")


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
