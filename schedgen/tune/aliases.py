"""The families' short knob names (`tile_n` sets the rhs and output BlockSpecs' N together), from each family's
manifest (`Family.tune_aliases`, in `schedgen/families/<kind>/tune.py`).

`aliases_for(spec)` is the one entry point; a family without aliases has none (field paths still work). A target
is (path, index) or (path, index, values): with values, pairs of (knob value, field value), the field follows the
knob (`knobs.Target`).
"""
from __future__ import annotations

from .. import registry as families
from .knobs import Target, frozen


def aliases_for(spec) -> dict[str, tuple[Target, ...]]:
    """The short knob names of this spec's family (alias -> the fields it sets); {} for a family without any."""
    fn = families.of(spec).tune_aliases
    if fn is None:
        return {}
    return {alias: tuple(_target(*t) for t in targets) for alias, targets in fn(spec).items()}


def _target(path, index=None, values=None) -> Target:
    """A family's plain (path, index[, values]) as a Target; `values` pairs (knob value, field value)."""
    return Target(tuple(path), index, None if values is None else tuple((k, frozen(v)) for k, v in values))
