"""What the attention backward planner picks for the schedule fields a spec does not write."""
from __future__ import annotations

from ...plan.defaults import Pick, written
from ...plan.hardware import Hardware


def attention_backward_defaults(spec, hw: Hardware) -> list[Pick]:
    picks = []
    if not written(spec, ("schedule", "backends")):
        picks.append(Pick(("schedule", "backends"), ["pallas"],
                          "the attention backward renders Pallas (Mosaic GPU) only so far"))
    if not written(spec, ("schedule", "compiler_params", "approx_math")):
        picks.append(Pick(("schedule", "compiler_params", "approx_math"), True,
                          "exp2 of the recomputed P in the fast approximate form (as the forward's)"))
    return picks
