"""`schedgen explain SPEC --draw FILE.png`: a picture of a plan.

Three views of one schedule, drawn from the plan's own fields (nothing is re-derived from the spec):

- the tile traversal over the output: each tile coloured by the persistent block (CTA) that computes it, the
  visit order numbered and traced (in the units the kernel counts, e.g. clusters), and the tiles of one unit
  outlined together;
- the SMEM map: every buffer at its offset with each stage slot, and the barriers, against the per-block limit;
- the pipeline over a few steps: the producer's TMA issues, what each stage slot holds over time (in flight,
  then being read), and the consumer warpgroups' steps and epilogue, from a simple illustrative timing
  model (the shape of the overlap is the point, not the microseconds).

This module is the shared drawing machinery only. What a family's picture contains (its tiles in the kernel's
order, its pipeline model, its summary and reading guide) comes from the family's `draw` hooks
(`schedgen/families/<kind>/draw.py`, named by its manifest as a `DrawHooks`), as the plain data below
(`Traversal`, `Pipeline`, `Span`, `Tile`).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from . import registry as families
from .files import existing_mode, save_figure

from .plan.hardware import COPY_GBPS, H200, PEAK_TFLOPS, SM_COUNT, for_target

SMEM_LIMIT = H200.smem_per_block
# The illustrative timing model of the pipeline views (per SM; the families' simulations use these):
TENSOR_RATE = PEAK_TFLOPS * 1e12 / SM_COUNT   # dense bf16 FLOP/s
L2_RATE = 12e12 / SM_COUNT            # bytes/s a CTA's TMA loads get from L2 (operands reused there; a guess)
HBM_RATE = COPY_GBPS * 1e9 / SM_COUNT  # bytes/s of a streaming kernel
TMA_LATENCY = 0.8e-6                 # s from issue to landing
SMEM_RATE = 250e9                    # bytes/s a warpgroup writes to SMEM in an epilogue
MAX_NUMBERED = 640                   # tiles numbered in full; beyond, the first waves only
MAX_TILES = 1 << 16                  # tiles drawn at most: beyond, the first MAX_TILES in the kernel's order
MIN_SHAPE, MAX_SHAPE = 0.3, 3.0      # output height / width drawn to scale; flatter or taller ones are stretched
EXTRA = "report"                     # the optional-dependency group that installs matplotlib


class DrawError(ValueError):
    """A `--draw` that cannot be done (no matplotlib, a path that cannot be written, a family without hooks):
    one line for the user, exit status 2."""


@dataclass(frozen=True)
class Tile:
    row: int
    col: int
    order: int       # visit index in the kernel's count (a unit: a tile, or a cluster's tiles)
    block: int       # the persistent block (CTA) that computes it
    cluster: int     # the unit-taker (cluster or block) it belongs to in its wave
    wave: int        # order // number of unit-takers


@dataclass(frozen=True)
class Traversal:
    """A family's tile view: its tiles in the kernel's order (all, or the first `limit` the hook was asked for)."""
    tiles: list[Tile]
    rows: int                      # the output's tile grid, rows x cols
    cols: int
    total: int                     # tiles in the grid (len(tiles) unless sampled)
    units: int                     # visit units in the grid (tiles, or cluster units)
    blocks: int                    # the colour range: blocks 0..blocks-1
    takers: int                    # what takes one unit a wave (blocks, or clusters)
    cell: tuple[int, int]          # (width, height) of one tile, in elements
    names: tuple[str, str]         # the column and the row axis
    order: str                     # the visit order, for the title
    unit: str = "tiles"            # what a unit is, for the title
    taker: str = "blocks"          # what takes a unit, for the title
    colorbar: str = ""             # the colour bar's label ("" = the persistent block)

    @property
    def sampled(self) -> bool:
        return len(self.tiles) < self.total


@dataclass
class Span:
    row: str
    start: float
    end: float
    label: str
    kind: str        # "issue" | "load" | "hold" | "mma" | "epilogue" | "compute" | "store" | "wait"
    stage: int = -1


@dataclass(frozen=True)
class Pipeline:
    """A family's pipeline view: the spans of its timing model on named rows."""
    spans: list[Span]
    rows: list[str]                                  # top to bottom
    title: str
    names: dict[str, str] = field(default_factory=dict)     # row -> tick label (default: the row)
    legend: list[dict] = field(default_factory=list)        # Patch keywords after the two shared entries
    aside: str | None = None       # a span kind drawn as a thin bar low in its row (work under another's)


def tile_order_text(p) -> str:
    """The persistent tile order of a plan with tile_order / minor_dim / tile_width, for a title."""
    return p.tile_order + (f", minor dim {'M' if p.minor_dim == 0 else 'N'} (dim {p.minor_dim}), bands of "
                           f"{p.tile_width}" if p.tile_order == "planar_snake" else "")


def sm_count(p) -> int:
    """The SMs of the GPU a plan targets (H200: 132, B200: 148), as the tile views count SM slots."""
    return for_target(p.launch.target).sm_count


def persistent_guide(per: int, tiles: Sequence[str] = (), pipeline: Sequence[str] = ()) -> str:
    """The reading guide of a persistent-block schedule: a block takes every `per`-th unit; extra lines about
    the tiles and the pipeline."""
    lines = ["How to read it:",
             "- tiles: colour = the persistent block that computes",
             f"  the tile; each block takes every {per}-th unit, one",
             "  per wave; numbers (where they fit) and the thin",
             "  line give the visit order, from 'start'", *tiles,
             "- SMEM: each slot of a ring is one stage; the",
             "  barriers are 8-byte mbarriers after the buffers", *pipeline]
    return "\n".join(lines)


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 and n % 1024 else (f"{n // 1024} KiB" if n >= 1024 else f"{n} B")


kib = _kib


# ---------------------------------------------------------------------------------------------- traversal


def _cell_points(ax, rows: int, cols: int, aspect: float) -> tuple[float, float]:
    """The size in points of one tile cell once the axes keep the data aspect."""
    fig = ax.figure
    pos = ax.get_position()
    w, h = pos.width * fig.get_figwidth(), pos.height * fig.get_figheight()
    per_col = min(w / max(1, cols), h / max(1e-9, rows * aspect))
    return per_col * 72, per_col * aspect * 72


def _shown(tv: Traversal) -> tuple[int, int]:
    """The rows x cols of tiles drawn: the whole grid, or the corner a sample covers."""
    if not tv.sampled:
        return tv.rows, tv.cols
    return max(t.row for t in tv.tiles) + 1, max(t.col for t in tv.tiles) + 1


def draw_traversal(ax, tv: Traversal) -> None:
    import matplotlib
    import numpy as np
    from matplotlib.collections import LineCollection, PatchCollection
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle
    tiles = tv.tiles
    rows, cols = _shown(tv)
    blocks = tv.blocks
    cmap, norm = matplotlib.colormaps["turbo"], Normalize(0, blocks - 1)
    # one pixel per tile (fast for any grid): the block's colour, paler in odd waves
    img = np.ones((rows, cols, 4))
    r_ = np.array([t.row for t in tiles])
    c_ = np.array([t.col for t in tiles])
    rgba = cmap(norm(np.array([t.block for t in tiles])))
    odd = (np.array([t.wave for t in tiles]) % 2 == 1)[:, None]
    rgba[:, :3] = np.where(odd, rgba[:, :3] * 0.55 + 0.45, rgba[:, :3] * 0.9 + 0.1)
    img[r_, c_] = rgba
    # the visit path, in the kernel's order (a unit's tiles share one point)
    by_order: dict[int, list[Tile]] = {}
    for t in tiles:
        by_order.setdefault(t.order, []).append(t)
    path = [(sum(t.col for t in ts) / len(ts) + 0.5, sum(t.row for t in ts) / len(ts) + 0.5)
            for _, ts in sorted(by_order.items())]
    clusters = tv.takers
    cell_w, cell_h = tv.cell
    aspect = cell_h / cell_w if cell_w and cell_h else 1.0
    shape = rows * aspect / max(1, cols)          # height / width of the output, drawn to scale where it reads
    stretched = not (MIN_SHAPE <= shape <= MAX_SHAPE)
    if stretched:
        aspect = min(MAX_SHAPE, max(MIN_SHAPE, shape)) * cols / max(1, rows)
    wpt, hpt = _cell_points(ax, rows, cols, aspect)
    ax.imshow(img, extent=(0, cols, rows, 0), aspect=aspect,
              interpolation="nearest" if max(rows, cols) <= 300 else "antialiased")
    if min(wpt, hpt) >= 3:   # cell borders where the cells are big enough to show them
        segs = [[(x, 0), (x, rows)] for x in range(cols + 1)] + [[(0, y), (cols, y)] for y in range(rows + 1)]
        ax.add_collection(LineCollection(segs, colors="white", linewidths=0.6 if min(wpt, hpt) > 10 else 0.3))
    limit = len(by_order) if len(tiles) <= MAX_NUMBERED else min(len(by_order), 2 * clusters)
    digits = len(str(max(0, limit - 1)))
    size = min(8.0, hpt * 0.6, wpt / (0.65 * digits))
    if size < 3.5:
        limit = 0
    if limit:   # the order traced (the first wave bold); too dense to trace when the tiles cannot be numbered
        ax.plot([x for x, _ in path], [y for _, y in path], color="black", lw=0.5, alpha=0.45)
        first = path[:clusters + 1]
        ax.plot([x for x, _ in first], [y for _, y in first], color="black", lw=1.1, alpha=0.7)
    if len(path) > 1:
        ax.annotate("start", xy=path[0], xytext=(-0.045, 1.0 - path[0][1] / rows), textcoords="axes fraction",
                    fontsize=7, ha="right", va="center", annotation_clip=False,
                    arrowprops=dict(arrowstyle="->", color="black", lw=1.0))
    # units of several tiles (clusters) outlined (thinner as the cells get small)
    lw_cluster = max(0.3, min(1.2, min(wpt, hpt) / 14))
    if any(len(ts) > 1 for ts in by_order.values()):
        outlines = []
        for ts in by_order.values():
            r0, c0 = min(t.row for t in ts), min(t.col for t in ts)
            h = max(t.row for t in ts) - r0 + 1
            w = max(t.col for t in ts) - c0 + 1
            outlines.append(Rectangle((c0, r0), w, h))
        ax.add_collection(PatchCollection(outlines, facecolor="none", edgecolor="black", linewidth=lw_cluster))
    # numbers where they fit: every unit, or the first two waves, or none
    for order, ts in sorted(by_order.items())[:limit]:
        x, y = (sum(u.col for u in ts) / len(ts) + 0.5, sum(u.row for u in ts) / len(ts) + 0.5)
        r, g, b, _ = cmap(norm(ts[0].block))
        dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5 and ts[0].wave % 2 == 0
        ax.text(x, y, str(order), ha="center", va="center", fontsize=size, color="white" if dark else "black")
    sm = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
    bar = ax.figure.colorbar(sm, ax=ax, fraction=0.035, pad=0.02)
    bar.set_label(tv.colorbar or f"persistent block (CTA) computing the tile, 0..{blocks - 1}", fontsize=7.5)
    bar.ax.tick_params(labelsize=7)
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_aspect(aspect)
    names = tv.names
    if stretched:
        names = (names[0] + ", stretched", names[1] + ", stretched")
    of_c, of_r = (f"{cols} of {tv.cols}", f"{rows} of {tv.rows}") if tv.sampled else (f"{cols}", f"{rows}")
    ax.set_xlabel(f"output tile column ({names[0]}; {of_c} tiles of {cell_w})", fontsize=8)
    ax.set_ylabel(f"output tile row ({names[1]}; {of_r} tiles of {cell_h})", fontsize=8)
    ax.tick_params(labelsize=7)
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    waves = tv.units / clusters
    numbered = ("all numbered" if limit == tv.units else f"first {limit} numbered" if limit
                else "too many to number")
    sample = (f"\na sample: the first {len(tiles)} of {tv.total} tiles drawn ({rows} x {cols} of {tv.rows} x "
              f"{tv.cols})" if tv.sampled else "")
    ax.set_title(f"Tile traversal: {tv.order}\n{tv.units} {tv.unit} over {clusters} "
                 f"{tv.taker} = {waves:.2f} waves (paler: odd waves); "
                 f"{numbered}" + ("; bold line: the first wave" if limit else "") + sample, fontsize=9)


# ---------------------------------------------------------------------------------------------- SMEM


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 and n % 1024 else (f"{n // 1024} KiB" if n >= 1024 else f"{n} B")


def draw_smem(ax, p, buffers) -> None:
    """The SMEM map `buffers` of plan `p` (its family's draw hook `smem`)."""
    from matplotlib.patches import Rectangle
    buffers = list(buffers)
    limit = max(SMEM_LIMIT, p.launch.smem_bytes)
    palette = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]
    big = [b for b in buffers if b.bytes * b.count >= limit * 0.01]
    small = [b for b in buffers if b not in big]
    for i, b in enumerate(buffers):
        colour = palette[i % len(palette)]
        for s in range(b.count):
            x = b.offset + s * b.bytes
            shade = 0.95 - 0.35 * (s / max(1, b.count - 1)) if b.count > 1 else 0.9
            ax.add_patch(Rectangle((x, 0), b.bytes, 1, facecolor=colour, alpha=shade, edgecolor="white", lw=0.8))
            if b in big and b.bytes >= limit * 0.035:
                ax.text(x + b.bytes / 2, 0.5, f"{b.name}[{s}]\n{_kib(b.bytes)}" if b.bytes >= limit * 0.06
                        else f"{s}", ha="center", va="center", fontsize=7, color="white", fontweight="bold")
    # the 1 KiB alignment slack, the free space and the limit
    ax.add_patch(Rectangle((p.launch.smem_bytes - 1024, 0), 1024, 1, facecolor="#dddddd", edgecolor="none"))
    ax.add_patch(Rectangle((p.launch.smem_bytes, 0), limit - p.launch.smem_bytes, 1, facecolor="white", edgecolor="#999999",
                           hatch="///", lw=0.5))
    ax.axvline(SMEM_LIMIT, color="#c44e52", lw=1.2)
    ax.text(SMEM_LIMIT, 1.05, f"limit {SMEM_LIMIT} B (227 KiB) per block", ha="right", va="bottom", fontsize=7.5,
            color="#c44e52")
    free = SMEM_LIMIT - p.launch.smem_bytes
    if free > 0:
        ax.text(p.launch.smem_bytes + free / 2, 0.5, f"free\n{_kib(free)}", ha="center", va="center", fontsize=7,
                color="#555555", bbox=dict(facecolor="white", edgecolor="none", pad=1))
    # barriers and other small buffers: called out below the bar
    for j, b in enumerate(small):   # spread along the bar, in two rows, so that many barrier sets stay inside
        x = b.offset + b.bytes * b.count / 2
        xt = limit * (0.1 + 0.8 * j / max(1, len(small) - 1)) if len(small) > 1 else x - limit * 0.06
        ax.annotate(f"{b.name}: {b.count} x {b.bytes} B barriers @ {b.offset}" if b.bytes == 8 else
                    f"{b.name}: {b.count} x {b.bytes} B @ {b.offset}", xy=(x, 0),
                    xytext=(xt, -0.4 if j % 2 == 0 else -0.75), fontsize=7, ha="center", va="center",
                    arrowprops=dict(arrowstyle="-", lw=0.6, color="#444444"))
    ax.set_xlim(0, limit * 1.005)
    ax.set_ylim(-0.9, 1.35)
    ax.set_yticks([])
    ax.set_xlabel("bytes of dynamic SMEM (offset)", fontsize=8)
    ax.tick_params(labelsize=7)
    for spine in ("left", "right", "top"):
        ax.spines[spine].set_visible(False)
    legend = "; ".join(f"{b.name} {b.count} x {_kib(b.bytes)} = {_kib(b.count * b.bytes)} ({b.note})"
                       for b in big)
    ax.set_title(f"SMEM map: {p.launch.smem_bytes} B of {SMEM_LIMIT} ({100 * p.launch.smem_bytes / SMEM_LIMIT:.0f}%), incl. 1 KiB "
                 f"alignment slack (grey)\n{legend}", fontsize=8.5)


# ---------------------------------------------------------------------------------------------- pipeline


def draw_pipeline(ax, pl: Pipeline) -> None:
    from matplotlib.patches import Patch, Rectangle
    spans, rows, names = pl.spans, pl.rows, pl.names
    y = {r: i for i, r in enumerate(rows)}
    stage_colours = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
                     "#ccb974", "#64b5cd"]
    t_end = max(s.end for s in spans)
    scale = 1e6  # microseconds
    last_label = -1.0
    for sp in spans:
        yy = y[sp.row]
        x0, w = sp.start * scale, (sp.end - sp.start) * scale
        colour = stage_colours[sp.stage % len(stage_colours)] if sp.stage >= 0 else "#333333"
        if sp.kind == "wait":
            ax.plot([x0, x0 + w], [yy + 0.5, yy + 0.5], color="#999999", lw=1, ls=":")
            continue
        if sp.kind == pl.aside:      # work that runs under another span's: a thinner bar
            ax.add_patch(Rectangle((x0, yy + 0.62), w, 0.3, facecolor="#55a868", edgecolor="white", lw=0.5))
            if w > t_end * scale * 0.03:
                ax.text(x0 + w / 2, yy + 0.77, sp.label, ha="center", va="center", fontsize=6, color="white")
            continue
        if sp.kind == "load":
            ax.add_patch(Rectangle((x0, yy + 0.15), w, 0.7, facecolor="white", edgecolor=colour, hatch="////",
                                   lw=0.8))
        elif sp.kind == "epilogue":
            ax.add_patch(Rectangle((x0, yy + 0.1), w, 0.8, facecolor="#222222", edgecolor="white", lw=0.5))
        elif sp.kind == "store":
            ax.add_patch(Rectangle((x0, yy + 0.15), w, 0.7, facecolor="#bbbbbb", edgecolor="white", lw=0.5))
        else:
            ax.add_patch(Rectangle((x0, yy + 0.1), w, 0.8, facecolor=colour,
                                   alpha=0.55 if sp.kind == "hold" else 0.95, edgecolor="white", lw=0.5))
        if w > t_end * scale * 0.018 and sp.kind != "issue":
            ax.text(x0 + w / 2, yy + 0.5, sp.label, ha="center", va="center", fontsize=6.5,
                    color="white" if sp.kind in ("mma", "epilogue", "compute") else "black")
        elif sp.kind == "issue" and x0 - last_label > t_end * scale * 0.02:
            ax.text(x0, yy + 0.95, sp.label, ha="left", va="bottom", fontsize=6)
            last_label = x0
    ax.set_xlim(0, t_end * scale * 1.01)
    ax.set_ylim(len(rows), 0)
    ax.set_yticks([i + 0.5 for i in range(len(rows))])
    ax.set_yticklabels([names.get(r, r) for r in rows], fontsize=7.5)
    ax.set_xlabel("time (µs, illustrative model: see schedgen/draw.py)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", alpha=0.25)
    ax.set_title(pl.title, fontsize=8.5)
    handles = [Patch(facecolor="white", edgecolor="#4c72b0", hatch="////", label="TMA load in flight"),
               Patch(facecolor="#4c72b0", alpha=0.55, label="stage landed, being read")]
    handles += [Patch(**kw) for kw in pl.legend]
    ax.legend(handles=handles, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=4, frameon=False)


# ---------------------------------------------------------------------------------------------- the figure


def _hooks(plan) -> families.DrawHooks:
    hooks = families.of(plan).draw
    if hooks is None:
        drawn = [f.kind for f in families.all_families() if f.draw is not None]
        known = ", ".join(drawn[:-1]) + " and " + drawn[-1] if len(drawn) > 1 else "".join(drawn)
        raise DrawError(f"--draw knows the {known} families; this plan is {plan.launch.family}")
    return hooks


def _matplotlib():
    try:
        import matplotlib
    except ImportError:
        raise DrawError(f"--draw needs matplotlib, which is not installed: pip install 'schedgen[{EXTRA}]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def target(out: str | Path, name: str, formats: Sequence[str] = ("png",)) -> Path:
    """The file `--draw OUT` writes, checked writable before anything is drawn: OUT itself; OUT/<name>.png when
    OUT is a directory (or ends in a separator); OUT.png when OUT has no suffix. A DrawError says why it cannot
    be written (its folder is a file or not writable, an unknown picture format)."""
    text = os.fspath(out)
    path = Path(text)
    if path.is_dir() or text.endswith(("/", os.sep)):
        path = path / f"{name}.png"
    elif not path.suffix:
        path = path.with_name(path.name + ".png")
    fmt = path.suffix[1:].lower()
    if fmt not in formats:
        raise DrawError(f"--draw {text}: unknown picture format '{path.suffix}' (legal: "
                        f"{', '.join('.' + f for f in sorted(formats))})")
    if path.is_dir():
        raise DrawError(f"--draw {text}: {path} is a directory")
    try:
        existing_mode(path)             # a symbolic link, FIFO or device there: refused now, not after drawing
    except OSError as exc:
        raise DrawError(f"--draw {text}: cannot write {path}: {exc.strerror}") from None
    folder = path.parent
    for up in (folder, *folder.parents):      # the nearest existing folder above must be a writable directory
        if up.exists():
            if not up.is_dir():
                raise DrawError(f"--draw {text}: cannot write {path}: {up} is not a directory")
            if not os.access(up, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
                raise DrawError(f"--draw {text}: cannot write {path}: permission denied")
            break
    return path


def _stderr(message: str) -> None:
    print(f"schedgen: {message}", file=sys.stderr)


def draw(plan, out: str | Path, *, dpi: int = 120, note: Callable[[str], None] | None = _stderr) -> Path:
    """Write the three views of `plan` to one picture and return the path actually written (see `target`).
    A grid of more than MAX_TILES tiles is drawn from its first MAX_TILES in the kernel's order; the figure says
    so and so does `note` (stderr by default). A DrawError (a ValueError) for what cannot be drawn or written."""
    hooks = _hooks(plan)
    plt = _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    out = target(out, plan.launch.name, tuple(FigureCanvasAgg.get_supported_filetypes()))
    tv = hooks.traversal(plan, MAX_TILES)
    if tv.sampled and note is not None:
        note(f"--draw: {plan.launch.name} has {tv.total} tiles; drawing the first {len(tv.tiles)} in the kernel's order "
             f"(a sample, at most {MAX_TILES})")
    # the traversal is drawn to scale: give its row the height its shape wants (about 7.5 in of width)
    rows, cols = _shown(tv)
    tall = rows * tv.cell[1] / max(1, cols * tv.cell[0])
    top = min(9.5, max(4.0, 7.2 * min(MAX_SHAPE, max(MIN_SHAPE, tall)))) + 0.8
    fig = plt.figure(figsize=(15, top + 7.6))
    try:
        gs = fig.add_gridspec(3, 2, height_ratios=[top, 2.1, 4.4], width_ratios=[1.7, 1], hspace=0.32, wspace=0.12)
        ax_t = fig.add_subplot(gs[0, 0])
        ax_i = fig.add_subplot(gs[0, 1])
        ax_s = fig.add_subplot(gs[1, :])
        ax_p = fig.add_subplot(gs[2, :])
        draw_traversal(ax_t, tv)
        ax_i.axis("off")
        ax_i.text(0.0, 1.0, "\n".join(line for text in hooks.summary(plan) for line in _wrap(text, 52)), va="top",
                  ha="left", fontsize=9, family="monospace", wrap=True, transform=ax_i.transAxes)
        ax_i.text(0.0, 0.45, hooks.guide(plan), va="top", ha="left", fontsize=8.5, color="#333333",
                  transform=ax_i.transAxes)
        draw_smem(ax_s, plan, hooks.smem(plan))
        draw_pipeline(ax_p, hooks.pipeline(plan))
        fig.suptitle(f"{plan.launch.name}: the schedule", fontsize=13, y=0.995)
        try:
            save_figure(fig, out, dpi=dpi, bbox_inches="tight")
        except OSError as exc:
            raise DrawError(f"--draw: cannot write {out}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return out


def _wrap(text: str, width: int) -> Sequence[str]:
    import textwrap
    return textwrap.wrap(text, width, subsequent_indent="  ") or [""]
