"""The attention_backward family's `schedgen explain` text."""
from __future__ import annotations

_MASKS = {"top_left": "top-left: query i sees keys j <= i",
          "bottom_right": "bottom-right: query i sees keys j <= i + Skv - Sq"}


def explain_attention_backward(p) -> str:
    mask = _MASKS[p.causal_alignment] if p.causal else "none"
    return "\n".join([
        f"attention backward '{p.launch.name}': dq, dk, dv of softmax({p.scale!r} q k^T) v, {p.dtype}, layout {p.layout}",
        f"  form       {p.form}",
        f"  B={p.batch} Hq={p.heads_q} Hkv={p.heads_kv} (group {p.group}) Sq={p.seq_q} Skv={p.seq_kv} "
        f"D={p.head_dim}; causal mask: {mask}",
        *(["  sizes      " + "; ".join(f"{r.name}: {r.describe()}" for r in p.launch.dynamic_sizes)
           + " (one package: the kernels take them at each call)"] if p.launch.dynamic_sizes else []),
        f"  {p.flops / 1e9:.3f} GFLOP{' at the largest sizes' if p.launch.dynamic_sizes else ''} (10 D per unmasked "
        f"(query, key) pair: S recomputed, dP, dV, dQ, dK = 2.5x the forward)",
        "  step 1 (jnp): delta = rowsum(dO * O) in f32, [B, Hq, Sq]",
        *(_fused_lines(p) if p.fused else _two_kernel_lines(p)),
        "  causal: blocks wholly past the mask are skipped, the blocks crossing the diagonal are masked" if p.causal else
        "  no mask: every block visited",
        f"  backends: {', '.join(p.launch.backends)}" + (" (Pallas: P^T and dS^T go to the wgmma through SMEM)"
                                                   if "pallas" in p.launch.backends and not p.fused else ""),
        *_cuda_lines(p),
    ]) + "\n"


def _fused_lines(p) -> list[str]:
    """pipeline.kind warp_specialized: the one Pallas kernel (fused.py)."""
    return [
        f"  pipeline.kind warp_specialized: ONE Pallas kernel (FlashAttention-3's form), {p.kv_rows_blocks // p.consumers}"
        f" x {p.heads_kv} x {p.batch} blocks of {p.keys} keys: {p.consumers} consumer warpgroup(s) (num_compute_wgs) of 64 "
        f"keys and a producer warpgroup that streams the {p.group} q head(s) of the group in {p.block_q}-query "
        f"blocks (Q, dO, lse, delta) through {p.stages} SMEM stage(s);",
        "    per step and consumer: S^T = K Q^T, P^T = exp2(S^T scale log2e - lse log2e), dP^T = V dO^T, "
        "dV += P^T dO, dS^T = P^T (dP^T - delta), dK += dS^T Q (P^T, dS^T from registers),",
        "    dQ partial = dS K (f32, dS^T through SMEM) summed into an f32 workspace by a TMA reduce-add (one a "
        "consumer and step); dK *= scale",
        f"    setmaxnreg {p.consumer_regs} (consumers) / {p.producer_regs} (producer); about {p.fused_regs} registers "
        f"a consumer thread, {p.fused_smem_bytes} B SMEM",
        "  step 3 (jnp): dq = scale * workspace, cast to the inputs' dtype (no kernel recomputes S and dP)",
    ]


def _two_kernel_lines(p) -> list[str]:
    """pipeline.kind emit_pipeline: the dK/dV kernel, then the dQ kernel."""
    return [
        "  pipeline.kind emit_pipeline: two Pallas kernels (warp_specialized: one, dQ by TMA reduce-add)",
        f"  step 2, dK/dV kernel: {p.kv_rows_blocks}{f' x {p.d_split}' if p.d_split > 1 else ''} x {p.heads_kv} x "
        f"{p.batch} blocks of 64 keys{_columns(p)}; each streams "
        f"the {p.group} q head(s) of its group in {p.block_q}-query blocks (Q, dO, lse, delta) through "
        f"{p.stages} SMEM stage(s):",
        "    S^T = K Q^T, P^T = exp2(S^T scale log2e - lse log2e), dV += P^T dO, dP^T = V dO^T, "
        "dS^T = P^T (dP^T - delta), dK += dS^T Q;  dK *= scale",
        f"    about {p.dkv_regs} registers a thread, {p.dkv_smem_bytes} B SMEM",
        f"  step 3, dQ kernel: {p.q_rows_blocks} x {p.heads_q} x {p.batch} blocks of 64 queries; each streams K, V "
        f"in {p.block_kv}-key blocks through {p.stages} stage(s):",
        "    S = Q K^T, P, dP = dO V^T, dS = P (dP - delta), dQ += dS K;  dQ *= scale (a separate pass: no atomics)",
        f"    about {p.dq_regs} registers a thread, {p.dq_smem_bytes} B SMEM",
    ]


def _columns(p) -> str:
    if p.d_split == 1:
        return ""
    return (f" and {p.d_part} of the {p.head_dim} columns of their dK, dV (a thread's registers hold no more; each "
            f"block recomputes S^T and dP^T over the whole head_dim)")


def _cuda_lines(p) -> list[str]:
    if p.wgmma is not None:
        return _wgmma_lines(p)
    c = p.cuda
    if c is None:
        return []
    return [
        f"  CUDA: one launch of {c.dkv_blocks} + {c.dq_blocks} blocks of {p.launch.threads} threads (dK/dV blocks first, "
        f"then dQ{'; the longest first' if p.causal else ''}); each role computes its own delta; 4 warps of 16 rows "
        f"on mma.sync m16n8k16, P^T / dS^T straight from the S^T fragments (no SMEM staging);",
        f"    Q, dO, O, lse (K, V) through a {p.stages}-stage cp.async ring; about {c.dkv_regs} (dK/dV) and "
        f"{c.dq_regs} (dQ) registers a thread, {c.smem_bytes} B SMEM",
    ]


def _wgmma_lines(p) -> list[str]:
    w = p.wgmma
    split = (f"each consumer {p.head_dim // w.consumers} of the columns over all {w.rows} keys" if w.dq_column_split
             else "each consumer all columns over its own 64 keys")
    adds = ("red.global.add.v4.f32" if w.dq_reduce == "red" else
            f"cp.reduce.async.bulk from an f32 SMEM staging buffer ({w.dq_bulk_ops} x {w.dq_bulk_bytes} B, issued by "
            f"the producer's warp 3, which counts the block's arrival once the adds complete)")
    pre = w.delta == "preprocess"
    return [
        *([f"  CUDA delta (pipeline.delta: preprocess): the launch's first {w.pre_blocks} blocks (by ticket) compute "
           f"delta of the {w.pre_tiles} 64-query tiles into the workspace (16-byte loads of dO and O) and zero the "
           f"tiles' dQ sums, a flag a tile (the key blocks' producers wait for it); the runtime zeroes "
           f"{w.workspace_zero} B of the workspace"] if pre else []),
        f"  CUDA (pipeline.kind: warp_specialized): one launch of {w.dkv_blocks} blocks of {w.threads} threads: a "
        f"TMA producer warpgroup (setmaxnreg {w.producer_regs}: memory_registers) and {w.consumers} consumer "
        f"warpgroup(s) of 64 keys (setmaxnreg {w.consumer_regs}: compute_registers; num_compute_wgs {w.consumers});",
        f"    blocks of {w.rows} keys: S^T = K Q^T and dP^T = V dO^T by wgmma m64n64k16 from SMEM, dV += P^T dO and "
        f"dK += dS^T Q by wgmma m64n{p.head_dim}k16 with P^T, dS^T from registers; "
        + ("delta from the preprocessing blocks, by bulk copy beside the stage's lse;" if pre else
           "delta = rowsum(dO O) by the producer's warps 1-2 for each step (beside the stage's lse);"),
        f"    dQ as FlashAttention-3: dS^T to SMEM (stmatrix.trans), dQ partial = dS K by wgmma m64n64k16 from SMEM "
        f"({split}), added to a {w.workspace_bytes} B f32 workspace "
        f"({'the sums zeroed by the preprocessing blocks' if pre else 'zeroed by the runtime before each launch'}) by "
        f"{adds}; the last arrival at a 64-query tile (a counter a tile) writes its dq "
        f"(summation order varies run to run)",
        f"    64-query steps ({'Q, dO, lse, delta' if pre else 'Q, dO, O, lse'}) through a {p.stages}-stage TMA ring "
        f"(mbarriers full / empty; {w.dkv_stage} B a stage, up to {w.max_stages} stages fit the SMEM: "
        f"max_concurrent_steps), {'two dS buffers' if w.ds_buffers == 2 else 'one dS buffer'}, {w.smem_bytes} B SMEM",
    ]
