"""A readable account of a plan: grid, blocks, SMEM map, barriers, and the traffic floor."""
from __future__ import annotations

import re

COPY_GBPS = 4300.0  # measured H200 device-to-device copy, bytes read + written (bench/results)
PEAK_TFLOPS = 989.0  # H200 dense bf16/f16 tensor-core peak (datasheet)


def explain_map(p) -> str:
    lines = [
        f"kernel {p.kernel_name}  (family map, backends: {', '.join(p.backends)})",
        f"  sizes      {', '.join(f'{k}={v}' for k, v in p.sizes.items())}",
        f"  grid       {' x '.join(map(str, p.grid))} tiles of {' x '.join(map(str, p.block))} "
        f"({p.num_tiles} tiles; grid names {', '.join(p.grid_names)}; order {p.tile_order}"
        + (f", minor_dim {p.minor_dim}, tile_width {p.tile_width}" if p.tile_order == "planar_snake" else "") + ")",
        f"  launch     {p.num_blocks} blocks x {p.threads} threads ({p.num_warpgroups} warpgroups), "
        f"{p.blocks_per_sm} per SM, {'persistent' if p.persistent else 'one tile per block'} "
        f"(the Pallas kernel runs one warpgroup per block)",
        f"  pipeline   {p.stages} stages, {p.vec} elements (16 B) per thread access",
        "  operands",
    ]
    for o in p.operands:
        lines.append(f"    {o.role:3} {o.name:10} {o.dtype:6} {str(list(o.shape)):18} block {list(o.block)} "
                     f"index_map {o.index_map}  TMA box {list(o.tma.box)} x{o.tma.n_boxes} "
                     f"swizzle {o.tma.swizzle or 'none'}" + ("  [broadcast rows]" if o.minor_bcast else ""))
    lines.append(f"  SMEM map ({p.smem_bytes} B incl. 1 KiB alignment slack)")
    for b in p.smem_buffers:
        lines.append(f"    {b.offset:7d}  {b.name:12} {b.count} x {b.bytes} B  {b.note}")
    lines.append(f"  barriers   full[{p.stages}] (mbarrier, {p.full_arrivals} arrival + {p.tx_bytes} B of TMA "
                 f"transactions per stage)")
    lines.append("  body")
    for target, value in p.body_cxx:
        lines.append(f"    {target} = {value}")
    floor_ms = p.bytes_moved / (COPY_GBPS * 1e9) * 1e3
    lines.append(f"  traffic    {p.bytes_moved / 2**20:.1f} MiB; floor at {COPY_GBPS:.0f} GB/s: {floor_ms:.4f} ms")
    return "\n".join(lines)


def _spec_name(name: str) -> str:
    """A name of the plan's rendered epilogue back in the spec's terms (v_acc -> acc, v_bias -> bias, ...)."""
    if name == "v_acc":
        return "acc"
    m = re.fullmatch(r"(?:v|_c|t)_([A-Za-z][A-Za-z0-9_]*)", name)
    return m.group(1) if m else name


def _epilogue_text(p) -> list[str]:
    """The epilogue as statements over the spec's names, re-printed from the plan's (validated, rendered) form
    with only the parentheses it needs."""
    import ast
    out = []
    for target, value in p.epilogue_jnp:
        try:
            tree = ast.parse(value, mode="eval")
            for node in ast.walk(tree):
                if isinstance(node, ast.Name):
                    node.id = _spec_name(node.id)
            text = ast.unparse(tree).replace("jnp.", "")
        except SyntaxError:
            text = value
        out.append(f"{p.outputs[0].name if target == 'r_out' else _spec_name(target)} = {text}")
    return out


def _sizes_differ(p) -> bool:
    """Whether the spec's size names say something beyond M, N, K (and B)."""
    dims = {"M": p.m, "N": p.n, "K": p.k, **({"B": p.batch} if p.batch > 1 else {})}
    return dict(p.sizes) != dims


def explain_matmul(p) -> str:
    """Problem, tiles, wgmma shapes, stages and SMEM map, cluster/multicast, registers, tile order, epilogue."""
    lhs = next(o for o in p.inputs if o.role == "lhs")
    rhs = next(o for o in p.inputs if o.role == "rhs")
    out = p.outputs[0]
    bat = "[B, " if p.batch > 1 else "["
    a_lay = f"{lhs.name}{'[B, ' if p.lhs_batched else '['}{'K, M' if p.transpose_lhs else 'M, K'}]"
    b_lay = f"{rhs.name}{'[B, ' if p.rhs_batched else '['}{'N, K' if p.transpose_rhs else 'K, N'}]"
    wg_k = 32 // lhs.itemsize
    clusters = max(1, p.num_blocks // p.cluster_size)
    waves = p.num_tiles / clusters
    mma_ms = p.flops / (PEAK_TFLOPS * 1e12) * 1e3
    floor_ms = p.bytes_moved / (COPY_GBPS * 1e9) * 1e3
    lines = [
        f"kernel {p.kernel_name}  (family matmul, backends: {', '.join(p.backends)})",
        f"  problem    {out.name}{bat}M, N] = epilogue(acc),  acc = {a_lay}{'^T' if p.transpose_lhs else ''} @ "
        f"{b_lay}{'^T' if p.transpose_rhs else ''}",
        f"             M={p.m}, N={p.n}, K={p.k}" + (f", batch {p.batch}" if p.batch > 1 else "")
        + (f"  (sizes {', '.join(f'{k}={v}' for k, v in p.sizes.items())})" if _sizes_differ(p) else "")
        + f"; {p.in_dtype} in, {p.out_dtype} out, "
          f"f32 accumulation" + ("; ragged edges (TMA zero-fills loads, clips stores)" if p.ragged else ""),
        f"             {p.flops / 1e9:.1f} GFLOP, {p.bytes_moved / 2**20:.1f} MiB moved "
        f"({p.flops / max(1, p.bytes_moved):.0f} FLOP/B); at the {PEAK_TFLOPS:.0f} TFLOP/s peak {mma_ms:.4f} ms, "
        f"traffic floor at {COPY_GBPS:.0f} GB/s {floor_ms:.4f} ms "
        f"({'compute' if mma_ms >= floor_ms else 'memory'}-bound)",
        f"  tiles      {p.tile_m} x {p.tile_n} x {p.tile_k} (tile_m x tile_n x tile_k): {p.tiles_m} x {p.tiles_n} output "
        f"tiles" + (f" per batch" if p.batch > 1 else "") + f", {p.k_iters} k-steps each",
        f"  consumers  {p.num_consumers} warpgroup{'s' if p.num_consumers > 1 else ''} split the tile along "
        f"{p.wg_axis}: each owns {p.wg_tile_m} x {p.wg_tile_n}; wgmma m64n{p.wg_tile_n}k{wg_k} "
        f"({p.in_dtype}, f32 acc) x {p.m_blocks} M-block{'s' if p.m_blocks > 1 else ''} x {p.tile_k // wg_k} "
        f"per k-step = {p.m_blocks * (p.tile_k // wg_k)} wgmma per consumer per stage; "
        f"{p.delay_release} wgmma group{'s' if p.delay_release != 1 else ''} kept in flight before a stage is released",
        f"  registers  {p.threads} threads: producer warpgroup {p.producer_regs}/thread, consumers "
        f"{p.consumer_regs}/thread (setmaxnreg); {p.acc_regs} f32 accumulators per consumer thread; "
        f"{128 * (p.producer_regs + p.num_consumers * p.consumer_regs)} of 65536 registers",
        f"  operands   lhs {lhs.name} {'K' if p.k_major_a else 'M'}-major, swizzle {p.swizzle_a} B "
        f"({p.atom_a}-element rows), {p.a_stage_bytes} B per stage, descriptor LBO {p.a_lbo} SBO {p.a_sbo}",
        f"             rhs {rhs.name} {'K' if p.k_major_b else 'N'}-major, swizzle {p.swizzle_b} B "
        f"({p.atom_b}-element rows), {p.b_stage_bytes} B per stage, descriptor LBO {p.b_lbo} SBO {p.b_sbo}",
    ]
    for a in p.kernel_args:
        if a.kind == "tmap":
            o = p.operands[a.operand]
            lines.append(f"             TMA {o.role:5} {o.name:8} box {list(a.box)} swizzle {a.swizzle or 'none'} "
                         f"over {list(a.shape)}")
        else:
            o = p.operands[a.operand]
            what = "written from registers by the epilogue" if o.role == "out" else f"{o.bcast}: read by the epilogue"
            lines.append(f"             ptr {o.role:5} {o.name:8} ({what})")
    lines.append(f"  stages     {p.stages}-stage TMA ring: {p.a_stage_bytes} + {p.b_stage_bytes} = {p.stage_tx_bytes} B "
                 f"per stage (the full barrier's expect_tx)")
    lines.append(f"  SMEM map ({p.smem_bytes} B incl. 1 KiB alignment slack, of 232448)")
    for b in p.smem_buffers:
        lines.append(f"    {b.offset:7d}  {b.name:6} {b.count} x {b.bytes} B = {b.count * b.bytes} B  {b.note}")
    lines.append(f"  barriers   full[{p.stages}] {p.full_arrivals} arrival + {p.stage_tx_bytes} B of TMA transactions; "
                 f"empty[{p.stages}] {p.empty_arrivals} arrivals (consumers x CTAs in the cluster)")
    if p.cluster_size > 1:
        shared, half = ("rhs", f"{p.tile_n // 2} of {p.tile_n} columns") if p.multicast == "rhs" else \
            ("lhs", f"{p.tile_m // 2} of {p.tile_m} rows")
        lines.append(f"  cluster    {p.cluster_m} x {p.cluster_n} CTAs ({'along M' if p.cluster_m > 1 else 'along N'}): "
                     f"they share the {shared} tile; each CTA loads half of it ({half}) and multicasts it to both, "
                     f"so each stage's empty barrier waits for the consumers of both CTAs")
    else:
        lines.append("  cluster    none (1 CTA): no multicast")
    cm_tiles, cn_tiles = p.tiles_m // p.cluster_m, p.tiles_n // p.cluster_n
    order = p.tile_order
    if order == "planar_snake":
        order += f" (minor dim {p.minor_dim} = {'M' if p.minor_dim == 0 else 'N'}, bands {p.tile_width} wide)"
    lines.append(f"  tile loop  {order} over {cm_tiles} x {cn_tiles} cluster tiles" + (f" x {p.batch} batches" if p.batch > 1 else "")
                 + f" = {p.num_tiles}; {p.num_blocks} blocks = {clusters} clusters"
                 + (" (lowered at launch to the clusters that fit at once)" if p.auto_blocks else "")
                 + f", {waves:.2f} waves")
    epi = _epilogue_text(p)
    lines.append(f"  epilogue   {'; '.join(epi)}" + ("  (identity: a plain store)" if p.identity_epilogue else "")
                 + (f"  constants {', '.join(f'{k}={v}' for k, v in p.constants.items())}" if p.constants else ""))
    for e in p.extras:
        lines.append(f"             {e.name} {e.dtype} {list(e.shape)}: {e.bcast}")
    if getattr(p, "epi_store", "tma") == "direct":
        lines.append("             stored directly: each thread writes its accumulator fragments from registers (no SMEM "
                     "staging, no store barriers); the warpgroup moves on while the stores drain")
    else:
        lines.append(f"             {p.epi_rows} x {p.epi_cols} chunks ({p.epi_bytes} B, swizzle {p.epi_swizzle or 'none'}) "
                     f"through {p.epi_buffers} SMEM buffer{'s' if p.epi_buffers > 1 else ''} per consumer, stored by TMA")
    return "\n".join(lines)


def explain_attention(p) -> str:
    """Problem, blocks, the two GEMMs per key block, registers, SMEM map, barriers and the grid."""
    lines = [
        f"kernel {p.kernel_name}  (family attention, backends: {', '.join(p.backends)})",
        f"  problem    o = softmax({p.scale:.6g} * q k^T{' + causal mask' if p.causal else ''}) v;  B={p.batch} "
        f"Hq={p.heads_q} Hkv={p.heads_kv} Sq={p.seq_q} Skv={p.seq_kv} D={p.head_dim} ({p.layout}, {p.dtype})"
        + (f"; GQA groups of {p.heads_q // p.heads_kv}" if p.heads_q != p.heads_kv else "")
        + ("; returns the log-sum-exp" if p.with_lse else ""),
        f"  FLOPs      {p.flops / 1e9:.1f} G (4 B H Sq Skv D{', halved for causal' if p.causal else ''})",
        (f"  grid       persistent: one CTA an SM claims each next of {p.num_tiles} tiles from a counter (dynamic)"
         if p.dynamic else f"  grid       persistent: one CTA an SM walks {p.num_tiles} tiles" if p.persistent else
         f"  grid       {p.num_blocks} CTAs") +
        f" = {p.q_blocks} query blocks x {p.heads_q} heads x {p.batch} batch "
        + (f"(lpt: longest first, (batch, head) fastest in {p.sections} section(s) of {p.section_heads} whose K/V share "
           f"the L2)" if p.tile_order == "lpt" else
           f"(query blocks fastest{'; longest causal rows first' if p.causal else ''})") + f", {p.threads} threads each",
        f"  per CTA    {p.block_q} query rows: {p.num_consumers} consumer warpgroup(s) x 64 rows; "
        f"{p.kv_blocks} key blocks of {p.block_kv}"
        + (f"; ragged last query block ({p.seq_q % p.block_q} rows: TMA zero-fills its load, clips its store)"
           if p.seq_q % p.block_q else "")
        + (f"; ragged last key block ({p.seq_kv % p.block_kv} keys, the rest masked)"
           if p.seq_kv % p.block_kv else ""),
        f"  per block  S = Q K^T: wgmma m64n{p.block_kv}k16 x {p.head_dim // 16} (SMEM x SMEM); online softmax "
        f"in base 2 ({'ex2.approx' if p.approx_math else 'exp2f'}); O += P V: wgmma m64n{p.head_dim}k16 x "
        f"{p.block_kv // 16} (P from registers, V N-major)",
        f"  registers  producer {p.producer_regs}, consumers {p.consumer_regs} (S {p.s_regs} + O {p.o_regs} + "
        f"P {p.block_kv // 4} f32/b32 per thread)",
        f"  pipeline   K and V through {p.stages} stages each, separate full/empty mbarrier rings"
        + ("; ping-pong schedule barrier between the consumers" if p.pingpong else ""),
        f"  SMEM       {p.smem_bytes} B",
    ]
    for b in p.smem_buffers:
        lines.append(f"    {b.name:8} @{b.offset:7}  {b.count} x {b.bytes} B  {b.note}")
    return "\n".join(lines)


NVLINK_GBPS = 450.0  # H200 NVLink 4, one direction (datasheet: 900 GB/s both ways); not measured here


def explain_collective_matmul(p) -> str:
    """The mesh and the ring, the semaphores, how each backend moves the chunks, then the step's matmul plan."""
    lhs = next(o for o in p.inputs if o.role == "lhs")
    rhs = next(o for o in p.inputs if o.role == "rhs")
    out = p.outputs[0]
    d = p.num_devices
    mma_ms = p.flops / (PEAK_TFLOPS * 1e12) * 1e3
    step_ms = mma_ms / d
    link_ms = p.link_bytes / (NVLINK_GBPS * 1e9) * 1e3 / max(1, p.slots)
    order = "; ".join(f"device {dev}: " + ", ".join(str(p.chunk(dev, s)) for s in range(d)) for dev in range(d))
    ring = ", ".join(f"{dev} -> {p.send_to[dev]}" for dev in range(d))
    target = "its row block" if p.received_per == "row_block" else "the whole chunk"
    lines = [
        f"kernel {p.kernel_name}  (family collective_matmul, backends: {', '.join(p.backends)})",
        f"  problem    {out.name}[{p.m_total}, {p.n}] = all_gather({lhs.name}[{p.m}, {p.k}] over mesh axis {p.axis_name}, "
        f"{d} devices) @ {rhs.name}[{p.k}, {p.n}] on every device; {p.in_dtype} in, {p.out_dtype} out, f32 accumulation",
        f"             {p.flops / 1e9:.1f} GFLOP per device: {mma_ms:.4f} ms at the {PEAK_TFLOPS:.0f} TFLOP/s peak "
        f"({step_ms:.4f} ms a step); each device sends {p.link_bytes / 2**20:.1f} MiB to its neighbour: "
        f"{link_ms:.4f} ms a chunk at NVLink's {NVLINK_GBPS:.0f} GB/s a direction (datasheet), "
        f"{'hidden under' if link_ms < step_ms else 'longer than'} a step's matmul",
        f"  ring       device x sends its chunks to {p.device_id_text} (remote_refs.gather): {ring}",
        f"             step s multiplies chunk (x {'+' if p.chunk_step > 0 else '-'} s) mod {d} into out rows chunk x {p.m}: "
        f"{order}",
        f"  semaphores received[{p.slots} slot{'s' if p.slots > 1 else ''} x {p.counters_per_step}] per {p.received_per}, "
        f"{p.received_signal}; a step waits until {target} landed",
        f"             done[1] per launch, {p.done_signal}: the receiver has read its chunks (the next launch may "
        f"overwrite its gather buffer)",
        f"  CUDA       warps 1-3 of the producer warpgroup copy each chunk to the peer: {p.units_per_step} units of "
        f"{p.copy_rows} row{'s' if p.copy_rows > 1 else ''} ({p.unit_bytes} B), 16-byte vectors x {p.copy_unroll} in flight "
        f"a lane; " + ("a release (red.release.sys) per unit" if p.received_signal == "semaphore_signal" else
                       "one fence.acq_rel.sys per step, then red.relaxed.sys per unit"),
        f"             the producer polls ld.acquire.sys (then fence.proxy.async.global) before its TMA reads a gathered "
        f"chunk; launch e waits for e x {p.units_per_counter} arrivals per received semaphore; waits trap after "
        f"{p.spin_timeout_ns / 1e9:.0f} s",
        f"             per device: gather buffer {p.gather_bytes / 2**20:.1f} MiB ({p.slots} slot{'s' if p.slots > 1 else ''}), "
        f"flags {p.flags_bytes} B",
        f"  Pallas     consumer warpgroup 0 TMA-stores each lhs stage of a tile row's first tile to "
        f"plgpu.remote_ref(gather, {p.device_id_text}) while its wgmma runs (delay_release 1); "
        f"plgpu.semaphore_signal / semaphore_wait on pl.get_global semaphores; run under jax.shard_map",
        f"  grid       {p.num_blocks} persistent blocks x {p.threads} threads walk {d} steps x {p.tiles_per_step} tiles = "
        f"{p.num_tiles} ({p.num_tiles / max(1, p.num_blocks):.2f} waves)" + (", lowered at launch to the SMs" if p.auto_blocks else ""),
    ]
    for a in p.kernel_args:
        if a.kind == "tmap":
            lines.append(f"  TMA        {a.what:7} box {list(a.box)} swizzle {a.swizzle or 'none'} over {list(a.shape)}")
    lines.append("  the matmul of one step (the matmul family's plan; its own grid, tensor maps and cluster lines left out):")
    skip = ("tile loop", "cluster", "TMA ")
    lines += ["  " + ln for ln in explain_matmul(p.mm).splitlines()[1:] if not ln.strip().startswith(skip)]
    return "\n".join(lines)


EXPLAINERS = {"attention": explain_attention, "map": explain_map, "matmul": explain_matmul,
              "collective_matmul": explain_collective_matmul}


def explain(plan) -> str:
    return EXPLAINERS[plan.family](plan)
