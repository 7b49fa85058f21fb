"""The rowwise family: a body over each row with reductions along it (softmax, norms, row sums, cross-entropy)."""
from __future__ import annotations

from pathlib import Path

from .. import Family, register
from .backward import rowwise_backward
from .defaults import rowwise_defaults
from .explain import explain_rowwise
from .model import RowwiseOp
from .plan import plan_rowwise
from .reference import rowwise_reference, small_sizes
from .report import REPORT
from .tune import rowwise_aliases, rowwise_space

FAMILY = register(Family(
    kind="rowwise",
    op_model=RowwiseOp,
    plan=plan_rowwise,
    defaults=rowwise_defaults,
    reference=rowwise_reference,
    explain=explain_rowwise,
    small_sizes=small_sizes,
    tune_aliases=rowwise_aliases,
    tune_space=rowwise_space,
    summary="a body over each row with reductions along it (softmax, layer / RMS norm, row sums, cross-entropy)",
    templates=Path(__file__).resolve().parent / "templates",
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="gbps",
    elementwise=lambda op: op.body,
    accumulation=lambda plan: plan.n,
    report=REPORT,
    backward=rowwise_backward,
))
