"""The collective_matmul family: multi-GPU out = all_gather(lhs) @ rhs over a 1-D mesh, the all-gather overlapped with the matmul."""
from __future__ import annotations

from pathlib import Path

from .. import Family, register
from .explain import explain_collective_matmul
from .model import CollectiveMatmulOp
from .defaults import collective_defaults
from .plan import plan_collective_matmul
from .reference import collective_matmul_reference, small_sizes
from .verify import verify_collective

FAMILY = register(Family(
    kind="collective_matmul",
    op_model=CollectiveMatmulOp,
    plan=plan_collective_matmul,
    defaults=collective_defaults,
    reference=collective_matmul_reference,
    explain=explain_collective_matmul,
    small_sizes=small_sizes,
    summary="multi-GPU out = all_gather(lhs) @ rhs over a 1-D mesh, the all-gather overlapped with the matmul",
    templates=Path(__file__).resolve().parent / "templates",
    starter=Path(__file__).resolve().parent / "starter.yaml",
    metric="tflops",
    devices=lambda op: op.mesh.num_devices,
    accumulation=lambda plan: plan.k,
    verify=verify_collective,
))
