"""What the benchmark report needs of the matmul family: its shape label and its minimum traffic."""
from __future__ import annotations

from ...registry import ReportHooks

ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4, "f8e4m3": 1, "f8e5m2": 1}


def shape_label(row: dict) -> str:
    """[B x]M x N x K and the dtype, and the spec's name unless it is a plain matmul_* one."""
    s = row["shape"]
    dims = "x".join(str(s[k]) for k in ("M", "N", "K") if k in s)
    batch = f"{s['B']}x" if "B" in s else ""
    name = "" if row["spec"].startswith("matmul_") else f" {row['spec']}"
    return f"{batch}{dims} {row['dtype']}{name}"


def row_bytes(row: dict) -> float | None:
    """Each operand read once, the output written once (small epilogue operands left out)."""
    s = row.get("shape", {})
    if not all(k in s for k in ("M", "N", "K")):
        return None
    isz = ITEMSIZE.get(row.get("dtype", "bf16"), 2)
    return float(s.get("B", 1) * (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"]) * isz)


REPORT = ReportHooks(shape_label=shape_label, row_bytes=row_bytes, order=0, marker="o", always_in_legend=True,
                     series_labels={"jax_pallas": "JAX Pallas hopper_matmul_mgpu",
                                    "torch_eager": "torch.matmul + the epilogue in eager torch",
                                    "torch_compile": "torch.compile (max-autotune-no-cudagraphs)"},
                     title="Matmul throughput per shape (M x N x K), each kernel verified against numpy before timing")
