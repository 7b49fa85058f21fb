"""The collective_matmul family: multi-GPU out = all_gather(lhs) @ rhs over a 1-D mesh, the all-gather overlapped with the matmul."""
from __future__ import annotations

from pathlib import Path

from ...registry import Family, register, template_folder
from .model import CollectiveMatmulOp, CollectiveMatmulSchedule

FAMILY = register(Family(
    package=__package__,
    kind="collective_matmul",
    op_model=CollectiveMatmulOp,
    schedule_model=CollectiveMatmulSchedule,
    plan=".plan:plan_collective_matmul",
    defaults=".defaults:collective_defaults",
    reference=".reference:collective_matmul_reference",
    explain=".explain:explain_collective_matmul",
    small_sizes=".reference:small_sizes",
    summary="multi-GPU out = all_gather(lhs) @ rhs over a 1-D mesh, the all-gather overlapped with the matmul",
    templates=template_folder("collective_matmul"),
    starter=Path(__file__).resolve().parent / "starter.yaml",
    metric="tflops",
    devices=lambda op: op.mesh.num_devices,
    accumulation=lambda plan: plan.k,
    verify=".verify:verify_collective",
))
