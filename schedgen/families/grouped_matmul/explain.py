"""The grouped_matmul family's `schedgen explain` text."""
from __future__ import annotations

from ...explain import PEAK_TFLOPS
from ...plan import dims as D
from ...plan.gemm import at_max
from ...registry import get as family
from .plan import STEP_KIND

_FORMAT = {"offsets": "offsets [G + 1]: group g is rows offsets[g] .. offsets[g + 1] - 1",
           "ends": "ends [G] (torch._grouped_mm's offs): group g is rows ends[g - 1] .. ends[g] - 1, group 0 from 0",
           "counts": "counts [G]: group g has counts[g] rows, groups back to back from row 0"}


def explain_grouped_matmul(p) -> str:
    """The groups and their operand, the tile space and how the kernel walks it, then the one-group matmul plan."""
    if p.ragged == "k":
        return _explain_ragged_k(p)
    at = {r.name: r.max for r in p.launch.dynamic_sizes}
    t_max = D.evaluate(p.t, at) if at else p.t
    flops = D.evaluate(p.flops, at) if at else p.flops
    mma_ms = flops / (PEAK_TFLOPS * 1e12) * 1e3
    x, w, offs = p.inputs
    most = D.evaluate(p.max_tiles, at) if at else p.max_tiles
    lay = "[G, N, K]" if p.transpose_rhs else "[G, K, N]"
    lines = [
        f"kernel {p.launch.kernel_name}  (family grouped_matmul, backends: {', '.join(p.launch.backends)})",
        f"  problem    {p.outputs[0].name}[T, {p.n}] rows of group g = epilogue({x.name}[rows of g, {p.k}] @ "
        f"{w.name}[g]) for {p.groups} groups, {w.name} {lay}; " + (f"T dynamic, at most {t_max}" if at else f"T = {p.t}")
        + f"; {p.in_dtype} in, {p.out_dtype} out, f32 accumulation",
        f"             {flops / 1e9:.1f} GFLOP at T = {t_max} (every row in a group): {mma_ms:.4f} ms at the "
        f"{PEAK_TFLOPS:.0f} TFLOP/s peak",
        f"  groups     {offs.name}: int32 {_FORMAT[p.offsets_format]}; read at kernel entry by warp 0 of every CTA "
        f"into SMEM tables ({p.table_bytes} B): each group's rows (clamped to 0..T) and the prefix of its tile "
        f"counts cdiv(M_g, {p.tile_m}) x {p.tiles_n}",
        f"  tiles      a persistent loop over the groups' tiles together (at most {most}: cdiv(T, {p.tile_m}) + "
        f"{p.groups} tile rows x {p.tiles_n}); tile t's group found by a forward-only cursor over the prefix, its "
        f"tile row and column in {p.tile_order} order inside the group"
        + (f" (bands {p.mm.tiles.tile_width} wide)" if p.tile_order == "planar_snake" else ""),
        f"  loads      {x.name} rows from the group's start + tile row x {p.tile_m} (rows past the group's end are "
        f"loaded, never stored); {w.name}[g] through a 3-D tensor map, one group a box",
        "  stores     " + ("64-row blocks wholly inside the group: staged in SMEM chunks and TMA-stored; the "
                           "group's last partial block: masked stores from registers" if p.epi_store != "direct"
                           else "masked stores from registers (rows below the group's end)"),
        "  no group   rows before the first group's start and from the last group's end to T: zeros in every output "
        "(CUDA: stored by the consumers after their tiles; Pallas: one zero item a row block)",
        f"  grid       {p.launch.num_blocks} persistent blocks x {p.launch.threads} threads"
        + (", lowered at launch to the SMs" if p.launch.auto_blocks and p.cluster_n == 1 else
           ", lowered at launch to the clusters the GPU holds at once" if p.launch.auto_blocks else ""),
    ]
    if p.cluster_n > 1:
        lines.append(f"  cluster    1x{p.cluster_n} (schedule.cluster): the cluster's CTAs take adjacent tile columns "
                     f"2 x c and 2 x c + 1 of the same tile row of one group (the tile space counts column pairs: "
                     f"cdiv(M_g, {p.tile_m}) x {p.cluster_tiles_n} a group, so a pair never straddles groups); each "
                     f"CTA loads {p.mm.cluster.mc_rank_elems} of the {p.tile_m} x rows and multicasts them to both, and its "
                     f"own {w.name}[g] tile; a stage is freed when the consumers of both CTAs have read it")
    lines += _tmaps_and_step(p, "x @ w[g]")
    return "\n".join(lines)


def _tmaps_and_step(p, product: str) -> list[str]:
    """The tensor maps, then the one-group matmul plan (its own grid, tile loop, tensor maps, cluster left out)."""
    lines = []
    for a in p.launch.kernel_args:
        if a.kind == "tmap":
            name = p.operands[a.operand].name
            lines.append(f"  TMA        {name:7} box {list(a.box)} swizzle {a.swizzle or 'none'} over [{", ".join(str(d) for d in a.shape)}]")
    lines.append(f"  the product of one group (the matmul family's plan of {product}; its own grid, tile loop, tensor "
                 "maps and cluster lines left out):")
    skip = ("tile loop", "cluster", "TMA ", "grid", "problem", "kernel ", "ptr ")
    lines += ["  " + ln for ln in family(STEP_KIND).explain(at_max(p.mm)).splitlines()[1:] if not ln.strip().startswith(skip)]
    return lines


def _explain_ragged_k(p) -> str:
    """ragged: k: the groups split the contraction; a static tile space of whole output blocks."""
    at = {r.name: r.max for r in p.launch.dynamic_sizes}
    t_max = D.evaluate(p.t, at) if at else p.t
    flops = D.evaluate(p.flops, at) if at else p.flops
    x, w, offs = p.inputs
    out = p.outputs[0]
    tiles_m = -(-p.m // p.tile_m)
    lines = [
        f"kernel {p.launch.kernel_name}  (family grouped_matmul, ragged: k, backends: {', '.join(p.launch.backends)})",
        f"  problem    {out.name}[g] [{p.m}, {p.n}] = epilogue({x.name}[rows of g, {p.m}]^T @ {w.name}[rows of g, "
        f"{p.n}]) for {p.groups} groups (the contraction is each group's rows); "
        + (f"T dynamic, at most {t_max}" if at else f"T = {p.t}") + f"; {p.in_dtype} in, {p.out_dtype} out, f32 "
        f"accumulation; {flops / 1e9:.1f} GFLOP at T = {t_max} (every row in a group): "
        f"{flops / (PEAK_TFLOPS * 1e12) * 1e3:.4f} ms at the {PEAK_TFLOPS:.0f} TFLOP/s peak",
        f"  groups     {offs.name}: int32 {_FORMAT[p.offsets_format]}; read at kernel entry by warp 0 of every CTA "
        f"into SMEM tables ({p.table_bytes} B): each group's rows, clamped to 0..T",
        f"  tiles      a persistent loop over {p.groups} x {tiles_m} x {p.tiles_n} = {p.max_tiles} tiles of "
        f"{p.tile_m} x {p.tile_n} (group-major, {p.tile_order} inside a group), each a k-loop over the "
        f"{p.tile_k}-row blocks holding the group's rows: start // {p.tile_k} .. cdiv(end, {p.tile_k}); none for an "
        f"empty group, whose block is epilogue(0) (zeros for the identity)",
        "  masking    the group's first and last blocks: the consumers zero the rows outside the group in both "
        "operands' SMEM before the wgmma (rows of other groups, or in no group, never reach the sum)",
        f"  loads      {x.name} M-major and {w.name} N-major through 2-D tensor maps over T rows",
        "  stores     " + ("the whole tile through SMEM chunks and a 3-D tensor map (a group a box; TMA clips the "
                           "M and N edges)" if p.epi_store != "direct" else "from registers, masked at the M and N "
                                                                            "edges"),
        f"  grid       {p.launch.num_blocks} persistent blocks x {p.launch.threads} threads"
        + (", lowered at launch to the SMs" if p.launch.auto_blocks else ""),
    ]
    lines += _tmaps_and_step(p, f"{x.name}^T @ {w.name}")
    return "\n".join(lines)
