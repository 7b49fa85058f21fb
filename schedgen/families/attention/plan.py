"""Planner of the `attention` family: flash-attention forward on Hopper tensor cores.

One CTA computes `block_q` query rows of one (batch, head): a TMA producer warpgroup loads the Q tile once and
streams K and V blocks (`block_kv` keys each) through `max_concurrent_steps` stages on separate full/empty
mbarrier rings; each of the 1-3 consumer warpgroups owns 64 query rows, computes S = Q K^T with wgmma from
SMEM, runs the online softmax in registers (exp2, row max/sum across the quad), and feeds P from registers as
the A operand of O += P V. With `barriers.schedule` (2 arrivals) the two consumers take turns issuing their
MMAs, so one's softmax overlaps the other's tensor-core work (ping-pong). Every rule is checked here.
"""
from __future__ import annotations

import dataclasses
import math

from typing import TYPE_CHECKING

from ...frontend.model import ITEMSIZE
from ...plan import dims as X
from ...plan.common import (
    CTYPE,
    KernelArg,
    Problems,
    SmemMap,
    dynamic_ranges,
    max_sizes,
    resolve_shape,
    size_values,
)
from ...plan.hardware import Hardware
from ...plan.launch import KernelLaunch
from ...plan.legality import (
    SMEM_SLACK,
    check_no_cluster,
    check_reserved_names,
    check_setmaxnreg,
    check_smem_fit,
    check_unique_names,
    max_consumer_regs,
    register_budget_problem,
    setmaxnreg_problem,
)
from . import blackwell as bw
from .in_specs import check_in_specs
from .unread import check_unread
from .records import (
    DTYPES,
    DYNAMIC_PRODUCER_REGS,
    HEAD_DIMS,
    MODULE_NAMES,
    REG_OVERHEAD,
    ROW_CHAINS,
    SKIP_RESCALE_MIN_D,
    WGMMA_M,
    AttentionPlan,
    attention_flops,
    causal_alignment,
    AttnOperand,
    Blocks,
    Dims,
    Grid,
    Names,
    Order,
    Regs,
    Smem,
)

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

# lpt tile order: the share of the L2 that one section's K and V may fill (FlashAttention-3 takes 32 of the H100's
# 50 MB); Q, O and the other sections' tails pass through the rest
L2_SECTION = 0.625


def desc_offsets_of(nc: int, d: int) -> bool:
    """Whether the Hopper consumers build a tile's wgmma descriptor once and add each k-step's byte offset (>> 4) to
    its start-address field (records.AttentionPlan.desc_offsets) rather than rebuilding it from the address each
    k-step: the same descriptors, fewer uniform instructions between the HGMMAs of S = Q K^T and O += P V (the
    consumers' issue slots, which the softmax competes for). False everywhere until the H200 times it
    (python -m bench.candidates)."""
    del nc, d
    return False


def plan_attention(spec: SpecFile, hw: Hardware) -> tuple[AttentionPlan | None, Problems]:
    """Phases: names, shapes, the problem's dims and dtypes, blocks, grid, registers, SMEM, barriers, tile order,
    what each backend cannot express, fields no backend reads; each phase reports its own located problems."""
    problems = Problems()
    op, sch = spec.op, spec.schedule
    names = _check_names(spec, problems)
    before = len(problems)
    shapes = _resolve_shapes(op, names, problems)
    if shapes is None:
        return None, problems
    pinned = _pinned(op, names, shapes)
    if pinned:
        shapes = _resolve_shapes(op, names, problems, pinned)
    dims = _check_problem(op, names, shapes, problems, pinned)
    if len(problems) != before:
        return None, problems
    if sch.target == "sm_100a":
        return _plan_sm100(spec, names, dims, hw, problems)
    blocks = _plan_blocks(sch, names, dims, problems)
    if dims.ranges:
        _check_counts(dims, blocks, problems)
    grid = _grid(sch)
    regs = _plan_registers(sch.pipeline, blocks, dims, grid, names, hw, problems)
    smem = _plan_smem(sch.pipeline, blocks, dims, grid, hw, problems)
    pingpong = _check_sync(sch, blocks.nc, problems)
    order = _tile_order(op, sch, dims, hw, problems)
    _backend_limits(sch, names, blocks, grid, regs, smem, hw, problems)
    check_unread(sch, names.inputs, problems)
    if problems:
        return None, problems
    return _assemble(spec, names, dims, blocks, grid, regs, smem, pingpong, order), problems


def _plan_sm100(spec: SpecFile, names: Names, dims: Dims, hw: Hardware,
                problems: Problems) -> tuple[AttentionPlan | None, Problems]:
    """sm_100a (blackwell.py): the Pallas tcgen05 kernel's blocks, TMEM, SMEM and limits; the problem, the tile
    order and the unread fields as on Hopper."""
    op, sch = spec.op, spec.schedule
    bw.check_target(spec, problems)
    blocks = bw.plan_blocks(sch, names, dims, problems)
    bw.check_problem(op, names, dims, blocks, problems)
    grid = _grid(sch)
    tmem = bw.plan_tmem(names, blocks, dims, hw, problems)
    smem_map, smem_bytes = bw.plan_smem(sch, blocks, dims, names.lse is not None, tmem.s_buffers if tmem else 1, hw,
                                        problems)
    order = _tile_order(op, sch, dims, hw, problems)
    bw.check_limits(sch, grid, names, problems)
    check_unread(sch, names.inputs, problems)
    if problems or tmem is None:
        return None, problems
    isz = ITEMSIZE[dims.dtype]
    smem = Smem(sch.pipeline.max_concurrent_steps, dims.d // 64, bw.ROWS * dims.d * isz,
                blocks.block_kv * dims.d * isz, False, smem_map, smem_bytes)
    plan = _assemble(spec, names, dims, blocks, grid, Regs(0, 0, 0, 0), smem, False, order)
    kname = "attn_{}_{}_d{}_q{}_kv{}_s{}_sm100{}".format(spec.name, dims.dtype, dims.d, blocks.block_q,
                                                        blocks.block_kv, smem.stages, "_persist" if grid.persistent
                                                        else "")
    launch = dataclasses.replace(plan.launch, kernel_name=kname, threads=bw.THREADS, target=sch.target,
                                 num_blocks=plan.num_tiles)
    return dataclasses.replace(plan, launch=launch, tcgen05=tmem), problems


def _check_names(spec: SpecFile, problems: Problems) -> Names:
    """One namespace for sizes and operands; the generated module's own names and schedgen.reserved's are taken."""
    op = spec.op
    check_unique_names((("sizes", op.sizes), ("inputs", op.inputs), ("outputs", op.outputs)), problems)
    for group, ns in (("sizes", op.sizes), ("outputs", op.outputs)):   # (input names: schedgen.reserved, below)
        for n in ns:
            if n in MODULE_NAMES:
                problems.add(("op", group, n), f"'{n}' is reserved by the generated module; choose another name")
    check_reserved_names(spec, problems)
    q, k, v = op.inputs
    outs = list(op.outputs)
    return Names(q, k, v, outs[0], outs[1] if len(outs) > 1 else None)


def _layout_text(op) -> str:
    return "[B, S, H, D]" if op.layout == "bshd" else "[B, H, S, D]"


def _resolve_shapes(op, names: Names, problems: Problems, pinned: dict | None = None) -> dict | None:
    """Every operand's shape in numbers; None (reported) when a size is unknown or q, k, v, o are not 4-D."""
    before = len(problems)
    sizes = {**size_values(op.sizes), **(pinned or {})}   # a dynamic size is the extent size(name) (plan/dims.py)
    shapes = {n: resolve_shape(o.shape, sizes, ("op", "inputs", n, "shape"), problems) for n, o in op.inputs.items()}
    shapes.update({n: resolve_shape(o.shape, sizes, ("op", "outputs", n, "shape"), problems) for n, o in op.outputs.items()})
    if len(problems) != before:
        return None
    for n in (*names.inputs, names.o):
        if len(shapes[n]) != 4:
            problems.add(("op", "inputs" if n in op.inputs else "outputs", n, "shape"),
                         f"attention operands are 4-D ({_layout_text(op)}); got {len(shapes[n])} dimensions")
    return None if len(problems) != before else shapes


def _pinned(op, names: Names, shapes: dict) -> dict[str, int]:
    """Dynamic sizes the kernel needs as constants (head_dim; grouped q and kv heads) whose range holds one value:
    that value (a range of one value is a fixed size; e.g. a spec with every size declared dynamic at its own
    value). The others are reported by _check_dynamic."""
    q, k = shapes[names.q], shapes[names.k]
    hq, hkv = (q[2], k[2]) if op.layout == "bshd" else (q[1], k[1])
    need = [q[3]] + ([hq, hkv] if hq != hkv else [])
    ranges = dynamic_ranges(op.sizes)
    one = {}
    for x in need:
        if not X.is_static(x) and x.op == "size" and ranges[x.args[0]].min == ranges[x.args[0]].max:
            one[x.args[0]] = ranges[x.args[0]].max
    return one


def _check_problem(op, names: Names, shapes: dict, problems: Problems, pinned: dict | None = None) -> Dims:
    """q, k, v and o agree (GQA heads, head_dim, the causal alignment), the scale is positive, the dtypes match;
    with dynamic sizes, over the whole range of each (_check_dynamic)."""
    def bshd(shape):
        return shape if op.layout == "bshd" else (shape[0], shape[2], shape[1], shape[3])

    b, sq, hq, d = bshd(shapes[names.q])
    bk, skv, hkv, dk = bshd(shapes[names.k])
    bv, sv, hv, dv = bshd(shapes[names.v])
    k_path = ("op", "inputs", names.k, "shape")
    if (bk, dk) != (b, d):
        problems.add(k_path, f"k {_layout_text(op)} must share B = {b} and D = {d} with q")
    if (bv, sv, hv, dv) != (bk, skv, hkv, dk):
        problems.add(("op", "inputs", names.v, "shape"),
                     f"v must have k's shape {_shown(shapes[names.k])}, got {_shown(shapes[names.v])}")
    if shapes[names.o] != shapes[names.q]:
        problems.add(("op", "outputs", names.o, "shape"), f"the output has q's shape {_shown(shapes[names.q])}")
    ranges = {n: r for n, r in dynamic_ranges(op.sizes).items() if n not in (pinned or {})}
    if ranges:
        _check_dynamic(op, names, (sq, hq, d, skv, hkv), ranges, problems)
    else:
        if hkv and hq % hkv:
            problems.add(k_path, f"q heads ({hq}) must be a multiple of kv heads ({hkv}) (grouped-query attention)")
        if causal_alignment(op.causal) == "bottom_right" and sq > skv:
            problems.add(("op", "causal"), f"causal: {_spelled(op.causal)} aligns the last query with the last key "
                                           f"(query i sees keys j <= i + Skv - Sq); it needs Sq <= Skv, got Sq = "
                                           f"{sq}, Skv = {skv} (the first {sq - skv} queries would see no key); "
                                           f"{TOP_LEFT_HINT}")
    if X.is_static(d) and d not in HEAD_DIMS:
        problems.add(("op", "inputs", names.q, "shape", 3), f"head_dim {d} is not supported; legal: 64, 128, 256")
    if op.scale is not None and op.scale <= 0:
        problems.add(("op", "scale"), f"the softmax scale must be positive (the running max is taken on scaled "
                                      f"scores), got {op.scale}")
    dims = Dims(b, sq, hq, skv, hkv, d, op.inputs[names.q].dtype, shapes, ranges)
    _check_dtypes(op, names, dims, problems)
    return dims


TOP_LEFT_HINT = "causal: top_left (query i sees keys j <= i) takes any Sq, the rows past Skv seeing every key"


def _spelled(causal) -> str:
    """How the spec wrote a bottom-right mask."""
    return "true (bottom_right)" if causal is True else "bottom_right"


def _shown(shape) -> str:
    return "[" + ", ".join(str(x) for x in shape) + "]"


def _size_name(d) -> str:
    """The size a dynamic extent of an operand's shape is (shapes name sizes, never expressions)."""
    return d.args[0]


def check_dynamic_extents(op, inputs, k_name: str, extents: tuple, ranges: dict, problems: Problems) -> bool:
    """What attention's kernels (forward and backward) take of dynamic sizes: each bound to an input's dimension;
    head_dim never (it shapes the MMA instructions, the registers and the SMEM tiles); the GQA ratio is built into
    the kernels, so dynamic heads are one size for q and kv (grouped heads are fixed). False when head_dim is
    dynamic (nothing after it can be planned)."""
    sq, hq, d, skv, hkv = extents
    bound = {x for n in inputs for x in op.inputs[n].shape if isinstance(x, str)}
    for n in ranges:
        if n not in bound:
            problems.add(("op", "sizes", n), f"the dynamic size {n} is no input's dimension: a call gives each dynamic "
                                             f"size through its inputs' shapes; use it in one or give it a fixed value")
    if not X.is_static(d):
        problems.add(("op", "sizes", _size_name(d)),
                     f"head_dim ({_size_name(d)}) cannot be dynamic: it sets the MMA shapes, the registers and the "
                     f"SMEM tiles of the kernels; give it a fixed value (64, 128 or 256)")
    if hq != hkv:
        for heads in (hq, hkv):
            if not X.is_static(heads):
                problems.add(("op", "sizes", _size_name(heads)),
                             f"{_size_name(heads)} (the {'q' if heads is hq else 'kv'} heads) may be dynamic only as "
                             f"the one size of both q and kv heads (no grouping): the q heads per kv head (GQA) are "
                             f"built into the kernels; give {_size_name(heads)} a fixed value")
        if X.is_static(hq) and X.is_static(hkv) and hq % hkv:
            problems.add(("op", "inputs", k_name, "shape"),
                         f"q heads ({hq}) must be a multiple of kv heads ({hkv}) (grouped-query attention)")
    return X.is_static(d)


def _check_dynamic(op, names: Names, extents: tuple, ranges: dict, problems: Problems) -> None:
    """Dynamic sizes: B, Sq, Skv and the heads may be, head_dim may not (check_dynamic_extents); bottom-right causal
    needs Sq <= Skv at every call (one size, or ranges that cannot cross)."""
    sq, hq, d, skv, hkv = extents
    check_dynamic_extents(op, names.inputs, names.k, extents, ranges, problems)
    if causal_alignment(op.causal) == "bottom_right" and sq != skv and X.upper(sq, ranges) > X.lower(skv, ranges):
        problems.add(("op", "causal"),
                     f"causal: {_spelled(op.causal)} aligns the last query with the last key; it needs Sq <= Skv at "
                     f"every call, but Sq ({sq}) reaches {X.upper(sq, ranges)} and Skv ({skv}) may be "
                     f"{X.lower(skv, ranges)}: use one size for both, or ranges that cannot cross; {TOP_LEFT_HINT}")


def _check_dtypes(op, names: Names, dims: Dims, problems: Problems) -> None:
    dtype = dims.dtype
    for n in names.inputs:
        if op.inputs[n].dtype not in DTYPES:
            problems.add(("op", "inputs", n, "dtype"), f"attention takes bf16 or f16, got {op.inputs[n].dtype}")
        elif op.inputs[n].dtype != dtype:
            problems.add(("op", "inputs", n, "dtype"), f"q, k and v share one dtype; q is {dtype}")
    if op.outputs[names.o].dtype != dtype:
        problems.add(("op", "outputs", names.o, "dtype"), f"the output has the inputs' dtype ({dtype})")
    if names.lse is not None:
        want = (dims.b, dims.hq, dims.sq)
        if dims.shapes[names.lse] != want or op.outputs[names.lse].dtype != "f32":
            problems.add(("op", "outputs", names.lse), f"the log-sum-exp output is f32 [B, Hq, Sq] = {_shown(want)}")


def _plan_blocks(sch, names: Names, dims: Dims, problems: Problems) -> Blocks:
    """block_q (64 rows a consumer warpgroup) and block_kv from the in_specs, which take no index maps."""
    pipe, d = sch.pipeline, dims.d
    nc = pipe.num_compute_wgs
    if pipe.kind != "warp_specialized":
        problems.add(("schedule", "pipeline", "kind"), "attention is warp-specialized (a TMA producer and 1-3 "
                                                       "consumer warpgroups): set pipeline.kind: warp_specialized")
    if nc > 3:
        problems.add(("schedule", "pipeline", "num_compute_wgs"), f"1 to 3 consumer warpgroups, got {nc}")
        nc = 3
    qs, ks = (sch.in_specs.get(n) for n in (names.q, names.k))
    block_q = qs.block_shape[0] if qs is not None else WGMMA_M * nc
    block_kv = ks.block_shape[0] if ks is not None else (128 if d <= 128 else 64)
    check_in_specs(sch, names, d, block_kv, problems)
    if block_q != WGMMA_M * nc:
        problems.add(("schedule", "in_specs", names.q, "block_shape", 0),
                     f"each consumer warpgroup owns {WGMMA_M} query rows (one wgmma M block): block_q is "
                     f"{WGMMA_M * nc} with {nc} consumer(s), got {block_q}")
    if block_kv % 16 or not 16 <= block_kv <= 256:
        problems.add(("schedule", "in_specs", names.k, "block_shape", 0),
                     f"block_kv is the N of S = Q K^T's wgmma and the K of O += P V's: a multiple of 16 in [16, 256], "
                     f"got {block_kv}")
    blocks = Blocks(nc, block_q, block_kv)
    if "pallas" in sch.backends:
        _pallas_ragged(names, dims, blocks, problems)
    return blocks


# Mosaic GPU (jax 0.11.2) views each GMEM operand through its SMEM tiling, 8 rows x 64 columns here
# (TilingTransform((8, 64))), and cannot round a partial tile up (TileTransform: "When no rounding mode is specified,
# dimension d must have size smaller or a multiple of its tiling 8"; Rounding.UP is NotImplemented): a sequence
# length must be a multiple of 8 rows, or under 8; past that, TMA zero-fills the ragged last blocks and clips their
# stores. The log-sum-exp rows [B, Hq, Sq] f32 leave by TMA too, whose GMEM strides are multiples of 16 bytes
# ("async_copy requires all GMEM strides except the last one to be a multiple of 16 bytes"): Sq a multiple of 4.
# tests/build/test_pallas_lowers.py pins both.
PALLAS_SEQ_QUANTUM = 8
PALLAS_LSE_QUANTUM = 4
# With the log-sum-exp output the Pallas kernel takes whole blocks only: on the H200 (2026-12-04) the LSE rows came
# out wrong with a ragged last query and key block (relative error 0.10 at Sq = Skv = 1000, 0.06 at Sq = 4 against
# 1000 keys; o right in both, and the LSE right in the interpreter); the cases that failed did not tell the query
# block from the key block, so both must be whole
PALLAS_LSE_WHOLE_BLOCKS = True


def _pallas_ragged(names: Names, dims: Dims, blocks: Blocks, problems: Problems) -> None:
    """The Pallas kernel takes ragged last blocks as the CUDA one does (a ragged last query block computed on TMA's
    zero fill and its stores clipped, a ragged last key block masked), for sequence lengths that are multiples of
    PALLAS_SEQ_QUANTUM or under it (a dynamic one: its multiple_of, or its max), and with the log-sum-exp output
    Sq a multiple of PALLAS_LSE_QUANTUM and (PALLAS_LSE_WHOLE_BLOCKS) Sq and Skv multiples of their blocks."""
    q = PALLAS_SEQ_QUANTUM
    why = (f"Mosaic GPU in jax 0.11.2 views the q, k, v and output arrays in GMEM through their SMEM tiling of {q} "
           f"rows and cannot round a partial tile up")
    for seq, block, what, name in ((dims.sq, blocks.block_q, "q", names.q), (dims.skv, blocks.block_kv, "kv", names.k)):
        if X.divisible(seq, q, dims.ranges) or X.upper(seq, dims.ranges) < q:
            continue
        if X.is_static(seq):
            problems.add(("op", "inputs", name, "shape"),
                         f"S{what} = {seq} is not a multiple of {q}: the Pallas attention takes a ragged last "
                         f"block (block_{what} = {block}) only for S{what} a multiple of {q} or under {q} ({why}); "
                         f"pad the sequence to a multiple of {q}, or set schedule.backends: [cuda]")
        else:
            r = dims.ranges[_size_name(seq)]
            problems.add(("op", "sizes", r.name, "multiple_of"),
                         f"S{what} ({r.name}: {r.describe()}) is not always a multiple of {q}: the Pallas attention "
                         f"takes a ragged last block only for S{what} a multiple of {q} or under {q} ({why}); set "
                         f"{r.name}'s multiple_of to a multiple of {q}, or set schedule.backends: [cuda]")
    lq = PALLAS_LSE_QUANTUM
    if names.lse is not None and not X.divisible(dims.sq, lq, dims.ranges):
        problems.add(("op", "outputs", names.lse, "shape"),
                     f"the Pallas attention stores the log-sum-exp rows [B, Hq, Sq] f32 by TMA, whose GMEM strides "
                     f"are multiples of 16 bytes (Mosaic GPU's async_copy), so Sq ({dims.sq}) must be a multiple of "
                     f"{lq}; pad the queries, drop the log-sum-exp output, or set schedule.backends: [cuda]")
    elif names.lse is not None and PALLAS_LSE_WHOLE_BLOCKS and not (
            X.divisible(dims.sq, blocks.block_q, dims.ranges) and X.divisible(dims.skv, blocks.block_kv, dims.ranges)):
        problems.add(("op", "outputs", names.lse, "shape"),
                     f"with the log-sum-exp output the Pallas attention takes whole blocks only: Sq ({dims.sq}) a "
                     f"multiple of block_q = {blocks.block_q} and Skv ({dims.skv}) of block_kv = {blocks.block_kv} (on "
                     f"the H200 the LSE rows of ragged last blocks came out wrong, o right); pad the sequences, drop "
                     f"the log-sum-exp output, or set schedule.backends: [cuda]")


def _check_counts(dims: Dims, blocks: Blocks, problems: Problems) -> None:
    """The kernel counts its tiles and blocks in 32-bit ints from the sz_ arguments (the grid's x extent is at
    most 2^31 - 1 too): at the largest call, a sequence plus a block and the tile count must fit."""
    limit = (1 << 31) - 1
    for seq, block in ((dims.sq, blocks.block_q), (dims.skv, blocks.block_kv)):
        if not X.is_static(seq) and X.upper(seq, dims.ranges) + block > limit:
            r = dims.ranges[_size_name(seq)]
            problems.add(("op", "sizes", r.name, "max"), f"{r.name} up to {r.max} overflows the kernel's 32-bit block "
                                                         f"counts (max + {block} must stay under 2^31); lower max")
    tiles = X.cdiv(dims.sq, blocks.block_q) * dims.hq * dims.b
    if X.upper(tiles, dims.ranges) > limit:
        names = ", ".join(sorted(X.sizes_of(tiles)))
        problems.add(("op", "sizes", sorted(X.sizes_of(tiles))[0], "max"),
                     f"the largest call has {X.upper(tiles, dims.ranges)} tiles (query blocks x heads x batch), over "
                     f"the 2^31 - 1 of the grid and the kernel's 32-bit tile index; lower the max of {names}")


def _grid(sch) -> Grid:
    """A persistent grid: nd_loop strides over the tiles (CTA i takes i, i + grid, ...); dynamic claims each next
    tile from an atomic counter in GMEM (the CUDA kernel's rendering of dynamic_scheduling_loop on Hopper, which
    has no cluster launch control), so CTAs that drew short causal tiles take more of them."""
    persistent = sch.persistent.loop in ("nd_loop", "dynamic") and "loop" in sch.persistent.model_fields_set
    return Grid(persistent, persistent and sch.persistent.loop == "dynamic")


def _plan_registers(pipe, blocks: Blocks, dims: Dims, grid: Grid, names: Names, hw: Hardware,
                    problems: Problems) -> Regs:
    """setmaxnreg budgets of the producer and the consumers, within the block's registers and above what S, O
    and P need."""
    nc, block_kv = blocks.nc, blocks.block_kv
    s_regs, o_regs = block_kv // 2, dims.d // 2
    budget = hw.regs_per_block(128 * (1 + nc))
    # the producer that claims tiles keeps the counter's address and the claimed index beside the loads' coordinates
    min_preg = DYNAMIC_PRODUCER_REGS if grid.dynamic else 24
    preg = pipe.memory_registers or min_preg
    creg = pipe.compute_registers or min(256, max_consumer_regs(budget, preg, nc))
    check_setmaxnreg({"memory_registers": preg, "compute_registers": creg}, problems, suggest=True)
    if preg < min_preg:
        problems.add(("schedule", "pipeline", "memory_registers"),
                     f"the producer of a dynamic persistent grid claims its tiles from a counter and needs "
                     f"{min_preg} registers (24 spill); give memory_registers: {min_preg} and at most "
                     f"{max_consumer_regs(budget, min_preg, nc)} compute_registers")
    if (message := register_budget_problem(preg, nc, creg, hw)) is not None:
        problems.add(("schedule", "pipeline", "compute_registers"), message)
    need = s_regs + o_regs + block_kv // 4 + REG_OVERHEAD
    if need > min(creg, 255):
        problems.add(("schedule", "in_specs", names.k, "block_shape", 0),
                     f"a consumer thread holds S ({s_regs}), O ({o_regs}) and P ({block_kv // 4}) registers plus about "
                     f"{REG_OVERHEAD}: {need}, over its budget of {min(creg, 255)}; use a smaller block_kv")
    return Regs(s_regs, o_regs, preg, creg)


def _smem_map(q_bytes: int, kv_bytes: int, stages: int, o_staging: bool, dynamic: bool) -> SmemMap:
    m = SmemMap()
    m.alloc("q", q_bytes, note="Q tile" + ("" if o_staging else " (reused to stage O for the TMA store)"))
    m.alloc("k", kv_bytes, stages, note="K stages")
    m.alloc("v", kv_bytes, stages, note="V stages")
    if o_staging:
        m.alloc("o", q_bytes, note="O staging for the TMA store (Q is refilled under the epilogue)")
    for nm in ("q_full", "q_empty", "k_full", "k_empty", "v_full", "v_empty"):
        m.alloc(nm, 8, 1 if nm.startswith("q_") else stages, align=8, note="mbarrier")
    if dynamic:
        m.alloc("tile", 8, align=8, note="the claimed tile index, published with q_full")
    return m


def _plan_smem(pipe, blocks: Blocks, dims: Dims, grid: Grid, hw: Hardware, problems: Problems) -> Smem:
    """The Q tile, the K and V stage rings, O staging where it fits (persistent grids), the mbarriers."""
    stages = pipe.max_concurrent_steps
    if stages < 1:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"), "at least one K/V stage")
    isz = ITEMSIZE[dims.dtype]
    q_bytes = blocks.block_q * dims.d * isz
    kv_bytes = blocks.block_kv * dims.d * isz
    # a persistent CTA stages O in its own buffer where SMEM allows, so the next tile's Q loads under the epilogue
    o_staging = grid.persistent and \
        _smem_map(q_bytes, kv_bytes, stages, True, grid.dynamic).top + SMEM_SLACK <= hw.smem_per_block
    smem = _smem_map(q_bytes, kv_bytes, stages, o_staging, grid.dynamic)
    smem_bytes = check_smem_fit(smem, hw, ("schedule", "pipeline", "max_concurrent_steps"), problems,
                                "use fewer stages or a smaller block_kv")
    return Smem(stages, dims.d // 64, q_bytes, kv_bytes, o_staging, smem, smem_bytes)


def _check_sync(sch, nc: int, problems: Problems) -> bool:
    """One optional barrier, 'schedule' (the consumers' ping-pong, one arrival each), and no cluster; returns
    whether the consumers ping-pong."""
    for bname, bar in sch.barriers.items():
        if bname != "schedule":
            problems.add(("schedule", "barriers", bname), "attention names one barrier, 'schedule' (the consumers' "
                                                          "ping-pong); the K/V rings are the planner's")
        elif nc < 2 or bar.num_arrivals != nc:
            problems.add(("schedule", "barriers", "schedule", "num_arrivals"),
                         f"the ping-pong schedule barrier hands the tensor cores round robin among the consumer "
                         f"warpgroups: num_arrivals = num_compute_wgs (2 or 3), got num_arrivals "
                         f"{bar.num_arrivals} with {nc} consumer warpgroup(s)")
    check_no_cluster(sch.cluster, "attention CTAs share no operand here", problems)
    return "schedule" in sch.barriers


def _tile_order(op, sch, dims: Dims, hw: Hardware, problems: Problems) -> Order:
    """row_major or lpt (the default when causal), and lpt's sections: whole kv-head groups (the q heads that read
    one K/V) whose K and V fit in L2_SECTION of the L2, as few sections as that allows, of equal size (a short last
    section would start its long tiles late). A dynamic Skv sizes the sections at its max (they fit the L2 at every
    call); with a dynamic batch or head count a section holds as many groups as fit, and the last one (shorter)
    is counted at the call."""
    order = sch.persistent.tile_order if "tile_order" in sch.persistent.model_fields_set else \
        ("lpt" if op.causal else "row_major")
    if order == "planar_snake":
        problems.add(("schedule", "persistent", "tile_order"), "attention tiles go row_major (query blocks fastest) or "
                                                               "lpt (longest first, heads fastest in L2-sized sections); "
                                                               "planar_snake orders a 2-D grid of like tiles")
    groups = X.upper(dims.b * dims.hkv, dims.ranges)
    skv = X.upper(dims.skv, dims.ranges)
    fit = max(1, int(hw.l2_bytes * L2_SECTION) // (2 * skv * dims.d * ITEMSIZE[dims.dtype]))
    group = dims.hq // dims.hkv if X.is_static(dims.hq) else 1   # dynamic heads: one size for q and kv
    if X.is_static(dims.b * dims.hkv):
        sections = -(-groups // fit)
        return Order(order, -(-groups // sections) * group)
    return Order(order, min(fit, groups) * group)


def _backend_limits(sch, names: Names, blocks: Blocks, grid: Grid, regs: Regs, smem: Smem, hw: Hardware,
                    problems: Problems) -> None:
    # jax 0.11.2 claims tiles only by cluster launch control (dynamic_scheduling_loop: clusterlaunchcontrol.try_cancel,
    # which ptxas takes for sm_100 and up; tests/families/attention/test_pallas_attention.py pins it), and its GMEM
    # atomics (plgpu.atomic_add, ...) are reductions that return no old value, so no counter can hand out tiles
    if grid.dynamic and "pallas" in sch.backends:
        problems.add(("schedule", "persistent", "loop"), "the Pallas attention's persistent grid is nd_loop (block i "
                                                         "takes tiles i, i + grid, ...); loop: dynamic is the CUDA "
                                                         "kernel's (an atomic tile counter): jax 0.11.2's "
                                                         "plgpu.dynamic_scheduling_loop is cluster launch control "
                                                         "(sm_100 and up, not Hopper) and its atomics return no old "
                                                         "value to claim a tile with; use loop: nd_loop or set "
                                                         "schedule.backends: [cuda]")
    if "pallas" in sch.backends:
        _pallas_limits(sch, names, blocks, regs, smem, hw, problems)


def _assemble(spec: SpecFile, names: Names, dims: Dims, blocks: Blocks, grid: Grid, regs: Regs, smem: Smem,
              pingpong: bool, order: Order) -> AttentionPlan:
    """The plan: every number the templates print."""
    op, sch = spec.op, spec.schedule
    b, sq, hq, skv, d, dtype = dims.b, dims.sq, dims.hq, dims.skv, dims.d, dims.dtype
    nc, block_q, block_kv, stages = blocks.nc, blocks.block_q, blocks.block_kv, smem.stages
    inputs, outputs = _operands(op, names, dims)
    scale = op.scale if op.scale is not None else 1.0 / math.sqrt(d)
    q_blocks, kv_blocks = X.cdiv(sq, block_q), X.cdiv(skv, block_kv)   # ragged last blocks: clipped / masked
    # at the largest call when sizes are dynamic (the benchmark and the reports time a build at fixed sizes)
    at_max = max_sizes(op.sizes)
    alignment = causal_alignment(op.causal)
    flops = attention_flops(*(X.evaluate(x, at_max) for x in (b, hq, sq, skv)), d, alignment)
    bytes_moved = sum(math.prod(X.evaluate(x, at_max) for x in o.shape) * o.itemsize for o in inputs + outputs)
    ranges = dims.ranges
    kname = "attn_{}_{}_d{}_q{}_kv{}_s{}_wg{}{}{}".format(
        spec.name, dtype, d, block_q, block_kv, stages, nc, "_pp" if pingpong else "",
        ("_dyn" if grid.dynamic else "_persist") if grid.persistent else "")
    return AttentionPlan(
        launch=KernelLaunch(name=spec.name, family="attention", kernel_name=kname, backends=tuple(sch.backends),
                            threads=128 * (1 + nc), smem_bytes=smem.bytes, num_blocks=q_blocks * hq * b,
                            blocks_per_sm=1, auto_blocks=grid.persistent,
                            kernel_args=_kernel_args(op.layout, names, dims, block_kv, grid.dynamic, tuple(ranges)),
                            dynamic_sizes=tuple(ranges.values())),
        sizes=dict(op.sizes), constants={},
        batch=b, heads_q=hq, heads_kv=dims.hkv, seq_q=sq, seq_kv=skv, head_dim=d,
        layout=op.layout, causal=alignment is not None, causal_alignment=alignment, scale=scale, scale_log2=scale * math.log2(math.e), dtype=dtype,
        with_lse=names.lse is not None, inputs=inputs, outputs=outputs, block_q=block_q, block_kv=block_kv,
        stages=stages, num_consumers=nc, pingpong=pingpong, q_blocks=q_blocks, kv_blocks=kv_blocks,
        num_tiles=q_blocks * hq * b, tile_order=order.order, section_heads=order.section_heads, slabs=smem.slabs,
        q_bytes=smem.q_bytes, kv_stage_bytes=smem.kv_bytes, s_regs=regs.s_regs, o_regs=regs.o_regs,
        producer_regs=regs.preg, consumer_regs=regs.creg,
        smem_buffers=tuple(smem.map.buffers),
        persistent=grid.persistent, dynamic=grid.dynamic,
        o_staging=smem.o_staging, row_chains=max(1, min(ROW_CHAINS, block_kv // 8)),
        skip_rescale=d >= SKIP_RESCALE_MIN_D,
        approx_math=sch.compiler_params.approx_math, flops=flops, bytes_moved=bytes_moved,
        desc_offsets=desc_offsets_of(nc, d),
    )


def _operands(op, names: Names, dims: Dims) -> tuple[tuple[AttnOperand, ...], tuple[AttnOperand, ...]]:
    isz, shapes = ITEMSIZE[dims.dtype], dims.shapes
    inputs = tuple(AttnOperand(n, f"in_{n}", r, op.inputs[n].dtype, CTYPE[op.inputs[n].dtype], isz, shapes[n])
                   for n, r in zip(names.inputs, ("q", "k", "v")))
    outputs = [AttnOperand(names.o, f"out_{names.o}", "o", dims.dtype, CTYPE[dims.dtype], isz, shapes[names.o])]
    if names.lse:
        outputs.append(AttnOperand(names.lse, f"out_{names.lse}", "lse", "f32", "float", 4, shapes[names.lse]))
    return inputs, tuple(outputs)


def seq_tmap(layout: str, dtype: str, i: int, shape, rows: int) -> KernelArg:
    """The tensor map of operand i, a 4-D [B, S, H, D] (bshd) or [B, H, S, D] (bhsd) array, as a 3-D view [batch,
    sequence, columns] (bshd: [B, S, H*D]; bhsd: [B*H, S, D]) in boxes of `rows` rows x 64 columns, 128-byte swizzled
    (the attention backward's wgmma kernel loads its tiles through the same maps)."""
    isz = ITEMSIZE[dtype]
    bb, s_or_h, h_or_s, dd = shape
    v3 = (bb * s_or_h, h_or_s, dd) if layout == "bhsd" else (bb, s_or_h, h_or_s * dd)
    return KernelArg("tmap", i, dtype, v3, (v3[1] * v3[2] * isz, v3[2] * isz, isz), (1, rows, 64), 128)


def _kernel_args(layout: str, names: Names, dims: Dims, block_kv: int, dynamic: bool,
                 sizes: tuple[str, ...]) -> tuple[KernelArg, ...]:
    """Tensor maps: 3-D views [batch, sequence, columns] of the 4-D arrays, so that TMA zero-fills a ragged last
    block on load and clips it on store at each sequence's end (bshd: [B, S, H*D]; bhsd: [B*H, S, D]); the
    log-sum-exp pointer; the dynamic grid's tile counter; each dynamic size (`int sz_<name>`, spec order), from
    which the kernel counts its tiles and blocks at entry."""
    def tmap(i: int, shape, rows: int) -> KernelArg:
        return seq_tmap(layout, dims.dtype, i, shape, rows)

    shapes = dims.shapes
    args = [tmap(0, shapes[names.q], WGMMA_M), tmap(1, shapes[names.k], block_kv),
            tmap(2, shapes[names.v], block_kv), tmap(3, shapes[names.o], WGMMA_M)]
    if names.lse:
        args.append(KernelArg("ptr", 4))
    if dynamic:
        args.append(KernelArg("counter", -1))   # 2 u32: the next tile to claim, CTAs done (zero between launches)
    args += [KernelArg("i32", -1, value=X.size(n)) for n in sizes]
    return tuple(args)


PALLAS_OWN_SMEM = 2048   # what Mosaic GPU (jax 0.11.2) adds to the attention kernel's own buffers and barriers


def _pallas_limits(sch, names: Names, blocks: Blocks, regs: Regs, smem: Smem, hw: Hardware,
                   problems: Problems) -> None:
    """What the Pallas (Mosaic GPU) rendering of this family (templates/attention/pallas.py.j2)
    cannot express; each message names the way out."""
    hint = "; or set schedule.backends: [cuda]"
    nc, block_kv, stages, q_bytes, kv_bytes = blocks.nc, blocks.block_kv, smem.stages, smem.q_bytes, smem.kv_bytes
    if nc > 2:
        problems.add(("schedule", "pipeline", "num_compute_wgs"),
                     f"the Pallas attention has 1 or 2 consumer warpgroups (its schedule barrier alternates two), got "
                     f"{nc}" + hint)
    # jax.experimental.mosaic.gpu.wgmma issues K in groups of one swizzle width: with the 128-byte swizzle of the
    # K / V tiles that is 64 elements, and block_kv is the K of O += P V (the planner reports other illegal values)
    if block_kv % 64 and block_kv % 16 == 0 and 16 <= block_kv <= 256:
        problems.add(("schedule", "in_specs", names.k, "block_shape", 0),
                     f"the Pallas attention needs block_kv a multiple of 64 (64, 128, 192 or 256): Mosaic GPU's wgmma "
                     f"takes the K of O += P V (= block_kv) in 64-element groups of the 128-byte swizzle; got "
                     f"{block_kv}" + hint)
    # plgpu.set_max_registers is setmaxnreg
    for field, n in (("memory_registers", regs.preg), ("compute_registers", regs.creg)):
        if (message := setmaxnreg_problem(n, suggest=True, instruction="plgpu.set_max_registers")) is not None:
            problems.add(("schedule", "pipeline", field), message + hint)
    # Pallas SMEM (only what the planner's own SMEM check, smem_bytes, did not already report): the Q/O tile, the K
    # and V rings, the barriers (q, 4 rings, schedule), the log-sum-exp rows (two buffers, whole KiB) and Mosaic GPU's
    # own 2 KiB. Fitted to what jax 0.11.2's lowering counts (D 64 / 128 / 256, 1-3 stages, with and without the
    # log-sum-exp: exact; 2026-12-06), after a 3-stage GQA spec planned at 231032 B lowered at 232568 B, over
    # the 232448 B an H200 block has
    with_lse = names.lse is not None
    lse_bytes = -(-2 * nc * 64 * 4 // 1024) * 1024 if with_lse else 0
    need = q_bytes + 2 * stages * kv_bytes + lse_bytes + 8 * (nc + 4 * stages + 1) + PALLAS_OWN_SMEM
    if smem.bytes <= hw.smem_per_block < need:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"the Pallas kernel needs {need} B of SMEM (Q {q_bytes} B + 2 x {stages} x {kv_bytes} B of K/V"
                     f"{' + the log-sum-exp rows' if with_lse else ''}), over {hw.smem_per_block} B; use fewer stages "
                     f"or a smaller block_kv" + hint)
    _pallas_compiler_params(sch.compiler_params, hint, problems)
    for n in names.inputs:
        if n == "interpret":
            problems.add(("op", "inputs", n), "'interpret' is the generated Pallas function's own keyword argument; "
                                              "choose another name" + hint)


def _pallas_compiler_params(cp, hint: str, problems: Problems) -> None:
    if "lowering_semantics" in cp.model_fields_set and cp.lowering_semantics != "lane":
        problems.add(("schedule", "compiler_params", "lowering_semantics"),
                     "the Pallas attention is written for Lane semantics (explicit WGMMA register layouts, as jax's "
                     "attention_mgpu); remove lowering_semantics or set it to lane" + hint)
    if cp.unsafe_no_auto_barriers:
        problems.add(("schedule", "compiler_params", "unsafe_no_auto_barriers"),
                     "the Pallas attention stages O through the Q tile that its wgmmas read and relies on Mosaic GPU's "
                     "automatic barriers there; remove unsafe_no_auto_barriers" + hint)
    for name in ("profile_space", "profile_dir"):
        if getattr(cp, name):
            problems.add(("schedule", "compiler_params", name),
                         f"the Pallas attention takes no profiler buffer (its SMEM holds Q, the K/V stages and O's "
                         f"staging); remove {name}" + hint)
