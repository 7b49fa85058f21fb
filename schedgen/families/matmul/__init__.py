"""The matmul family: out = epilogue(lhs @ rhs): bf16/f16 in, f32 accumulation, a fused elementwise epilogue."""
from __future__ import annotations

from pathlib import Path

from .. import Family, register
from .draw import HOOKS as DRAW_HOOKS
from .explain import explain_matmul
from .model import MatmulOp
from .report import REPORT
from .defaults import matmul_defaults
from .plan import plan_matmul
from .tune import matmul_aliases, matmul_space
from .reference import accumulation, matmul_reference, small_sizes
from .backward import matmul_backward

FAMILY = register(Family(
    kind="matmul",
    op_model=MatmulOp,
    plan=plan_matmul,
    defaults=matmul_defaults,
    reference=matmul_reference,
    explain=explain_matmul,
    small_sizes=small_sizes,
    tune_aliases=matmul_aliases,
    tune_space=matmul_space,
    summary="out = epilogue(lhs @ rhs): bf16/f16/fp8 in, f32 accumulation, a fused elementwise epilogue",
    draw=DRAW_HOOKS,
    templates=Path(__file__).resolve().parent / "templates",
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="tflops",
    elementwise=lambda op: op.epilogue or "",
    accumulation=accumulation,
    report=REPORT,
    backward=matmul_backward,
    targets=("sm_90a", "sm_100a"),
))
