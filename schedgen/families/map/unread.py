"""Values of the map schedule's fields that the map kernels do not read (the shared machinery:
schedgen/plan/unread.py): planar_snake's shape without planar_snake, an output's delay_release, and the Mosaic GPU
compiler parameters when pallas is not built. (Fields the map schedule does not have, as the matmul family's
warpgroup roles and epilogue, are unknown keys: MapSchedule, model.py.)"""
from __future__ import annotations

from ...plan.common import Problems
from ...plan.unread import (
    CUDA_WARPGROUPS,
    ONE_BLOCK_A_TILE,
    OUTPUT_DELAY_RELEASE,
    PALLAS_COMPILER_PARAMS,
    PLANAR_SNAKE_ONLY,
    Unread,
    UnreadTable,
    check_unread as _check,
)

SCHEDULE = PLANAR_SNAKE_ONLY + ONE_BLOCK_A_TILE + (
    Unread(("pipeline", "max_concurrent_steps"),
           lambda s: s.pipeline.kind == "none" and s.pipeline.max_concurrent_steps != 2,
           "with pipeline.kind: none each step loads, computes and stores in turn (one stage)",
           "leave it out, or pipeline.kind: emit_pipeline"),
)

PALLAS_ONLY_BLOCK = (
    Unread(("transforms", "tiling"), lambda b: b.transforms.tiling is not None,
           "tiling is Mosaic GPU's SMEM tiling (a TilingTransform); the CUDA kernel lays a block out as its TMA boxes",
           "leave it out, or add pallas to schedule.backends"),
)

TABLE = UnreadTable("map", schedule=SCHEDULE, out_spec=OUTPUT_DELAY_RELEASE, pallas_only=PALLAS_COMPILER_PARAMS, cuda_only=CUDA_WARPGROUPS,
                    pallas_only_block=PALLAS_ONLY_BLOCK)


def check_unread(op, sch, problems: Problems) -> None:
    _check(sch, TABLE, tuple(op.inputs), tuple(op.outputs), problems)
