"""The matmul family: out = epilogue(lhs @ rhs): bf16/f16 in, f32 accumulation, a fused elementwise epilogue."""
from __future__ import annotations

from pathlib import Path

from ...registry import Family, register, template_folder
from .model import MatmulOp, MatmulSchedule

FAMILY = register(Family(
    package=__package__,
    kind="matmul",
    op_model=MatmulOp,
    schedule_model=MatmulSchedule,
    plan=".plan:plan_matmul",
    defaults=".defaults:matmul_defaults",
    reference=".reference:matmul_reference",
    explain=".explain:explain_matmul",
    small_sizes=".reference:small_sizes",
    tune_aliases=".tune:matmul_aliases",
    tune_space=".tune:matmul_space",
    summary="out = epilogue(lhs @ rhs): bf16/f16/fp8 in, f32 accumulation, a fused elementwise epilogue",
    draw=".draw:HOOKS",
    templates=template_folder("matmul"),
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="tflops",
    elementwise=lambda op: op.epilogue or "",
    accumulation=".reference:accumulation",
    report=".report:REPORT",
    backward=".backward:matmul_backward",
    dispatch=".dispatch_auto:derived_table",
    targets=("sm_90a", "sm_100a"),
))
