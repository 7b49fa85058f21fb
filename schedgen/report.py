"""A benchmark report from bench rows (bench/results/<family>.json): JSON, a Markdown table and PNG plots.

    write_report(rows, "report/")       # what `schedgen bench ... --report report/` calls
    python -m schedgen.report bench/results/*.json -o report/

Plots: achieved TFLOP/s or GB/s per shape against each peer (by the family's `metric`), and a roofline view: each
kernel's time against its floor, floor = max(FLOPs / matrix rate, bytes / copy bandwidth). The rates are taken from
the rows where they were measured (the best cuBLAS TFLOP/s; the device-to-device copy peer) or given; without
either, 4.25 TB/s and the 989 TFLOP/s datasheet peak stand in, and the report says which.

What differs per family (shape labels, minimum traffic, titles, markers, peer names, a record format of its own)
comes from the family's manifest (`Family.report`, a `ReportHooks`): this module names no family.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from . import registry
from .bench.rows import MAX_RECORD_BYTES, ROW_KEYS, row_problem
from .errors import printable, stop_quietly_on_broken_pipe
from .registry import ReportHooks
from .files import UnreadableFile, read_json, save_figure, write_file
from .plan.hardware import COPY_GBPS as DEFAULT_COPY_GBPS, PEAK_TFLOPS   # the figures and their provenance

SERIES = {   # key -> (label, colour)
    "cuda": ("schedgen CUDA", "#1f77b4"),
    "pallas": ("schedgen Pallas", "#2ca02c"),
    "cublas": ("cuBLAS (torch.matmul)", "#7f7f7f"),
    "jax_pallas": ("JAX's own Pallas kernel", "#ff7f0e"),        # each family names its kernel (series_labels)
    "sdpa": ("torch SDPA", "#8c564b"),
    "copy": ("device copy (same bytes)", "#9467bd"),
}


def _family(kind: str):
    try:
        return registry.get(kind)
    except KeyError:                 # rows of a family this schedgen does not know: the defaults
        return None


def _hooks(kind: str) -> ReportHooks:
    fam = _family(kind)
    return fam.report if fam is not None else ReportHooks()


def _metric(kind: str) -> str:
    fam = _family(kind)
    return fam.metric if fam is not None else "tflops"


def _kind(row: dict) -> str:
    """The row's family; rows of the first record format carry none (the family whose hooks say so)."""
    if row.get("family"):
        return row["family"]
    return next((f.kind for f in registry.all_families() if f.report.unlabelled_rows), "")


def _label(series: str, kind: str | None = None) -> str:
    """The series' label, as the family `kind` names its peers where it does."""
    own = _hooks(kind).series_labels.get(series) if kind else None
    return own or SERIES.get(series, (series, None))[0]


def _series_label(series: str, points: Sequence[dict]) -> str:
    """One label for a series across families: theirs where they agree, else the generic one."""
    labels = {_label(series, p["family"]) for p in points if p["series"] == series}
    return labels.pop() if len(labels) == 1 else _label(series)


def _colour(series: str) -> str:
    return SERIES.get(series, (None, "#17becf"))[1]


def shape_label(row: dict) -> str:
    """The row's shape on plots and tables: the family's label, else the spec and its sizes."""
    own = _hooks(_kind(row)).shape_label
    if own is not None:
        return own(row)
    return f"{row['spec']} {'x'.join(str(v) for v in row['shape'].values())}"


def row_bytes(row: dict) -> float | None:
    """The minimum traffic: rows that say GB/s through GB/s x time, others through their family's formula."""
    if row.get("gbps") and row.get("time_ms"):
        return row["gbps"] * 1e9 * row["time_ms"] * 1e-3
    own = _hooks(_kind(row)).row_bytes
    return own(row) if own is not None else None


def rates(rows: Sequence[dict], copy_gbps: float | None = None, matrix_tflops: float | None = None) -> dict:
    """The two rates of the floor, and where each came from."""
    out: dict[str, Any] = {}
    if copy_gbps:
        out.update(copy_gbps=float(copy_gbps), copy_source="given")
    else:
        measured = [row_bytes(r) / (r["peer_time_ms"] * 1e-3) / 1e9 for r in rows
                    if r.get("peer") == "copy" and r.get("peer_time_ms") and row_bytes(r)]
        if measured:
            out.update(copy_gbps=max(measured), copy_source="measured: the fastest device copy in these rows")
        else:
            out.update(copy_gbps=DEFAULT_COPY_GBPS, copy_source="default (H200 device copy)")
    if matrix_tflops:
        out.update(matrix_tflops=float(matrix_tflops), matrix_source="given")
    else:
        cub = [p["tflops"] for r in rows for n, p in (r.get("peers") or {}).items()
               if n == "cublas" and p.get("tflops") and p.get("verified", True)]
        if cub:
            out.update(matrix_tflops=max(cub), matrix_source="measured: the best cuBLAS rate in these rows")
        else:
            out.update(matrix_tflops=PEAK_TFLOPS, matrix_source="default (datasheet dense peak)")
    return out


def kernels(rows: Sequence[dict]) -> list[dict]:
    """Every timed kernel in the rows, once: ours per backend, each peer once per spec and shape."""
    out, seen = [], set()
    for r in rows:
        label = shape_label(r)
        flops = float(r.get("flops") or 0)
        nbytes = row_bytes(r)
        base = {"spec": r["spec"], "family": _kind(r), "shape": label, "variant": r.get("variant", "default"),
                "flops": flops, "bytes": nbytes}
        if r.get("time_ms"):
            out.append({**base, "series": r["backend"], "time_ms": r["time_ms"], "verified": r.get("verified")})
        peers = dict(r.get("peers") or {})
        if r.get("peer") == "copy" and r.get("peer_time_ms"):
            peers["copy"] = {"time_ms": r["peer_time_ms"], "verified": True}
        for name, p in peers.items():
            key = (r["spec"], label, base["variant"], name)
            if p.get("time_ms") and key not in seen:
                seen.add(key)
                out.append({**base, "series": name, "time_ms": p["time_ms"], "verified": p.get("verified")})
    for k in out:
        t = k["time_ms"] * 1e-3
        k["tflops"] = k["flops"] / t / 1e12 if k["flops"] else None
        k["gbps"] = k["bytes"] / t / 1e9 if k["bytes"] else None
    return out


def roofline(entries: Iterable[dict], r: dict) -> list[dict]:
    """Each kernel's floor: max(FLOPs / matrix rate, bytes / copy bandwidth), and its time as a share of it."""
    out = []
    for k in entries:
        compute = k["flops"] / (r["matrix_tflops"] * 1e12) * 1e3 if k["flops"] else 0.0
        memory = k["bytes"] / (r["copy_gbps"] * 1e9) * 1e3 if k["bytes"] else 0.0
        floor = max(compute, memory)
        out.append({**k, "floor_ms": floor, "bound": "compute" if compute >= memory else "memory",
                    "of_floor": floor / k["time_ms"] if floor else None})
    return out


# ---------------------------------------------------------------------------------------------- plots


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _grouped_bars(ax, groups: list[str], series: list[str], values: dict, fmt: str, kind: str | None = None) -> None:
    n = len(series)
    width = 0.8 / max(1, n)
    for i, s in enumerate(series):
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(groups))]
        ys = [values.get((g, s)) or 0.0 for g in groups]
        bars = ax.bar(xs, ys, width, label=_label(s, kind), color=_colour(s))
        for b, y in zip(bars, ys):
            if y:   # inside the bar's top, clear of the reference lines above
                ax.text(b.get_x() + b.get_width() / 2, y * 0.985, fmt.format(y), ha="center", va="top", fontsize=6.5,
                        rotation=90, color="white", fontweight="bold")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=25, ha="right", fontsize=8)


def _ref_line(ax, y: float, colour: str, style: str, label: str):
    return ax.axhline(y, color=colour, lw=1.0, ls=style, label=label)


def plot_throughput(entries: list[dict], family: str, r: dict, path: Path) -> Path:
    """TFLOP/s per shape, ours and each peer, against the peak (a family whose metric is tflops); else GB/s per spec
    and shape against the device copy."""
    plt = _plt()
    ks = [k for k in entries if k["family"] == family]

    def group(k: dict) -> str:
        return k["shape"] + ("" if k["variant"] == "default" else f" ({k['variant']})")
    groups = list(dict.fromkeys(group(k) for k in ks))
    series = [s for s in SERIES if any(k["series"] == s for k in ks)] + sorted(
        {k["series"] for k in ks} - set(SERIES))
    metric = _metric(family)
    title = _hooks(family).title
    values = {(group(k), k["series"]): k[metric] for k in ks}
    fig, ax = plt.subplots(figsize=(max(8.0, 1.25 * len(groups) + 2), 5.6))
    _grouped_bars(ax, groups, series, values, "{:.0f}", family)
    if metric == "tflops":
        _ref_line(ax, PEAK_TFLOPS, "black", ":", f"dense bf16 peak {PEAK_TFLOPS:.0f} TFLOP/s (datasheet)")
        _ref_line(ax, r["matrix_tflops"], "#555555", "--", f"matrix rate of the floor {r['matrix_tflops']:.0f} TFLOP/s")
        ax.set_ylabel("achieved TFLOP/s (higher is better)")
        ax.set_ylim(0, PEAK_TFLOPS * 1.3)
        ax.set_title(title or f"{family.capitalize()} throughput per spec and shape, each kernel verified against "
                              f"numpy before timing", fontsize=10)
    else:
        _ref_line(ax, r["copy_gbps"], "#9467bd", "--", f"copy bandwidth of the floor {r['copy_gbps']:.0f} GB/s")
        ax.set_ylabel("achieved GB/s, bytes read + written (higher is better)")
        ax.set_ylim(0, r["copy_gbps"] * 1.35)
        ax.set_title(title or f"{family.capitalize()} bandwidth per spec and shape, against a device copy of the "
                              f"same bytes", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", ncol=3, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path


def plot_roofline(points: list[dict], r: dict, path: Path) -> Path:
    """Left: each kernel's time against its floor (log-log; the diagonal is the floor), shapes numbered. Right: the
    share of the floor each kernel reaches, per shape and series. One colour legend for both, below."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    plt = _plt()
    pts = [p for p in points if p["floor_ms"]]
    groups = list(dict.fromkeys(p["shape"] for p in pts))
    number = {g: i + 1 for i, g in enumerate(groups)}
    series = [s for s in SERIES if any(p["series"] == s for p in pts)] + sorted(
        {p["series"] for p in pts} - set(SERIES))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(15, 6.8), gridspec_kw={"width_ratios": [1, 1.2]})
    kinds = _legend_kinds(p["family"] for p in pts)
    for s in series:
        for kind in kinds:
            sel = [p for p in pts if p["series"] == s and p["family"] == kind]
            if sel:
                ax.scatter([p["floor_ms"] for p in sel], [p["time_ms"] for p in sel], s=34, marker=_hooks(kind).marker,
                           color=_colour(s), edgecolor="black", linewidth=0.4, alpha=0.9, zorder=3)
    if pts:
        lo = min(min(p["floor_ms"] for p in pts), min(p["time_ms"] for p in pts)) / 1.6
        hi = max(max(p["floor_ms"] for p in pts), max(p["time_ms"] for p in pts)) * 1.6
        ax.plot([lo, hi], [lo, hi], color="black", lw=1.0)
        ax.plot([lo, hi], [2 * lo, 2 * hi], color="black", lw=0.6, ls="--", alpha=0.5)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        # one number per shape, right of its slowest point; neighbours with close floors are staggered
        last_x, stagger = None, 0
        for g in sorted(groups, key=lambda g: min(p["floor_ms"] for p in pts if p["shape"] == g)):
            sel = [p for p in pts if p["shape"] == g]
            x = sel[0]["floor_ms"]
            y = max(p["time_ms"] for p in sel)
            stagger = stagger + 1 if last_x is not None and x / last_x < 1.12 else 0
            last_x = x
            ax.annotate(str(number[g]), (x, y), xytext=(6 + 13 * stagger, 4 + 3 * stagger),
                        textcoords="offset points", fontsize=8, fontweight="bold", color="#222222")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("floor (ms) = max(FLOPs / matrix rate, bytes / copy bandwidth)")
    ax.set_ylabel("achieved time (ms)")
    ax.set_title(f"Time against the floor (matrix rate {r['matrix_tflops']:.0f} TFLOP/s, "
                 f"copy {r['copy_gbps'] / 1000:.2f} TB/s)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(handles=[Line2D([], [], color="black", lw=1.0, label="at the floor"),
                       Line2D([], [], color="black", lw=0.6, ls="--", alpha=0.5, label="2 x the floor")] +
              [Line2D([], [], ls="", marker=_hooks(k).marker, color="white", markeredgecolor="black",
                      label=_hooks(k).legend or k) for k in kinds],
              fontsize=8, loc="upper left", frameon=True)

    n = len(series)
    height = 0.8 / max(1, n)
    for i, s in enumerate(series):
        ys = [j + (i - (n - 1) / 2) * height for j in range(len(groups))]
        vals = {p["shape"]: 100.0 * p["of_floor"] for p in pts if p["series"] == s}
        bx.barh(ys, [vals.get(g, 0.0) for g in groups], height, color=_colour(s))
    bx.axvline(100, color="black", lw=0.8)
    bx.set_yticks(range(len(groups)))
    bx.set_yticklabels([f"{g}{'  [mem]' if any(p['shape'] == g and p['bound'] == 'memory' for p in pts) else ''}"
                        f"  ({number[g]})" for g in groups], fontsize=7.5)
    bx.invert_yaxis()
    bx.set_xlabel("% of the floor reached (floor / achieved time; 100 = at the floor)")
    bx.set_xlim(0, 110)
    bx.set_title("Share of the floor per shape, numbered as on the left ([mem]: memory-bound)", fontsize=10)
    bx.grid(axis="x", alpha=0.3)
    fig.legend(handles=[Patch(color=_colour(s), label=_series_label(s, pts)) for s in series], loc="lower center",
               ncol=len(series), fontsize=8.5, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path


def _in_order(kinds: Iterable[str]) -> list[str]:
    """Families by their report order, then as they came."""
    seen = list(dict.fromkeys(kinds))
    return sorted(seen, key=lambda k: (_hooks(k).order, seen.index(k)))


def _legend_kinds(present: Iterable[str]) -> list[str]:
    """The roofline's marker legend: the families always listed, then the others present, each group in order."""
    always = [f.kind for f in registry.all_families() if f.report.always_in_legend]
    return _in_order(always) + [k for k in _in_order(present) if k not in always]


# ---------------------------------------------------------------------------------------------- the report


def markdown_report(rows: Sequence[dict], points: list[dict], r: dict, images: Sequence[str]) -> str:
    from .bench import markdown
    lines = ["# Benchmark report", "",
             f"Rows: {len(rows)} ({', '.join(sorted({_kind(x) for x in rows}))}); GPU: "
             f"{', '.join(sorted({str((x.get('env') or {}).get('gpu')) for x in rows}))}.", "",
             f"Floor of each kernel = max(FLOPs / {r['matrix_tflops']:.0f} TFLOP/s, bytes / "
             f"{r['copy_gbps']:.0f} GB/s). Matrix rate: {r['matrix_source']}. Copy bandwidth: {r['copy_source']}.",
             ""]
    lines += [f"![{Path(i).stem}]({i})" for i in images] + ["", "## Rows", "", markdown(list(rows)).rstrip(), "",
                                                              "## Roofline", "",
                                                              "| shape | kernel | time (ms) | floor (ms) | bound | "
                                                              "% of floor | TFLOP/s | GB/s |",
                                                              "|---|---|---|---|---|---|---|---|"]
    for p in points:
        tf = f"{p['tflops']:.0f}" if p.get("tflops") else "-"
        gb = f"{p['gbps']:.0f}" if p.get("gbps") else "-"
        share = f"{100 * p['of_floor']:.1f}" if p.get("of_floor") else "-"
        lines.append(f"| {p['shape']} | {_label(p['series'], p['family'])} | {p['time_ms']:.4f} | {p['floor_ms']:.4f} | "
                     f"{p['bound']} | {share} | {tf} | {gb} |")
    return "\n".join(lines) + "\n"


def write_report(rows: Sequence[dict], out_dir: str | Path, *, copy_gbps: float | None = None,
                 matrix_tflops: float | None = None) -> dict[str, Path]:
    """report.json (rows, rates, roofline points), report.md, <family>_throughput.png per family, roofline.png."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = [r for r in rows if r.get("spec")]
    r = rates(rows, copy_gbps, matrix_tflops)
    points = roofline(kernels(rows), r)
    files: dict[str, Path] = {}
    for fam in _in_order(k["family"] for k in points):
        files[f"{fam}_throughput"] = plot_throughput(points, fam, r, out / f"{fam}_throughput.png")
    if points:
        files["roofline"] = plot_roofline(points, r, out / "roofline.png")
    write_file(out / "report.json", json.dumps({"rates": r, "roofline": points, "rows": list(rows)}, indent=1,
                                                default=lambda o: None if isinstance(o, float) and math.isnan(o)
                                                else str(o)) + "\n")
    files["json"] = out / "report.json"
    write_file(out / "report.md", markdown_report(rows, points, r, [p.name for k, p in files.items()
                                                                      if p.suffix == ".png"]))
    files["markdown"] = out / "report.md"
    return files


class RecordError(ValueError):
    """A file given to the report that is not a benchmark record: its path and what is wrong."""


def load_record(path: str | Path) -> list[dict]:
    """The bench rows of one record file: a JSON list of rows (`schedgen bench --json`), or a record in a family's
    own format (`ReportHooks.record_rows`, e.g. bench/results/attention.json). RecordError otherwise."""
    try:
        data = read_json(path, MAX_RECORD_BYTES, legal="a benchmark record is a regular JSON file")
    except UnreadableFile as exc:
        raise RecordError(exc.located(path, f"not a benchmark record: {exc}" if exc.content else None)) from None
    rows = data if isinstance(data, list) and all(isinstance(r, dict) and isinstance(r.get("spec"), str)
                                                  for r in data) else None
    for fam in registry.all_families():
        if rows is None and fam.report.record_rows is not None:
            rows = fam.report.record_rows(data)
    if rows is not None:
        for i, r in enumerate(rows):
            why = _row_problem(r)
            if why is not None:
                raise RecordError(f"{printable(str(path))}: not a benchmark record: row {i}: {why}")
        return rows
    raise RecordError(f"{printable(str(path))}: not a benchmark record: expected a JSON list of bench rows (objects with a 'spec', "
                      f"as `schedgen bench --json` writes) or a family's own record (bench/results/*.json)")


def _row_problem(r: dict) -> str | None:
    """bench.rows.row_problem, for a row of either form (bench's own, or a family's record turned into rows)."""
    missing = [k for k in ROW_KEYS if k not in r]
    if missing:
        return f"no {', '.join(missing)}"
    if not isinstance(r["shape"], dict):
        return "its shape is not an object"
    return row_problem(r)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m schedgen.report",
                                 description="JSON, Markdown and PNG plots from bench rows")
    ap.add_argument("rows", nargs="+", help="bench record files (bench/results/*.json)")
    ap.add_argument("-o", "--output", default="report")
    ap.add_argument("--copy-gbps", type=float, help="copy bandwidth of the floor (default: measured in the rows)")
    ap.add_argument("--matrix-tflops", type=float, help="matrix rate of the floor (default: best cuBLAS in the rows)")
    args = ap.parse_args(argv)
    rows: list[dict] = []
    try:
        for f in args.rows:
            rows += load_record(f)
        files = write_report(rows, args.output, copy_gbps=args.copy_gbps, matrix_tflops=args.matrix_tflops)
    except RecordError as exc:
        print(f"schedgen.report: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as exc:
        print(printable(f"schedgen.report: -o {args.output}: cannot write the report: "
                        f"{(exc.strerror or str(exc)).lower()}{f' ({exc.filename})' if exc.filename else ''}"),
              file=sys.stderr)
        raise SystemExit(2) from None
    try:
        for path in files.values():
            print(f"wrote {printable(str(path))}")
        sys.stdout.flush()
    except BrokenPipeError:
        return stop_quietly_on_broken_pipe()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
