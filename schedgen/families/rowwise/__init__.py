"""The rowwise family: a body over each row with reductions along it (softmax, norms, row sums, cross-entropy)."""
from __future__ import annotations

from pathlib import Path

from ...registry import Family, register, template_folder
from .model import RowwiseOp

FAMILY = register(Family(
    package=__package__,
    kind="rowwise",
    op_model=RowwiseOp,
    plan=".plan:plan_rowwise",
    defaults=".defaults:rowwise_defaults",
    reference=".reference:rowwise_reference",
    random_inputs=".reference:rowwise_random_inputs",
    explain=".explain:explain_rowwise",
    small_sizes=".reference:small_sizes",
    tune_aliases=".tune:rowwise_aliases",
    tune_space=".tune:rowwise_space",
    summary="a body over each row with reductions along it (softmax, layer / RMS norm, row sums, cross-entropy)",
    templates=template_folder("rowwise"),
    starter=Path(__file__).resolve().parent / "starter.yaml",
    peers=f"{__package__}.peers",
    metric="gbps",
    elementwise=lambda op: op.body,
    accumulation=lambda plan: plan.n,
    report=".report:REPORT",
    backward=".backward:rowwise_backward",
))
