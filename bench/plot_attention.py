"""TFLOP/s per shape of the attention record against its peers, as a grouped bar chart (PNG).

    python bench/plot_attention.py bench/results/attention.json docs/img/attention_tflops.png

Reads the rows bench/attn_gpu.py writes (one row per shape, every contender inside, timed side by side).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

SERIES = [("cuda", "schedgen CUDA"), ("pallas", "schedgen Pallas"), ("sdpa", "torch SDPA"),
          ("jax", "JAX attention_mgpu (best of sweep)")]
COLORS = {"cuda": "#1f77b4", "pallas": "#2ca02c", "sdpa": "#7f7f7f", "jax": "#ff7f0e"}


def label_of(r: dict) -> str:
    heads = f"{r['Hq']}/{r['Hkv']}" if r["Hq"] != r["Hkv"] else str(r["Hq"])
    return f"{r['B']}x{heads}x{r['Sq']}x{r['D']}" + (" causal" if r["causal"] else "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("record")
    ap.add_argument("png")
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # the shapes (labels p-*), timed against every peer; schedule and tile-order variants (t-, o-, ab-) are not plotted
    rows = [r for r in json.loads(Path(args.record).read_text())["rows"] if r["label"].startswith("p-") and r.get("cuda_tflops")]
    fig, ax = plt.subplots(figsize=(13, 5.2), dpi=110)
    width = 0.8 / len(SERIES)
    for i, (key, name) in enumerate(SERIES):
        vals = [r.get(f"{key}_tflops") or 0 for r in rows]
        xs = [j + (i - (len(SERIES) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, vals, width, label=name, color=COLORS[key])
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([label_of(r) for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("TFLOP/s (4 D per unmasked (q, k) pair per head and batch)")
    ax.set_title("Flash attention forward, bf16, H200: schedgen against torch SDPA and JAX's attention_mgpu "
                 "(CUPTI kernel time, interleaved)", fontsize=10)
    ax.axhline(650, color="#d62728", lw=0.8, ls="--", label="target: 650 at 1x16x16384x128")
    ax.set_ylim(0, 880)
    ax.legend(fontsize=8, ncol=5, loc="upper center")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
