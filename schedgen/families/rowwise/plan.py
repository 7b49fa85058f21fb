"""Planner of the `rowwise` family: a body over each row of [M, N] arrays with reductions along the row.

CUDA: each CTA runs `rows_per_block` row groups of `warps_per_row` warps; a row group loads `steps` rows into
registers with 16-byte vector loads (the row stays on chip), sweeps them once per reduction level (per-thread
partials in f32, warp shuffles, then the row group's warps through SMEM), and writes the outputs with 16-byte
stores: one read of each input row from HBM, one write of each output. With pipeline.kind emit_pipeline (the
default) the next piece of rows (the next row block, or the row's next segment when it streams) is copied into a
two-slot SMEM ring by cp.async while this one is reduced, each thread copying and reading back only its own
vectors (no barrier); pipeline.kind none loads straight into the registers, no overlap. The CTAs loop over row
blocks (a grid of all SMs, or one block a row block); M is a launch argument when dynamic. With schedule.cluster [C, 1, 1] the C CTAs
of a cluster split each row block's columns in C equal slices, each reduction level combined within the CTA and then
across the cluster through DSMEM (CUDA only). Pallas: the same rows of a step go
through an emit_pipeline ring of `max_concurrent_steps` SMEM stages, reduced with jnp in registers.

Class indices (F.cross_entropy's targets): an i32 / i64 input of one value a row is read as an f32 column where
0 <= i < N and as -1 (no column: take() loads nothing, gives 0) anywhere else; a row whose index equals
op.ignore_index writes 0 to every output. op.reduction mean / sum: the one-value-a-row outputs are [1] (kind
"scalar"); the CUDA kernel's row groups sum their rows not ignored, each block writes its sums and count to a slot of
a workspace and bumps a zeroed counter, and the last block adds every slot in block order (deterministic for a grid)
and writes the [1] outputs; the Pallas kernel writes the rows' values and the module's jax function sums them. A [1]
input (a reduced loss's cotangent, in the derived backward) reaches every row as the reduction's adjoint: mean
divides by the rows not ignored, which each CUDA block counts over all of M before its rows.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...frontend import expr as ex
from ...frontend.model import ITEMSIZE
from ...plan import dims
from ...plan.common import CTYPE, KernelArg, Problems, dynamic_ranges, max_sizes, resolve_shape, size_values
from ...plan.exprs import PlanExpr
from ...plan.hardware import Hardware
from ...plan.launch import KernelLaunch
from ...plan.legality import check_profiler, check_reserved_names, check_sizes_int32, check_unique_names
from . import body as rb
from .records import RowOperand, RowReduction, RowwisePlan
from .unread import check_unread

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

MAX_PARTIALS = 4096        # blocks of a kernel with partial-sum outputs [P, N] (P x N f32 summed after it)
MAX_ROW_REGS = 64          # 32-bit registers a thread may give the rows it keeps (the rest: the math, addresses)
STREAM_CHUNKS = 8          # vectors a thread loads a segment when a long row streams (8 x 16 B in flight)
STREAM_REGS = 32           # registers of a segment when the row streams through the prefetch ring (whose two SMEM
                           # slots of a 512-thread block's segments then take at most 128 KiB)
REGS_PER_SM = 65536
IN_DTYPES = ("bf16", "f16", "f32")
INDEX_DTYPES = ("i32", "i64")      # class indices: an input of one value a row read only as take()'s column
MAX_EXACT_INDEX = 1 << 24         # take() reads its column as an f32 (exact below 2^24): N at most this with them
ONE_A_ROW = ("per_row", "scalar")
_ONE_HINT = ", or [1] (one value in all) with op.reduction mean or sum"  # kinds of one value a row in the kernels ([1]: the Pallas kernel's [M] values)
LEGAL_SHAPES = ("[M, N] (rows), [N] or [1, N] (a vector along the row), [M] or [M, 1] (one value a row), an "
                "output [P, N] (P partial column sums, P >= 2 a literal)")


def plan_rowwise(spec: SpecFile, hw: Hardware) -> tuple[RowwisePlan | None, Problems]:
    """Phases: names, shapes (the row count M and length N), dtypes, the body, the schedule's row blocking, the
    register and SMEM budgets, 32-bit limits, backend limits, the launch."""
    problems = Problems()
    op, sch = spec.op, spec.schedule
    check_unique_names((("sizes", op.sizes), ("constants", op.constants), ("inputs", op.inputs),
                        ("outputs", op.outputs)), problems)
    check_reserved_names(spec, problems)
    check_unread(op, sch, problems)
    kinds, m, n = _shapes(op, problems)
    _dtypes(op, kinds, problems)
    body = _parse_body(op, kinds, problems)
    if body is not None and kinds is not None and n is not None:
        _check_index_inputs(op, kinds, body, n, problems)
    if body is not None and sch.compiler_params.approx_math:
        body = rb.hoist_reciprocals(body)       # a reciprocal a row, a multiply an element
    if kinds is None or n is None:
        return None, problems
    rows, steps, warps_per_row = _blocking(op, sch, kinds, problems)
    _check_schedule(sch, problems)
    streams = body is not None and streaming(op, kinds, body)
    csize = _cluster(op, sch, kinds, n, problems)
    vec, chunks, row_regs, segments = _registers(op, kinds, n, rows, steps, warps_per_row, sch, streams, problems,
                                                 csize)
    ranges = dynamic_ranges(op.sizes)
    ragged = _ragged(op, sch, kinds, m, rows * steps, ranges, problems)
    check_sizes_int32(max_sizes(op.sizes), problems, f"the kernel's 32-bit int index math (at most {ex.MAX_INT})")
    # (element offsets are 64-bit in the CUDA kernel, row and column coordinates 32-bit in both: M x N may pass 2^31)
    operands = _operands(op, kinds, rows, hw)
    ring = (False, 0, 0)
    if body is not None:
        _check_outputs(op, kinds, body, problems)
        _check_partials(op, sch, kinds, body, problems)
        _check_reduction(op, sch, kinds, csize, problems)
        _pallas_limits(op, sch, body, operands, rows, steps, n, hw, problems)
        ring = _ring(op, sch, kinds, body, vec, chunks, rows, steps, warps_per_row, csize, hw, problems)
    check_profiler(sch.compiler_params, sch.backends, problems)
    if problems or body is None:
        return None, problems
    return _assemble(spec, hw, body, operands, m, n, rows, steps, warps_per_row, vec, chunks, row_regs,
                     ragged, ranges, segments, csize, ring), problems


# ---------------------------------------------------------------------------------------------------- op

def _shapes(op, problems: Problems):
    """Each operand's kind (row / col / per_row), and the row count M and length N (from the first [M, N])."""
    sizes = size_values(op.sizes)
    shapes, before = {}, len(problems)
    for group in ("inputs", "outputs"):
        for name, o in getattr(op, group).items():
            shapes[(group, name)] = resolve_shape(o.shape, sizes, ("op", group, name, "shape"), problems)
    if len(problems) != before:
        return None, None, None
    rows = [(k, s) for k, s in shapes.items() if len(s) == 2 and s[1] != 1 and s[0] != 1]
    if not rows:
        first = next(iter(op.outputs))
        problems.add(("op", "outputs", first, "shape"), f"a rowwise kernel needs an operand of shape [M, N] (its "
                                                        f"rows); shapes may be {LEGAL_SHAPES}")
        return None, None, None
    (g0, n0), (m, n) = rows[0][0], rows[0][1]
    if isinstance(n, dims.Dim):
        problems.add(("op", g0, n0, "shape", 1), "the row length N must be a fixed size (the kernel keeps a row of N "
                                                 "on chip, split across its threads at compile time); only the row "
                                                 "count M may be dynamic")
        return None, None, None
    if n < 2:
        problems.add(("op", g0, n0, "shape", 1), f"the row length is {n}: a row needs at least 2 elements")
    kinds = {}
    for (group, name), s in shapes.items():
        written_p = group == "outputs" and len(op.outputs[name].shape) == 2 and \
            isinstance(op.outputs[name].shape[0], int)     # P is a literal in the file, not a size's value
        one = list(getattr(op, group)[name].shape) == [1]      # [1]: reduced over the rows (op.reduction)
        kind = "scalar" if one and op.reduction != "none" else \
            _kind(s, m, n) or (_partial_kind(s, n) if written_p else None)
        if kind is None:
            problems.add(("op", group, name, "shape"), f"shape {list(map(str, s))} is none of the row shapes "
                                                       f"{LEGAL_SHAPES}{_ONE_HINT if one else ''} with M = {m}, "
                                                       f"N = {n}")
        kinds[name] = kind
    for name in op.outputs:
        if kinds.get(name) == "col":
            problems.add(("op", "outputs", name, "shape"), "an output is rows [M, N] or one value a row [M] / [M, 1]; "
                                                           "a vector along the row [N] would be written by every row")
    if any(k is None for k in kinds.values()) or len(problems) != before:
        return None, m, n
    unbound = [x for x in op.sizes if not isinstance(op.sizes[x], int) and
               not any(isinstance(d, dims.Dim) and dims.sizes_of(d) == {x} for nm in op.inputs
                       for d in shapes[("inputs", nm)])]
    for x in unbound:
        problems.add(("op", "sizes", x), f"the dynamic size {x} is no input's dimension, so a call's inputs cannot "
                                         f"give its value; use it in an input's shape, or give it a fixed value")
    return kinds, m, n


def _kind(shape, m, n) -> str | None:
    def same(a, b):
        return a == b if isinstance(a, dims.Dim) == isinstance(b, dims.Dim) else False
    if len(shape) == 2 and same(shape[0], m) and shape[1] == n:
        return "row"
    if (len(shape) == 1 and shape[0] == n) or (len(shape) == 2 and shape[0] == 1 and shape[1] == n):
        return "col"
    if (len(shape) == 1 and same(shape[0], m)) or (len(shape) == 2 and same(shape[0], m) and shape[1] == 1):
        return "per_row"
    return None


def _partial_kind(shape, n) -> str | None:
    """An output [P, N], P a literal of at least 2 other than M: the body's value summed over the rows, in P
    partial sums (one row a block; their sum over the P rows is the column sum)."""
    if len(shape) == 2 and isinstance(shape[0], int) and not isinstance(shape[0], dims.Dim) and shape[0] >= 2 \
            and shape[1] == n:
        return "partial"
    return None


def partial_blocks(kinds, op) -> int:
    """P: the blocks of a kernel with partial-sum outputs [P, N] (0: it has none)."""
    return next((int(op.outputs[nm].shape[0]) for nm in op.outputs if kinds.get(nm) == "partial"), 0)


def _check_partials(op, sch, kinds, body, problems: Problems) -> None:
    """Partial-sum outputs: f32, a value that varies along the row, one P, at most MAX_PARTIALS, P persistent
    blocks (clusters with schedule.cluster: each CTA writes its slice of the cluster's row)."""
    names = [nm for nm in op.outputs if kinds.get(nm) == "partial"]
    if not names:
        return
    p = partial_blocks(kinds, op)
    for nm in names:
        o = op.outputs[nm]
        if o.dtype != "f32":
            problems.add(("op", "outputs", nm, "dtype"), f"'{nm}' [{o.shape[0]}, N] holds partial column sums: "
                                                         f"f32 (the sums of many rows), got {o.dtype}")
        if int(o.shape[0]) != p:
            problems.add(("op", "outputs", nm, "shape", 0), f"every partial-sum output has the same P (the kernel's "
                                                            f"blocks): another has {p}, this one {o.shape[0]}")
        if p > MAX_PARTIALS:
            problems.add(("op", "outputs", nm, "shape", 0), f"P = {o.shape[0]} blocks of partial sums: at most "
                                                            f"{MAX_PARTIALS}")
        if body is not None and not body.varies.get(nm, True):
            problems.add(("op", "outputs", nm, "shape"), f"'{nm}' [P, N] sums a value along the columns, but the "
                                                         f"body's value of it is one value a row: make it [M]")
    if sch.persistent.loop == "none" or sch.persistent.num_blocks != "auto":
        field = "loop" if sch.persistent.loop == "none" else "num_blocks"
        problems.add(("schedule", "persistent", field), f"with partial-sum outputs [{p}, N] the kernel runs "
                                                        f"exactly {p} persistent blocks (one row of partials each): "
                                                        f"leave persistent.{field} unset (nd_loop, auto)")


def _dtypes(op, kinds, problems: Problems) -> None:
    for group in ("inputs", "outputs"):
        for name, o in getattr(op, group).items():
            if o.dtype in INDEX_DTYPES and group == "inputs":
                if kinds is not None and kinds.get(name) != "per_row":
                    problems.add(("op", group, name, "dtype"), f"'{name}' is {o.dtype}: integer inputs are class "
                                                               f"indices of one value a row, shape [M] (or [M, 1]); "
                                                               f"the kernels load and store rows in "
                                                               f"{', '.join(IN_DTYPES)}")
            elif o.dtype not in IN_DTYPES:
                problems.add(("op", group, name, "dtype"), f"{o.dtype} is not a rowwise dtype; the kernels load and "
                                                           f"store {', '.join(IN_DTYPES)} (math in f32), and take "
                                                           f"class indices of one value a row in "
                                                           f"{', '.join(INDEX_DTYPES)}")
    if kinds is not None:
        for name, o in op.outputs.items():
            if kinds.get(name) == "scalar" and o.dtype != "f32":
                problems.add(("op", "outputs", name, "dtype"), f"'{name}' [1] holds the rows' values reduced "
                                                               f"({op.reduction}): f32, got {o.dtype}")
        for name, o in op.inputs.items():
            if kinds.get(name) == "scalar" and o.dtype != "f32":
                problems.add(("op", "inputs", name, "dtype"), f"'{name}' [1] is one value for every row (a "
                                                              f"reduced output's gradient): f32, got {o.dtype}")


def index_inputs(op) -> list[str]:
    """The integer inputs (class indices)."""
    return [n for n, o in op.inputs.items() if o.dtype in INDEX_DTYPES]


def _check_index_inputs(op, kinds, body, n: int, problems: Problems) -> None:
    """An integer input is a class index: the kernels read it as an f32, exact where it is a column of the row
    (0 <= i < N) and -1 (no column) anywhere else, so N must be below 2^24."""
    del kinds, body
    if "ignore_index" in op.model_fields_set and not index_inputs(op):
        problems.add(("op", "ignore_index"), "ignore_index names the class index of rows to ignore, but no input is "
                                             "one (an i32 / i64 input of one value a row): remove it, or declare "
                                             "the targets i32 / i64")
    for name in index_inputs(op):
        if n > MAX_EXACT_INDEX:
            problems.add(("op", "inputs", name, "dtype"), f"class indices of rows of N = {n}: the kernels read "
                                                          f"them as f32 columns, exact below {MAX_EXACT_INDEX}")


def _check_reduction(op, sch, kinds, csize: int, problems: Problems) -> None:
    """op.reduction mean / sum: the one-value-a-row outputs are [1] (their rows' values reduced), no partial-sum
    outputs, no cluster with [1] outputs (a [1] input, the backward's, is read by every CTA); reduction none: no
    [1] operand (_shapes)."""
    if op.reduction == "none":
        return
    scalars_out = [nm for nm in op.outputs if kinds.get(nm) == "scalar"]
    for nm in op.outputs:
        if kinds.get(nm) == "per_row":
            problems.add(("op", "outputs", nm, "shape"), f"with op.reduction {op.reduction} the rows' values of "
                                                         f"'{nm}' are reduced to one: shape [1] (or op.reduction: "
                                                         f"none for one value a row)")
        elif kinds.get(nm) == "partial":
            problems.add(("op", "outputs", nm, "shape"), f"op.reduction {op.reduction} reduces one-value-a-row "
                                                         f"outputs; a kernel with partial column sums [P, N] takes "
                                                         f"reduction: none")
    if not scalars_out and not any(kinds.get(nm) == "scalar" for nm in op.inputs):
        problems.add(("op", "reduction"), f"reduction {op.reduction} reduces the [1] outputs (or reads a [1] "
                                          f"gradient): this op has no operand of shape [1]; use reduction: none")
    if op.reduction == "mean" and sch.persistent.loop == "none" and \
            any(kinds.get(nm) == "scalar" for nm in op.inputs):
        problems.add(("schedule", "persistent", "loop"), "a [1] input under reduction mean is divided by the rows "
                                                         "not ignored, which every block of the CUDA kernel counts "
                                                         "over all of M: a block a row block would read M x M class "
                                                         "indices; leave persistent.loop unset (nd_loop: a grid of "
                                                         "the resident blocks)")
    if csize > 1 and scalars_out:
        problems.add(("schedule", "cluster", 0), f"op.reduction {op.reduction}: the CUDA kernel's blocks add "
                                                 f"their rows' values, which a cluster's CTAs split; use cluster: "
                                                 f"[1]")


def _parse_body(op, kinds, problems: Problems):
    row_inputs = [n for n in op.inputs if kinds is None or kinds.get(n) in ("row", "col")]
    try:
        return rb.parse(op.body, inputs=list(op.inputs), outputs=list(op.outputs), constants=list(op.constants),
                        row_inputs=row_inputs)
    except ex.ExprError as err:
        problems.add(("op", "body"), err.message, (err.line, err.col))
        return None


def _check_outputs(op, kinds, body, problems: Problems) -> None:
    for name in op.outputs:
        if kinds.get(name) in ONE_A_ROW and body.varies[name]:
            problems.add(("op", "outputs", name, "shape"), f"'{name}' holds one value a row ({list(op.outputs[name].shape)}) "
                                                           f"but the body's value of it varies along the row: reduce it "
                                                           f"(sum, mean, max, min, logsumexp, take), or make it [M, N]")
    if not body.reductions:
        problems.add(("op", "body"), "the body has no reduction (sum, mean, max, min, logsumexp, take): an "
                                     "elementwise body is the map family's (op.kind: map)")


# ---------------------------------------------------------------------------------------------- schedule

def _block_entries(op, sch):
    """(path, BlockSpec, operand kind-relevant shape) of every BlockSpec the spec gives, outputs first."""
    for group, names in (("out_specs", op.outputs), ("in_specs", op.inputs)):
        for name, bs in getattr(sch, group).items():
            yield group, name, bs, names


def _blocking(op, sch, kinds, problems: Problems) -> tuple[int, int, int]:
    """(rows per block R, steps S, warps per row) from the BlockSpecs, the pipeline and the warpgroups."""
    warps = 4 * sch.num_warpgroups
    rows = None
    out0 = next(iter(op.outputs))
    for group, name, bs, names in _block_entries(op, sch):
        path = ("schedule", group, name, "block_shape")
        if name not in names:
            problems.add(("schedule", group, name), f"no {'output' if group == 'out_specs' else 'input'} named "
                                                    f"'{name}'; they are: {', '.join(names)}")
            continue
        if (group, name) != ("out_specs", out0):
            problems.add(("schedule", group, name), f"every operand's block follows the first output's: "
                                                    f"schedule.out_specs.{out0} sets the rows a block (rows go "
                                                    f"whole); remove this BlockSpec")
            continue
        kind, shape = kinds[name], list(getattr(op, "outputs" if group == "out_specs" else "inputs")[name].shape)
        blk = list(bs.block_shape)
        if len(blk) != len(shape):
            problems.add(path, f"block_shape has {len(blk)} dimensions but '{name}' has {len(shape)} ({shape})")
            continue
        if kind == "col":
            if blk[-1] != _n(op, shape[-1]) or (len(blk) == 2 and blk[0] != 1):
                problems.add(path, f"'{name}' runs along the row: its block is the whole of it, "
                                   f"{[1] * (len(blk) - 1) + [_n(op, shape[-1])]}")
            continue
        if kind in ("row", "partial") and blk[1] != _n(op, shape[1]):   # partial: [rows a step of its block, N]
            problems.add((*path, 1), f"a block holds whole rows (the reductions run along them): its second "
                                     f"dimension is the row length N = {_n(op, shape[1])}, got {blk[1]}")
        if kind == "per_row" and len(blk) == 2 and blk[1] != 1:
            problems.add((*path, 1), "a per-row operand's block is [rows, 1]")
        if rows is None:
            rows = blk[0]
        elif blk[0] != rows:
            problems.add((*path, 0), f"every operand's block has the same rows (one step of rows_per_block rows); "
                                     f"another block has {rows}, this one {blk[0]}")
    rows = rows or 1
    if warps % rows:
        legal = [d for d in range(1, warps + 1) if warps % d == 0]
        problems.add(_rows_path(op, sch), f"{rows} rows a block on {warps} warps ({sch.num_warpgroups} warpgroups): "
                                          f"each row gets a whole number of warps, so the rows must divide {warps}: "
                                          f"{', '.join(map(str, legal))}, or change schedule.num_warpgroups")
        rows = 1
    steps = 1 if sch.pipeline.kind == "none" else sch.pipeline.max_concurrent_steps
    return rows, steps, warps // rows


def _n(op, d):
    return op.sizes.get(d, d) if isinstance(d, str) else d


def _rows_path(op, sch):
    for group, name, _bs, names in _block_entries(op, sch):
        if name in names:
            return ("schedule", group, name, "block_shape", 0)
    return ("schedule", "num_warpgroups")


def _check_schedule(sch, problems: Problems) -> None:
    if sch.pipeline.kind == "warp_specialized":
        problems.add(("schedule", "pipeline", "kind"), "a rowwise kernel has no MMA for a producer warpgroup to overlap "
                                                       "with: every warp loads, reduces and stores its rows; use "
                                                       "emit_pipeline (or none)")
    if sch.persistent.loop == "dynamic":
        problems.add(("schedule", "persistent", "loop"), "dynamic work claiming pays where tiles differ in length; rows "
                                                        "are all alike: use nd_loop (a grid of all SMs) or none")
    if sch.persistent.tile_order != "row_major":
        problems.add(("schedule", "persistent", "tile_order"), f"{sch.persistent.tile_order} orders 2-D tile grids; a "
                                                              f"rowwise kernel walks its row blocks in order: row_major")
    for bname in sch.barriers:
        problems.add(("schedule", "barriers", bname), "the rowwise kernels declare no barriers (the CUDA kernel syncs "
                                                      "its warps with __syncthreads, the Pallas one uses "
                                                      "emit_pipeline's): remove it")


def _vec(op, kinds, n: int) -> int:
    """Elements a thread access: 16 B of the narrowest row dtype, or 1 when a row's start is not 16-byte aligned."""
    row_ops = [o for nm, o in (op.inputs | op.outputs).items() if kinds.get(nm) in ("row", "col")]
    vec = 16 // min(ITEMSIZE.get(o.dtype, 2) for o in row_ops) if row_ops else 8
    return vec if n % vec == 0 else 1


def streaming(op, kinds, body) -> bool:
    """Whether nothing needs the row after its one reduction level (only per-row outputs: cross-entropy,
    logsumexp, row sums), so a long row streams through the registers rather than being kept."""
    return not any(kinds.get(o) in ("row", "partial") for o in op.outputs) and \
        max((r.level for r in body.reductions), default=0) == 1


CLUSTER_SIZES = (2, 4, 8, 16)     # 16: a non-portable cluster size (Hopper allows it; the runtime sets the attribute)


def _cluster(op, sch, kinds, n: int, problems: Problems) -> int:
    """schedule.cluster [C, 1, 1]: C CTAs split each row into equal slices of whole 16-byte vectors and combine
    their partials through DSMEM. Returns C (1 when absent or illegal)."""
    c, path = list(sch.cluster), ("schedule", "cluster")
    if any(x != 1 for x in c[1:]):
        problems.add((*path, next(i for i, x in enumerate(c) if i and x != 1)),
                     f"a rowwise cluster splits each row along its columns: [C, 1, 1] (C CTAs a row), got {c}")
        return 1
    size = c[0]
    if size == 1:
        return 1
    if size not in CLUSTER_SIZES:
        problems.add((*path, 0), f"a cluster of {size} CTAs: C CTAs split each row in C equal slices; legal: 1, 2, "
                                 f"4, 8 (portable) or 16 (non-portable: Hopper allows it, the runtime sets the "
                                 f"attribute)")
        return 1
    vec = _vec(op, kinds, n)
    if n % (size * vec):
        legal = [x for x in CLUSTER_SIZES if n % (x * vec) == 0]
        problems.add((*path, 0), f"N = {n} is not {size} equal slices of whole {vec}-element vectors (a multiple "
                                 f"of {size} x {vec} = {size * vec}): each CTA of the cluster holds one slice; legal "
                                 f"sizes for this N: {', '.join(map(str, [1] + legal))}")
        return 1
    if sch.persistent.loop != "none" and sch.persistent.num_blocks != "auto" and sch.persistent.num_blocks % size:
        problems.add(("schedule", "persistent", "num_blocks"),
                     f"{sch.persistent.num_blocks} blocks are not whole clusters of {size} CTAs: use a multiple of "
                     f"{size}, or auto")
    if "pallas" in sch.backends:
        problems.add((*path, 0), "the Pallas kernel keeps each row in one CTA: it does not split a row across a "
                                 "cluster (jax 0.11.2's Mosaic GPU has the pieces, plgpu.kernel's cluster_names and "
                                 "plgpu.cluster_ref for another CTA's SMEM, but its interpret mode has no "
                                 "cluster_ref, so it could not be checked on the CPU, and this release does not "
                                 "build it): set schedule.backends: [cuda], or cluster: [1]")
    return size


def kept_row_registers(n: int, vec: int, warps_per_row: int, steps: int, dtypes) -> int:
    """Registers a thread holds for the kept rows: `steps` rows of `n` columns (a CTA's slice) in 16-byte vectors
    over 32 x warps_per_row threads, each vector of a row input of `dtypes` taking vec x itemsize / 4 registers."""
    chunks = -(-n // (32 * warps_per_row * vec))
    return steps * chunks * sum(max(1, vec * ITEMSIZE.get(d, 2) // 4) for d in dtypes)


def _registers(op, kinds, n: int, rows: int, steps: int, warps_per_row: int, sch, streams: bool,
               problems: Problems, csize: int = 1):
    """(vector width, vectors a thread holds per row (per segment when streaming), registers the kept rows take,
    segments) for each CTA's slice of N / csize columns: a row too long for the registers (for STREAM_REGS when it
    goes through the prefetch ring) streams through them in segments when nothing needs it after its one reduction
    level, else a located error naming the cluster split."""
    vec = _vec(op, kinds, n)
    group = 32 * warps_per_row
    chunks = -(-(n // csize) // (group * vec))
    per_chunk = sum(max(1, vec * ITEMSIZE.get(o.dtype, 2) // 4) for nm, o in op.inputs.items() if kinds.get(nm) == "row")
    row_regs = kept_row_registers(n // csize, vec, warps_per_row, steps,
                                  [o.dtype for nm, o in op.inputs.items() if kinds.get(nm) == "row"])
    limit = STREAM_REGS if prefetches(sch, vec, row_words(op, kinds, vec)) else MAX_ROW_REGS
    if row_regs > limit and streams:
        chunks = max(1, min(STREAM_CHUNKS, limit // max(1, steps * per_chunk)))
        return vec, chunks, steps * chunks * per_chunk, -(-(n // csize) // (group * vec * chunks))
    if row_regs > MAX_ROW_REGS:
        per_elem = sum(ITEMSIZE.get(o.dtype, 2) for nm, o in op.inputs.items() if kinds.get(nm) == "row") / 4
        longest = int(MAX_ROW_REGS * group * vec // max(1, steps * per_chunk)) * csize
        widest = int(MAX_ROW_REGS * 32 * 4 * 4 / max(per_elem, 1e-9))   # 4 warpgroups: 512 threads
        fits = [c for c in CLUSTER_SIZES if c > csize and n % (c * vec) == 0 and
                steps * -(-(n // c) // (group * vec)) * per_chunk <= MAX_ROW_REGS]
        split = (f"split each row across a cluster of CTAs that combine their partials through DSMEM: "
                 f"schedule.cluster: [{fits[0]}, 1, 1] fits this blocking, " if fits else
                 "even a cluster of 16 CTAs (through DSMEM) does not fit this blocking: ")
        on = f"the registers of a cluster of {csize} CTAs" if csize > 1 else "one CTA's registers"
        problems.add(_rows_path(op, sch), (
            f"a row of N = {n} is too long for {on}: {steps} step(s) of a CTA's {n // csize} columns "
            f"over {group} threads a row take {row_regs} registers a thread for the kept rows (at most "
            f"{MAX_ROW_REGS}); with this blocking N may be at most {longest}, and one CTA with one row a block on 4 "
            f"warpgroups holds at most {widest // max(steps, 1)}. A body whose outputs are all one value a row, "
            f"from one level of reductions (cross-entropy, logsumexp, a row sum), streams a row of any length; "
            f"this one keeps the row for a later pass: {split}or use fewer rows a block, more warpgroups or fewer "
            f"max_concurrent_steps"))
    return vec, chunks, row_regs, 1


def _ragged(op, sch, kinds, m, step_rows: int, ranges, problems: Problems) -> bool:
    """Whether the last row block is partial (rows past M are masked; out_of_bounds: zero must say so)."""
    ragged = not dims.divisible(m, step_rows, ranges)
    for group, name, bs, names in _block_entries(op, sch):
        if name not in names:
            continue
        path = ("schedule", group, name, "out_of_bounds")
        if bs.out_of_bounds == "nan":
            problems.add(path, "the kernels never load a row past M (those rows are masked, not filled), so a fill "
                               "value is never read: use zero (a partial last block allowed) or reject")
        elif ragged and bs.out_of_bounds == "reject" and kinds.get(name) != "col":
            at = f"M = {m}" if not ranges else f"M (dynamic, {ranges[str(next(iter(dims.sizes_of(m))))].describe()})"
            problems.add(path, f"{at} is not a whole number of row blocks of {step_rows} rows (rows a block x "
                               f"max_concurrent_steps): the last block is partial; set out_of_bounds: zero (rows past "
                               f"M are masked) or pick rows that divide M")
    return ragged


def _operands(op, kinds, rows: int, hw: Hardware) -> tuple[RowOperand, ...]:
    out = []
    sizes = size_values(op.sizes)
    for role, group in (("in", op.inputs), ("out", op.outputs)):
        for name, o in group.items():
            shape = tuple(d if isinstance(d, int) else sizes[d] for d in o.shape)
            kind = kinds[name]
            block = {"row": (rows, shape[-1]), "col": tuple(shape), "per_row": (rows,) + tuple(shape[1:]),
                     "partial": (1, shape[-1]), "scalar": (rows,)}[kind]
            out.append(RowOperand(name, role, kind, o.dtype, shape, ITEMSIZE[o.dtype], CTYPE[o.dtype],
                                  f"{role}_{name}", tuple(int(b) for b in block)))
    return tuple(out)


# ------------------------------------------------------------------------------------------ prefetch ring

def red_slots_of(body) -> int:
    """f32 partials a row takes a level in SMEM: the most reductions of one level (log-sum-exp: two)."""
    levels = max((r.level for r in body.reductions), default=0)
    return max((sum(2 if r.op == "logsumexp" else 1 for r in body.reductions if r.level == lv)
                for lv in range(1, levels + 1)), default=1)


def reduction_smem(levels: int, rows: int, steps: int, warps_per_row: int, red_slots: int, csize: int) -> int:
    """Bytes of the CUDA kernel's reduction scratch: the row groups' cross-warp partials (none when a warp has the
    row) and, in a cluster, the CTA's partials the others read; two parities each."""
    smem = 0 if warps_per_row == 1 else 2 * levels * rows * steps * warps_per_row * red_slots * 4
    return smem + (0 if csize == 1 else 2 * levels * rows * steps * red_slots * 4)


def ring_slot_bytes(threads: int, steps: int, chunks: int, words: int) -> int:
    """One slot of the prefetch ring: every thread's `steps` x `chunks` accesses of `words` 16-byte words (the
    row inputs' together)."""
    return threads * steps * chunks * words * 16


def row_words(op, kinds, vec: int) -> int:
    """16-byte words of one access across the row inputs (a bf16 vector of 8: 1; an f32 one of 8: 2)."""
    return sum(max(1, vec * ITEMSIZE.get(o.dtype, 2) // 16) for nm, o in op.inputs.items() if kinds.get(nm) == "row")


def prefetches(sch, vec: int, words: int) -> bool:
    """Whether the CUDA kernel copies the next piece to SMEM while reducing this one: a CUDA backend, pipeline.kind
    not none, 16-byte accesses (cp.async moves 4, 8 or 16 B; an element access of 2 B cannot), a row input."""
    return "cuda" in sch.backends and sch.pipeline.kind != "none" and vec > 1 and words > 0


def ring_layout(op, sch, kinds, body, vec, chunks, rows, steps, warps_per_row, csize,
                threads: int) -> tuple[bool, int, int]:
    """(prefetch, the ring's offset in the dynamic SMEM: the reduction scratch rounded up to 16 B, one slot's
    bytes) for blocks of `threads`; (False, 0, 0) when the kernel does not prefetch."""
    words = row_words(op, kinds, vec)
    if not prefetches(sch, vec, words):
        return False, 0, 0
    levels = max((r.level for r in body.reductions), default=0)
    offset = -(-reduction_smem(levels, rows, steps, warps_per_row, red_slots_of(body), csize) // 16) * 16
    return True, offset, ring_slot_bytes(threads, steps, chunks, words)


def _ring(op, sch, kinds, body, vec, chunks, rows, steps, warps_per_row, csize, hw: Hardware,
          problems: Problems) -> tuple[bool, int, int]:
    """ring_layout, and a located error when its two slots do not fit beside the reduction scratch."""
    prefetch, offset, slot = ring_layout(op, sch, kinds, body, vec, chunks, rows, steps, warps_per_row, csize,
                                         128 * sch.num_warpgroups)
    words = row_words(op, kinds, vec)
    static = reduction_static_smem(op, kinds, rows, 128 * sch.num_warpgroups)
    if prefetch and offset + 2 * slot + static > hw.smem_per_block:
        problems.add(("schedule", "pipeline", "kind"),
                     f"the CUDA kernel's prefetch ring (two slots of {steps} row(s) x {chunks} 16-byte vector(s) "
                     f"x {words} word(s) a thread, {128 * sch.num_warpgroups} threads: {2 * slot} B) does not fit "
                     f"the {hw.smem_per_block} B of SMEM a block beside {offset} B of partials: set pipeline.kind: "
                     f"none (loads straight into the registers, no overlap), or use fewer max_concurrent_steps, "
                     f"rows a block or warpgroups")
    return prefetch, offset, slot


# ----------------------------------------------------------------------------------------------- Pallas

PALLAS_CHUNK = 256        # a TMA box's most elements along a dimension (Mosaic GPU copies one box a BlockSpec)


def pallas_chunks(n: int, quantum: int = 8) -> tuple[int, int]:
    """(chunk, chunks): the Pallas kernel's columns a BlockSpec (the largest divisor of N up to a TMA box's 256
    that is a multiple of `quantum`, the elements of 16 B: emit_pipeline's blocks must tile the row exactly) and
    BlockSpecs a row; chunk 0 when there is none."""
    for chunk in range(min(PALLAS_CHUNK, n), 0, -1):
        if n % chunk == 0 and chunk % quantum == 0:
            return chunk, n // chunk
    return 0, 0


PALLAS_QUANTUM = 128       # a chunk's columns: a multiple of a warpgroup's 128 lanes (Mosaic GPU's 1-D layouts)


def _quantum(operands) -> int:
    del operands
    return PALLAS_QUANTUM


def _row_shape_path(op):
    for group in ("inputs", "outputs"):
        for name, o in getattr(op, group).items():
            if len(o.shape) == 2 and o.shape[1] != 1 and o.shape[0] != 1:
                return ("op", group, name, "shape", 1)
    return ("op", "body")


def pallas_smem(operands, steps: int, n: int) -> int:
    """SMEM of the Pallas kernel: `steps` stages of every input's block, two buffers of every output's (a row
    rounded up to whole chunks)."""
    chunk, chunks = pallas_chunks(n)
    total = 0
    for o in operands:
        elems = math.prod(o.block) if o.kind in ONE_A_ROW else math.prod(o.block) // n * chunk * chunks
        total += elems * o.itemsize * (steps if o.role == "in" else 1 if o.kind == "partial" else 2)
    return total


def _pallas_limits(op, sch, body, operands, rows: int, steps: int, n: int, hw: Hardware, problems: Problems):
    """What jax 0.11.2's Mosaic GPU cannot do with these kernels, reported before rendering."""
    if "pallas" not in sch.backends:
        return
    hint = "or set schedule.backends: [cuda]"
    for fn in sorted({"gelu_erf", "erf"} & set(rb.functions_used(body))):
        problems.add(("op", "body"), f"{fn} needs erf, which Mosaic GPU (jax 0.11.2) cannot lower; use gelu (the "
                                     f"tanh form) {hint}")
    for o in operands:
        if o.kind == "per_row" and len(o.shape) == 2:
            problems.add(("op", "inputs" if o.role == "in" else "outputs", o.name, "shape"),
                         f"'{o.name}' [M, 1] has a row stride of {o.itemsize} B; the Pallas kernel's TMA copies need "
                         f"GMEM strides that are a multiple of 16 B (Mosaic GPU, jax 0.11.2): write its shape [M] "
                         f"{hint}")
        elif o.kind in ONE_A_ROW and (rows * o.itemsize) % 16:
            problems.add(_rows_path(op, sch), f"the Pallas kernel moves a step's {rows} values of the per-row "
                                              f"{'output' if o.role == 'out' else 'input'} '{o.name}' by TMA "
                                              f"({rows * o.itemsize} B), which needs a multiple of 16 B (Mosaic GPU, "
                                              f"jax 0.11.2, copies GMEM <-> SMEM by TMA only): use rows a multiple of "
                                              f"{16 // o.itemsize} {hint}")
    for o in operands:
        if o.kind not in ONE_A_ROW and (n * o.itemsize) % 16:
            problems.add(("op", "inputs" if o.role == "in" else "outputs", o.name, "shape"),
                         f"a row of '{o.name}' is {n * o.itemsize} B; the Pallas kernel's TMA copies need a row "
                         f"stride that is a multiple of 16 B (Mosaic GPU, jax 0.11.2, copies GMEM <-> SMEM by TMA "
                         f"only): use N a multiple of {16 // o.itemsize} {hint}")
    quantum = _quantum(operands)
    if pallas_chunks(n, quantum)[0] == 0 and not any(o.kind not in ONE_A_ROW and (n * o.itemsize) % 16 for o in operands):
        problems.add(_row_shape_path(op), f"the Pallas kernel cuts a row into TMA boxes of at most {PALLAS_CHUNK} "
                                          f"columns that tile it exactly, each a multiple of {quantum} columns (a warpgroup's lanes): "
                                          f"N = {n} has no such divisor (Mosaic GPU, jax 0.11.2, cannot copy a "
                                          f"partial box here) {hint}")
    smem = pallas_smem(operands, steps, n)
    if smem > hw.smem_per_block:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"the Pallas kernel's {steps} pipeline stage(s) of {rows} row(s) of N = {n} take {smem} B of SMEM "
                     f"(at most {hw.smem_per_block}): use fewer stages or rows a block {hint}")


# ------------------------------------------------------------------------------------------------ assemble

def _roles(op, kinds, body) -> dict:
    roles = {n: ("operand" if kinds[n] in ("row", "col") else "per_row") for n in op.inputs}
    roles |= {c: "constant" for c in op.constants}
    roles |= {t: ("output" if t in op.outputs else "temporary") if body.varies[t] else "scalar"
              for t, _ in body.statements}
    roles |= {rb.PLACEHOLDER.format(r.index): "reduction" for r in body.reductions}
    return roles


def _assemble(spec, hw, body, operands, m, n, rows, steps, warps_per_row, vec, chunks, row_regs, ragged,
              ranges, segments, csize, ring) -> RowwisePlan:
    op, sch = spec.op, spec.schedule
    kinds = {o.name: o.kind for o in operands}
    threads = 128 * sch.num_warpgroups
    levels = max((r.level for r in body.reductions), default=0)
    red_slots = red_slots_of(body)
    prefetch, ring_offset, slot = ring
    smem = ring_offset + 2 * slot if prefetch else reduction_smem(levels, rows, steps, warps_per_row, red_slots,
                                                                  csize)
    partial_regs = chunks * vec * sum(1 for o in operands if o.kind == "partial")   # a thread's column sums
    regs = min(255, max(32, 2 * row_regs + 48 + partial_regs))
    per_sm = max(1, min(hw.max_threads_per_sm // threads, REGS_PER_SM // (threads * (-(-regs // 8) * 8)),
                        hw.max_blocks_per_sm, hw.smem_per_sm // (smem + hw.smem_reserved_per_block)))
    num_row_blocks = dims.cdiv(m, rows * steps)
    tiles = dims.cdiv(m, rows)
    persistent = sch.persistent.loop != "none"
    if not persistent:
        num_blocks, pallas_blocks = num_row_blocks, tiles
    elif sch.persistent.num_blocks == "auto":
        num_blocks, pallas_blocks = num_row_blocks, dims.dmin(tiles, hw.sm_count)
    else:
        num_blocks = dims.dmin(num_row_blocks, sch.persistent.num_blocks // csize)
        pallas_blocks = dims.dmin(tiles, sch.persistent.num_blocks)
    if csize > 1:
        num_blocks = num_blocks * csize         # a cluster of csize CTAs a row block
    partials = partial_blocks(kinds, op)
    if partials:             # exactly P blocks (clusters) striding over the rows, each writes its row of partials
        num_blocks, pallas_blocks = partials * csize, partials
        persistent = True
    ins = tuple(o for o in operands if o.role == "in")
    outs = tuple(o for o in operands if o.role == "out")
    m_max = dims.upper(m, ranges)
    bytes_moved = sum((m_max * n if o.kind == "row" else n if o.kind == "col" else o.shape[0] * n
                       if o.kind == "partial" else 1 if o.kind == "scalar" else m_max) * o.itemsize
                      for o in operands)
    reductions = tuple(RowReduction(r.index, r.op, rb.COMBINE[r.op], PlanExpr(r.arg),
                                    PlanExpr(r.index_arg) if r.index_arg is not None else None, r.level, r.statement)
                       for r in body.reductions)
    kname = f"rowwise_{spec.name}_r{rows}w{warps_per_row}_s{steps}_v{vec}" + (f"_c{csize}" if csize > 1 else "")
    cp = sch.compiler_params
    args = tuple(KernelArg("ptr", i, o.dtype, o.shape) for i, o in enumerate(operands)) + \
        tuple(KernelArg("i32", -1, value=dims.size(x)) for x in ranges)
    args += _reduction_workspace(outs, num_blocks)
    return RowwisePlan(
        launch=KernelLaunch(name=spec.name, family="rowwise", kernel_name=kname, backends=tuple(sch.backends),
                            threads=threads, smem_bytes=smem, num_blocks=num_blocks, blocks_per_sm=per_sm,
                            kernel_args=args, auto_blocks=persistent and not partials and sch.persistent.num_blocks == "auto",
                            cluster_dims=(csize, 1, 1), dynamic_sizes=tuple(ranges.values())),
        sizes=size_values(op.sizes), constants=dict(op.constants), m=m, n=n, rows_per_block=rows,
        warps_per_row=warps_per_row, steps=steps, vec=vec, chunks=chunks, segments=segments, row_regs=row_regs,
        num_warpgroups=sch.num_warpgroups, num_row_blocks=num_row_blocks, pallas_tiles=tiles,
        pallas_blocks=pallas_blocks, persistent=persistent, levels=levels, inputs=ins, outputs=outs,
        body=tuple((t, PlanExpr(e)) for t, e in body.statements), body_level=dict(body.level),
        body_varies={t: bool(v) for t, v in body.varies.items() if t in dict(body.statements)},
        body_roles=_roles(op, kinds, body), reductions=reductions, red_slots=red_slots,
        prefetch=prefetch, ring_offset=ring_offset, ring_slot_bytes=slot,
        pallas_smem_bytes=pallas_smem(operands, steps, n), ragged_m=ragged,
        pallas_chunk=pallas_chunks(n, _quantum(operands))[0], pallas_chunks=pallas_chunks(n, _quantum(operands))[1],
        approx_math=cp.approx_math, lowering_semantics=cp.lowering_semantics,
        unsafe_no_auto_barriers=cp.unsafe_no_auto_barriers, profile_space=cp.profile_space,
        profile_dir=cp.profile_dir, bytes_moved=int(bytes_moved), ignore_index=op.ignore_index,
        reduction=op.reduction)


def _reduction_workspace(outs, num_blocks) -> tuple[KernelArg, ...]:
    """op.reduction's workspace argument when there are [1] outputs: a zeroed 16-byte counter of blocks done, then
    the blocks' sums (a 16-byte slot each)."""
    reduced = sum(1 for o in outs if o.kind == "scalar")
    if not reduced:
        return ()
    return (KernelArg("workspace", -1, value=WORKSPACE_HEAD + num_blocks * 4 * ws_stride(reduced),
                      zero=WORKSPACE_HEAD),)


def reduction_static_smem(op, kinds, rows: int, threads: int) -> int:
    """Bytes of static SMEM the CUDA kernel declares beside its dynamic SMEM for op.reduction: the row groups' and
    the warps' slots of sums ([1] outputs), the warps' counts of rows not ignored (a [1] input under mean), a flag."""
    outs = sum(1 for nm in op.outputs if kinds.get(nm) == "scalar")
    ins = any(kinds.get(nm) == "scalar" for nm in op.inputs)
    slots = (rows + threads // 32) * ws_stride(outs) * 4 + 4 if outs else 0
    return slots + (threads // 32 * 4 if ins and op.reduction == "mean" else 0)


WORKSPACE_HEAD = 16       # bytes of the reduction's workspace before the blocks' slots: the blocks-done counter


def ws_stride(reduced: int) -> int:
    """f32 words of a block's slot in the reduction's workspace: its sum of each [1] output and its count of rows
    not ignored, rounded up to 16 bytes."""
    return -(-(reduced + 1) // 4) * 4
