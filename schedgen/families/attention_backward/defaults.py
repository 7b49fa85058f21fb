"""What the attention backward planner picks for the schedule fields a spec does not write."""
from __future__ import annotations

from ...plan.defaults import Pick, written
from ...plan.hardware import Hardware
from .records import CUDA_REG_OVERHEAD, REG_LIMIT


def _cuda_fits(spec) -> str | None:
    """Why the CUDA kernel cannot take the spec's head_dim or blocks (None: it can): head_dim 64 or 128, and
    head_dim + block_q (block_kv) within the register budget. The planner checks the same and locates it."""
    op, sch = spec.op, spec.schedule
    qn, kn = list(op.inputs)[:2]
    d = op.inputs[qn].shape[-1]
    d = op.sizes.get(d, d) if isinstance(d, str) else d
    if d not in (64, 128):
        return f"the CUDA kernel takes head_dim 64 or 128 (got {d})"
    for n in (qn, kn):
        bs = sch.in_specs.get(n)
        block = bs.block_shape[0] if bs is not None and bs.block_shape else 64
        if d + block + CUDA_REG_OVERHEAD > REG_LIMIT:
            return f"the CUDA kernel's registers do not hold head_dim {d} with {n}'s block of {block} rows"
    return None


def attention_backward_defaults(spec, hw: Hardware) -> list[Pick]:
    picks = []
    if not written(spec, ("schedule", "backends")):
        why = _cuda_fits(spec)
        if spec.schedule.pipeline.kind == "warp_specialized":
            picks.append(Pick(("schedule", "backends"), ["cuda"],
                              "CUDA only: pipeline.kind warp_specialized selects the CUDA wgmma kernel"))
        elif why is None:
            picks.append(Pick(("schedule", "backends"), ["cuda", "pallas"],
                              "both: the CUDA C++ kernel (one launch, mma.sync) and the Pallas (Mosaic GPU) one"))
        else:
            picks.append(Pick(("schedule", "backends"), ["pallas"], f"Pallas only: {why}"))
    if not written(spec, ("schedule", "compiler_params", "approx_math")):
        picks.append(Pick(("schedule", "compiler_params", "approx_math"), True,
                          "exp2 of the recomputed P in the fast approximate form (as the forward's)"))
    return picks
