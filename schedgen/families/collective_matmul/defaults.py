"""What the collective_matmul planner picks for the schedule fields a spec does not write: the per-step matmul's
schedule, picked by the matmul family for one ring step's [M, K] @ [K, N] (specs/collective_matmul_*.yaml use the
matmul family's 128 x 256 x 64 kernel too). The ring's own fields (remote refs, semaphores) have the planner's
defaults. A field the spec writes is never replaced."""
from __future__ import annotations

from ...frontend.model import recast
from ...plan.defaults import Pick
from ...plan.hardware import Hardware
from ...registry import get as family
from .plan import STEP_KIND, step_op_of


def collective_defaults(spec, hw: Hardware) -> list[Pick]:
    """The matmul family's picks for one step, but for zero padding (the ring's chunks are whole tiles: the planner
    says so at the sizes)."""
    op = spec.op
    if len(op.outputs) != 1 or op.lhs not in op.inputs or op.rhs not in op.inputs or len(op.inputs[op.lhs].shape) != 2 \
            or len(op.inputs[op.rhs].shape) != 2:
        return []                               # the planner reports what is wrong with the op
    step = spec.model_copy(update={"op": step_op_of(op, next(iter(op.outputs))),
                                   "schedule": recast(spec.schedule, family(STEP_KIND).schedule_model)})
    picks = []
    for pick in family(STEP_KIND).defaults(step, hw):
        value = pick.value
        if getattr(value, "out_of_bounds", "reject") == "zero":
            value = value.model_copy(update={"out_of_bounds": "reject"})
        picks.append(Pick(pick.path, value, pick.why.split("; the edge tiles")[0]))
    return picks
