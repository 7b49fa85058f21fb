"""The one-kernel attention backward (FlashAttention-3's form): `pipeline.kind: warp_specialized` on the Pallas backend.

A block owns 64 x num_compute_wgs keys of one kv head: num_compute_wgs consumer warpgroups of 64 keys each hold their dK and dV
(64 x D f32) in registers, and a producer warpgroup streams every q head of the group's Q, dO, lse and delta blocks
(block_q queries) through a ring of max_concurrent_steps stages. Per step a consumer recomputes S^T = K Q^T and P^T,
accumulates dV += P^T dO and dK += dS^T Q (P^T, dS^T as register operands) and computes its dQ partial dS K, which a
TMA reduce-add sums into an f32 workspace; a jnp pass then scales and casts dQ. No second kernel recomputes S and dP.
Every rule of that form is checked here, at the field that breaks it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...frontend.model import ITEMSIZE
from ...plan.common import Problems
from ...plan.hardware import Hardware
from ...plan.legality import max_consumer_regs
from .records import REG_OVERHEAD, ROWS

KIND = "warp_specialized"
MAX_CONSUMERS = 2
PRODUCER_REGS = 40     # setmaxnreg of the producer warpgroup (it computes a step's coordinates and issues 4 TMAs)


def consumer_regs(consumers: int, hw: Hardware) -> int:
    """setmaxnreg of each consumer: what the block's launch registers leave beside the producer (2 consumers: 232,
    2 x 128 x 232 + 128 x 40 = 64512 = 384 threads x 168; 1: 256)."""
    return min(256, max_consumer_regs(hw.regs_per_block(128 * (1 + consumers)), PRODUCER_REGS, consumers))


@dataclass(frozen=True)
class Fused:
    consumers: int       # consumer warpgroups a block (pipeline.num_compute_wgs), 64 keys each
    regs: int            # registers a consumer thread needs (estimate)
    budget: int          # its setmaxnreg
    smem_bytes: int


def fused_chosen(sch) -> bool:
    return sch.pipeline.kind == KIND


def plan_fused(sch, dims, block_q: int, block_kv: int, names, ranges: dict, hw: Hardware,
               problems: Problems) -> Fused | None:
    """The one kernel's consumers, registers and SMEM, or None (with located errors) when it cannot serve the spec."""
    d, dtype = dims[5], dims[6]
    kind = ("schedule", "pipeline", "kind")
    before = len(problems)
    if ranges:
        problems.add(kind, "the one-kernel backward (warp_specialized) takes fixed sizes only; with dynamic sizes "
                           "leave kind out (emit_pipeline: the two-kernel form)")
        return None                       # the rules below compare extents known only at launch
    if d not in (64, 128):
        problems.add(kind, f"the one-kernel backward (warp_specialized) holds a consumer's dK and dV (64 x {d} f32 "
                           f"each) in registers for head_dim 64 or 128 only; got {d}: leave kind out "
                           f"(emit_pipeline splits head_dim 256 across blocks)")
    consumers = sch.pipeline.num_compute_wgs
    if consumers > MAX_CONSUMERS:
        problems.add(("schedule", "pipeline", "num_compute_wgs"),
                     f"the one-kernel backward's consumer warpgroups own 64 keys each and share the SM's registers "
                     f"with the producer: legal 1 or {MAX_CONSUMERS}; got {consumers}")
        consumers = 1
    if dims[3] % (ROWS * consumers):
        problems.add(("schedule", "pipeline", "num_compute_wgs"),
                     f"{consumers} consumer warpgroups make blocks of {ROWS * consumers} keys, and Skv = {dims[3]} is "
                     f"not a multiple of it; use 1")
    if "cuda" not in sch.backends and block_kv != ROWS:
        problems.add(("schedule", "in_specs", names[1], "block_shape", 0),
                     f"block_kv is the keys a step of the dQ kernels, which the one-kernel backward (warp_specialized) "
                     f"does not have (its blocks own 64 x num_compute_wgs keys); legal: 64 (the default), or add cuda "
                     f"to backends; got {block_kv}")
    budget = consumer_regs(consumers, hw)
    # dK, dV (D / 2 each) + S^T, dP^T (block_q / 2 each); later the dQ partial (block_q D / 128 <= block_q)
    regs = d + block_q + REG_OVERHEAD
    if regs > budget:
        problems.add(("schedule", "in_specs", names[0], "block_shape", 0),
                     f"a consumer thread of the one-kernel backward holds dK, dV ({d}) and S^T, dP^T ({block_q}) f32 "
                     f"plus about {REG_OVERHEAD}: {regs} registers, over its {budget}; legal here: block_q <= "
                     f"{(budget - REG_OVERHEAD - d) // 64 * 64}")
    isz = ITEMSIZE[dtype]
    stages = sch.pipeline.max_concurrent_steps
    smem = consumers * (2 * ROWS * d * isz + ROWS * block_q * isz + block_q * d * 4) \
        + stages * (2 * block_q * d * isz + 2 * block_q * 4) + 8 * (consumers + 3 * stages) + 1024
    if smem > hw.smem_per_block:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"the one-kernel backward needs {smem} B of SMEM with {stages} stages ({consumers} x (K, V, dS^T "
                     f"and an f32 dQ partial) + the ring), over the {hw.smem_per_block} B a block may have; use fewer "
                     f"stages or a smaller block_q")
    if len(problems) != before:
        return None
    return Fused(consumers, regs, budget, smem)
