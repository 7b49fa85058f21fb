"""TFLOP/s per shape of the matmul specs against their peers, as a grouped bar chart (PNG).

    python -m bench.plot_matmul bench/results/matmul.json docs/img/matmul_tflops.png [--fair fair.json]

Reads the rows `bench/run_gpu.py` writes (one row per spec and backend, peers inside), or the rows of
`bench/mm_fair.py` (all contenders of a spec in one row).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


SERIES = [("cuda", "schedgen CUDA"), ("pallas", "schedgen Pallas"), ("cublas", "cuBLAS (torch.matmul, the bare product)"),
          ("jax_pallas", "JAX Pallas hopper_matmul_mgpu"), ("torch_eager", "torch.matmul + eager epilogue"),
          ("torch_compile", "torch.compile max-autotune-no-cudagraphs")]
COLORS = {"cuda": "#1f77b4", "pallas": "#2ca02c", "cublas": "#7f7f7f", "jax_pallas": "#ff7f0e",
          "torch_eager": "#8c564b", "torch_compile": "#9467bd"}


def table(rows: list[dict]) -> dict[str, dict[str, float]]:
    """spec label -> {series: TFLOP/s}: the shape and dtype, and the spec's name where it is not a plain
    matmul_* product or another spec has that shape already (the tuned and fused 4096^3 specs are separate bars)."""
    out: dict[str, dict[str, float]] = {}
    owner: dict[str, str] = {}
    for r in rows:
        if "tflops" in r and isinstance(r["tflops"], dict):      # mm_fair.py
            label = f"{r['M']}x{r['N']}x{r['K']} {r['dtype']}"
            out[label] = dict(r["tflops"])
            continue
        if r.get("family") != "matmul" or r.get("variant", "default") != "default":
            continue
        s = r["shape"]
        label = f"{s.get('M')}x{s.get('N')}x{s.get('K')} {r['dtype']}"
        if not r["spec"].startswith("matmul_bf16_") and not r["spec"].startswith("matmul_f16_") \
                or owner.setdefault(label, r["spec"]) != r["spec"]:
            label += f" ({r['spec']})"
        cell = out.setdefault(label, {})
        cell[r["backend"]] = r["tflops"]
        for peer, info in (r.get("peers") or {}).items():
            if info.get("tflops") and info.get("verified", True):
                cell.setdefault(peer, info["tflops"])
    return out


def plot(data: dict[str, dict[str, float]], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = list(data)
    series = [(k, n) for k, n in SERIES if any(k in data[lb] for lb in labels)]
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(labels)), 5.2))
    for i, (key, name) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))]
        ys = [data[l].get(key, 0.0) for l in labels]
        ax.bar(xs, ys, width, label=name, color=COLORS[key])
    from schedgen.plan.hardware import PEAK_TFLOPS
    ax.axhline(PEAK_TFLOPS, color="black", lw=0.8, ls=":")
    ax.text(len(labels) - 0.5, PEAK_TFLOPS, f"dense bf16 peak {PEAK_TFLOPS:.0f} (datasheet)", ha="right", va="bottom",
            fontsize=8)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("TFLOP/s")
    ax.set_ylim(0, 1180)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", ncol=3, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("png")
    ap.add_argument("--title", default="Matmul on the H200 (M x N x K), verified before timing")
    args = ap.parse_args()
    plot(table(json.loads(Path(args.rows).read_text())), Path(args.png), args.title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
