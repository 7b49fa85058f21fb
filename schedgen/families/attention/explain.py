"""The attention family's `schedgen explain` text."""
from __future__ import annotations

from ...plan import dims as X


_MASKS = {"top_left": "top-left: query i sees keys j <= i",
          "bottom_right": "bottom-right: query i sees keys j <= i + Skv - Sq"}


def _ragged(p, what: str) -> str:
    """The ragged last query / key block: its size when the sizes are fixed, when it happens when they are not."""
    if what == "q":
        rows, seq, block, how = p.ragged_q_rows, p.seq_q, p.block_q, "TMA zero-fills its load, clips its store"
        unit = "rows"
    else:
        rows, seq, block, how = p.ragged_kv_keys, p.seq_kv, p.block_kv, "the rest masked"
        unit = "keys"
    if not (p.may_ragged_q if what == "q" else p.may_ragged_kv):
        return ""
    kind = "query" if what == "q" else "key"
    if X.is_static(rows):
        return f"; ragged last {kind} block ({rows} {unit}: {how})"
    return f"; a ragged last {kind} block when {seq} is not a multiple of {block} ({how})"


def explain_attention(p) -> str:
    """Problem, dynamic sizes, blocks, the two GEMMs per key block, registers, SMEM map, barriers and the grid."""
    at_max = " at the largest sizes" if p.launch.dynamic_sizes else ""
    lines = [
        f"kernel {p.launch.kernel_name}  (family attention, backends: {', '.join(p.launch.backends)})",
        f"  problem    o = softmax({p.scale:.6g} * q k^T{' + causal mask' if p.causal else ''}) v"
        + (f" ({_MASKS[p.causal_alignment]})" if p.causal else "") + f";  B={p.batch} "
        f"Hq={p.heads_q} Hkv={p.heads_kv} Sq={p.seq_q} Skv={p.seq_kv} D={p.head_dim} ({p.layout}, {p.dtype})"
        + (f"; GQA groups of {p.group}" if p.heads_q != p.heads_kv else "")
        + ("; returns the log-sum-exp" if p.with_lse else ""),
        *(["  sizes      " + "; ".join(f"{r.name}: {r.describe()}" for r in p.launch.dynamic_sizes)
           + " (launch arguments: one cubin serves the range; counts below are extents of them)"]
          if p.launch.dynamic_sizes else []),
        f"  FLOPs      {p.flops / 1e9:.1f} G{at_max} ("
        + (f"4 D per unmasked (q, k) pair x H x B, causal {p.causal_alignment}" if p.causal else "4 B H Sq Skv D")
        + ")",
        (f"  grid       persistent: one CTA an SM claims each next of {p.num_tiles} tiles from a counter (dynamic)"
         if p.dynamic else f"  grid       persistent: one CTA an SM walks {p.num_tiles} tiles" if p.persistent else
         f"  grid       {p.launch.num_blocks} CTAs") +
        f" = {p.q_blocks} query blocks x {p.heads_q} heads x {p.batch} batch "
        + (f"(lpt: longest first, (batch, head) fastest in {p.sections} section(s) of {p.section_heads} whose K/V share "
           f"the L2)" if p.tile_order == "lpt" else
           f"(query blocks fastest{'; longest causal rows first' if p.causal else ''})") + f", {p.launch.threads} threads each",
        *(_sm100(p) if p.tcgen05 is not None else _hopper(p)),
        f"  SMEM       {p.launch.smem_bytes} B",
    ]
    for b in p.smem_buffers:
        lines.append(f"    {b.name:8} @{b.offset:7}  {b.count} x {b.bytes} B  {b.note}")
    if p.tcgen05 is not None:
        from .blackwell import tmem_map
        t = p.tcgen05
        lines.append(f"  TMEM map   ({t.tmem_cols} of 512 columns allocated, {t.rows} lanes x 32 bit each; lane = query "
                     f"row)")
        for col, n, what in tmem_map(p):
            lines.append(f"    columns {col:3d}-{col + n - 1:3d}  {what}")
    return "\n".join(lines)


def _hopper(p) -> list[str]:
    return [
        f"  per CTA    {p.block_q} query rows: {p.num_consumers} consumer warpgroup(s) x 64 rows; "
        f"{p.kv_blocks} key blocks of {p.block_kv}"
        + _ragged(p, "q") + _ragged(p, "kv"),
        f"  per block  S = Q K^T: wgmma m64n{p.block_kv}k16 x {p.qk_steps} (SMEM x SMEM); online softmax "
        f"in base 2 ({'ex2.approx' if p.approx_math else 'exp2f'}); O += P V: wgmma m64n{p.head_dim}k16 x "
        f"{p.pv_steps} (P from registers, V N-major)",
        f"  registers  producer {p.producer_regs}, consumers {p.consumer_regs} (S {p.s_regs} + O {p.o_regs} + "
        f"P {p.p_regs} f32/b32 per thread)",
        f"  pipeline   K and V through {p.stages} stages each, separate full/empty mbarrier rings"
        + ("; ping-pong schedule barrier between the consumers" if p.pingpong else ""),
    ]


def _sm100(p) -> list[str]:
    """The sm_100a Pallas kernel (blackwell.py): its warps, MMAs, softmax and pipeline."""
    t = p.tcgen05
    return [
        "  target     sm_100a (Blackwell, B200), Pallas: lowered for sm_100a and run in Mosaic GPU's interpreter on "
        "the CPU, NOT RUN on Blackwell hardware",
        f"  per CTA    {p.block_q} query rows (thread = row of the softmax warpgroup, lane = row of TMEM); "
        f"{p.kv_blocks} key blocks of {p.block_kv}",
        "  warps      warpgroup 0: warp 0 TMA (Q, the K / V ring), warp 1 tcgen05_mma issue; warpgroup 1 the "
        "softmax, the O rescale and the epilogue",
        f"  per block  S = Q K^T: tcgen05.mma kind::f16 M{t.rows} N{p.block_kv} (SMEM x SMEM) into "
        f"S[{'(j % 2)' if t.s_buffers > 1 else '0'}]; online softmax in base 2 "
        f"({'ex2.approx' if p.approx_math else 'exp2'}) on async_load_tmem of S; O rescaled in TMEM {t.chunk} "
        f"columns at a time; P written with async_store_tmem + commit_tmem; O += P V: tcgen05.mma M{t.rows} "
        f"N{p.head_dim} with P from TMEM (the TS form) and V from SMEM (N-major)",
        f"  pipeline   K and V through {p.stages} stages each (full / empty rings, freed by the MMAs' commits); "
        + ("S double-buffered in TMEM: S_(j+1) is issued before P_j, under the softmax of block j"
           if t.s_buffers > 1 else "one S buffer (the TMEM columns allow no second): S_(j+1) is issued once P_j is "
                                   "written"),
    ]
