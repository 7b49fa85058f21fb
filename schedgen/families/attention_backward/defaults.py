"""What the attention backward planner picks for the schedule fields a spec does not write."""
from __future__ import annotations

from ...plan.defaults import Pick, written
from ...plan.hardware import Hardware
from .records import CUDA_REG_OVERHEAD, REG_LIMIT

# The Pallas backward's form when pipeline.kind is not written. The one-kernel form (warp_specialized, fused.py)
# verifies in the interpreter and lowers for the GPU; it becomes the default once the H200 has verified and timed it
# (bench/attention_backward_forms.py) against the two-kernel form.
DEFAULT_KIND = "emit_pipeline"
DEFAULT_KIND_WHY = ("the Pallas backward in two kernels (dK/dV, then dQ recomputing S and dP); warp_specialized is the "
                    "one-kernel form (dQ by TMA reduce-add), not yet timed on the GPU")


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


def _consumers(spec) -> Pick:
    """The warp-specialized forms' consumer warpgroups: 2 (128 keys a block, FlashAttention-3's) when Skv (and for
    the CUDA kernel Sq) allows."""
    op = spec.op
    kn = list(op.inputs)[1]
    s = op.inputs[kn].shape[1 if op.layout == "bshd" else 2]
    s = op.sizes.get(s, s) if isinstance(s, str) else s
    qn = list(op.inputs)[0]                 # the CUDA wgmma kernel's query blocks are as long as its key blocks
    sq = op.inputs[qn].shape[1 if op.layout == "bshd" else 2]
    sq = op.sizes.get(sq, sq) if isinstance(sq, str) else sq
    if "cuda" not in spec.schedule.backends:
        sq = None
    if isinstance(s, int) and s % 128 == 0 and (not isinstance(sq, int) or sq % 128 == 0):
        return Pick(("schedule", "pipeline", "num_compute_wgs"), 2,
                    "two consumer warpgroups of 64 keys (128 keys a block share each streamed Q, dO block)")
    return Pick(("schedule", "pipeline", "num_compute_wgs"), 1,
                "one consumer warpgroup: Skv (or, with the CUDA kernel, Sq) is not a multiple of 128")


def attention_backward_defaults(spec, hw: Hardware) -> list[Pick]:
    picks = []
    if not written(spec, ("schedule", "backends")):
        why = _cuda_fits(spec)
        if why is None:
            picks.append(Pick(("schedule", "backends"), ["cuda", "pallas"],
                              "both: the CUDA C++ kernel (one launch: mma.sync, or wgmma with "
                              "kind warp_specialized) and the Pallas (Mosaic GPU) one"))
        else:
            picks.append(Pick(("schedule", "backends"), ["pallas"], f"Pallas only: {why}"))
    if not written(spec, ("schedule", "pipeline", "kind")):
        picks.append(Pick(("schedule", "pipeline", "kind"), DEFAULT_KIND, DEFAULT_KIND_WHY))
    if spec.schedule.pipeline.kind == "warp_specialized" and not written(spec, ("schedule", "pipeline",
                                                                                 "num_compute_wgs")):
        picks.append(_consumers(spec))
    if not written(spec, ("schedule", "compiler_params", "approx_math")):
        picks.append(Pick(("schedule", "compiler_params", "approx_math"), True,
                          "exp2 of the recomputed P in the fast approximate form (as the forward's)"))
    return picks
