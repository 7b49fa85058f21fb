"""GEMM planning shared by the families whose kernel is a GEMM (matmul, and the one-step matmul plans of the
grouped and collective matmul families): `out = epilogue(lhs @ rhs)` on a persistent, warp-specialized kernel fed by
a TMA stage ring.

The families import these names only (this package's `__all__`), never its modules:

- records.py    the plan (`MatmulPlan`) and the records it is composed of (tiles, cluster, pipeline, operand layout, warp
                roles, epilogue staging, the MMA generation's record), the phases' records, the operand record
- schedule.py   the phases every generation runs: the tile, the cluster, the pipeline, the loop over tiles, what
                the Pallas renderings take
- operands.py   the operands' roles, SMEM layout (major order, swizzle), TMA boxes, tensor maps, kernel arguments
- epilogue.py   the epilogue's vector operands staged in SMEM
- sm90.py       the sm_90a planner (wgmma, register accumulators): warpgroups, registers, epilogue chunks, SMEM map
- sm100.py      the sm_100a planner (tcgen05.mma, the accumulator in TMEM), and sm100_pallas.py its Pallas kernel's
- compose.py    the plan composed from the phases' records

`generation(target)` is the planner of a target's MMA generation, found through the hardware table
(schedgen/plan/hardware.py: `Hardware.mma`): each planner says where the wgmma kernel's rules report
(`wgmma_problems`), checks and plans its own kernel (`check`) and finishes the composed plan (`finish`).
"""
from __future__ import annotations

from typing import Protocol

from ..common import Problems
from ..hardware import Hardware, for_target
from .compose import compose_plan
from .epilogue import check_smem_operands, vector_slots
from .operands import (
    check_operand_roles,
    kernel_args,
    lhs_stage_rows,
    pallas_swizzles,
    smem_layouts,
    tensor_map,
)
from .records import (
    FP8_DTYPES,
    MMA_DTYPES,
    OUT_DTYPES,
    REG_OVERHEAD,
    WGMMA_M,
    ClusterShape,
    Dims,
    EpilogueCode,
    EpilogueStaging,
    MatmulPlan,
    MatOperand,
    OperandLayout,
    StageRing,
    TileGrid,
    VectorSlots,
    WarpRoles,
    at_max,
    broadcast_kind,
    mat_operand,
    peak_tflops,
)
from .schedule import (
    CLUSTER_AXIS,
    backend_limits,
    block_tile,
    cluster_shape,
    pipeline,
    tile_from_block_specs,
    tile_loop,
)
from .sm90 import SM90, Sm90, Wgmma, epilogue_chunks, registers, smem_map, warpgroups
from .sm100 import SM100, BlackwellPlan, Sm100, Tcgen05Mma, instruction_descriptor
from .sm100 import acc_buffers as sm100_acc_buffers
from .sm100 import epilogue_cols as sm100_epilogue_cols
from .sm100 import ring_depth_that_fits as sm100_ring_depth
from .sm100 import staging_bytes as sm100_staging_bytes
from .sm100_pallas import Tcgen05Plan
from .sm100_pallas import tmem_map as sm100_pallas_tmem_map


class Generation(Protocol):
    """The planner of one MMA generation (sm90.Sm90, sm100.Sm100): what it adds to the shared phases."""
    mma: str          # the hardware table's name of its tensor-core instructions (Hardware.mma)

    def schedule_spec(self, spec):
        """The spec the shared phases plan (sm_100a: a dynamic loop as the nd_loop it is planned as)."""

    def wgmma_problems(self, problems: Problems) -> Problems:
        """Where the wgmma kernel's phases (warpgroups, registers, epilogue chunks, SMEM map) report their rules."""

    def check(self, spec, op, dims: Dims, tile, lay, cl, pipe, hw: Hardware, problems: Problems):
        """The generation's own rules and numbers, after the shared phases (the state `finish` takes)."""

    def finish(self, plan: MatmulPlan, state, spec, hw: Hardware) -> MatmulPlan:
        """The composed plan with the generation's own records (plan.mma, and those its kernel changes)."""


# the planner of each MMA generation, by the hardware table's name of its instructions (Hardware.mma)
GENERATIONS: dict[str, Generation] = {SM90.mma: SM90, SM100.mma: SM100}


def generation(target: str) -> Generation:
    """The planner of `target`'s MMA generation (schedule.target: sm_90a wgmma, sm_100a tcgen05)."""
    return GENERATIONS[for_target(target).mma]


__all__ = [
    # the generations' planners
    "generation", "Generation", "GENERATIONS", "Sm90", "Sm100", "SM90", "SM100",
    # the plan and its records
    "MatmulPlan", "TileGrid", "ClusterShape", "StageRing", "OperandLayout", "WarpRoles", "EpilogueStaging", "Wgmma",
    "Tcgen05Mma", "BlackwellPlan", "Tcgen05Plan", "VectorSlots", "MatOperand", "Dims", "EpilogueCode",
    "mat_operand", "broadcast_kind", "at_max", "peak_tflops", "compose_plan",
    # the kernel's shape
    "FP8_DTYPES", "MMA_DTYPES", "OUT_DTYPES", "REG_OVERHEAD", "WGMMA_M", "CLUSTER_AXIS",
    # the phases
    "block_tile", "tile_from_block_specs", "cluster_shape", "pipeline", "tile_loop", "backend_limits", "warpgroups",
    "registers", "epilogue_chunks", "smem_map", "vector_slots",
    # the operands
    "check_operand_roles", "check_smem_operands", "smem_layouts", "lhs_stage_rows", "kernel_args", "tensor_map",
    "pallas_swizzles",
    # sm_100a
    "instruction_descriptor", "sm100_acc_buffers", "sm100_epilogue_cols", "sm100_ring_depth", "sm100_staging_bytes",
    "sm100_pallas_tmem_map",
]
