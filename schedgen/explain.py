"""A readable account of a plan: grid, blocks, SMEM map, barriers, and the traffic floor."""
from __future__ import annotations

from .plan.hardware import COPY_GBPS, PEAK_TFLOPS  # noqa: F401 (the families' explain hooks read them here)


def explain(plan) -> str:
    from . import families
    return families.of(plan).explain(plan)
