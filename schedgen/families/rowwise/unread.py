"""Schedule fields the rowwise kernels do not read (the shared machinery: schedgen/plan/unread.py): the matmul
family's knobs (warpgroup roles, register budgets, the epilogue), the grid (the planner sizes it from the row
blocks), planar_snake's shape, and a block's SMEM layout, release delay and multicast axes (the CUDA kernel loads
rows from GMEM straight into registers; the Pallas pipeline stages them plainly)."""
from __future__ import annotations

from ...plan.common import Problems
from ...plan.unread import (
    CUDA_WARPGROUPS,
    DATA_PARALLEL_ONLY,
    NO_GRID,
    ONE_BLOCK_A_TILE,
    OUTPUT_DELAY_RELEASE,
    PALLAS_COMPILER_PARAMS,
    PLANAR_SNAKE_ONLY,
    Unread,
    UnreadTable,
    check_unread as _check,
)

_ROLES = ("every warp of a rowwise kernel loads, reduces and stores its rows alike (no producer / consumer split, "
          "no setmaxnreg)")
_EPILOGUE = "outputs are stored straight from registers (epilogue is the matmul's)"
_ROWS = "a block's rows go from GMEM into registers (CUDA) or through emit_pipeline's plain SMEM stages (Pallas)"

SCHEDULE = NO_GRID + PLANAR_SNAKE_ONLY + ONE_BLOCK_A_TILE + DATA_PARALLEL_ONLY + (
    Unread(("pipeline", "max_concurrent_steps"),
           lambda s: s.pipeline.kind == "none" and s.pipeline.max_concurrent_steps != 2,
           "with pipeline.kind: none a row group keeps one row in flight", "leave it out, or pipeline.kind: "
           "emit_pipeline"),
    Unread(("pipeline", "memory_registers"), lambda s: s.pipeline.memory_registers is not None, _ROLES,
           "leave memory_registers out"),
    Unread(("pipeline", "compute_registers"), lambda s: s.pipeline.compute_registers is not None, _ROLES,
           "leave compute_registers out"),
    Unread(("pipeline", "num_compute_wgs"), lambda s: s.pipeline.num_compute_wgs != 1, _ROLES,
           "1 (the default); schedule.num_warpgroups sets the block's warpgroups"),
    Unread(("pipeline", "wg_axis"), lambda s: s.pipeline.wg_axis is not None,
           "rows are split across warps by rows_per_block (the BlockSpecs' first dimension)", "leave wg_axis out"),
    Unread(("pipeline", "consumer_schedule"), lambda s: s.pipeline.consumer_schedule != "cooperative", _ROLES,
           "cooperative (the default)"),
    Unread(("epilogue", "tile"), lambda s: s.epilogue.tile is not None, _EPILOGUE, "leave epilogue out"),
    Unread(("epilogue", "buffers"), lambda s: s.epilogue.buffers != 2, _EPILOGUE, "leave epilogue out"),
    Unread(("epilogue", "store"), lambda s: s.epilogue.store != "tma", _EPILOGUE, "leave epilogue out"),
    Unread(("epilogue", "operands"), lambda s: s.epilogue.operands != "global", _EPILOGUE, "leave epilogue out"),
)

BLOCK = (
    Unread(("index_map",), lambda b: b.index_map is not None,
           "block i holds rows i x rows_per_block onwards (the kernels walk the rows in order)", "leave index_map out"),
    Unread(("memory_space",), lambda b: b.memory_space != "smem", _ROWS, "smem (the default)"),
    Unread(("transforms", "swizzle"), lambda b: b.transforms.swizzle != "auto", _ROWS, "auto (the default)"),
    Unread(("transforms", "tiling"), lambda b: b.transforms.tiling is not None, _ROWS, "leave it out"),
    Unread(("transforms", "transpose"), lambda b: b.transforms.transpose is not None, _ROWS, "leave it out"),
    Unread(("collective_axes",), lambda b: bool(b.collective_axes),
           "no operand is shared between blocks, so there is nothing to multicast", "leave it out"),
)
IN_BLOCK = BLOCK + (
    Unread(("delay_release",), lambda b: b.delay_release != 0,
           "a step's rows are released when the step's outputs are written", "0 (the default)"),
)
OUT_BLOCK = BLOCK + OUTPUT_DELAY_RELEASE

TABLE = UnreadTable("rowwise", schedule=SCHEDULE, in_spec=IN_BLOCK, out_spec=OUT_BLOCK,
                    pallas_only=PALLAS_COMPILER_PARAMS, cuda_only=CUDA_WARPGROUPS)


def check_unread(op, sch, problems: Problems) -> None:
    _check(sch, TABLE, tuple(op.inputs), tuple(op.outputs), problems)
