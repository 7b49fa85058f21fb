"""What the benchmark report needs of the attention family: its shape label, its minimum traffic, its peers' names,
and its committed record read as bench rows.

bench/results/attention.json is the attention record of an earlier driver, not a list of bench rows: an object (date, gpu, driver,
notes) whose "rows" each hold one shape (B, Hq, Hkv, Sq, Skv, D, causal) with every contender timed side by side
(cuda_ms, pallas_ms, sdpa_ms, jax_ms, cuda_same_ms: the CUDA kernel at the Pallas kernel's schedule) and each one's
relative error against float64 (*_err). `record_rows` turns the timed ones into the rows `schedgen bench` writes
(one per backend, the others as peers); the correctness-only rows (labels c-*, no times) have nothing to plot.
"""
from __future__ import annotations

from typing import Any

from ...registry import ReportHooks

ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4}
RECORD_SHAPE = ("B", "Hq", "Hkv", "Sq", "Skv", "D")
RECORD_TOLERANCE = 1e-2        # the record's own pass mark (bench/attn_record.py: rel. error < 1e-2 against float64)
RECORD_DTYPE = "bf16"          # the earlier attention driver timed bf16 inputs only (its rows name no dtype)


def shape_label(row: dict) -> str:
    """B x H x S x D (H as Hq/Hkv under GQA) and 'causal' (naming a top-left mask) for the record's shapes; else the
    spec and its sizes."""
    s = row["shape"]
    causal = (" causal top-left" if row.get("causal_alignment") == "top_left" else " causal") if row.get("causal") \
        else ""
    if all(k in s for k in RECORD_SHAPE):
        heads = f"{s['Hq']}/{s['Hkv']}" if s["Hq"] != s["Hkv"] else str(s["Hq"])
        seq = str(s["Sq"]) if s["Sq"] == s["Skv"] else f"{s['Sq']}/{s['Skv']}"
        return f"{s['B']}x{heads}x{seq}x{s['D']}{causal}"
    return f"{row['spec']} {'x'.join(str(v) for v in s.values())}"     # the report's default, as for any family


def row_bytes(row: dict) -> float | None:
    """q and o read and written once, k and v read once (the record's shapes; a spec's own size names are not
    known here)."""
    s = row.get("shape", {})
    if not all(k in s for k in RECORD_SHAPE):
        return None
    isz = ITEMSIZE.get(row.get("dtype", RECORD_DTYPE), 2)
    return float(2 * s["B"] * s["D"] * (s["Hq"] * s["Sq"] + s["Hkv"] * s["Skv"]) * isz)


def _verified(err: Any) -> bool:
    return isinstance(err, (int, float)) and err <= RECORD_TOLERANCE


def record_rows(record: Any) -> list[dict] | None:
    """the attention record of an earlier driver as bench rows, or None when `record` is not one."""
    if not isinstance(record, dict) or not isinstance(record.get("rows"), list):
        return None
    rows = record["rows"]
    if not all(isinstance(r, dict) and "label" in r and all(k in r for k in RECORD_SHAPE) for r in rows):
        return None
    env = {"gpu": record.get("gpu"), "driver": record.get("driver"), "software": record.get("software")}
    out = []
    for r in rows:
        ours = {b: r[f"{b}_ms"] for b in ("cuda", "pallas") if r.get(f"{b}_ms")}
        if not ours:
            continue                                  # a correctness check: nothing timed
        label = str(r["label"])
        base = {"family": "attention", "spec": label.removeprefix("p-"), "kernel": r.get("kernel", ""),
                "shape": {k: r[k] for k in RECORD_SHAPE}, "dtype": r.get("dtype", RECORD_DTYPE),
                "flops": r.get("flops"), "causal": bool(r.get("causal")),
                "causal_alignment": r.get("causal_alignment"), "date": record.get("date"), "env": env,
                "variant": "default" if label.startswith("p-") else label}
        for backend, ms in ours.items():
            peers = {}
            for name, key in (("sdpa", "sdpa"), ("jax_pallas", "jax"), ("cuda_same", "cuda_same")):
                if r.get(f"{key}_ms"):
                    peers[name] = {"time_ms": r[f"{key}_ms"], "tflops": r.get(f"{key}_tflops"),
                                   "verified": _verified(r.get(f"{key}_err")),
                                   "rel_error": r.get(f"{key}_err"), "ratio": r[f"{key}_ms"] / ms,
                                   "ratio_basis": "cupti"}
            out.append({**base, "backend": backend, "kernel": r.get(f"{backend}_kernel", base["kernel"]),
                        "time_ms": ms, "tflops": r.get(f"{backend}_tflops"), "timing": "cupti",
                        "verified": _verified(r.get(f"{backend}_err")), "rel_error": r.get(f"{backend}_err"),
                        "peers": peers})
    return out


REPORT = ReportHooks(shape_label=shape_label, row_bytes=row_bytes, order=1, marker="^", record_rows=record_rows,
                     series_labels={"jax_pallas": "JAX attention_mgpu (best of its sweep)",
                                    "sdpa_cudnn": "torch SDPA, cuDNN backend", "sdpa_flash": "torch SDPA, flash backend",
                                    "sdpa": "torch SDPA (torch's backend pick)",
                                    "cuda_same": "schedgen CUDA at the Pallas kernel's schedule"})
