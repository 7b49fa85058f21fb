"""Schedule fields the matmul kernels do not read (the shared machinery: schedgen/plan/unread.py). The collective
matmul's step kernel is this family's, so its planner reports these too."""
from __future__ import annotations

from ...plan.common import Problems
from ...plan.unread import (
    NO_GRID,
    ONE_BLOCK_A_TILE,
    OUTPUT_DELAY_RELEASE,
    PALLAS_COMPILER_PARAMS,
    PLANAR_SNAKE_ONLY,
    Unread,
    UnreadTable,
    check_unread as _check,
)

_EPILOGUE = "the output tile leaves through the epilogue (schedule.epilogue: its chunks, buffers and store)"

_DIRECT = "with store: direct each thread stores its accumulator fragment from registers (no SMEM chunks)"

SCHEDULE = NO_GRID + PLANAR_SNAKE_ONLY + ONE_BLOCK_A_TILE + (
    Unread(("num_warpgroups",), lambda s: s.num_warpgroups != 1,
           "a block is one TMA producer warpgroup and pipeline.num_compute_wgs consumer warpgroups",
           "1 (the default); set pipeline.num_compute_wgs for more consumers",
           ("an sm_100a block is a TMA producer warp, the thread that issues every tcgen05.mma and an epilogue "
            "warpgroup that reads the accumulator from TMEM", "1 (the default)")),
    Unread(("epilogue", "tile"), lambda s: s.epilogue.store == "direct" and s.epilogue.tile is not None, _DIRECT,
           "leave tile out, or store: tma"),
    Unread(("epilogue", "buffers"), lambda s: s.epilogue.store == "direct" and s.epilogue.buffers != 2, _DIRECT,
           "leave buffers out, or store: tma"),
)

OUT_SPEC = OUTPUT_DELAY_RELEASE + (
    Unread(("transforms", "tiling"), lambda b: b.transforms.tiling is not None, _EPILOGUE, "leave tiling out"),
    Unread(("transforms", "swizzle"), lambda b: b.transforms.swizzle != "auto",
           _EPILOGUE + ", whose SMEM chunks take the swizzle of their row width", "auto (the default)"),
    Unread(("transforms", "transpose"), lambda b: b.transforms.transpose is not None,
           "the output is stored in its own [M, N] layout", "leave transpose out"),
    Unread(("collective_axes",), lambda b: bool(b.collective_axes),
           "each CTA stores its own output tile (only an input is multicast over a cluster)",
           "leave collective_axes out"),
    Unread(("out_of_bounds",), lambda b: b.out_of_bounds != "reject",
           "a TMA store clips a ragged edge of the output; out_of_bounds: zero on the lhs and rhs BlockSpecs is what "
           "makes ragged sizes work", "reject (the default)"),
)

TABLE = UnreadTable("matmul", schedule=SCHEDULE, out_spec=OUT_SPEC, pallas_only=PALLAS_COMPILER_PARAMS)


def check_unread(op, sch, out_name: str, problems: Problems) -> None:
    _check(sch, TABLE, (op.lhs, op.rhs), (out_name,), problems)
