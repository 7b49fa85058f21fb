"""attention's `explain --draw` hooks: its tiles in launch order, its pipeline model of one tile (K and V rings,
the consumers' GEMMs and softmax), its summary and reading guide (schedgen/draw.py draws them)."""
from __future__ import annotations

import heapq

from ...draw import L2_RATE, SM_COUNT, TENSOR_RATE, Pipeline, Span, Tile, Traversal, kib, sm_count
from ...registry import DrawHooks
from .records import tile_of


DRAWN_SEQ = 4096                       # a dynamic plan is drawn at its largest sequence lengths up to this


def drawn_sizes(p) -> dict[str, int]:
    """Where a dynamic plan is drawn: each sequence length at its largest legal value up to DRAWN_SEQ, every other
    dynamic size (batch, heads) at its smallest."""
    seqs = {getattr(x, "args", (None,))[0] for x in (p.seq_q, p.seq_kv)}
    out = {}
    for r in p.launch.dynamic_sizes:
        top = max(r.min, min(r.max, DRAWN_SEQ // r.multiple_of * r.multiple_of))
        out[r.name] = top if r.name in seqs else r.min
    return out


def _static(p):
    return p.at(drawn_sizes(p)) if p.launch.dynamic_sizes else p


def attention_tiles(p, limit: int | None = None) -> tuple[list[Tile], int, int]:
    """Tiles of an attention plan in the kernel's order (plan.tile_of): rows are (batch, head) pairs, columns
    query blocks. A static persistent grid gives tile t to CTA t % grid; a dynamic one to the CTA that frees up
    first (modelled: a tile costs its key blocks plus one); otherwise each tile is its own CTA, started in index
    order by the hardware and coloured by its SM slot (index mod the target GPU's SMs, as the colour bar says). With `limit`,
    the first `limit` tiles only."""
    # a persistent grid's CTAs; otherwise the SM slots the hardware starts a CTA a tile in (index mod the target's
    # SM count)
    sms = sm_count(p)
    slots = min(p.num_tiles, sms) if p.persistent else sms
    free = [(0, c) for c in range(slots)] if p.persistent else []      # the CTAs a dynamic grid hands tiles to
    tiles = []
    for t in range(p.num_tiles if limit is None else min(p.num_tiles, limit)):
        b, h, qb = tile_of(p, t)
        if p.persistent and p.dynamic:
            at, blk = heapq.heappop(free)
            heapq.heappush(free, (at + p.kv_end(qb) + 1, blk))
        else:
            blk = t % slots
        tiles.append(Tile(b * p.heads_q + h, qb, t, blk, blk, t // slots))
    return tiles, p.batch * p.heads_q, p.q_blocks


def traversal(p, limit: int) -> Traversal:
    p = _static(p)
    tiles, rows, cols = attention_tiles(p, limit)
    sms = sm_count(p)
    blocks = max(1, min(p.num_tiles, sms) if p.persistent else sms)
    order = ("query blocks fastest, longest causal rows first" if p.causal else "query blocks fastest") + \
        (", persistent" if p.persistent else ", a CTA a tile")
    return Traversal(
        tiles=tiles, rows=rows, cols=cols, total=p.num_tiles, units=p.num_tiles, blocks=blocks, takers=blocks,
        cell=(p.block_q, p.block_q), names=("query blocks", "batch x q heads"), order=order,
        colorbar="" if p.persistent else f"SM slot of the tile's CTA in launch order (index mod {sms})")


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


def pipeline(p) -> Pipeline:
    p = _static(p)
    n = min(p.kv_blocks, p.stages + 3)
    rows = ["producer"] + [f"{k} stage {s}" for k in "KV" for s in range(p.stages)] + \
        [f"consumer {c}" for c in range(p.num_consumers)]
    names = {"producer": "producer WG\n(1 thread: TMA)",
             **{f"consumer {c}": f"consumer WG {c}\n(64 query rows)" for c in range(p.num_consumers)}}
    if p.tcgen05 is not None:   # sm_100a: drawn with the same timing model; one warp issues the tcgen05 MMAs
        names = {"producer": "TMA warp", "consumer 0": f"MMA warp + softmax WG\n({p.block_q} query rows)"}
    who = "the MMA warp" if p.tcgen05 is not None else "each consumer"
    title = (f"Pipeline of one tile over {n} key blocks (of {p.kv_blocks}): {p.stages}-stage K and V rings; {who} "
             f"issues S_j = Q K_j^T with P_(j-1) V_(j-1), then the softmax of S_j runs under its P V"
             + ("; the ping-pong barrier hands the tensor cores round robin" if p.pingpong else ""))
    mma = "tcgen05.mma" if p.tcgen05 is not None else "wgmma"
    legend = [dict(facecolor="#4c72b0", label=f"{mma}: S = Q K^T, O += P V (colour: the stage read)"),
              dict(facecolor="#55a868", label="online softmax (exp2, max, sum, rescale)")]
    return Pipeline(simulate_attention(p, n), rows, title, names, legend, aside="compute")


def summary(p) -> list[str]:
    at = "; drawn at " + ", ".join(f"{n} = {v}" for n, v in drawn_sizes(p).items()) if p.launch.dynamic_sizes else ""
    p = _static(p)
    heads = f"{p.heads_q} q / {p.heads_kv} kv heads" if p.heads_q != p.heads_kv else f"{p.heads_q} heads"
    return [
        f"kernel {p.launch.kernel_name}",
        f"B {p.batch}, {heads}, Sq {p.seq_q}, Skv {p.seq_kv}, D {p.head_dim} ({p.layout}, {p.dtype})"
        + (f", causal {p.causal_alignment.replace('_', '-')}" if p.causal else "") + (", with LSE" if p.with_lse else "") + at,
        f"block_q {p.block_q} (" + ("one softmax WG, thread = row" if p.tcgen05 is not None else
                                    f"{p.num_consumers} consumer WG x 64 rows") + f"), block_kv {p.block_kv}; "
        f"{p.q_blocks} x {p.kv_blocks} blocks",
        f"{p.num_tiles} tiles" + (" on a persistent grid of one CTA an SM" if p.persistent else ", a CTA each")
        + f"; {p.launch.threads} threads",
        f"{p.stages} K/V stages x {kib(p.kv_stage_bytes)} each; SMEM {p.launch.smem_bytes} B",
        *(_tmem_lines(p) if p.tcgen05 is not None else
          [f"registers: producer {p.producer_regs}, consumers {p.consumer_regs}"
           + ("; ping-pong schedule barrier" if p.pingpong else "")]),
    ]


def _tmem_lines(p) -> list[str]:
    """sm_100a: the TMEM columns, like the SMEM map (blackwell.tmem_map)."""
    from .blackwell import tmem_map
    used = [f"{what.split(':')[0]} {c}-{c + n - 1}" for c, n, what in tmem_map(p) if ":" in what]
    return ["sm_100a (Blackwell), Pallas: NOT RUN on hardware",
            f"TMEM {p.tcgen05.tmem_cols} of 512 cols: " + ", ".join(used)]


def _tcgen05_ring(p) -> list[str]:
    """The sm_100a pipeline's roles: the TMA warp, the MMA warp, the softmax warpgroup."""
    return ["- pipeline: the TMA warp refills a K / V slot once",
            "  the tcgen05.mma that read it is done (tcgen05.commit);",
            *(["  the softmax WG's work on S_j (green) runs under",
               "  the MMA warp's S_(j+1) (two S buffers in TMEM)"] if p.tcgen05.s_buffers > 1 else
              ["  the MMA warp waits for the softmax WG's P_j (one",
               "  S buffer in TMEM) before it issues S_(j+1)"])]


def guide(p) -> str:
    p = _static(p)
    lines = ["How to read it:",
             "- tiles: one row per (batch, q head), one column per",
             "  query block; the numbers give the launch order" + (" (a" if p.persistent else ""),
             ("  persistent CTA takes every " + str(min(p.num_tiles, sm_count(p))) + "-th tile)") if p.persistent
             else "  (the hardware starts CTAs in index order)",
             "- SMEM: the Q tile, the K and V stage rings (and O's",
             "  staging buffer where it fits), then the mbarriers",
             *(_tcgen05_ring(p) if p.tcgen05 is not None else
               ["- pipeline: the producer refills a K / V slot once",
                "  every consumer has released it; a consumer's",
                "  softmax (green) runs under its own P V"])]
    return "\n".join(lines)


HOOKS = DrawHooks(traversal=traversal, pipeline=pipeline, summary=summary, guide=guide)
