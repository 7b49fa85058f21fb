"""The map family's `schedgen explain` text."""
from __future__ import annotations

from ...explain import COPY_GBPS
from ...frontend import spelling
from ...plan.exprs import spell

# The identifiers the CUDA template gives the body's names, by role (explain prints the body as the kernel has it).
CXX_SPELLING = {"operand": "v_{}", "constant": "c_{}", "temporary": "t_{}", "output": "r_{}"}


def sizes_line(p) -> str:
    """Each size: a fixed one as name=value, a dynamic one with its range (SizeRange.describe)."""
    ranges = {r.name: r for r in p.launch.dynamic_sizes}
    return ", ".join(f"{k}: {ranges[k].describe()}" if k in ranges else f"{k}={v}" for k, v in p.sizes.items())


def explain_map(p) -> str:
    lines = [
        f"kernel {p.launch.kernel_name}  (family map, backends: {', '.join(p.launch.backends)})",
        f"  sizes      {sizes_line(p)}",
        f"  grid       {' x '.join(map(str, p.grid))} tiles of {' x '.join(map(str, p.block))} "
        f"({p.num_tiles} tiles; grid names {', '.join(p.grid_names)}; order {p.tile_order}"
        + (f", minor_dim {p.minor_dim}, tile_width {p.tile_width}" if p.tile_order == "planar_snake" else "") + ")",
        f"  launch     {p.launch.num_blocks} blocks x {p.launch.threads} threads ({p.num_warpgroups} warpgroups), "
        f"{p.launch.blocks_per_sm} per SM, {'persistent' if p.persistent else 'one tile per block'}"
        + ("" if getattr(p, "regs", None) is not None else " (the Pallas kernel runs one warpgroup per block)"),
        _pipeline_line(p),
        "  operands",
    ]
    for o in p.operands:
        how = f"TMA box {list(o.tma.box)} x{o.tma.n_boxes} swizzle {o.tma.swizzle or 'none'}" \
            if getattr(p, "regs", None) is None else "16-byte global accesses"
        lines.append(f"    {o.role:3} {o.name:10} {o.dtype:6} {'[' + ', '.join(map(str, o.shape)) + ']':18} block {list(o.block)} "
                     f"index_map {o.index_map}  {how}" + ("  [broadcast rows]" if o.minor_bcast else ""))
    reg = getattr(p, "registers", None)
    if reg is not None:
        lines.append(_layout_line(reg))
    if getattr(p, "regs", None) is None:
        lines.append(f"  SMEM map ({p.launch.smem_bytes} B incl. 1 KiB alignment slack)")
        for b in p.smem_buffers:
            lines.append(f"    {b.offset:7d}  {b.name:12} {b.count} x {b.bytes} B  {b.note}")
        lines.append(f"  barriers   full[{p.stages}] (mbarrier, {p.full_arrivals} arrival + {p.tx_bytes} B of TMA "
                     f"transactions per stage)")
    lines.append("  body")
    ids = spell(p.body_roles, CXX_SPELLING)
    for target, value in p.body:
        lines.append(f"    {ids[target]} = {spelling.render_cxx(value.expr, ids)}")
    floor_ms = p.bytes_moved / (COPY_GBPS * 1e9) * 1e3
    at_max = " (every dynamic size at its max)" if p.launch.dynamic_sizes else ""
    lines.append(f"  traffic    {p.bytes_moved / 2**20:.1f} MiB{at_max}; floor at {COPY_GBPS:.0f} GB/s: "
                 f"{floor_ms:.4f} ms")
    return "\n".join(lines)


def _pipeline_line(p) -> str:
    """Which data path the CUDA kernel takes (schedule.pipeline.data_path) and why."""
    regs = getattr(p, "regs", None)
    if regs is None:
        return f"  pipeline   {p.stages} stages, {p.vec} elements (16 B) per thread access"   # data_path tma
    return (f"  pipeline   {regs.why}; {regs.batches} batch{'es' if regs.batches > 1 else ''} of "
            f"{p.launch.threads} x {regs.unroll} chunks a tile")


def _layout_line(reg) -> str:
    """The Pallas kernel's named register layout (families/map/columns.py): what it is and why it is named."""
    rows = ", ".join(v.name for v in reg.views if v.reduced and not v.gmem)
    cols = ", ".join(v.name for v in reg.views if v.gmem)
    if reg.strided:
        what = f"every value in one strided layout ({reg.vec}-element vectors over the block; the SMEM blocks untiled)"
    else:
        what = (f"every value in one register layout of {reg.rows} x {reg.cols} tiles (4 warps x {reg.lane_rows} "
                f"row{'s' if reg.lane_rows > 1 else ''}, {reg.lane_cols} lanes x {reg.vec} elements)")
    why = []
    if cols:
        why.append(f"columns read from GMEM into registers: {cols} (Mosaic GPU infers no layout for a column, nor can "
                   f"its TMA load one)")
    if rows:
        why.append(f"rows broadcast in registers: {rows} (Mosaic GPU's layout inference lays a row out only by a "
                   f"search that can run out)")
    return f"  pallas     {what}; " + "; ".join(why)
