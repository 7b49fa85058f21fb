"""The grouped_matmul family: grouped (MoE) products out[rows of g] = epilogue(x[rows of g] @ w[g]) over contiguous
row groups whose offsets are known at the call, on one persistent warp-specialized kernel."""
from __future__ import annotations

from pathlib import Path

from ...registry import Family, register, template_folder
from .model import GroupedMatmulOp, GroupedMatmulSchedule

FAMILY = register(Family(
    package=__package__,
    kind="grouped_matmul",
    op_model=GroupedMatmulOp,
    schedule_model=GroupedMatmulSchedule,
    plan=".ragged_k:plan_grouped",          # ragged: k there, ragged: m in plan.py
    defaults=".defaults:grouped_defaults",
    reference=".reference:grouped_reference",
    explain=".explain:explain_grouped_matmul",
    small_sizes=".reference:small_sizes",
    tune_aliases=".tune:grouped_aliases",
    tune_space=".tune:grouped_space",
    summary="grouped (MoE) out[rows of g] = epilogue(x[rows of g] @ w[g]): per-group rows from int32 offsets at the "
            "call, one persistent kernel",
    templates=template_folder("grouped_matmul"),
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="tflops",
    elementwise=lambda op: op.epilogue or "",
    accumulation=lambda plan: plan.k,
    report=".report:REPORT",
    random_inputs=".reference:random_inputs",
    backward=".backward:grouped_backward",
    call_inputs=lambda op: (*op.inputs, op.group_offsets),
))
