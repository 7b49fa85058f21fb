"""What the benchmark report needs of the grouped_matmul family: its shape label and its minimum traffic."""
from __future__ import annotations

from ...registry import ReportHooks

ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4}


def shape_label(row: dict) -> str:
    """G x T x N x K, the dtype and the spec's name."""
    s = row.get("shape", {})
    dims = "x".join(str(s[k]) for k in ("T", "N", "K") if k in s)
    return f"{row.get('groups', '?')} groups {dims} {row.get('dtype', '')} {row['spec']}".strip()


def row_bytes(row: dict) -> float | None:
    """x read once, every group's weight once, the output written once."""
    s, g = row.get("shape", {}), row.get("groups")
    if not g or not all(k in s for k in ("T", "N", "K")):
        return None
    isz = ITEMSIZE.get(row.get("dtype", "bf16"), 2)
    return float((s["T"] * s["K"] + g * s["K"] * s["N"] + s["T"] * s["N"]) * isz)


REPORT = ReportHooks(shape_label=shape_label, row_bytes=row_bytes, order=5, marker="s",
                     series_labels={"torch_grouped_mm": "torch._grouped_mm",
                                    "cublas_loop": "a loop of cuBLAS calls (torch.matmul per group)",
                                    "device_copy": "a device copy of the bytes moved"},
                     title="Grouped (MoE) matmul throughput, each kernel verified against numpy before timing")
