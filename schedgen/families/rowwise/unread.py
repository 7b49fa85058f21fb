"""Values of the schedule's fields that the rowwise kernels do not read (the shared machinery:
schedgen/plan/unread.py): the grid (the planner sizes it from the row blocks), and a block's SMEM layout, release
delay and multicast axes (the CUDA kernel loads rows from GMEM straight into registers; the Pallas pipeline stages
them plainly). The rowwise schedule is the core one: the other families' fields (warpgroup roles, the epilogue,
planar_snake's shape, ...) are unknown keys."""
from __future__ import annotations

from ...plan.common import Problems
from ...plan.unread import (
    CUDA_WARPGROUPS,
    NO_GRID,
    ONE_BLOCK_A_TILE,
    OUTPUT_DELAY_RELEASE,
    PALLAS_COMPILER_PARAMS,
    Unread,
    UnreadTable,
    check_unread as _check,
)

_ROWS = "a block's rows go from GMEM into registers (CUDA) or through emit_pipeline's plain SMEM stages (Pallas)"

SCHEDULE = NO_GRID + ONE_BLOCK_A_TILE + (
    Unread(("pipeline", "max_concurrent_steps"),
           lambda s: s.pipeline.kind == "none" and s.pipeline.max_concurrent_steps != 2,
           "with pipeline.kind: none a row group keeps one row in flight", "leave it out, or pipeline.kind: "
           "emit_pipeline"),
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
