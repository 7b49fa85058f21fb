"""Schedule fields the map kernels do not read (the shared machinery: schedgen/plan/unread.py): the matmul family's
knobs (warpgroup roles, register budgets, the epilogue), planar_snake's shape without planar_snake, an output's
delay_release, and the Mosaic GPU compiler parameters when pallas is not built."""
from __future__ import annotations

from ...plan.common import Problems
from ...plan.unread import (
    CUDA_WARPGROUPS,
    DATA_PARALLEL_ONLY,
    ONE_BLOCK_A_TILE,
    OUTPUT_DELAY_RELEASE,
    PALLAS_COMPILER_PARAMS,
    PLANAR_SNAKE_ONLY,
    Unread,
    UnreadTable,
    check_unread as _check,
)

_ROLES = ("every warpgroup of a map kernel loads, computes and stores alike (no producer / consumer split, no "
          "setmaxnreg)")
_EPILOGUE = "outputs leave in their out_specs blocks, staged in SMEM and stored by TMA (epilogue is the matmul's)"

SCHEDULE = PLANAR_SNAKE_ONLY + ONE_BLOCK_A_TILE + DATA_PARALLEL_ONLY + (
    Unread(("pipeline", "max_concurrent_steps"),
           lambda s: s.pipeline.kind == "none" and s.pipeline.max_concurrent_steps != 2,
           "with pipeline.kind: none each step loads, computes and stores in turn (one stage)",
           "leave it out, or pipeline.kind: emit_pipeline"),
    Unread(("pipeline", "memory_registers"), lambda s: s.pipeline.memory_registers is not None, _ROLES,
           "leave memory_registers out"),
    Unread(("pipeline", "compute_registers"), lambda s: s.pipeline.compute_registers is not None, _ROLES,
           "leave compute_registers out"),
    Unread(("pipeline", "num_compute_wgs"), lambda s: s.pipeline.num_compute_wgs != 1, _ROLES,
           "1 (the default); schedule.num_warpgroups sets the block's warpgroups"),
    Unread(("pipeline", "wg_axis"), lambda s: s.pipeline.wg_axis is not None,
           "all threads share each block (16-byte vectors), warpgroups are not given rows or columns of it",
           "leave wg_axis out"),
    Unread(("pipeline", "consumer_schedule"), lambda s: s.pipeline.consumer_schedule != "cooperative",
           "all threads share each block (16-byte vectors); there are no consumer warpgroups taking tiles",
           "cooperative (the default)"),
    Unread(("epilogue", "tile"), lambda s: s.epilogue.tile is not None, _EPILOGUE, "leave epilogue out"),
    Unread(("epilogue", "buffers"), lambda s: s.epilogue.buffers != 2, _EPILOGUE, "leave epilogue out"),
    Unread(("epilogue", "store"), lambda s: s.epilogue.store != "tma", _EPILOGUE, "leave epilogue out"),
    Unread(("epilogue", "operands"), lambda s: s.epilogue.operands != "global", _EPILOGUE, "leave epilogue out"),
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
