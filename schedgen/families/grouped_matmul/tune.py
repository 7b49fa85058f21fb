"""The grouped_matmul family's tune aliases (the matmul family's knobs for one group's product, without the
cluster and consumer-schedule ones the grouped kernel does not take) and its default tune space."""
from __future__ import annotations

from .. import TuneSpace
from ..matmul.tune import matmul_aliases

# knobs of the matmul family the grouped kernel has no use for (its planner rejects clusters and ping-pong)
DROPPED = ("cluster_m", "cluster_n", "split_k", "consumer_schedule")
TILE_N = (128, 256)
STAGES = (3, 4, 5, 6)


def _step(spec):
    from .plan import step_op_of
    return spec.model_copy(update={"op": step_op_of(spec.op, next(iter(spec.op.outputs)))})


def grouped_aliases(spec) -> dict:
    """tile_m / tile_n / tile_k (moving the x, w and output blocks together), stages, consumers, ..."""
    op = spec.op
    if op.rhs not in op.inputs or len(op.inputs[op.rhs].shape) != 3 or op.lhs not in op.inputs:
        return {}
    return {k: v for k, v in matmul_aliases(_step(spec)).items() if k not in DROPPED}


def grouped_space(spec) -> TuneSpace:
    """Around the planner's picks: tile_n 128 / 256, 3-6 stages, row-major or planar-snake order inside a group
    (the tile rows stay 128: two 64-row consumers; a group's rows are known only at the call)."""
    sch = spec.schedule
    stages = tuple(sorted(set(STAGES) | {sch.pipeline.max_concurrent_steps}))
    return TuneSpace(params={"tile_n": TILE_N, "stages": stages, "tile_order": ("row_major", "planar_snake")},
                     why="the tile width, the ring depth and the order of a group's tiles (128-row tiles: a "
                         "group's rows are known only at the call)")
