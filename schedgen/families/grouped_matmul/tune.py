"""The grouped_matmul family's tune aliases (the matmul family's knobs for one group's product, without the
M-cluster, split-K and consumer-schedule ones the grouped kernel does not take) and its default tune space."""
from __future__ import annotations

from ...frontend.model import recast
from ...registry import TuneSpace
from ...registry import get as family
from .plan import STEP_KIND, step_op_of

# knobs of the matmul family the grouped kernel has no use for (its planner takes the [1, 2] cluster only: cluster_n
# and the x multicast, not pairs along M, split-K or ping-pong)
DROPPED = ("cluster_m", "split_k", "consumer_schedule", "partial_sums", "scale_prefetch", "decomposition")
TILE_N = (128, 256)
STAGES = (3, 4, 5, 6)
STAGE_BYTES = 196608   # the ring's share of SMEM beside the staging buffers and tables (4 x 48 KiB, 6 x 32 KiB)


def _step(spec):
    return spec.model_copy(update={"op": step_op_of(spec.op, next(iter(spec.op.outputs))),
                                   "schedule": recast(spec.schedule, family(STEP_KIND).schedule_model)})


def grouped_aliases(spec) -> dict:
    """tile_m / tile_n / tile_k (moving the x, w and output blocks together), stages, consumers, ..."""
    op = spec.op
    if op.rhs not in op.inputs or len(op.inputs[op.rhs].shape) != 3 or op.lhs not in op.inputs:
        return {}
    return {k: v for k, v in family(STEP_KIND).tune_aliases(_step(spec)).items() if k not in DROPPED}


def grouped_space(spec) -> TuneSpace:
    """Around the planner's picks: tile_n 128 / 256, 3-6 stages (as many as SMEM holds beside the staging buffers),
    the [1, 2] cluster or none (cluster_n 1 / 2: x multicast to two tile columns of a group; on the CUDA backend
    alone, and where N's tile columns pair up), and the band width of the planar snake inside a group (4, 8, 16 tile
    rows); the tile rows stay 128 (two 64-row consumers: a group's rows are known only at the call)."""
    if spec.op.ragged == "k":
        return TuneSpace(why="ragged: k has no default tune space yet (its knobs are the schedule fields: write a tune "
                             "section over them)")
    sch = spec.schedule
    stages = tuple(sorted(set(STAGES) | {sch.pipeline.max_concurrent_steps}))
    params = {"tile_n": TILE_N, "stages": stages}
    if sch.backends == ["cuda"]:
        params["cluster_n"] = (1, 2)
    if sch.persistent.tile_order == "planar_snake":
        params["tile_width"] = tuple(sorted({4, 8, 16, sch.persistent.tile_width}))
    return TuneSpace(params=params, constraints=(f"(128 + tile_n) * 128 * stages <= {STAGE_BYTES}",),
                     why="the tile width, the ring depth, the x-multicast cluster and the band width of a group's "
                         "tiles (128-row tiles: a group's rows are known only at the call)")
