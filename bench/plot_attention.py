"""TFLOP/s per shape of the attention record against its peers, as a grouped bar chart (PNG).

    python -m bench.plot_attention bench/results/attention.json docs/img/attention_tflops.png

Reads the rows bench/record17.py (and `schedgen bench`) write: one row per spec and backend, the peers inside
(sdpa_cudnn, sdpa_flash: torch SDPA restricted to one backend; jax_pallas: JAX's attention_mgpu at the best of its
sweep), every contender timed side by side. The older record of bench/attn_gpu.py (an object whose "rows" hold
cuda_tflops, sdpa_tflops, ... per shape; its one SDPA peer was torch's own backend pick) is read too.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

SERIES = [("cuda", "schedgen CUDA"), ("pallas", "schedgen Pallas"), ("sdpa_cudnn", "torch SDPA, cuDNN backend"),
          ("sdpa_flash", "torch SDPA, flash backend"), ("sdpa", "torch SDPA (torch's pick)"),
          ("jax_pallas", "JAX attention_mgpu (best of sweep)")]
COLORS = {"cuda": "#1f77b4", "pallas": "#2ca02c", "sdpa_cudnn": "#7f7f7f", "sdpa_flash": "#bcbd22",
          "sdpa": "#8c564b", "jax_pallas": "#ff7f0e"}
OLD_KEYS = {"cuda": "cuda", "pallas": "pallas", "sdpa": "sdpa", "jax": "jax_pallas"}   # attn_gpu.py's -> ours


def _old_label(r: dict) -> str:
    heads = f"{r['Hq']}/{r['Hkv']}" if r["Hq"] != r["Hkv"] else str(r["Hq"])
    return f"{r['B']}x{heads}x{r['Sq']}x{r['D']}" + (" causal" if r["causal"] else "")


def label_of(r: dict) -> str:
    """A row's shape on the x axis: its spec and sizes, and its mask."""
    sizes = "x".join(str(v) for v in r["shape"].values())
    mask = r.get("causal_alignment") or ("causal" if r.get("causal") else "")
    return f"{r['spec']}\n{sizes}" + (f" {mask}" if mask else "")


def table(record) -> dict[str, dict[str, float]]:
    """shape label -> {series: TFLOP/s}, from bench rows (a list) or attn_gpu.py's record (an object)."""
    out: dict[str, dict[str, float]] = {}
    if isinstance(record, dict):
        # the shapes (labels p-*), timed against every peer; schedule and tile-order variants are not plotted
        for r in record["rows"]:
            if str(r.get("label", "")).startswith("p-") and r.get("cuda_tflops"):
                out[_old_label(r)] = {ours: r[f"{key}_tflops"] for key, ours in OLD_KEYS.items()
                                      if r.get(f"{key}_tflops")}
        return out
    for r in record:
        if r.get("family") != "attention" or r.get("variant", "default") != "default" or not r.get("tflops"):
            continue
        cell = out.setdefault(label_of(r), {})
        cell[r["backend"]] = r["tflops"]
        for name, p in (r.get("peers") or {}).items():
            if p.get("tflops") and p.get("verified", True):
                cell.setdefault(name, p["tflops"])
    return out


def plot(data: dict[str, dict[str, float]], path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = list(data)
    series = [(k, n) for k, n in SERIES if any(k in data[lb] for lb in labels)]
    fig, ax = plt.subplots(figsize=(max(10.0, 1.4 * len(labels) + 2), 5.6), dpi=110)
    width = 0.8 / max(1, len(series))
    for i, (key, name) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))]
        ax.bar(xs, [data[lb].get(key, 0.0) for lb in labels], width, label=name, color=COLORS.get(key, "#17becf"))
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("TFLOP/s (4 D per unmasked (q, k) pair per head and batch)")
    ax.set_title("Attention forward, bf16, H200: schedgen vs torch SDPA (cuDNN, flash) and JAX attention_mgpu\n"
                 "each verified against float64 first, timed interleaved", fontsize=10)
    top = max((v for cell in data.values() for v in cell.values()), default=800.0)
    ax.set_ylim(0, top * 1.25)
    ax.legend(fontsize=8, ncol=3, loc="upper left", frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("record")
    ap.add_argument("png")
    args = ap.parse_args()
    plot(table(json.loads(Path(args.record).read_text())), Path(args.png))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
