"""What the attention planner picks for the schedule fields a spec does not write.

The bundled specs (specs/attention_*.yaml, chosen on the H200) are the model: FlashAttention-3's warp-specialized
kernel with a TMA producer and two consumer warpgroups of 64 query rows, the `schedule` barrier that makes the
consumers take turns on the tensor cores, and the exp2 softmax with approx_math. The blocks (128 query rows, 128
keys, 64 for head_dim 256), the register budgets and the grid are the planner's own defaults. A field the spec
writes is never replaced.
"""
from __future__ import annotations

from ...frontend.model import Barrier
from ...plan.defaults import Pick, written
from ...plan.hardware import Hardware

CONSUMERS = 2


def attention_defaults(spec, hw: Hardware) -> list[Pick]:
    """Picks for the fields the spec leaves out (plan.defaults applies the ones not written)."""
    picks = []
    if spec.schedule.target == "sm_100a":
        return _sm100_picks(spec)
    if not written(spec, ("schedule", "pipeline", "kind")):
        picks.append(Pick(("schedule", "pipeline", "kind"), "warp_specialized",
                          "attention is warp-specialized (a TMA producer and wgmma consumer warpgroups)"))
    nc = spec.schedule.pipeline.num_compute_wgs
    if not written(spec, ("schedule", "pipeline", "num_compute_wgs")):
        nc = CONSUMERS
        picks.append(Pick(("schedule", "pipeline", "num_compute_wgs"), nc,
                          f"{nc} consumers of 64 query rows (both backends render it)"))
    if not written(spec, ("schedule", "barriers")) and nc in (2, 3):
        picks.append(Pick(("schedule", "barriers"), {"schedule": Barrier(num_arrivals=nc)},
                          "the consumers take turns issuing their wgmmas (one arrival each)"))
    if not written(spec, ("schedule", "compiler_params", "approx_math")):
        picks.append(Pick(("schedule", "compiler_params", "approx_math"), True,
                          "the softmax's exp2 in the fast approximate form (the bundled specs')"))
    return picks


def _sm100_picks(spec) -> list[Pick]:
    """sm_100a: the Pallas tcgen05 kernel (the CUDA kernel is Hopper's); no consumer warpgroups or ping-pong
    barrier to pick (one MMA warp, one softmax warpgroup: blackwell.py)."""
    picks = []
    if not written(spec, ("schedule", "backends")):
        picks.append(Pick(("schedule", "backends"), ["pallas"],
                          "on sm_100a attention has the Pallas rendering only (tcgen05 with S and O in TMEM)"))
    if not written(spec, ("schedule", "pipeline", "kind")):
        picks.append(Pick(("schedule", "pipeline", "kind"), "warp_specialized",
                          "attention on sm_100a is warp-specialized (a TMA warp, a tcgen05 MMA warp, a softmax "
                          "warpgroup)"))
    if not written(spec, ("schedule", "compiler_params", "approx_math")):
        picks.append(Pick(("schedule", "compiler_params", "approx_math"), True,
                          "the softmax's exp2 in the fast approximate form (the bundled specs')"))
    return picks
