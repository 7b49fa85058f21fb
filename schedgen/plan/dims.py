"""Extents that may be known only at launch: integer expressions over the op's dynamic sizes.

A spec may declare a size dynamic (`op.sizes.M: {dynamic: true, max: 65536, multiple_of: 8}`). A planner then
computes with `Dim` values where it used ints: `cdiv(size("M"), 128) * 16` is a `Dim`, and any expression whose
operands are all ints folds to an int, so a plan with no dynamic size holds exactly the numbers it always did.

A `Dim` is data, never text: the launch record stores it as a nested list in prefix form (`["cdiv", "M", 128]`),
the runtime evaluates it from a call's shapes (`evaluate`), and the render filters spell it in each backend's
syntax (schedgen/render/filters.py). Every operator keeps values non-negative and bounded by `upper`, which a
planner uses to check a whole range at once (32-bit index math, grid limits).

Operators: + * // % (floor division / modulo by a positive int), cdiv, min, max; all arguments non-negative.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union

from ..errors import shorten

OPS = ("+", "*", "//", "%", "cdiv", "min", "max")


@dataclass(frozen=True)
class SizeRange:
    """The values a dynamic size may take at a call: min <= v <= max and v % multiple_of == 0."""
    name: str
    min: int
    max: int
    multiple_of: int = 1

    def check(self, value: int) -> str | None:
        """None when `value` is legal, else what is legal, as a phrase."""
        if value < self.min or value > self.max:
            return f"must be in {self.min}..{self.max}"
        if value % self.multiple_of:
            return f"must be a multiple of {self.multiple_of} (in {self.min}..{self.max})"
        return None

    def describe(self) -> str:
        step = f", a multiple of {self.multiple_of}" if self.multiple_of > 1 else ""
        return f"dynamic, {self.min}..{self.max}{step}"

    def to_dict(self) -> dict:
        return {"name": self.name, "min": self.min, "max": self.max, "multiple_of": self.multiple_of}


@dataclass(frozen=True, eq=True)
class Dim:
    """An integer expression over dynamic sizes (never all-constant: those fold to int)."""
    op: str                        # "size" (a dynamic size named args[0]) or one of OPS
    args: tuple

    # -- arithmetic (Dim op int|Dim, int op Dim); folding lives in _make
    def __add__(self, o: "DimLike") -> "DimLike":
        return _make("+", self, o)

    __radd__ = __add__

    def __mul__(self, o: "DimLike") -> "DimLike":
        return _make("*", self, o)

    __rmul__ = __mul__

    def __floordiv__(self, o: "DimLike") -> "DimLike":
        return _make("//", self, o)

    def __rfloordiv__(self, o: "DimLike") -> "DimLike":
        return _make("//", o, self)

    def __mod__(self, o: "DimLike") -> "DimLike":
        return _make("%", self, o)

    def __rmod__(self, o: "DimLike") -> "DimLike":
        return _make("%", o, self)

    def __bool__(self) -> bool:
        raise TypeError(f"the extent {self} is known only at launch: compare its `upper` bound or its sizes' "
                        f"ranges instead of its value")

    def __int__(self) -> int:
        raise TypeError(f"the extent {self} is known only at launch (use dims.upper or dims.evaluate)")

    __index__ = __int__

    def __str__(self) -> str:
        return spell(self, lambda n: n, cdiv=lambda a, b: f"cdiv({a}, {b})")

    def __repr__(self) -> str:
        return f"Dim({self})"


DimLike = Union[int, Dim]


def size(name: str) -> Dim:
    return Dim("size", (name,))


def is_static(d: Any) -> bool:
    return not isinstance(d, Dim)


def _make(op: str, a: DimLike, b: DimLike) -> DimLike:
    for v in (a, b):
        if not isinstance(v, (int, Dim)) or isinstance(v, bool):
            raise TypeError(f"extent arithmetic takes ints and Dims, got {type(v).__name__}")
    if isinstance(a, int) and isinstance(b, int):
        return _fold(op, a, b)
    if op in ("//", "%", "cdiv") and isinstance(b, int) and b <= 0:
        raise ValueError(f"extent {op} by {b}: the divisor must be positive")
    if op == "*" and (a == 0 or b == 0):
        return 0
    if op in ("*", "//", "cdiv") and b == 1:
        return a
    if op == "*" and a == 1:
        return b
    if op == "+" and (a == 0 or b == 0):
        return b if a == 0 else a
    if op == "%" and b == 1:
        return 0
    return Dim(op, (a, b))


def _fold(op: str, a: int, b: int) -> int:
    if op == "+":
        return a + b
    if op == "*":
        return a * b
    if op == "//":
        return a // b
    if op == "%":
        return a % b
    if op == "cdiv":
        return -(-a // b)
    if op == "min":
        return min(a, b)
    if op == "max":
        return max(a, b)
    raise ValueError(f"unknown extent operator {op!r}")


def cdiv(a: DimLike, b: DimLike) -> DimLike:
    return _make("cdiv", a, b)


def dmin(a: DimLike, b: DimLike) -> DimLike:
    return _make("min", a, b)


def dmax(a: DimLike, b: DimLike) -> DimLike:
    return _make("max", a, b)


def round_up(a: DimLike, b: int) -> DimLike:
    return cdiv(a, b) * b


def sizes_of(d: DimLike) -> set[str]:
    """The dynamic sizes an extent depends on."""
    if isinstance(d, int):
        return set()
    if d.op == "size":
        return {d.args[0]}
    return set().union(*(sizes_of(x) for x in d.args))


def evaluate(d: DimLike, sizes: Mapping[str, int]) -> int:
    """The value at one call (sizes: every dynamic size the extent names)."""
    if isinstance(d, int):
        return d
    if d.op == "size":
        return int(sizes[d.args[0]])
    return _fold(d.op, evaluate(d.args[0], sizes), evaluate(d.args[1], sizes))


def upper(d: DimLike, ranges: Mapping[str, SizeRange]) -> int:
    """An upper bound over every legal call (each operator is monotone in its first argument; // % cdiv by ints)."""
    if isinstance(d, int):
        return d
    if d.op == "size":
        return ranges[d.args[0]].max
    a, b = d.args
    if d.op in ("//", "cdiv"):
        return _fold(d.op, upper(a, ranges), lower(b, ranges))
    if d.op == "%":
        return min(upper(a, ranges), upper(b, ranges) - 1)
    return _fold(d.op, upper(a, ranges), upper(b, ranges))


def lower(d: DimLike, ranges: Mapping[str, SizeRange]) -> int:
    """A lower bound over every legal call."""
    if isinstance(d, int):
        return d
    if d.op == "size":
        return ranges[d.args[0]].min
    a, b = d.args
    if d.op in ("//", "cdiv"):
        return _fold(d.op, lower(a, ranges), upper(b, ranges))
    if d.op == "%":
        return 0
    return _fold(d.op, lower(a, ranges), lower(b, ranges))


def divisible(d: DimLike, k: int, ranges: Mapping[str, SizeRange]) -> bool:
    """True when d is a multiple of k at every legal call (a sufficient check: products and sums of multiples)."""
    if isinstance(d, int):
        return d % k == 0
    if d.op == "size":
        return ranges[d.args[0]].multiple_of % k == 0
    a, b = d.args
    if d.op == "*":
        return (_known_factor(a, ranges) * _known_factor(b, ranges)) % k == 0 or divisible(a, k, ranges) \
            or divisible(b, k, ranges)
    if d.op == "+":
        return divisible(a, k, ranges) and divisible(b, k, ranges)
    if d.op in ("min", "max"):
        return divisible(a, k, ranges) and divisible(b, k, ranges)
    return False


def _known_factor(d: DimLike, ranges: Mapping[str, SizeRange]) -> int:
    if isinstance(d, int):
        return d
    if d.op == "size":
        return ranges[d.args[0]].multiple_of
    if d.op == "*":
        return _known_factor(d.args[0], ranges) * _known_factor(d.args[1], ranges)
    return 1


def sources(shapes) -> dict[str, tuple[int, int]]:
    """Where a call's shapes give each dynamic size: name -> (operand index, dimension), first occurrence."""
    out: dict[str, tuple[int, int]] = {}
    for i, shape in enumerate(shapes):
        for j, x in enumerate(shape):
            if isinstance(x, Dim) and x.op == "size":
                out.setdefault(x.args[0], (i, j))
    return out


# ------------------------------------------------------------------------------------------------ JSON

def to_json(d: DimLike) -> Any:
    """int, a size name (str), or [op, a, b] in prefix form."""
    if isinstance(d, int):
        return d
    if d.op == "size":
        return d.args[0]
    return [d.op, to_json(d.args[0]), to_json(d.args[1])]


def from_json(v: Any, names: Mapping[str, Any] | set[str], where: str = "extent") -> DimLike:
    """The inverse of to_json; raises ValueError naming `where` for anything else (unknown size, operator)."""
    if isinstance(v, bool):
        raise ValueError(f"{where}: must be an integer, a size name or [op, a, b], got {shorten(v)}")
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"{where}: must be >= 0, got {v}")
        return v
    if isinstance(v, str):
        if v not in names:
            raise ValueError(f"{where}: {shorten(v)} is not a dynamic size of this kernel "
                             f"({', '.join(sorted(names)) or 'it has none'})")
        return size(v)
    if isinstance(v, list) and len(v) == 3 and v[0] in OPS:
        return _make(v[0], from_json(v[1], names, where), from_json(v[2], names, where))
    raise ValueError(f"{where}: must be an integer, a size name or [op, a, b] with op one of {', '.join(OPS)}, "
                     f"got {shorten(v)}")


# ------------------------------------------------------------------------------------------------ spelling

def spell(d: DimLike, name: Callable[[str], str], *, cdiv: Callable[[str, str], str],
          floordiv: str = "//", minmax: tuple[str, str] = ("min", "max")) -> str:
    """The extent as source text: `name` spells a size, `cdiv` a ceiling division; fully parenthesized."""
    if isinstance(d, int):
        return str(d)
    if d.op == "size":
        return name(d.args[0])
    a, b = (spell(x, name, cdiv=cdiv, floordiv=floordiv, minmax=minmax) for x in d.args)
    if d.op == "cdiv":
        return cdiv(a, b)
    if d.op == "min":
        return f"{minmax[0]}({a}, {b})"
    if d.op == "max":
        return f"{minmax[1]}({a}, {b})"
    op = floordiv if d.op == "//" else d.op
    return f"({a} {op} {b})"


def evaluated(value: Any, sizes: Mapping[str, int]) -> Any:
    """`value` (a plan, a record of one, a tuple, list or dict of them) with every extent (Dim) in it evaluated at
    one call's `sizes`, the rest as it is: what `schedgen explain --at` shows of a dynamic plan (the same plan, its
    counts at those sizes)."""
    if isinstance(value, Dim):
        return evaluate(value, sizes)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            old = getattr(value, f.name)
            new = evaluated(old, sizes)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, (tuple, list)):
        items = [evaluated(v, sizes) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        if isinstance(value, list):
            return items
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        items = {k: evaluated(v, sizes) for k, v in value.items()}
        return value if all(items[k] is value[k] for k in value) else items
    return value
