"""`schedgen explain SPEC --draw FILE.png`: a picture of a plan.

Three views of one schedule, drawn from the plan's own fields (nothing is re-derived from the spec):

- the tile traversal over the output: each tile coloured by the persistent block (CTA) that computes it, the
  visit order numbered and traced (row-major or planar snake, in cluster units as the kernel counts them), and
  each cluster's tiles outlined together;
- the SMEM map: every buffer at its offset with each stage slot, and the barriers, against the per-block limit;
- the pipeline over a few steps: the producer's TMA issues, what each stage slot holds over time (in flight,
  then being read), and the consumer warpgroups' wgmma steps and epilogue, from a simple illustrative timing
  model (the shape of the overlap is the point, not the microseconds).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .families.attention.plan import tile_of
from .plan.common import planar_snake, tile_index

SMEM_LIMIT = 232448
SM_COUNT = 132
# The illustrative timing model of the pipeline view (per SM):
TENSOR_RATE = 989e12 / SM_COUNT      # dense bf16 FLOP/s
L2_RATE = 12e12 / SM_COUNT            # bytes/s a CTA's TMA loads get from L2 (matmul operands are reused there)
HBM_RATE = 4.25e12 / SM_COUNT        # bytes/s of a streaming (map) kernel
TMA_LATENCY = 0.8e-6                 # s from issue to landing
SMEM_RATE = 250e9                    # bytes/s a warpgroup writes to SMEM in an epilogue
MAX_NUMBERED = 640                   # tiles numbered in full; beyond, the first waves only
MIN_SHAPE, MAX_SHAPE = 0.3, 3.0      # output height / width drawn to scale; flatter or taller ones are stretched


@dataclass(frozen=True)
class Tile:
    row: int
    col: int
    order: int       # visit index in the kernel's count (cluster units for matmul)
    block: int       # the persistent block (CTA) that computes it
    cluster: int     # the cluster (matmul) or block (map) it belongs to in its wave
    wave: int        # order // number of clusters


# ---------------------------------------------------------------------------------------------- traversal


def matmul_tiles(p) -> tuple[list[Tile], int, int]:
    """Tiles of batch 0 in the kernel's order (schedgen/families/matmul/templates/cuda.cu.j2 sg_tile_coords): cluster units in
    row-major or planar-snake order, unit t handled by cluster t % clusters, its CTAs side by side along M or N."""
    cm, cn = p.cluster_m, p.cluster_n
    tmc, tnc = p.tiles_m // cm, p.tiles_n // cn
    clusters = max(1, p.num_blocks // p.cluster_size)
    tiles = []
    for t in range(tmc * tnc):
        if p.tile_order == "planar_snake":
            um, un = planar_snake(t, (tmc, tnc), p.minor_dim, p.tile_width)
        else:
            um, un = t // tnc, t % tnc
        c = t % clusters
        for r in range(p.cluster_size):
            row, col = (um * cm + r, un) if cm == 2 else (um, un * cn + r)
            tiles.append(Tile(row, col, t, c * p.cluster_size + r, c, t // clusters))
    return tiles, p.tiles_m, p.tiles_n


def map_tiles(p) -> tuple[list[Tile], int, int]:
    """Tiles of a map plan: block b handles tiles b, b + blocks, ...; leading grid dimensions are stacked as rows."""
    grid = list(p.grid)
    rows, cols = (1, grid[0]) if len(grid) == 1 else (math.prod(grid[:-1]), grid[-1])
    tiles = []
    for lin in range(p.num_tiles):
        idx = tile_index(lin, grid, p.tile_order, p.minor_dim, p.tile_width)
        row = 0
        for d, g in zip(idx[:-1], grid[:-1]):
            row = row * g + d
        b = lin % max(1, p.num_blocks)
        tiles.append(Tile(row, idx[-1], lin, b, b, lin // max(1, p.num_blocks)))
    return tiles, rows, cols


def attention_tiles(p) -> tuple[list[Tile], int, int]:
    """Tiles of an attention plan in the kernel's order (plan.attention.tile_of): rows are (batch, head) pairs,
    columns query blocks. A static persistent grid gives tile t to CTA t % grid; a dynamic one to the CTA that
    frees up first (modelled: a tile costs its key blocks plus one); otherwise each tile is its own CTA, started in
    index order by the hardware."""
    grid = min(p.num_tiles, SM_COUNT) if p.persistent else p.num_tiles
    free = [(0, c) for c in range(grid)]
    tiles = []
    for t in range(p.num_tiles):
        b, h, qb = tile_of(p, t)
        if p.persistent and p.dynamic:
            at, blk = heapq.heappop(free)
            heapq.heappush(free, (at + p.kv_end(qb) + 1, blk))
        else:
            blk = t % grid
        tiles.append(Tile(b * p.heads_q + h, qb, t, blk, blk, t // (grid if p.persistent else SM_COUNT)))
    return tiles, p.batch * p.heads_q, p.q_blocks


def _cell_points(ax, rows: int, cols: int, aspect: float) -> tuple[float, float]:
    """The size in points of one tile cell once the axes keep the data aspect."""
    fig = ax.figure
    pos = ax.get_position()
    w, h = pos.width * fig.get_figwidth(), pos.height * fig.get_figheight()
    per_col = min(w / max(1, cols), h / max(1e-9, rows * aspect))
    return per_col * 72, per_col * aspect * 72


def draw_traversal(ax, p) -> None:
    import matplotlib
    import numpy as np
    from matplotlib.collections import LineCollection, PatchCollection
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle
    matmul = p.family == "matmul"
    attention = p.family == "attention"
    tiles, rows, cols = matmul_tiles(p) if matmul else attention_tiles(p) if attention else map_tiles(p)
    blocks = max(1, min(p.num_tiles, SM_COUNT) if attention and p.persistent else SM_COUNT if attention
                 else p.num_blocks)
    cmap, norm = matplotlib.colormaps["turbo"], Normalize(0, blocks - 1)
    # one pixel per tile (fast for any grid): the block's colour, paler in odd waves
    img = np.ones((rows, cols, 4))
    r_ = np.array([t.row for t in tiles])
    c_ = np.array([t.col for t in tiles])
    rgba = cmap(norm(np.array([t.block for t in tiles])))
    odd = (np.array([t.wave for t in tiles]) % 2 == 1)[:, None]
    rgba[:, :3] = np.where(odd, rgba[:, :3] * 0.55 + 0.45, rgba[:, :3] * 0.9 + 0.1)
    img[r_, c_] = rgba
    # the visit path, in the kernel's order (a cluster's tiles share one point)
    by_order: dict[int, list[Tile]] = {}
    for t in tiles:
        by_order.setdefault(t.order, []).append(t)
    path = [(sum(t.col for t in ts) / len(ts) + 0.5, sum(t.row for t in ts) / len(ts) + 0.5)
            for _, ts in sorted(by_order.items())]
    clusters = max(1, blocks // (p.cluster_size if matmul else 1))
    if attention:          # a (batch, head) row against query blocks: drawn as cells of one aspect
        cell_w, cell_h = p.block_q, p.block_q
    else:
        cell_w = p.tile_n if matmul else p.block[-1]
        cell_h = p.tile_m if matmul else (p.block[-2] if len(p.block) > 1 else 1)
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
    # clusters outlined (thinner as the cells get small)
    lw_cluster = max(0.3, min(1.2, min(wpt, hpt) / 14))
    if matmul and p.cluster_size > 1:
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
    bar.set_label(f"persistent block (CTA) computing the tile, 0..{blocks - 1}" if not attention or p.persistent
                  else f"SM slot of the tile's CTA in launch order (index mod {SM_COUNT})", fontsize=7.5)
    bar.ax.tick_params(labelsize=7)
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_aspect(aspect)
    names = ("N", "M") if matmul else ("query blocks", "batch x q heads") if attention else \
        ("last grid dim", "leading grid dims")
    if stretched:
        names = (names[0] + ", stretched", names[1] + ", stretched")
    ax.set_xlabel(f"output tile column ({names[0]}; {cols} tiles of {cell_w})", fontsize=8)
    ax.set_ylabel(f"output tile row ({names[1]}; {rows} tiles of {cell_h})", fontsize=8)
    ax.tick_params(labelsize=7)
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if attention:
        order = ("query blocks fastest, longest causal rows first" if p.causal else "query blocks fastest") + \
            (", persistent" if p.persistent else ", a CTA a tile")
    else:
        order = p.tile_order + (f", minor dim {'M' if p.minor_dim == 0 else 'N'} (dim {p.minor_dim}), bands of "
                                f"{p.tile_width}" if p.tile_order == "planar_snake" else "")
    waves = len(by_order) / clusters
    numbered = ("all numbered" if limit == len(by_order) else f"first {limit} numbered" if limit
                else "too many to number")
    unit = f"{p.cluster_m}x{p.cluster_n} cluster units" if matmul and p.cluster_size > 1 else "tiles"
    ax.set_title(f"Tile traversal: {order}\n{len(by_order)} {unit} over {clusters} "
                 f"{'clusters' if matmul and p.cluster_size > 1 else 'blocks'} = {waves:.2f} waves (paler: odd waves); "
                 f"{numbered}" + ("; bold line: the first wave" if limit else ""), fontsize=9)


# ---------------------------------------------------------------------------------------------- SMEM


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 and n % 1024 else (f"{n // 1024} KiB" if n >= 1024 else f"{n} B")


def draw_smem(ax, p) -> None:
    from matplotlib.patches import Rectangle
    buffers = list(p.smem_buffers)
    limit = max(SMEM_LIMIT, p.smem_bytes)
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
    ax.add_patch(Rectangle((p.smem_bytes - 1024, 0), 1024, 1, facecolor="#dddddd", edgecolor="none"))
    ax.add_patch(Rectangle((p.smem_bytes, 0), limit - p.smem_bytes, 1, facecolor="white", edgecolor="#999999",
                           hatch="///", lw=0.5))
    ax.axvline(SMEM_LIMIT, color="#c44e52", lw=1.2)
    ax.text(SMEM_LIMIT, 1.05, f"limit {SMEM_LIMIT} B (227 KiB) per block", ha="right", va="bottom", fontsize=7.5,
            color="#c44e52")
    free = SMEM_LIMIT - p.smem_bytes
    if free > 0:
        ax.text(p.smem_bytes + free / 2, 0.5, f"free\n{_kib(free)}", ha="center", va="center", fontsize=7,
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
    ax.set_title(f"SMEM map: {p.smem_bytes} B of {SMEM_LIMIT} ({100 * p.smem_bytes / SMEM_LIMIT:.0f}%), incl. 1 KiB "
                 f"alignment slack (grey)\n{legend}", fontsize=8.5)


# ---------------------------------------------------------------------------------------------- pipeline


@dataclass
class Span:
    row: str
    start: float
    end: float
    label: str
    kind: str        # "issue" | "load" | "hold" | "mma" | "epilogue" | "compute" | "store" | "wait"
    stage: int = -1


def simulate_matmul(p, tiles: int = 2, k_shown: int | None = None) -> tuple[list[Span], int]:
    """Producer / stage slots / consumers over `tiles` tiles of `k_shown` k-steps each, in a simple timing model:
    a stage's TMA load lands TMA_LATENCY + bytes / L2_RATE after issue (loads overlap but stream one after another),
    a k-step of wgmma takes its FLOPs at the tensor rate, the epilogue writes the tile at SMEM_RATE; the producer
    waits for a slot's `empty` barrier, the consumers for its `full` barrier; a stage is released when its wgmma is
    done (with delay_release 1, when the next step's wgmma has been issued)."""
    S = p.stages
    k_shown = k_shown or min(p.k_iters, S + 3)
    load = p.stage_tx_bytes / L2_RATE
    mma = 2.0 * p.tile_m * p.tile_n * p.tile_k / TENSOR_RATE
    epi = p.tile_m * p.tile_n * p.outputs[0].itemsize / SMEM_RATE / max(1, p.num_consumers)
    issue_gap = 0.02e-6
    steps = tiles * k_shown
    spans: list[Span] = []
    landed, start, end, release = [0.0] * steps, [0.0] * steps, [0.0] * steps, [0.0] * steps
    issue_t, land_t, cons_free = 0.0, 0.0, 0.0
    for i in range(steps):
        s = i % S
        tile, k = divmod(i, k_shown)
        ready = release[i - S] if i >= S else 0.0
        issue = max(issue_t + issue_gap, ready)
        if issue > issue_t + issue_gap * 1.5 and i >= S:
            spans.append(Span("producer", issue_t + issue_gap, issue, f"wait empty[{s}]", "wait", s))
        issue_t = issue
        spans.append(Span("producer", issue, issue + issue_gap * 4, f"k{k}", "issue", s))
        land = max(issue + TMA_LATENCY + load * 0.3, land_t + load)
        land_t = land
        landed[i] = land
        spans.append(Span(f"stage {s}", issue, land, f"t{tile} k{k}", "load", s))
        start[i] = max(land, cons_free)
        end[i] = start[i] + mma
        cons_free = end[i]
        if k == k_shown - 1:
            cons_free = end[i] + epi
        if i >= 1:
            prev = i - 1
            release[prev] = end[prev] if (p.delay_release == 0 or (prev % k_shown) == k_shown - 1) else max(
                end[prev], start[i])
    release[steps - 1] = end[steps - 1]
    for i in range(steps):
        s = i % S
        tile, k = divmod(i, k_shown)
        spans.append(Span(f"stage {s}", landed[i], release[i], f"t{tile} k{k}", "hold", s))
        for c in range(p.num_consumers):
            spans.append(Span(f"consumer {c}", start[i], end[i], f"k{k}", "mma", s))
        if k == k_shown - 1:
            for c in range(p.num_consumers):
                spans.append(Span(f"consumer {c}", end[i], end[i] + epi, f"epilogue t{tile}", "epilogue"))
    return spans, k_shown


def simulate_map(p, steps: int = 10) -> list[Span]:
    """TMA loads of the input blocks, the elementwise compute by every warpgroup, TMA stores through the output
    buffers; a stage is refilled once its step (plus delay_release) is done."""
    S = p.stages
    in_bytes = p.tx_bytes
    out_bytes = sum(o.block_bytes for o in p.outputs)
    load = in_bytes / HBM_RATE
    compute = max(0.05e-6, math.prod(p.block) / (p.threads * 4) * 2e-9)
    store = out_bytes / HBM_RATE
    spans: list[Span] = []
    release, start, end = [0.0] * steps, [0.0] * steps, [0.0] * steps
    issue_t, land_t, comp_free, store_t = 0.0, 0.0, 0.0, 0.0
    gap = 0.02e-6
    for i in range(steps):
        s = i % S
        ready = release[i - S] if i >= S else 0.0
        issue = max(issue_t + gap, ready)
        if issue > issue_t + gap * 1.5 and i >= S:
            spans.append(Span("TMA issue", issue_t + gap, issue, f"wait stage {s}", "wait", s))
        issue_t = issue
        spans.append(Span("TMA issue", issue, issue + gap * 4, f"{i}", "issue", s))
        land = max(issue + TMA_LATENCY + load * 0.3, land_t + load)
        land_t = land
        spans.append(Span(f"stage {s}", issue, land, f"step {i}", "load", s))
        start[i] = max(land, comp_free)
        end[i] = start[i] + compute
        comp_free = end[i]
        spans.append(Span("compute (all WGs)", start[i], end[i], f"{i}", "compute", s))
        st = max(end[i], store_t)
        store_t = st + store
        spans.append(Span("TMA store", st, store_t, f"{i}", "store", s))
        release[i] = end[min(steps - 1, i + p.delay_release)] if p.delay_release == 0 else end[i]
        spans.append(Span(f"stage {s}", land, end[i], f"step {i}", "hold", s))
    return spans


EXP_RATE = 3.9e12 / SM_COUNT           # exp2 a second on an SM's special-function units
SOFTMAX_OPS = 1.6                      # the softmax's other work (max, scale, sum, rescale, pack) per exp, in exps
ATTN_TMA_LATENCY = 0.5e-6              # K / V blocks are mostly L2 hits (the CTAs of a head read the same keys)


def simulate_attention(p, blocks: int | None = None) -> list[Span]:
    """One tile over `blocks` key blocks: the producer's K and V loads through the stage slots, and each consumer's
    phases. Phase j issues S_j = Q K_j^T and P_{j-1} V_{j-1} on the tensor cores (shared: with the ping-pong barrier
    the consumers take turns, round robin), then runs the softmax of S_j on its own units while its P V runs. A
    slot is refilled once every consumer has released it (K after its S, V after its P V)."""
    n = blocks or min(p.kv_blocks, p.stages + 3)
    S, nc = p.stages, p.num_consumers
    gemm = 2.0 * 64 * p.block_kv * p.head_dim / TENSOR_RATE          # one GEMM of one consumer
    soft = 64 * p.block_kv * SOFTMAX_OPS / EXP_RATE
    load = p.kv_stage_bytes / L2_RATE
    spans: list[Span] = []
    k_land, v_land = [0.0] * n, [0.0] * n
    k_free, v_free = [0.0] * n, [0.0] * n                             # when every consumer released block j
    k_rel = [[0.0] * nc for _ in range(n)]
    v_rel = [[0.0] * nc for _ in range(n)]
    issue_t, land_t = 0.0, 0.0

    def issue_loads(j: int) -> None:
        nonlocal issue_t, land_t
        s = j % S
        for kind, land, free in (("K", k_land, k_free), ("V", v_land, v_free)):
            ready = free[j - S] if j >= S else 0.0
            t = max(issue_t + 0.02e-6, ready)
            if t > issue_t + 0.03e-6 and j >= S:
                spans.append(Span("producer", issue_t + 0.02e-6, t, f"wait {kind.lower()}_empty[{s}]", "wait", s))
            issue_t = t
            spans.append(Span("producer", t, t + 0.08e-6, f"{kind}{j}", "issue", s))
            land_t = max(t + ATTN_TMA_LATENCY + load * 0.3, land_t + load)
            land[j] = land_t
            spans.append(Span(f"{kind} stage {s}", t, land_t, f"{kind}{j}", "load", s))
    # the producer runs ahead as far as the slots allow; the consumers' releases are known phase by phase
    tc_free, ready = 0.0, [0.0] * nc
    issued = 0
    for j in range(n + 1):
        while issued < n and (issued < S or (k_free[issued - S] and v_free[issued - S])):
            issue_loads(issued)
            issued += 1
        for w in range(nc):
            need = max(k_land[j] if j < n else 0.0, v_land[j - 1] if j > 0 else 0.0)
            start = max(tc_free if p.pingpong else 0.0, ready[w], need)
            t = start
            if j < n:
                spans.append(Span(f"consumer {w}", t, t + gemm, f"S{j}", "mma", j % S))
                t += gemm
                k_rel[j][w] = t
            if j > 0:
                spans.append(Span(f"consumer {w}", t, t + gemm, f"PV{j - 1}", "mma", (j - 1) % S))
                v_rel[j - 1][w] = t + gemm
            tc_free = start + gemm * ((j < n) + (j > 0)) if p.pingpong else tc_free
            end = t + (gemm if j > 0 else 0.0)
            if j < n:
                spans.append(Span(f"consumer {w}", start + gemm, start + gemm + soft, f"softmax {j}", "compute"))
                end = max(end, start + gemm + soft)
            ready[w] = end
        if j < n:
            k_free[j] = max(k_rel[j])
        if j > 0:
            v_free[j - 1] = max(v_rel[j - 1])
    for j in range(n):
        s = j % S
        spans.append(Span(f"K stage {s}", k_land[j], k_free[j], f"K{j}", "hold", s))
        spans.append(Span(f"V stage {s}", v_land[j], v_free[j], f"V{j}", "hold", s))
    return spans


def draw_pipeline(ax, p) -> None:
    from matplotlib.patches import Patch, Rectangle
    if p.family == "attention":
        n = min(p.kv_blocks, p.stages + 3)
        spans = simulate_attention(p, n)
        rows = ["producer"] + [f"{k} stage {s}" for k in "KV" for s in range(p.stages)] + \
            [f"consumer {c}" for c in range(p.num_consumers)]
        names = {"producer": "producer WG\n(1 thread: TMA)",
                 **{f"consumer {c}": f"consumer WG {c}\n(64 query rows)" for c in range(p.num_consumers)}}
        title = (f"Pipeline of one tile over {n} key blocks (of {p.kv_blocks}): {p.stages}-stage K and V rings; each "
                 f"consumer issues S_j = Q K_j^T with P_(j-1) V_(j-1), then the softmax of S_j runs under its P V"
                 + ("; the ping-pong barrier hands the tensor cores round robin" if p.pingpong else ""))
    elif p.family == "matmul":
        spans, k_shown = simulate_matmul(p)
        rows = ["producer"] + [f"stage {s}" for s in range(p.stages)] + [f"consumer {c}"
                                                                          for c in range(p.num_consumers)]
        names = {"producer": "producer WG\n(1 thread: TMA)", **{f"consumer {c}": f"consumer WG {c}\n(wgmma "
                                                                               f"{p.wg_tile_m}x{p.wg_tile_n})"
                                                               for c in range(p.num_consumers)}}
        title = (f"Pipeline over 2 tiles x {k_shown} k-steps (of {p.k_iters}; the rest of the K loop is cut): "
                 f"{p.stages}-stage ring, delay_release {p.delay_release}; stage slot rows: hatched = TMA in flight "
                 f"({_kib(p.stage_tx_bytes)}), solid = landed and read by wgmma until released")
    else:
        spans = simulate_map(p)
        rows = ["TMA issue"] + [f"stage {s}" for s in range(p.stages)] + ["compute (all WGs)", "TMA store"]
        names = {"compute (all WGs)": f"compute\n({p.num_warpgroups} WGs, all threads)"}
        title = (f"Pipeline over 10 steps: {p.stages}-stage ring of input blocks ({_kib(p.tx_bytes)} per step), "
                 f"outputs staged and stored by TMA; hatched = TMA in flight, solid = landed and being read")
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
        if sp.kind == "compute" and p.family == "attention":      # the softmax: a thinner bar under the MMAs
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
    ax.set_title(title, fontsize=8.5)
    handles = [Patch(facecolor="white", edgecolor="#4c72b0", hatch="////", label="TMA load in flight"),
               Patch(facecolor="#4c72b0", alpha=0.55, label="stage landed, being read")]
    if p.family == "attention":
        handles += [Patch(facecolor="#4c72b0", label="wgmma: S = Q K^T, O += P V (colour: the stage read)"),
                    Patch(facecolor="#55a868", label="online softmax (exp2, max, sum, rescale)")]
    else:
        handles += [Patch(facecolor="#4c72b0", label="wgmma k-step" if p.family == "matmul" else "compute"),
                    Patch(facecolor="#222222" if p.family == "matmul" else "#bbbbbb",
                          label="epilogue (apply, stage, TMA store)" if p.family == "matmul" else "TMA store")]
    ax.legend(handles=handles, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=4, frameon=False)


# ---------------------------------------------------------------------------------------------- the figure


def summary_lines(p) -> list[str]:
    if p.family == "attention":
        heads = f"{p.heads_q} q / {p.heads_kv} kv heads" if p.heads_q != p.heads_kv else f"{p.heads_q} heads"
        return [
            f"kernel {p.kernel_name}",
            f"B {p.batch}, {heads}, Sq {p.seq_q}, Skv {p.seq_kv}, D {p.head_dim} ({p.layout}, {p.dtype})"
            + (", causal" if p.causal else "") + (", with LSE" if p.with_lse else ""),
            f"block_q {p.block_q} ({p.num_consumers} consumer WG x 64 rows), block_kv {p.block_kv}; "
            f"{p.q_blocks} x {p.kv_blocks} blocks",
            f"{p.num_tiles} tiles" + (" on a persistent grid of one CTA an SM" if p.persistent else ", a CTA each")
            + f"; {p.threads} threads",
            f"{p.stages} K/V stages x {_kib(p.kv_stage_bytes)} each; SMEM {p.smem_bytes} B",
            f"registers: producer {p.producer_regs}, consumers {p.consumer_regs}"
            + ("; ping-pong schedule barrier" if p.pingpong else ""),
        ]
    if p.family == "matmul":
        clusters = max(1, p.num_blocks // p.cluster_size)
        return [
            f"kernel {p.kernel_name}",
            f"M x N x K = {p.m} x {p.n} x {p.k}" + (f", batch {p.batch}" if p.batch > 1 else "")
            + f"; {p.in_dtype} in, {p.out_dtype} out",
            f"tile {p.tile_m} x {p.tile_n} x {p.tile_k}; {p.tiles_m} x {p.tiles_n} tiles, {p.k_iters} k-steps each",
            f"{p.num_consumers} consumer warpgroup(s) split along {p.wg_axis}: {p.wg_tile_m} x {p.wg_tile_n} each",
            f"cluster {p.cluster_m} x {p.cluster_n}" + (f" (multicast {p.multicast})" if p.multicast else "")
            + f"; {p.num_blocks} blocks = {clusters} clusters" + (" (at most; the runtime keeps what fits)"
                                                                 if p.auto_blocks else ""),
            f"{p.stages} stages x {_kib(p.stage_tx_bytes)}; SMEM {p.smem_bytes} B; {p.threads} threads",
            f"order {p.tile_order}" + (f" (minor dim {p.minor_dim}, width {p.tile_width})"
                                       if p.tile_order == "planar_snake" else ""),
        ]
    return [
        f"kernel {p.kernel_name}",
        f"sizes {', '.join(f'{k}={v}' for k, v in p.sizes.items())}",
        f"grid {' x '.join(map(str, p.grid))} tiles of {' x '.join(map(str, p.block))}",
        f"{p.num_blocks} blocks x {p.threads} threads, {p.blocks_per_sm} per SM",
        f"{p.stages} stages, {_kib(p.tx_bytes)} of inputs per step; SMEM {p.smem_bytes} B",
        f"order {p.tile_order}" + (f" (minor dim {p.minor_dim}, width {p.tile_width})"
                                   if p.tile_order == "planar_snake" else ""),
    ]


def draw(plan, out: str | Path, *, dpi: int = 120) -> Path:
    """Write the three views of `plan` (a MatmulPlan or MapPlan) to one PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if plan.family not in ("map", "matmul", "attention"):
        raise ValueError(f"--draw knows the map, matmul and attention families; this plan is {plan.family}")
    out = Path(out)
    # the traversal is drawn to scale: give its row the height its shape wants (about 7.5 in of width)
    if plan.family == "attention":
        tall = plan.batch * plan.heads_q / max(1, plan.q_blocks)
    elif plan.family == "matmul":
        tall = (plan.tiles_m * plan.tile_m) / max(1, plan.tiles_n * plan.tile_n)
    else:
        grid = list(plan.grid)
        rows = math.prod(grid[:-1]) * (plan.block[-2] if len(plan.block) > 1 else 1) if len(grid) > 1 else 1
        tall = rows / max(1, grid[-1] * plan.block[-1])
    top = min(9.5, max(4.0, 7.2 * min(MAX_SHAPE, max(MIN_SHAPE, tall)))) + 0.8
    fig = plt.figure(figsize=(15, top + 7.6))
    gs = fig.add_gridspec(3, 2, height_ratios=[top, 2.1, 4.4], width_ratios=[1.7, 1], hspace=0.32, wspace=0.12)
    ax_t = fig.add_subplot(gs[0, 0])
    ax_i = fig.add_subplot(gs[0, 1])
    ax_s = fig.add_subplot(gs[1, :])
    ax_p = fig.add_subplot(gs[2, :])
    draw_traversal(ax_t, plan)
    ax_i.axis("off")
    ax_i.text(0.0, 1.0, "\n".join(line for text in summary_lines(plan) for line in _wrap(text, 52)), va="top", ha="left", fontsize=9, family="monospace",
              wrap=True, transform=ax_i.transAxes)
    ax_i.text(0.0, 0.45, _reading_guide(plan), va="top", ha="left", fontsize=8.5, color="#333333",
              transform=ax_i.transAxes)
    draw_smem(ax_s, plan)
    draw_pipeline(ax_p, plan)
    fig.suptitle(f"{plan.name}: the schedule", fontsize=13, y=0.995)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return out


def _reading_guide(p) -> str:
    if p.family == "attention":
        lines = ["How to read it:",
                 "- tiles: one row per (batch, q head), one column per",
                 "  query block; the numbers give the launch order" + (" (a" if p.persistent else ""),
                 ("  persistent CTA takes every " + str(min(p.num_tiles, SM_COUNT)) + "-th tile)") if p.persistent
                 else "  (the hardware starts CTAs in index order)",
                 "- SMEM: the Q tile, the K and V stage rings (and O's",
                 "  staging buffer where it fits), then the mbarriers",
                 "- pipeline: the producer refills a K / V slot once",
                 "  every consumer has released it; a consumer's",
                 "  softmax (green) runs under its own P V"]
        return "\n".join(lines)
    per = max(1, p.num_blocks // (p.cluster_size if p.family == "matmul" else 1))
    lines = ["How to read it:",
             "- tiles: colour = the persistent block that computes",
             f"  the tile; each block takes every {per}-th unit, one",
             "  per wave; numbers (where they fit) and the thin",
             "  line give the visit order, from 'start'"]
    if p.family == "matmul" and p.cluster_size > 1:
        lines += ["- black outlines: the CTAs of one cluster", "  (they share one operand tile by multicast)"]
    lines += ["- SMEM: each slot of a ring is one stage; the",
              "  barriers are 8-byte mbarriers after the buffers"]
    if p.family == "matmul":
        lines += ["- pipeline: the producer refills a slot only after",
                  "  both consumers release it (empty barrier); the",
                  "  consumers wait for it to land (full barrier)"]
    else:
        lines += ["- pipeline: one thread issues the TMA loads; a slot",
                  "  is refilled once its step has been computed; the",
                  "  outputs leave through double-buffered TMA stores"]
    return "\n".join(lines)


def _wrap(text: str, width: int) -> Sequence[str]:
    import textwrap
    return textwrap.wrap(text, width, subsequent_indent="  ") or [""]
