"""matmul's `explain --draw` hooks: its tiles in the kernel's order (cluster units), its pipeline model, its summary
and reading guide (schedgen/draw.py draws them)."""
from __future__ import annotations

from ...draw import (L2_RATE, SMEM_RATE, TENSOR_RATE, TMA_LATENCY, Pipeline, Span, Tile, Traversal, kib,
                     persistent_guide, tile_order_text)
from ...plan.common import planar_snake
from ...plan.gemm import Tcgen05Mma, at_max, sm100_pallas_tmem_map
from ...registry import DrawHooks
from .explain import tmem_map


def matmul_tiles(p, limit: int | None = None) -> tuple[list[Tile], int, int]:
    """Tiles of batch 0 in the kernel's order (templates/matmul/cuda.cu.j2 sg_tile_coords): cluster units in row-major or
    planar-snake order, unit t handled by cluster t % clusters, its CTAs side by side along M or N. With `limit`,
    the units of the first `limit` tiles only."""
    grid, cl = p.tiles, p.cluster
    cm, cn = cl.cluster_m, cl.cluster_n
    tmc, tnc = grid.tiles_m // cm, grid.tiles_n // cn
    clusters = max(1, p.launch.num_blocks // cl.cluster_size)
    units = tmc * tnc if limit is None else min(tmc * tnc, max(1, limit // cl.cluster_size))
    tiles = []
    for t in range(units):
        if grid.tile_order == "planar_snake":
            um, un = planar_snake(t, (tmc, tnc), grid.minor_dim, grid.tile_width)
        else:
            um, un = t // tnc, t % tnc
        c = t % clusters
        for r in range(cl.cluster_size):
            row, col = (um * cm + r, un) if cm == 2 else (um, un * cn + r)
            tiles.append(Tile(row, col, t, c * cl.cluster_size + r, c, t // clusters))
    return tiles, grid.tiles_m, grid.tiles_n


def traversal(p, limit: int) -> Traversal:
    grid, cl = p.tiles, p.cluster
    tiles, rows, cols = matmul_tiles(p, limit)
    blocks = max(1, p.launch.num_blocks)
    clustered = cl.cluster_size > 1
    return Traversal(
        tiles=tiles, rows=rows, cols=cols, total=rows * cols,
        units=(grid.tiles_m // cl.cluster_m) * (grid.tiles_n // cl.cluster_n),
        blocks=blocks, takers=max(1, blocks // cl.cluster_size),
        cell=(grid.tile_n, grid.tile_m), names=("N", "M"), order=tile_order_text(p.tiles),
        unit=f"{cl.cluster_m}x{cl.cluster_n} cluster units" if clustered else "tiles",
        taker="clusters" if clustered else "blocks")


def simulate_matmul(p, tiles: int = 2, k_shown: int | None = None) -> tuple[list[Span], int]:
    """Producer / stage slots / consumers over `tiles` tiles of `k_shown` k-steps each, in a simple timing model:
    a stage's TMA load lands TMA_LATENCY + bytes / L2_RATE after issue (loads overlap but stream one after another),
    a k-step of wgmma takes its FLOPs at the tensor rate, the epilogue writes the tile at SMEM_RATE; the producer
    waits for a slot's `empty` barrier, the consumers for its `full` barrier; a stage is released when its wgmma is
    done (with delay_release 1, when the next step's wgmma has been issued). Ping-pong: tile t is consumer t % 2's,
    whose epilogue (the whole tile's) holds only that consumer; the tensor cores run one k-step at a time.
    sm_100a: the MMA thread (row "consumer 0") runs the next tile's k-steps while the epilogue warpgroup (row
    "epilogue") reads and stores the last one's accumulator from TMEM; tile t's first MMA waits only for its TMEM
    buffer (t % acc_stages), freed after the epilogue of tile t - acc_stages has read it (before its last chunk's
    conversion and store)."""
    grid, ring, w = p.tiles, p.pipeline, p.warps
    S = ring.stages
    k_shown = k_shown or min(grid.k_iters, S + 3)
    load = ring.stage_tx_bytes / L2_RATE
    mma = 2.0 * grid.tile_m * grid.tile_n * grid.tile_k / TENSOR_RATE
    pingpong = w.pingpong
    bw = _blackwell(p)
    epi = grid.tile_m * grid.tile_n * p.outputs[0].itemsize / SMEM_RATE / (1 if pingpong or bw else max(1, w.num_consumers))
    acc_free: dict[int, float] = {}      # sm_100a: tile -> when its TMEM buffer may take tile + acc_stages's MMAs
    epi_start: dict[int, float] = {}
    epi_end = 0.0
    issue_gap = 0.02e-6
    steps = tiles * k_shown
    spans: list[Span] = []
    landed, start, end, release = [0.0] * steps, [0.0] * steps, [0.0] * steps, [0.0] * steps
    issue_t, land_t, cons_free = 0.0, 0.0, 0.0
    own_free = [0.0, 0.0]             # ping-pong: when each consumer is done with its last tile's epilogue
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
        if pingpong:
            start[i] = max(land, cons_free, own_free[tile % 2])
            end[i] = cons_free = start[i] + mma                     # cons_free: the tensor cores
            own_free[tile % 2] = end[i] + (epi if k == k_shown - 1 else 0.0)
        else:
            start[i] = max(land, cons_free)
            if bw is not None and k == 0 and tile >= bw.acc_stages:
                start[i] = max(start[i], acc_free[tile - bw.acc_stages])
            end[i] = start[i] + mma
            cons_free = end[i]
            if k == k_shown - 1 and bw is not None:       # the epilogue warpgroup, not the MMA thread
                epi_start[tile] = max(end[i], epi_end)
                epi_end = epi_start[tile] + epi
                acc_free[tile] = epi_end - epi / bw.epi_chunks
            elif k == k_shown - 1:
                cons_free = end[i] + epi
        if i >= 1:
            prev = i - 1
            release[prev] = end[prev] if (ring.delay_release == 0 or (prev % k_shown) == k_shown - 1) else max(
                end[prev], start[i])
    release[steps - 1] = end[steps - 1]
    for i in range(steps):
        s = i % S
        tile, k = divmod(i, k_shown)
        spans.append(Span(f"stage {s}", landed[i], release[i], f"t{tile} k{k}", "hold", s))
        takers = (tile % 2,) if pingpong else (0,) if bw is not None else range(w.num_consumers)
        for c in takers:
            spans.append(Span(f"consumer {c}", start[i], end[i], f"k{k}", "mma", s))
        if k == k_shown - 1 and bw is not None:
            spans.append(Span("epilogue", epi_start[tile], epi_start[tile] + epi, f"epilogue t{tile}", "epilogue"))
        elif k == k_shown - 1:
            for c in takers:
                spans.append(Span(f"consumer {c}", end[i], end[i] + epi, f"epilogue t{tile}", "epilogue"))
    return spans, k_shown


def pipeline(p) -> Pipeline:
    grid, ring, w = p.tiles, p.pipeline, p.warps
    spans, k_shown = simulate_matmul(p)
    rows = ["producer"] + [f"stage {s}" for s in range(ring.stages)] + [f"consumer {c}" for c in range(w.num_consumers)]
    bw = _blackwell(p)
    names = {"producer": "producer WG\n(1 thread: TMA)",
             **{f"consumer {c}": f"consumer WG {c}\n(wgmma {w.wg_tile_m}x{w.wg_tile_n})"
                for c in range(w.num_consumers)}}
    if bw is not None:      # sm_100a: one thread issues tcgen05.mma; the epilogue warpgroup is its own row
        rows = ["producer"] + [f"stage {s}" for s in range(ring.stages)] + ["consumer 0", "epilogue"]
        names = {"producer": "producer warp\n(1 thread: TMA)",
                 "consumer 0": f"MMA thread\n(tcgen05 {bw.mma_m}x{bw.mma_n})",
                 "epilogue": f"epilogue WG\n(tcgen05.ld, TMA store;\n{bw.acc_stages} TMEM buffers)"}
    title = (f"Pipeline over 2 tiles x {k_shown} k-steps (of {grid.k_iters}; the rest of the K loop is cut): "
             f"{ring.stages}-stage ring, delay_release {ring.delay_release}; stage slot rows: hatched = TMA in flight "
             f"({kib(ring.stage_tx_bytes)}), solid = landed and read by {'tcgen05.mma' if bw else 'wgmma'} until "
             f"released" + (f"; the epilogue of a tile runs under the next tile's MMAs ({bw.acc_stages} TMEM "
                            f"accumulator buffers)" if bw else ""))
    legend = [dict(facecolor="#4c72b0", label="tcgen05.mma k-step" if bw else "wgmma k-step"),
              dict(facecolor="#222222", label="epilogue (TMEM load, apply, stage, TMA store)" if bw else
                   "epilogue (apply, stage, TMA store)")]
    return Pipeline(spans, rows, title, names, legend)


def summary(p) -> list[str]:
    grid, cl, ring, w = p.tiles, p.cluster, p.pipeline, p.warps
    clusters = max(1, p.launch.num_blocks // cl.cluster_size)
    bw = _blackwell(p)
    if bw is not None:
        return [
            f"kernel {p.launch.kernel_name}",
            "sm_100a (Blackwell): compiled, NOT RUN on hardware",
            f"M x N x K = {p.m} x {p.n} x {p.k}; {p.in_dtype} in, {p.out_dtype} out",
            f"tile {grid.tile_m} x {grid.tile_n} x {grid.tile_k}; tcgen05.mma.cta_group::{bw.cta_group} M{bw.mma_m} N{bw.mma_n}",
            f"cluster {cl.cluster_m} x {cl.cluster_n}; {p.launch.num_blocks} blocks; {p.launch.threads} threads",
            f"{ring.stages} stages x {kib(bw.stage_bytes)}; SMEM {p.launch.smem_bytes} B",
            f"TMEM {bw.tmem_cols} of 512 columns x 128 lanes:",
            *[f"  cols {c}-{c + n - 1}: {what.split(':')[0]}" for c, n, what in tmem_map(p)],
            *_pallas_tmem(p),
        ]
    return [
        f"kernel {p.launch.kernel_name}",
        f"M x N x K = {p.m} x {p.n} x {p.k}" + (f", batch {p.batch}" if p.batch > 1 else "")
        + f"; {p.in_dtype} in, {p.out_dtype} out",
        f"tile {grid.tile_m} x {grid.tile_n} x {grid.tile_k}; {grid.tiles_m} x {grid.tiles_n} tiles, {grid.k_iters} k-steps each",
        (f"{w.num_consumers} consumer warpgroups ping-pong ({w.consumer_schedule}): whole {w.wg_tile_m} x "
         f"{w.wg_tile_n} tiles, alternating" if w.pingpong else
         f"{w.num_consumers} consumer warpgroup(s) split along {w.wg_axis}: {w.wg_tile_m} x {w.wg_tile_n} each"),
        f"cluster {cl.cluster_m} x {cl.cluster_n}" + (f" (multicast {cl.multicast})" if cl.multicast else "")
        + f"; {p.launch.num_blocks} blocks = {clusters} clusters" + (" (at most; the runtime keeps what fits)"
                                                             if p.launch.auto_blocks else ""),
        f"{ring.stages} stages x {kib(ring.stage_tx_bytes)}; SMEM {p.launch.smem_bytes} B; {p.launch.threads} threads",
        f"order {grid.tile_order}" + (f" (minor dim {grid.minor_dim}, width {grid.tile_width})"
                                   if grid.tile_order == "planar_snake" else ""),
    ]


def _pallas_tmem(p) -> list[str]:
    """The Pallas sm_100a kernel's TMEM columns (plan.mma.tcgen05), under the CUDA kernel's."""
    t = p.mma.tcgen05
    if t is None:
        return []
    return [f"Pallas: TMEM {t.tmem_cols} columns x {t.rows} lanes:",
            *[f"  cols {c}-{c + n - 1}: {what.split(':')[0]}" for c, n, what in sm100_pallas_tmem_map(p)]]


def _blackwell(p):
    """The sm_100a CUDA kernel's numbers (plan.mma.blackwell), or None on sm_90a."""
    return p.mma.blackwell if isinstance(p.mma, Tcgen05Mma) else None


def guide(p) -> str:
    tiles = (["- black outlines: the CTAs of one cluster", "  (they share one operand tile by multicast)"]
             if p.cluster.cluster_size > 1 else [])
    ring = (["- pipeline: the TMA warp refills a slot once the",
             "  tcgen05.mma that read it are done (the MMA thread's",
             "  tcgen05.commit arrives on its empty barrier); the",
             "  MMA thread waits for it to land (full barrier)"] if _blackwell(p) is not None else
            ["- pipeline: the producer refills a slot only after",
             "  both consumers release it (empty barrier); the",
             "  consumers wait for it to land (full barrier)"])
    return persistent_guide(max(1, p.launch.num_blocks // p.cluster.cluster_size), tiles, ring)


def _at_max(hook):
    """A hook drawing a dynamic plan at its sizes' max."""
    return lambda p, *a, **kw: hook(at_max(p), *a, **kw)


HOOKS = DrawHooks(traversal=_at_max(traversal), pipeline=_at_max(pipeline), summary=_at_max(summary),
                  guide=_at_max(guide), smem=lambda p: p.pipeline.smem_buffers)
