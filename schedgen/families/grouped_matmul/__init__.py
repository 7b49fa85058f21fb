"""The grouped_matmul family: grouped (MoE) products out[rows of g] = epilogue(x[rows of g] @ w[g]) over contiguous
row groups whose offsets are known at the call, on one persistent warp-specialized kernel."""
from __future__ import annotations

from pathlib import Path

from .. import Family, register
from .backward import grouped_backward
from .defaults import grouped_defaults
from .explain import explain_grouped_matmul
from .model import GroupedMatmulOp
from .plan import plan_grouped_matmul
from .reference import grouped_reference, random_inputs, small_sizes
from .report import REPORT
from .tune import grouped_aliases, grouped_space

FAMILY = register(Family(
    kind="grouped_matmul",
    op_model=GroupedMatmulOp,
    plan=plan_grouped_matmul,
    defaults=grouped_defaults,
    reference=grouped_reference,
    explain=explain_grouped_matmul,
    small_sizes=small_sizes,
    tune_aliases=grouped_aliases,
    tune_space=grouped_space,
    summary="grouped (MoE) out[rows of g] = epilogue(x[rows of g] @ w[g]): per-group rows from int32 offsets at the "
            "call, one persistent kernel",
    templates=Path(__file__).resolve().parent / "templates",
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="tflops",
    elementwise=lambda op: op.epilogue or "",
    accumulation=lambda plan: plan.k,
    report=REPORT,
    random_inputs=random_inputs,
    backward=grouped_backward,
    call_inputs=lambda op: (*op.inputs, op.group_offsets),
))
