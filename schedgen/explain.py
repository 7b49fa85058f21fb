"""A readable account of a plan: grid, blocks, SMEM map, barriers, and the traffic floor."""
from __future__ import annotations

COPY_GBPS = 4300.0  # measured H200 device-to-device copy, bytes read + written (bench/results)
PEAK_TFLOPS = 989.0  # H200 dense bf16/f16 tensor-core peak (datasheet)


def explain(plan) -> str:
    from . import families
    return families.of(plan).explain(plan)
