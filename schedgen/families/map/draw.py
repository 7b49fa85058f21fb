"""map's `explain --draw` hooks: its tiles in the kernel's order, its pipeline model, its summary and reading
guide (schedgen/draw.py draws them)."""
from __future__ import annotations

import dataclasses
import math

from ...draw import HBM_RATE, TMA_LATENCY, Pipeline, Span, Tile, Traversal, kib, persistent_guide, tile_order_text
from ...plan import dims
from ...plan.common import tile_index
from ...registry import DrawHooks
from .explain import sizes_line


DRAWN_SIZE = 4096   # a dynamic size is drawn at this value (within its range, on its step): a typical call


def drawn_sizes(p) -> dict[str, int]:
    """The value each dynamic size is drawn at."""
    return {r.name: max(r.min, min(r.max, DRAWN_SIZE) // r.multiple_of * r.multiple_of) for r in p.launch.dynamic_sizes}


def at_drawn_size(p):
    """The plan with its grid, tile count and blocks evaluated at drawn_sizes (a static plan as it is)."""
    if not p.launch.dynamic_sizes:
        return p
    sizes = drawn_sizes(p)
    return dataclasses.replace(p, grid=tuple(dims.evaluate(g, sizes) for g in p.grid),
                               num_tiles=dims.evaluate(p.num_tiles, sizes),
                               launch=dataclasses.replace(p.launch, num_blocks=dims.evaluate(p.launch.num_blocks,
                                                                                             sizes)))


def map_tiles(p, limit: int | None = None) -> tuple[list[Tile], int, int]:
    """Tiles of a map plan: block b handles tiles b, b + blocks, ...; leading grid dimensions are stacked as rows.
    With `limit`, the first `limit` tiles only."""
    grid = list(p.grid)
    rows, cols = (1, grid[0]) if len(grid) == 1 else (math.prod(grid[:-1]), grid[-1])
    tiles = []
    for lin in range(p.num_tiles if limit is None else min(p.num_tiles, limit)):
        idx = tile_index(lin, grid, p.tile_order, p.minor_dim, p.tile_width)
        row = 0
        for d, g in zip(idx[:-1], grid[:-1]):
            row = row * g + d
        b = lin % max(1, p.launch.num_blocks)
        tiles.append(Tile(row, idx[-1], lin, b, b, lin // max(1, p.launch.num_blocks)))
    return tiles, rows, cols


def traversal(p, limit: int) -> Traversal:
    p = at_drawn_size(p)
    tiles, rows, cols = map_tiles(p, limit)
    blocks = max(1, p.launch.num_blocks)
    return Traversal(
        tiles=tiles, rows=rows, cols=cols, total=p.num_tiles, units=p.num_tiles, blocks=blocks, takers=blocks,
        cell=(p.block[-1], p.block[-2] if len(p.block) > 1 else 1), names=("last grid dim", "leading grid dims"),
        order=tile_order_text(p))


def simulate_map(p, steps: int = 10) -> list[Span]:
    """TMA loads of the input blocks, the elementwise compute by every warpgroup, TMA stores through the output
    buffers; a stage is refilled once its step (plus delay_release) is done."""
    S = p.stages
    in_bytes = p.tx_bytes
    out_bytes = sum(o.block_bytes for o in p.outputs)
    load = in_bytes / HBM_RATE
    compute = max(0.05e-6, math.prod(p.block) / (p.launch.threads * 4) * 2e-9)
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


def pipeline(p) -> Pipeline:
    rows = ["TMA issue"] + [f"stage {s}" for s in range(p.stages)] + ["compute (all WGs)", "TMA store"]
    names = {"compute (all WGs)": f"compute\n({p.num_warpgroups} WGs, all threads)"}
    title = (f"Pipeline over 10 steps: {p.stages}-stage ring of input blocks ({kib(p.tx_bytes)} per step), "
             f"outputs staged and stored by TMA; hatched = TMA in flight, solid = landed and being read")
    legend = [dict(facecolor="#4c72b0", label="compute"), dict(facecolor="#bbbbbb", label="TMA store")]
    return Pipeline(simulate_map(p), rows, title, names, legend)


def summary(p) -> list[str]:
    drawn = ", ".join(f"{k}={v}" for k, v in drawn_sizes(p).items())
    p = at_drawn_size(p)
    return [
        f"kernel {p.launch.kernel_name}",
        f"sizes {sizes_line(p)}" + (f" (drawn at {drawn})" if drawn else ""),
        f"grid {' x '.join(map(str, p.grid))} tiles of {' x '.join(map(str, p.block))}",
        f"{p.launch.num_blocks} blocks x {p.launch.threads} threads, {p.launch.blocks_per_sm} per SM",
        f"{p.stages} stages, {kib(p.tx_bytes)} of inputs per step; SMEM {p.launch.smem_bytes} B" if p.regs is None
        else p.regs.why,
        f"order {p.tile_order}" + (f" (minor dim {p.minor_dim}, width {p.tile_width})"
                                   if p.tile_order == "planar_snake" else ""),
    ]


def guide(p) -> str:
    return persistent_guide(max(1, at_drawn_size(p).launch.num_blocks), pipeline=[
        "- pipeline: one thread issues the TMA loads; a slot",
        "  is refilled once its step has been computed; the",
        "  outputs leave through double-buffered TMA stores"])


HOOKS = DrawHooks(traversal=traversal, pipeline=pipeline, summary=summary, guide=guide)
