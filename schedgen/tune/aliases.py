"""The families' short knob names (`tile_n` sets the rhs and output BlockSpecs' N together), from each family's
manifest (`Family.tune_aliases`, in `schedgen/families/<kind>/tune.py`).

`aliases_for(spec)` is the one entry point; a family without aliases has none (field paths still work).
"""
from __future__ import annotations

from .. import families
from .knobs import Target


def aliases_for(spec) -> dict[str, tuple[Target, ...]]:
    """The short knob names of this spec's family (alias -> the fields it sets); {} for a family without any."""
    fn = families.of(spec).tune_aliases
    if fn is None:
        return {}
    return {alias: tuple(Target(tuple(path), index) for path, index in targets) for alias, targets in fn(spec).items()}
