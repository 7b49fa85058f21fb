"""What the attention backward planner picks for the schedule fields a spec does not write."""
from __future__ import annotations

from ...plan.defaults import Pick, apply, written
from ...plan.hardware import Hardware
from .records import CUDA_REG_OVERHEAD, REG_LIMIT

# pipeline.kind when not written: the warp-specialized forms wherever the spec lets them plan (fixed sizes, head_dim
# 64 or 128, whole 64-row blocks, ...). Measured on the H200 (docs/benchmarks.md, session 11, D128 B1 S4096 H16 bf16):
# the Pallas one-kernel form 450 TFLOP/s against the two-kernel form's 333 (causal 376 / 269); the CUDA wgmma kernel
# 270 against the mma.sync kernel's 151. Elsewhere the two-kernel Pallas form and the mma.sync kernel, which take
# every spec the family does.
FAST_KIND = "warp_specialized"
FAST_KIND_WHY = ("one kernel a backend: the Pallas form of FlashAttention-3 (dQ by TMA reduce-add) and the CUDA wgmma "
                 "kernel (dQ by red.global.add into a workspace); 1.35x and 1.79x the two-kernel / mma.sync forms on "
                 "the H200")
DEFAULT_KIND = "emit_pipeline"
DEFAULT_KIND_WHY = "the two-kernel Pallas form (dK/dV, then dQ recomputing S and dP) and the mma.sync CUDA kernel"


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


def _well_formed(spec) -> bool:
    """q and k given, 4-D: the picks read their extents (otherwise the planner reports the op's problems)."""
    ins = list(spec.op.inputs.values())
    return len(ins) >= 2 and all(len(o.shape) == 4 for o in ins[:2])


def attention_backward_defaults(spec, hw: Hardware) -> list[Pick]:
    if not _well_formed(spec):
        return []
    picks = []
    if not written(spec, ("schedule", "backends")):
        why = _cuda_fits(spec)
        if why is None:
            picks.append(Pick(("schedule", "backends"), ["cuda", "pallas"],
                              "both: the CUDA C++ kernel (one launch: mma.sync, or wgmma with "
                              "kind warp_specialized) and the Pallas (Mosaic GPU) one"))
        else:
            picks.append(Pick(("schedule", "backends"), ["pallas"], f"Pallas only: {why}"))
    if not written(spec, ("schedule", "compiler_params", "approx_math")):
        picks.append(Pick(("schedule", "compiler_params", "approx_math"), True,
                          "exp2 of the recomputed P in the fast approximate form (as the forward's)"))
    consumers = [] if written(spec, ("schedule", "pipeline", "num_compute_wgs")) else [_consumers(spec)]
    if written(spec, ("schedule", "pipeline", "kind")):
        return picks + (consumers if spec.schedule.pipeline.kind == FAST_KIND else [])
    why_not = _fast_form_refuses(spec, hw, picks + consumers)
    if why_not is None:
        return picks + [Pick(("schedule", "pipeline", "kind"), FAST_KIND, FAST_KIND_WHY)] + consumers
    return picks + [Pick(("schedule", "pipeline", "kind"), DEFAULT_KIND, f"{DEFAULT_KIND_WHY}; {why_not}")]


def _fast_form_refuses(spec, hw: Hardware, picks: list[Pick]) -> str | None:
    """Why the warp-specialized forms cannot take the spec with the other picks (None: they can): the planner's
    first problem with pipeline.kind set to warp_specialized, so the pick and the rules never disagree."""
    from .plan import plan_attention_backward       # the planner imports this module's neighbours, not this one

    trial, _ = apply(spec, [*picks, Pick(("schedule", "pipeline", "kind"), FAST_KIND, "")])
    result, problems = plan_attention_backward(trial, hw)
    if result is not None:
        return None
    first = next(iter(problems), None)
    said = first.message if first is not None else "it does not plan"
    return f"warp_specialized does not take this spec ({said})"
