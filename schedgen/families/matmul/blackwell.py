"""The matmul family on Blackwell (schedule.target: sm_100a): what the planner checks for that target.

The sm_100a kernel is warp-specialized like the Hopper one, but its MMA is tcgen05 (one thread issues it, the
accumulator lives in tensor memory, TMEM) and its epilogue warpgroups read the accumulator with tcgen05.ld.
No kernel of this family has run on Blackwell hardware: the CUDA kernels are compiled to sm_100a cubins and their
SASS is checked on the CPU.
"""
from __future__ import annotations

from ...plan.common import Problems
from ...plan.hardware import Hardware

# the backends whose sm_100a rendering is not written yet: backend -> why (a located error at schedule.target)
UNRENDERED = {
    "cuda": "the CUDA rendering of the matmul for sm_100a (tcgen05) is not written yet",
    "pallas": "the Pallas rendering of the matmul for sm_100a (plgpu.tcgen05_mma) is not written yet",
}


def check_target(op, sch, hw: Hardware, problems: Problems) -> None:
    """On sm_100a: every listed backend must have an sm_100a rendering."""
    if sch.target != "sm_100a":
        return
    for backend in sch.backends:
        if backend in UNRENDERED:
            problems.add(("schedule", "target"), f"{UNRENDERED[backend]}; write backends without {backend}, or "
                                                 f"target: sm_90a")
