"""The rowwise family's `schedgen explain` text."""
from __future__ import annotations

from ...explain import COPY_GBPS
from ...frontend import spelling
from ...plan.exprs import spell

# The identifiers the CUDA template gives the body's names, by role (explain prints the body as the kernel has it).
CXX_SPELLING = {"operand": "v_{}", "per_row": "p_{}", "constant": "c_{}", "temporary": "t_{}", "output": "o_{}",
                "scalar": "u_{}", "reduction": "red_{}"}
WHAT = {"sum": "sum", "mean": "mean", "max": "max", "min": "min", "logsumexp": "log-sum-exp (max, then sum of exp)",
        "take": "the value at a column (a sum of the one matching term)"}


def sizes_line(p) -> str:
    ranges = {r.name: r for r in p.launch.dynamic_sizes}
    return ", ".join(f"{k}: {ranges[k].describe()}" if k in ranges else f"{k}={v}" for k, v in p.sizes.items())


def _prefetch_line(p) -> str:
    if not p.prefetch:
        why = "16 B accesses only (N is not a multiple of 16 B)" if p.vec == 1 else "pipeline.kind: none"
        return f"  prefetch   none ({why}): each piece is loaded straight into the registers, then reduced"
    piece = "segment of the row (the last one's next: the next row block's first)" if p.segments > 1 else "row block"
    return (f"  prefetch   the next {piece} is copied to SMEM by cp.async while this one is reduced: a ring of two "
            f"slots of {p.ring_slot_bytes} B, each thread copying and reading back its own 16-byte words (no barrier)")


def explain_rowwise(p) -> str:
    group = 32 * p.warps_per_row
    lines = [
        f"kernel {p.launch.kernel_name}  (family rowwise, backends: {', '.join(p.launch.backends)})",
        f"  sizes      {sizes_line(p)}; rows of N = {p.n}",
        f"  rows       {p.rows_per_block} row(s) a block side by side, {p.warps_per_row} warp(s) ({group} threads) a "
        f"row, {p.steps} row(s) in flight per row group (max_concurrent_steps): {p.rows_per_block * p.steps} rows "
        f"a block step, {p.num_row_blocks} row blocks" + ("; the last one partial (rows past M masked)" if p.ragged_m else ""),
        f"  launch     {p.launch.num_blocks} blocks x {p.launch.threads} threads ({p.num_warpgroups} warpgroups), {p.launch.blocks_per_sm} "
        f"per SM (__launch_bounds__), " + ("persistent: lowered at launch to what is resident, each block striding "
                                           "over the row blocks" if p.launch.auto_blocks else
                                           "persistent over the row blocks" if p.persistent else "one row block a block"),
    ] + ([
        f"  partials   {', '.join(p.summed_outputs)}: each of the {p.partials} blocks (exactly, every backend) adds "
        f"its rows' values per column in f32 and writes one row of [{p.partials}, N] (zeros with no rows); the "
        f"caller sums the {p.partials} rows"] if p.partials else []) + ([
        f"  cluster    {p.launch.cluster_dims[0]} CTAs a row block (a thread-block cluster"
        f"{', non-portable size: the runtime allows it' if p.launch.cluster_dims[0] > 8 else ''}): CTA r holds columns "
        f"[r x {p.n // p.launch.cluster_dims[0]}, (r+1) x {p.n // p.launch.cluster_dims[0]}) of its rows; each reduction level "
        f"combines the CTAs' partials through DSMEM (mapa + ld.shared::cluster after a cluster barrier, in rank "
        f"order, so every CTA gets the same bits)"] if p.launch.cluster_dims[0] > 1 else []) + [
        f"  registers  each thread keeps {p.chunks} vector(s) of {p.vec} element(s) of each input row"
        f"{' segment' if p.segments > 1 else ''} "
        f"({'16 B accesses' if p.vec > 1 else 'element accesses: N is not a multiple of 16 B'}): {p.row_regs} "
        f"registers for the rows on chip; one HBM read of every input row, one write of every output",
        (f"  passes     {p.levels} sweep(s) over the row on chip (reduction levels), then the output pass"
         if p.segments == 1 else
         f"  passes     one: the row streams through the registers in {p.segments} segments (nothing reads it after "
         f"its one reduction level; log-sum-exp merged online)"),
        _prefetch_line(p),
        f"  SMEM       {p.launch.smem_bytes} B: " + ("; ".join(
            (["the row group's cross-warp partials (f32, two parities x levels)"] if p.warps_per_row > 1 else []) +
            (["the CTA's partials its cluster reads (f32, two parities x levels)"] if p.launch.cluster_dims[0] > 1 else []) +
            ([f"the prefetch ring at byte {p.ring_offset} (2 x {p.ring_slot_bytes} B)"] if p.prefetch else []))
            if p.launch.smem_bytes else "none (a row is one warp's: shuffles only)"),
        f"  pallas     emit_pipeline over {p.pallas_tiles} steps of {p.rows_per_block} row(s), {p.steps} stage(s) "
        f"({p.pallas_smem_bytes} B of SMEM), {p.pallas_blocks} blocks of one warpgroup; jnp reductions along the row",
        "  operands",
    ]
    kinds = {"row": "rows", "col": "a vector along the row", "per_row": "one value a row",
             "partial": "partial column sums, one row a block",
             "scalar": f"one value for all rows (reduction {p.reduction})"}
    for o in p.operands:
        lines.append(f"    {o.role:3} {o.name:10} {o.dtype:5} {'[' + ', '.join(map(str, o.shape)) + ']':16} "
                     f"{kinds[o.kind]}")
    lines += _class_index_lines(p)
    ids = spell(p.body_roles, CXX_SPELLING)
    lines.append("  reductions")
    for r in p.reductions:
        idx = f", column {spelling.render_cxx(r.index_arg.expr, ids)}" if r.index_arg is not None else ""
        lines.append(f"    red__r{r.index} = {r.op} over the row of {spelling.render_cxx(r.arg.expr, ids)}{idx}  "
                     f"(level {r.level}: {WHAT[r.op]})")
    lines.append("  body")
    for target, value in p.body:
        where = "per element" if p.body_varies.get(target) else "per row"
        lines.append(f"    {ids[target]} = {spelling.render_cxx(value.expr, ids)}  ({where}, after level "
                     f"{p.body_level.get(target, 0)})")
    floor_ms = p.bytes_moved / (COPY_GBPS * 1e9) * 1e3
    at_max = " (M at its max)" if p.launch.dynamic_sizes else ""
    lines.append(f"  traffic    {p.bytes_moved / 2**20:.1f} MiB{at_max}; floor at {COPY_GBPS:.0f} GB/s: {floor_ms:.4f} ms")
    return "\n".join(lines)


def _class_index_lines(p) -> list[str]:
    """The ignored rows and the reduction over the rows (F.cross_entropy's contract), when the plan has them."""
    lines = []
    if p.index_inputs:
        lines.append(f"  ignored    rows whose {', '.join(o.name for o in p.index_inputs)} is {p.ignore_index}: every "
                     f"output 0; class indices outside [0, {p.n}) read as -1 (no column)")
    if p.scalar_outputs:
        lines.append(f"  reduction  {p.reduction} over the rows not ignored: each block adds its rows' values, the last "
                     f"block to finish adds the blocks' sums in block order (CUDA; deterministic for a grid); the "
                     f"Pallas package's jax function sums the kernel's values a row")
    return lines
