"""The matmul family's `schedgen explain` text."""
from __future__ import annotations

from ...explain import COPY_GBPS
from ...plan.gemm import Tcgen05Mma, at_max, peak_tflops, sm100_pallas_tmem_map
from .epilogue import epilogue_text
from .blockscale import is_block_scaled, scale_operand
from .stream_k import explain_lines


def _sizes_differ(p) -> bool:
    """Whether the spec's size names say something beyond M, N, K (and B)."""
    named = {"M": p.m, "N": p.n, "K": p.k, **({"B": p.batch} if p.batch > 1 else {})}
    return {k: v if isinstance(v, int) else v.max for k, v in p.sizes.items()} != named


def explain_matmul(p) -> str:
    """Problem, tiles, wgmma shapes, stages and SMEM map, cluster/multicast, registers, tile order, epilogue."""
    if p.launch.dynamic_sizes:
        q, ranges = at_max(p), {r.name: r for r in p.launch.dynamic_sizes}
        head = ["  sizes      " + "; ".join(f"{r.name}: {r.describe()}" for r in ranges.values())
                + "  (one cubin for the range: the kernel takes them as launch arguments; the numbers below are "
                + "at " + ", ".join(f"{r.name} = {r.max}" for r in ranges.values()) + ")"]
        lines = _explain(q).split("\n")
        return "\n".join(lines[:1] + head + lines[1:])
    return _explain(p)


def _consumers(p) -> str:
    """How the consumer warpgroups share the tiles (pipeline.consumer_schedule)."""
    if not p.warps.pingpong:
        return (f"  consumers  {p.warps.num_consumers} warpgroup{'s' if p.warps.num_consumers > 1 else ''} split the tile along "
                f"{p.warps.wg_axis}: each owns {p.warps.wg_tile_m} x {p.warps.wg_tile_n}")
    return (f"  consumers  {p.warps.num_consumers} warpgroups ping-pong ({p.warps.consumer_schedule}): each owns whole "
            f"{p.warps.wg_tile_m} x {p.warps.wg_tile_n} tiles, the two take alternate tiles of the block's sequence, so one's "
            f"epilogue runs under the other's wgmma; an ordering barrier makes their k-loops take turns on the tensor cores")


def _explain(p) -> str:
    lhs = next(o for o in p.inputs if o.role == "lhs")
    rhs = next(o for o in p.inputs if o.role == "rhs")
    lines = _problem_lines(p, lhs, rhs)
    if isinstance(p.mma, Tcgen05Mma):
        return "\n".join(lines + _blackwell(p, lhs, rhs))
    lines += _warpgroup_lines(p, lhs, rhs) + _argument_lines(p) + _ring_lines(p)
    lines += [_cluster_line(p), _tile_loop_line(p)]
    if p.stream_k:
        lines += explain_lines(p)
    if is_block_scaled(p):
        lines.append(_scales_line(p))
    lines += _epilogue_lines(p)
    return "\n".join(lines)


def _problem_lines(p, lhs, rhs) -> list[str]:
    """The kernel, the problem (layouts, sizes, dtypes), its FLOPs and bytes against the roofline, the tiles."""
    out = p.outputs[0]
    bat = "[B, " if p.batch > 1 else "["
    a_lay = f"{lhs.name}{'[B, ' if p.lhs_batched else '['}{'K, M' if p.transpose_lhs else 'M, K'}]"
    b_lay = f"{rhs.name}{'[B, ' if p.rhs_batched else '['}{'N, K' if p.transpose_rhs else 'K, N'}]"
    peak = peak_tflops(p)
    mma_ms = p.flops / (peak * 1e12) * 1e3
    floor_ms = p.bytes_moved / (COPY_GBPS * 1e9) * 1e3
    return [
        f"kernel {p.launch.kernel_name}  (family matmul, backends: {', '.join(p.launch.backends)})",
        f"  problem    {out.name}{bat}M, N] = epilogue(acc),  acc = {a_lay}{'^T' if p.transpose_lhs else ''} @ "
        f"{b_lay}{'^T' if p.transpose_rhs else ''}",
        f"             M={p.m}, N={p.n}, K={p.k}" + (f", batch {p.batch}" if p.batch > 1 else "")
        + (f"  (sizes {', '.join(f'{k}={v}' for k, v in p.sizes.items())})" if _sizes_differ(p) else "")
        + f"; {p.in_dtype} in, {p.out_dtype} out, "
          f"f32 accumulation" + ("; ragged edges (TMA zero-fills loads, clips stores)" if p.tiles.ragged else ""),
        f"             {p.flops / 1e9:.1f} GFLOP, {p.bytes_moved / 2**20:.1f} MiB moved "
        f"({p.flops / max(1, p.bytes_moved):.0f} FLOP/B); at the {peak:.0f} TFLOP/s peak {mma_ms:.4f} ms, "
        f"traffic floor at {COPY_GBPS:.0f} GB/s {floor_ms:.4f} ms "
        f"({'compute' if mma_ms >= floor_ms else 'memory'}-bound)" + (f" (target {p.launch.target}: {peak:.0f} is the "
                                                                      f"H200's figure)" if p.launch.target != "sm_90a" else ""),
        f"  tiles      {p.tiles.tile_m} x {p.tiles.tile_n} x {p.tiles.tile_k} (tile_m x tile_n x tile_k): {p.tiles.tiles_m} x {p.tiles.tiles_n} output "
        f"tiles" + (" per batch" if p.batch > 1 else "") + f", {p.tiles.k_iters} k-steps each",
    ]


def _warpgroup_lines(p, lhs, rhs) -> list[str]:
    """The Hopper kernel's consumers and wgmma, its registers, its operands' SMEM layouts."""
    wg_k = 32 // lhs.itemsize
    return [
        _consumers(p) + f"; wgmma m64n{p.warps.wg_tile_n}k{wg_k} "
        f"({p.in_dtype}, f32 acc) x {p.mma.m_blocks} M-block{'s' if p.mma.m_blocks > 1 else ''} x {p.tiles.tile_k // wg_k} "
        f"per k-step = {p.mma.m_blocks * (p.tiles.tile_k // wg_k)} wgmma per consumer per stage; "
        f"{p.pipeline.delay_release} wgmma group{'s' if p.pipeline.delay_release != 1 else ''} kept in flight before a stage is released",
        f"  registers  {p.launch.threads} threads: producer warpgroup {p.warps.producer_regs}/thread, consumers "
        f"{p.warps.consumer_regs}/thread (setmaxnreg); {p.warps.acc_regs} f32 accumulators per consumer thread; "
        f"{128 * (p.warps.producer_regs + p.warps.num_consumers * p.warps.consumer_regs)} of the block's {p.warps.block_regs} registers "
        f"(__launch_bounds__({p.launch.threads}, 1))",
        f"  operands   lhs {lhs.name} {'K' if p.layout.k_major_a else 'M'}-major, swizzle {p.layout.swizzle_a} B "
        f"({p.layout.atom_a}-element rows), {p.layout.a_stage_bytes} B per stage, descriptor LBO {p.layout.a_lbo} SBO {p.layout.a_sbo}",
        f"             rhs {rhs.name} {'K' if p.layout.k_major_b else 'N'}-major, swizzle {p.layout.swizzle_b} B "
        f"({p.layout.atom_b}-element rows), {p.layout.b_stage_bytes} B per stage, descriptor LBO {p.layout.b_lbo} SBO {p.layout.b_sbo}",
    ]


def _argument_lines(p) -> list[str]:
    """The kernel's arguments: each tensor map's box, each pointer's reader."""
    lines = []
    for a in p.launch.kernel_args:
        o = p.operands[a.operand]
        if a.kind == "tmap":
            lines.append(f"             TMA {o.role:5} {o.name:8} box {list(a.box)} swizzle {a.swizzle or 'none'} "
                         f"over [{', '.join(map(str, a.shape))}]")
        else:
            what = ("written from registers by the epilogue" if o.role == "out" else
                    f"{o.bcast}: block scales, read by the k-loop once per 128-K block" if o.bcast.startswith("kblock")
                    else f"{o.bcast}: read by the epilogue")
            lines.append(f"             ptr {o.role:5} {o.name:8} ({what})")
    return lines


def _ring_lines(p) -> list[str]:
    """The TMA ring's stages, the SMEM map, the ring's barriers."""
    a_loaded = p.pipeline.stage_tx_bytes - p.layout.b_stage_bytes
    lines = [f"  stages     {p.pipeline.stages}-stage TMA ring: {a_loaded}"
             + (f" (M = {p.layout.a_box_rows} of the {p.layout.a_stage_bytes} B stage's {p.tiles.tile_m} rows: the rest are zeroed "
                f"once, never loaded)" if a_loaded != p.layout.a_stage_bytes else "")
             + f" + {p.layout.b_stage_bytes} = {p.pipeline.stage_tx_bytes} B per stage (the full barrier's expect_tx)",
             f"  SMEM map ({p.launch.smem_bytes} B incl. 1 KiB alignment slack, of 232448)"]
    for b in p.pipeline.smem_buffers:
        lines.append(f"    {b.offset:7d}  {b.name:6} {b.count} x {b.bytes} B = {b.count * b.bytes} B  {b.note}")
    lines.append(f"  barriers   full[{p.pipeline.stages}] {p.pipeline.full_arrivals} arrival + {p.pipeline.stage_tx_bytes} B of TMA transactions; "
                 f"empty[{p.pipeline.stages}] {p.pipeline.empty_arrivals} arrivals (consumers x CTAs {'it is multicast to' if p.cluster.multicast else 'reading it'}"
                 + (", one consumer reads a stage" if p.warps.pingpong else "") + ")")
    return lines


def _multicast_half(p) -> tuple[str, str]:
    """The multicast operand of a CTA pair and the half of its tile each CTA loads."""
    if p.cluster.multicast == "rhs":
        return "rhs", f"{p.tiles.tile_n // 2} of {p.tiles.tile_n} columns"
    return "lhs", f"{p.tiles.tile_m // 2} of {p.tiles.tile_m} rows"


def _cluster_line(p) -> str:
    """The thread-block cluster: split-K's ranks, a multicast pair, or none."""
    if p.cluster.split_k > 1:
        share = [f"{(r * p.tiles.k_iters) // p.cluster.split_k}-{((r + 1) * p.tiles.k_iters) // p.cluster.split_k - 1}"
                 for r in range(p.cluster.split_k)] if isinstance(p.tiles.k_iters, int) else []
        return (f"  cluster    1 x 1 x {p.cluster.split_k} CTAs (split-K): each runs 1/{p.cluster.split_k} of a tile's k-steps"
                + (f" (ranks 0-{p.cluster.split_k - 1}: k-steps {', '.join(share)})" if share else "")
                + f"; {'rank 1' if p.cluster.split_k == 2 else f'ranks 1-{p.cluster.split_k - 1}'} write their f32 partial tile ({p.tiles.tile_m * p.tiles.tile_n * 4} B) to "
                  f"their own SMEM and arrive on rank 0's red_full barrier (release, cluster scope); rank 0 "
                  f"adds the partials over DSMEM (ld.shared::cluster), frees them (red_empty) and runs the "
                  f"epilogue")
    if p.cluster.cluster_size > 1:
        shared, half = _multicast_half(p)
        return (f"  cluster    {p.cluster.cluster_m} x {p.cluster.cluster_n} CTAs ({'along M' if p.cluster.cluster_m > 1 else 'along N'}): "
                f"they share the {shared} tile; each CTA loads half of it ({half}) and multicasts it to both, "
                f"so each stage's empty barrier waits for the consumers of both CTAs")
    return "  cluster    none (1 CTA): no multicast"


def _tile_loop_line(p) -> str:
    """The persistent tile loop: its order, tiles, blocks, clusters and waves."""
    clusters = max(1, p.launch.num_blocks // p.cluster.cluster_size)
    waves = p.tiles.num_tiles / clusters
    cm_tiles, cn_tiles = p.tiles.tiles_m // p.cluster.cluster_m, p.tiles.tiles_n // p.cluster.cluster_n
    order = p.tiles.tile_order
    if order == "planar_snake":
        order += f" (minor dim {p.tiles.minor_dim} = {'M' if p.tiles.minor_dim == 0 else 'N'}, bands {p.tiles.tile_width} wide)"
    return (f"  tile loop  {order} over {cm_tiles} x {cn_tiles} cluster tiles" + (f" x {p.batch} batches" if p.batch > 1 else "")
            + f" = {p.tiles.num_tiles}; {p.launch.num_blocks} blocks = {clusters} clusters"
            + (" (lowered at launch to the clusters that fit at once)" if p.launch.auto_blocks else "")
            + f", {waves:.2f} waves")


def _scales_line(p) -> str:
    """Block scales (128 x 128): how each K block's partial sum is promoted."""
    sa, sb = scale_operand(p, "lhs"), scale_operand(p, "rhs")
    sets = p.partial_sums
    how = ("one partial-sum set: each block's wgmmas are waited for (wait_group 0) before its promotion"
           if sets == 1 else
           "two partial-sum sets, K blocks in pairs: block kb + 1's wgmmas are issued before block kb is waited "
           "for (wait_group 1) and promoted, so they run under its promotion")
    return (f"  scales     128 x 128 blocks: each stage's wgmmas (one 128-K block) run into a fresh partial sum, "
            f"added to acc x {sa.name}[row, kb] x {sb.name}[col / 128, kb] ({sa.name} {list(sa.shape)}, "
            f"{sb.name} {list(sb.shape)}, f32); partial_sums {sets}: {how} ({(1 + sets) * p.warps.acc_regs} f32 "
            f"registers per consumer thread); the scales read "
            + (f"a {'K block' if sets == 1 else 'pair'} ahead (scale_prefetch)" if p.scale_prefetch else
               "while the block's own wgmmas run"))


def _epilogue_lines(p) -> list[str]:
    """The epilogue: its statements, its extra operands and where it reads them, how it stores."""
    epi = epilogue_text(p)
    lines = [f"  epilogue   {'; '.join(epi)}" + ("  (identity: a plain store)" if p.identity_epilogue else "")
             + (f"  constants {', '.join(f'{k}={v}' for k, v in p.constants.items())}" if p.constants else "")]
    for e in p.extras:
        if not e.bcast.startswith("kblock"):
            lines.append(f"             {e.name} {e.dtype} {list(e.shape)}: {e.bcast}")
    lines += operand_lines(p)
    if p.staging.epi_store == "direct":
        lines.append("             stored directly: each thread writes its accumulator fragments from registers (no SMEM "
                     "staging, no store barriers); the warpgroup moves on while the stores drain")
    else:
        lines.append(f"             {p.staging.epi_rows} x {p.staging.epi_cols} chunks ({p.staging.epi_bytes} B, swizzle {p.staging.epi_swizzle or 'none'}) "
                     f"through {p.staging.epi_buffers} SMEM buffer{'s' if p.staging.epi_buffers > 1 else ''} per consumer, stored by TMA")
    return lines


def operand_lines(p) -> list[str]:
    """Where the epilogue reads its row and column operands (schedule.epilogue.operands)."""
    vs = getattr(p, "epi_vectors", None)
    if vs is not None and vs.slots:
        what = ", ".join(f"{v.name} ({v.elems} {'columns' if v.bcast == 'row' else 'rows'} a tile)" for v in vs.vectors)
        return [f"             operands from SMEM: producer warp 1 copies each tile's slice of {what} with 16-byte "
                f"cp.async (zero-filled past {'N' if any(v.bcast == 'row' for v in vs.vectors) else 'M'}) into "
                f"{vs.slots} slot{'s' if vs.slots > 1 else ''} of {vs.slot_bytes} B while the k-loop runs; the "
                f"consumers wait on vec_full before the epilogue, read them with ld.shared and free the slot on "
                f"vec_empty"]
    vectors = [e.name for e in p.extras if e.bcast in ("row", "col")]
    if vectors:
        return [f"             operands from global memory: each thread loads its values of {', '.join(vectors)} in "
                f"the epilogue (epilogue.operands: smem stages them in SMEM during the k-loop)"]
    return []


def tmem_map(p) -> list[tuple[int, int, str]]:
    """The TMEM columns of an sm_100a plan, like the SMEM map: (first column, columns, what), every 128 lanes."""
    bw = p.mma.blackwell
    out = [(i * p.tiles.tile_n, p.tiles.tile_n, f"acc[{i}]: the f32 accumulator of the CTA's {'even' if i == 0 else 'odd'} "
                                    f"local tiles ({bw.rows} rows = lanes x {p.tiles.tile_n} columns)")
           for i in range(bw.acc_stages)]
    used = bw.acc_stages * p.tiles.tile_n
    if used < bw.tmem_cols:
        out.append((used, bw.tmem_cols - used, "allocated, unused (tcgen05.alloc takes a power of two of columns)"))
    return out


def _blackwell(p, lhs, rhs) -> list[str]:
    """The sm_100a kernel's lines: MMA, warps, operands, SMEM and TMEM maps, barriers, tile loop, epilogue."""
    bw = p.mma.blackwell
    lines = [
        "  target     sm_100a (Blackwell, B200): compiled and SASS-checked on the CPU, NOT RUN on Blackwell hardware",
        f"  MMA        tcgen05.mma.cta_group::{bw.cta_group}.kind::{bw.mma_kind} M{bw.mma_m} N{bw.mma_n} K{bw.mma_k} x "
        f"{bw.k_mmas} per "
        f"k-step, issued by one thread (warp 1); instruction descriptor 0x{bw.idesc:08x}; the f32 accumulator in "
        f"TMEM; tcgen05.commit frees each stage (empty barrier) and completes a tile (acc_full)",
        f"  warps      {p.launch.threads} threads: warp 0 TMA producer (one thread), warp 1 TMEM allocation + MMA issue, "
        f"warps 2-5 the epilogue warpgroup (warp w reads TMEM lanes 32 x (w % 4) .. + 31: thread = row)",
        f"  operands   lhs {lhs.name} K-major, swizzle {p.layout.swizzle_a} B, {bw.a_stage_bytes} B per stage, descriptor "
        f"LBO {p.layout.a_lbo} SBO {p.layout.a_sbo}",
        f"             rhs {rhs.name} {'K' if p.layout.k_major_b else 'N'}-major, swizzle {p.layout.swizzle_b} B, "
        f"{bw.stage_bytes - bw.a_stage_bytes} B per stage, descriptor LBO {p.layout.b_lbo} SBO {p.layout.b_sbo}",
        f"  SMEM map ({bw.smem_bytes} B incl. 1 KiB alignment slack, of 232448)",
        f"          0  ring   {p.pipeline.stages} x {bw.stage_bytes} B = {p.pipeline.stages * bw.stage_bytes} B  lhs then rhs block "
        f"a stage",
        f"    {bw.off_epi:7d}  epi    4 warps x {bw.epi_buffers} x {bw.epi_bytes} B = {4 * bw.epi_buffers * bw.epi_bytes} B"
        f"  staging tiles: a warp's 32 rows x {bw.epi_cols} {p.out_dtype}, swizzle {bw.epi_swizzle} B",
    ]
    for name, count, off in (("full", p.pipeline.stages, bw.off_full), ("empty", p.pipeline.stages, bw.off_empty),
                             ("acc_full", bw.acc_stages, bw.off_acc_full), ("acc_empty", bw.acc_stages, bw.off_acc_empty)):
        lines.append(f"    {off:7d}  {name:9} {count} x 8 B  mbarriers")
    if bw.dynamic:
        lines.append(f"    {bw.off_clc_full:7d}  clc_full / clc_empty 2 + 2 x 8 B, {bw.off_clc_resp}: two 16-byte "
                     f"cluster-launch-control responses")
    lines.append(f"    {bw.off_tmem_slot:7d}  tmem     4 B  the address tcgen05.alloc returns")
    lines.append(f"  TMEM map ({bw.tmem_cols} of 512 columns allocated, 128 lanes x 32 bit each)")
    for col, n, what in tmem_map(p):
        lines.append(f"    columns {col:3d}-{col + n - 1:3d}  {what}")
    if bw.cta_group == 2:
        lines.append(f"  cluster    2 x 1 CTAs, one tcgen05.mma.cta_group::2 (M {bw.mma_m}) for the pair: each CTA loads "
                     f"its {bw.rows} rows of the lhs and {p.tiles.tile_n // 2} of the {p.tiles.tile_n} rhs columns, both CTAs' TMA "
                     f"bytes land on the leader's (rank 0) full barrier, the leader's thread issues the MMAs, whose "
                     f"commit frees the stage and completes the tile in both CTAs; each CTA's TMEM holds its {bw.rows} "
                     f"rows, and its epilogue threads arrive on the leader's acc_empty (256 arrivals)")
    elif p.cluster.cluster_size > 1:
        shared, half = _multicast_half(p)
        lines.append(f"  cluster    {p.cluster.cluster_m} x {p.cluster.cluster_n} CTAs, each its own tcgen05.mma.cta_group::1 tile: they "
                     f"share the {shared} tile, each CTA loads half of it ({half}) by TMA multicast to both, and "
                     f"each CTA's tcgen05.commit arrives on the stage's empty barrier of both (2 arrivals)")
    lines.append(f"  tile loop  {p.tiles.tile_order} over {p.tiles.cluster_tiles_m} x {p.tiles.cluster_tiles_n} "
                 f"{'cluster ' if p.cluster.cluster_size > 1 else ''}tiles = {p.tiles.num_tiles}; "
                 + (f"a CTA a tile ({p.launch.num_blocks} launched); a running CTA claims the tile of one not launched yet "
                    f"by clusterlaunchcontrol.try_cancel (query_cancel reads its blockIdx.x), so the grid balances "
                    f"itself" if bw.dynamic else
                    f"{p.launch.num_blocks} persistent blocks (lowered at launch to those resident), tile t, t + gridDim.x, ..."))
    epi = epilogue_text(p)
    lines.append(f"  epilogue   {'; '.join(epi)}" + ("  (identity: a plain store)" if p.identity_epilogue else "")
                 + (f"  constants {', '.join(f'{k}={v}' for k, v in p.constants.items())}" if p.constants else ""))
    for e in p.extras:
        lines.append(f"             {e.name} {e.dtype} {list(e.shape)}: {e.bcast}")
    lines.append(f"             {bw.epi_chunks} chunks of {bw.epi_cols} columns a tile, each {bw.epi_lds} x "
                 f"tcgen05.ld.32x32b.x32 + wait::ld, converted and written (st.shared, 16-byte vectors, swizzled) into "
                 f"one of the warp's {bw.epi_buffers} staging tiles, which one thread of the warp stores by TMA "
                 f"(32 x {bw.epi_cols} box, a bulk group a chunk, wait_group.read {bw.epi_buffers - 1} before a tile "
                 f"is rewritten); the TMEM buffer is freed (acc_empty) for the MMAs of tile + {bw.acc_stages} right "
                 f"after the tile's last load, before its last chunk is stored")
    if p.mma.tcgen05 is not None:
        lines += _pallas_sm100(p)
    return lines


def _pallas_sm100(p) -> list[str]:
    """The Pallas (Mosaic GPU) sm_100a kernel's lines: its warpgroups, SMEM, TMEM map and epilogue."""
    t = p.mma.tcgen05
    pair = t.cta_group == 2
    lines = [
        "  Pallas     the Mosaic GPU kernel (jax 0.11.2): lowered for sm_100a and run in the interpreter on the CPU, "
        "NOT RUN on Blackwell hardware",
        (f"             3 warpgroups: 0 the TMA of {t.rows} x {p.tiles.tile_k} lhs / {p.tiles.tile_k} x {t.cols_b} rhs blocks, 1 "
         f"tcgen05_mma (cta_group::1) into TMEM, the stage freed by its commit on empty, tcgen05_commit_arrive on "
         f"acc_full; 2 the epilogue" if t.relay else
         f"             2 warpgroups: warpgroup 0 split by warp_map into warp 0 (TMA of {t.rows} x {p.tiles.tile_k} lhs / "
         f"{p.tiles.tile_k} x {t.cols_b} rhs blocks{', leader_tracked halves of the pair' if pair else ''}) and warp 1 "
         f"(tcgen05_mma{' collective_axis (cta_group::2, the leader)' if pair else ' (cta_group::1)'} into TMEM, the "
         f"stage freed by its commit on empty, tcgen05_commit_arrive on acc_full); warpgroup 1 the epilogue"),
        *([f"             cluster {p.cluster.cluster_m} x {p.cluster.cluster_n}: each CTA its own tile, sharing the {p.cluster.multicast} tile "
           f"by multicast TMA copies; a stage is freed in both CTAs through a cluster barrier (freed) each CTA's "
           f"producer arrives on after its own MMAs' commit (a warpgroup of its own: Mosaic GPU cannot arrive on a "
           f"cluster barrier from a warp_map warp)"] if t.relay else []),
        f"             SMEM {p.pipeline.stages} x {t.stage_bytes} B ring + {t.epi_buffers} x {t.rows} x {t.epi_cols} "
        f"{p.out_dtype} staging (swizzle {t.epi_swizzle or 'none'}) + barriers: about {t.smem_bytes} B of 232448",
        f"  Pallas TMEM map ({t.tmem_cols} columns x {t.rows} lanes of f32, plgpu.TMEM"
        f"{', collective: each CTA of the pair its own 128 lanes' if pair else ''})",
    ]
    for col, n, what in sm100_pallas_tmem_map(p):
        lines.append(f"    columns {col:3d}-{col + n - 1:3d}  {what}")
    lines.append(f"             epilogue: {t.epi_chunks} x async_load_tmem of {t.epi_cols} columns a tile, the body, a "
                 f"cast, a TMA store through {t.epi_buffers} SMEM buffers; wait_load_tmem, then acc_empty frees the "
                 f"buffer; tiles by {'dynamic_scheduling_loop (cluster launch control)' if t.dynamic else 'nd_loop'}"
                 + (f"; {t.interpretable.split(':')[0]} (the interpreter cannot run the pair)" if t.interpretable else ""))
    return lines
