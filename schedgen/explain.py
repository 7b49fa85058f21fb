"""A readable account of a plan: grid, blocks, SMEM map, barriers, and the traffic floor."""
from __future__ import annotations

from .plan.hardware import COPY_GBPS, PEAK_TFLOPS  # noqa: F401 (the families' explain hooks read them here)


def explain(plan, picks=()) -> str:
    """The family's account of the plan, then what the planner picked for fields the spec does not write."""
    from . import families
    from .plan.defaults import explain_picks
    text = families.of(plan).explain(plan)
    picked = explain_picks(picks)
    return f"{text.rstrip(chr(10))}\n\n{picked}\n" if picked else text
