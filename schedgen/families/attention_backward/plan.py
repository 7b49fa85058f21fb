"""Planner of the `attention_backward` family: the gradients of flash attention (FlashAttention-2's backward).

Two kernels and a preprocessing step (the Pallas rendering): delta = rowsum(dO * O) in f32; the dK/dV kernel, one
block per (64 keys, kv head, batch), keeps its K and V rows in SMEM and streams every q head of the group's Q, dO,
lse and delta blocks (block_q queries each) through an SMEM ring, recomputing S^T = K Q^T and P^T, accumulating
dV += P^T dO and dK += dS^T Q in registers; the dQ kernel, one block per (64 queries, q head, batch), streams K and V
blocks (block_kv keys each) and accumulates dQ += dS K (a separate dQ pass, as JAX's attention_mgpu: no atomics).
Causal: blocks wholly past the mask are skipped, the ones crossing it masked. Every rule is checked here.
`pipeline.kind: warp_specialized` renders the Pallas backward as ONE kernel instead (FlashAttention-3's form; its
rules in fused.py); the two-kernel form's register and SMEM rules then do not apply.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...frontend.model import ITEMSIZE
from ...plan import dims as X
from ...plan.common import CTYPE, KernelArg, Problems, dynamic_ranges, resolve_shape, size_values
from ...plan.hardware import Hardware
from ...plan.launch import KernelLaunch
from ...plan.legality import check_no_cluster, check_reserved_names, check_sizes_int32, check_unique_names
from ..attention.plan import check_dynamic_extents
from ..attention.records import AttnOperand, causal_alignment, causal_offset_of
from .records import (
    BLOCKS,
    CUDA_REG_OVERHEAD,
    CUDA_THREADS,
    DTYPES,
    MODULE_NAMES,
    REG_LIMIT,
    REG_OVERHEAD,
    ROWS,
    AttentionBackwardPlan,
    CudaBackward,
    backward_flops,
)
from .fused import PRODUCER_REGS, Fused, fused_chosen, plan_fused
from .unread import check_unread
from .wgmma import _strides, plan_wgmma, wants_wgmma, with_wgmma

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

ROLES_IN = ("q", "k", "v", "o", "do", "lse")
ROLES_OUT = ("dq", "dk", "dv")
HINT_TOP_LEFT = "causal: top_left (query i sees keys j <= i) takes any Sq"


def plan_attention_backward(spec: SpecFile, hw: Hardware) -> tuple[AttentionBackwardPlan | None, Problems]:
    """Phases: names, shapes and dims, dtypes, blocks, registers and SMEM, the backends, fields no kernel reads."""
    problems = Problems()
    op, sch = spec.op, spec.schedule
    names = _check_names(spec, problems)
    before = len(problems)
    sizes, ranges = size_values(op.sizes), dynamic_ranges(op.sizes)   # a dynamic size is the extent size(name)
    shapes = {n: resolve_shape(o.shape, sizes, ("op", "inputs", n, "shape"), problems) for n, o in op.inputs.items()}
    shapes.update({n: resolve_shape(o.shape, sizes, ("op", "outputs", n, "shape"), problems)
                   for n, o in op.outputs.items()})
    if len(problems) != before:
        return None, problems
    dims = _check_problem(op, names, shapes, ranges, problems)
    if dims is None:
        return None, problems
    check_sizes_int32({n: v if isinstance(v, int) else ranges[n].max for n, v in op.sizes.items()}, problems)
    block_q, block_kv = _blocks(sch, op, names, dims, ranges, problems)
    # pipeline.kind warp_specialized: each backend's warp-specialized form (Pallas: the one-kernel backward of
    # fused.py; CUDA: the wgmma kernel of wgmma.py); emit_pipeline: the two-kernel Pallas form, the mma.sync CUDA one
    fused = plan_fused(sch, dims, block_q, block_kv, names, ranges, hw, problems) \
        if fused_chosen(sch) and "pallas" in sch.backends else None
    two_kernels = Problems() if fused_chosen(sch) else problems   # the two-kernel form's rules hold for it only
    regs = _registers(names, dims, block_q, block_kv, two_kernels)
    smem = _smem(sch, dims, block_q, block_kv, hw, two_kernels)
    _backends(sch, problems)
    cuda = wg = None
    if wants_wgmma(sch) and "cuda" in sch.backends:     # the wgmma kernel instead of the mma.sync one
        wg = plan_wgmma(op, sch, names, dims, (block_q, block_kv), smem[0], ranges, hw, problems)
    elif "cuda" in sch.backends:
        cuda = _cuda(op, names, dims, block_q, block_kv, smem[0], hw, problems)
    check_no_cluster(sch.cluster, "attention_backward blocks share no operand", problems)
    for bname in sch.barriers:
        problems.add(("schedule", "barriers", bname), "the attention backward names no barrier: its TMA rings' "
                                                      "barriers are the planner's; remove it")
    check_unread(sch, names[:6], problems)
    if problems:
        return None, problems
    plan = _assemble(spec, names, dims, ranges, block_q, block_kv, regs, smem, cuda, fused)
    return (plan if wg is None else with_wgmma(plan, wg)), problems


def _check_names(spec, problems: Problems) -> tuple[str, ...]:
    op = spec.op
    check_unique_names((("sizes", op.sizes), ("inputs", op.inputs), ("outputs", op.outputs)), problems)
    for group, ns in (("sizes", op.sizes), ("inputs", op.inputs), ("outputs", op.outputs)):
        for n in ns:
            if n in MODULE_NAMES or n == "interpret":
                problems.add(("op", group, n), f"'{n}' is reserved by the generated module; choose another name")
    check_reserved_names(spec, problems)
    return (*op.inputs, *op.outputs)


def _shown(shape) -> str:
    return "[" + ", ".join(str(x) for x in shape) + "]"


def _check_problem(op, names, shapes: dict, ranges: dict, problems: Problems):
    """q, o, do, dq share [B, Sq, Hq, D]; k, v, dk, dv [B, Skv, Hkv, D]; lse [B, Hq, Sq] f32; GQA; the mask; with
    dynamic sizes, over the whole range of each (_check_dynamic)."""
    qn, kn, vn, on, don, lsen, dqn, dkn, dvn = names
    layout = "[B, S, H, D]" if op.layout == "bshd" else "[B, H, S, D]"
    bad = False
    for n in (qn, kn, vn, on, don, dqn, dkn, dvn):
        if len(shapes[n]) != 4:
            group = "inputs" if n in op.inputs else "outputs"
            problems.add(("op", group, n, "shape"), f"q, k, v, o, do and the gradients are 4-D ({layout}); got "
                                                    f"{len(shapes[n])} dimensions")
            bad = True
    if bad:
        return None

    def bshd(s):
        return s if op.layout == "bshd" else (s[0], s[2], s[1], s[3])

    b, sq, hq, d = bshd(shapes[qn])
    bk, skv, hkv, dk = bshd(shapes[kn])
    if (bk, dk) != (b, d):
        problems.add(("op", "inputs", kn, "shape"), f"k {layout} must share B = {b} and D = {d} with q")
    for n, like, group in ((vn, kn, "inputs"), (on, qn, "inputs"), (don, qn, "inputs"), (dqn, qn, "outputs"),
                           (dkn, kn, "outputs"), (dvn, kn, "outputs")):
        if shapes[n] != shapes[like]:
            problems.add(("op", group, n, "shape"), f"{n} has {like}'s shape {_shown(shapes[like])}, got "
                                                    f"{_shown(shapes[n])}")
    if shapes[lsen] != (b, hq, sq) or op.inputs[lsen].dtype != "f32":
        problems.add(("op", "inputs", lsen), f"the log-sum-exp input is f32 [B, Hq, Sq] = {_shown((b, hq, sq))} "
                                             f"(the attention forward's second output)")
    if ranges:
        if not _check_dynamic(op, names, (sq, hq, d, skv, hkv), ranges, problems):
            return None
    else:
        if hkv and hq % hkv:
            problems.add(("op", "inputs", kn, "shape"),
                         f"q heads ({hq}) must be a multiple of kv heads ({hkv}) (grouped-query attention)")
        if causal_alignment(op.causal) == "bottom_right" and sq > skv:
            problems.add(("op", "causal"), f"causal: bottom_right (what true means) needs Sq <= Skv (query i sees "
                                           f"keys j <= i + Skv - Sq), got Sq = {sq}, Skv = {skv}; {HINT_TOP_LEFT}")
    if d not in (64, 128, 256):
        problems.add(("op", "inputs", qn, "shape", 3), f"head_dim {d} is not supported; legal: 64, 128, 256")
    if op.scale is not None and op.scale <= 0:
        problems.add(("op", "scale"), f"the softmax scale must be positive (the forward's), got {op.scale}")
    dtype = op.inputs[qn].dtype
    _check_dtypes(op, names, dtype, problems)
    return b, sq, hq, skv, hkv, d, dtype


def _check_dynamic(op, names, extents: tuple, ranges: dict, problems: Problems) -> bool:
    """Dynamic sizes as the forward takes them (check_dynamic_extents: bound to inputs, head_dim fixed, dynamic heads
    one size for q and kv); a bottom-right mask with dynamic sequence lengths takes one size for both (its offset
    Skv - Sq is then 0). False when planning cannot go on (a dynamic head_dim)."""
    sq, hq, d, skv, hkv = extents
    if not check_dynamic_extents(op, names[:6], names[1], extents, ranges, problems):
        return False
    if causal_alignment(op.causal) == "bottom_right" and sq != skv:
        problems.add(("op", "causal"), f"causal: bottom_right (what true means) with dynamic sequence lengths takes "
                                       f"one size for Sq and Skv (the mask's offset Skv - Sq is built into the "
                                       f"kernels); got Sq = {sq}, Skv = {skv}; {HINT_TOP_LEFT}")
    return True


def _check_dtypes(op, names, dtype: str, problems: Problems) -> None:
    qn, kn, vn, on, don, lsen, dqn, dkn, dvn = names
    for n in (qn, kn, vn, on, don):
        if op.inputs[n].dtype not in DTYPES:
            problems.add(("op", "inputs", n, "dtype"), f"attention_backward takes bf16 or f16, got "
                                                       f"{op.inputs[n].dtype}")
        elif op.inputs[n].dtype != dtype:
            problems.add(("op", "inputs", n, "dtype"), f"q, k, v, o and do share one dtype; q is {dtype}")
    for n in (dqn, dkn, dvn):
        if op.outputs[n].dtype != dtype:
            problems.add(("op", "outputs", n, "dtype"), f"the gradients have the inputs' dtype ({dtype})")


def _blocks(sch, op, names, dims, ranges: dict, problems: Problems) -> tuple[int, int]:
    """block_q (q's in_spec rows: the queries of a dK/dV step) and block_kv (k's: the keys of a dQ step); the
    sequences must be multiples of them and of the 64 rows a warpgroup owns."""
    qn, kn = names[0], names[1]
    b, sq, hq, skv, hkv, d, _ = dims
    blocks = []
    for n, default in ((qn, 64), (kn, 64)):
        bs = sch.in_specs.get(n)
        block = bs.block_shape[0] if bs is not None else default
        path = ("schedule", "in_specs", n, "block_shape")
        if bs is not None:
            if len(bs.block_shape) != 2 or bs.block_shape[1] != d:
                problems.add(path, f"a block is [rows, head_dim] = [..., {d}]")
            if bs.index_map is not None:
                problems.add(("schedule", "in_specs", n, "index_map"),
                             "the attention backward derives its index maps; remove index_map")
        if block not in BLOCKS:
            problems.add((*path, 0), f"{'block_q' if n == qn else 'block_kv'} is the N of the recomputed scores' "
                                     f"wgmma and the K of the next one, taken by Mosaic GPU in 64-element groups "
                                     f"of the 128-byte swizzle: legal 64, 128, 192, 256; got {block}")
        blocks.append(block)
    for n in sch.in_specs:
        if n not in (qn, kn):
            problems.add(("schedule", "in_specs", n),
                         f"the attention backward takes blocks for {qn} (block_q) and {kn} (block_kv) only: the "
                         f"other operands follow them; remove this entry")
    block_q, block_kv = blocks
    for n, seq, what in ((qn, sq, "Sq"), (kn, skv, "Skv")):
        unit = math.lcm(ROWS, block_q if n == qn else block_kv)
        if (block_q if n == qn else block_kv) not in BLOCKS or X.divisible(seq, unit, ranges):
            continue
        block = "block_q" if n == qn else "block_kv"
        if X.is_static(seq):
            problems.add(("op", "inputs", n, "shape", 1 if op.layout == "bshd" else 2),
                         f"{what} = {seq} must be a multiple of {unit} (the 64 rows of a warpgroup and the {block} "
                         f"of a step): the backward takes no ragged blocks yet")
        else:
            problems.add(("op", "sizes", seq.args[0]),
                         f"{what} ({seq.args[0]}, {ranges[seq.args[0]].describe()}) must be a multiple of {unit} at "
                         f"every call (the 64 rows of a warpgroup and the {block} of a step): give it multiple_of: "
                         f"{unit} (or a multiple of it); the backward takes no ragged blocks yet")
    return block_q, block_kv


def _registers(names, dims, block_q: int, block_kv: int, problems: Problems) -> tuple[int, int, int]:
    """f32 accumulators a thread of a warpgroup holds: dK/dV kernel dK and dV (64 x D / d_split each) and S^T, dP^T
    (64 x block_q each); dQ kernel dQ (64 x D), S and dP (64 x block_kv each); plus about REG_OVERHEAD. d_split: the
    fewest column parts of head_dim (1 or 2) whose dK, dV fit (head_dim 256: 2, each block recomputing S^T and dP^T
    over the whole head_dim for its half of the columns)."""
    d = dims[5]
    dq = ROWS * d // 128 + 2 * (ROWS * block_kv // 128) + REG_OVERHEAD

    def dkv_regs(split: int) -> int:
        return 2 * (ROWS * d // split // 128) + 2 * (ROWS * block_q // 128) + REG_OVERHEAD

    d_split = 1 if dkv_regs(1) <= REG_LIMIT or d < 256 else 2
    dkv = dkv_regs(d_split)
    if dkv > REG_LIMIT:
        problems.add(("schedule", "in_specs", names[0], "block_shape", 0),
                     f"the dK/dV kernel's thread holds dK, dV ({ROWS * d // d_split // 64}"
                     f"{f', {d // d_split} of the {d} columns' if d_split > 1 else ''}) and S^T, dP^T "
                     f"({ROWS * block_q // 64}) f32 plus about {REG_OVERHEAD}: {dkv} registers, over {REG_LIMIT}; "
                     f"use a smaller block_q")
    if dq > REG_LIMIT:
        problems.add(("schedule", "in_specs", names[1], "block_shape", 0),
                     f"the dQ kernel's thread holds dQ ({ROWS * d // 128}) and S, dP ({ROWS * block_kv // 64}) f32 "
                     f"plus about {REG_OVERHEAD}: {dq} registers, over {REG_LIMIT}; use a smaller block_kv")
    return dkv, dq, d_split


def _smem(sch, dims, block_q: int, block_kv: int, hw: Hardware, problems: Problems) -> tuple[int, int, int]:
    """dK/dV kernel: K, V (64 rows) + stages x (Q, dO: block_q rows; lse, delta: block_q f32) + P^T / dS^T staging
    (64 x block_q); dQ kernel: Q, dO (64 rows) + stages x (K, V: block_kv rows) + dS staging (64 x block_kv); the
    barriers and 1 KiB of alignment slack."""
    stages = sch.pipeline.max_concurrent_steps
    d, isz = dims[5], ITEMSIZE[dims[6]]
    dkv = 2 * ROWS * d * isz + stages * (2 * block_q * d * isz + 2 * block_q * 4) + ROWS * block_q * isz \
        + 8 * (4 * stages + 2) + 1024
    dq = 2 * ROWS * d * isz + 2 * ROWS * 4 + stages * 2 * block_kv * d * isz + ROWS * block_kv * isz \
        + 8 * (2 * stages + 4) + 1024
    for what, need, block in (("dK/dV", dkv, "block_q"), ("dQ", dq, "block_kv")):
        if need > hw.smem_per_block:
            problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                         f"the {what} kernel needs {need} B of SMEM with {stages} stages, over the "
                         f"{hw.smem_per_block} B a block may have; use fewer stages or a smaller {block}")
    return stages, dkv, dq


def _backends(sch, problems: Problems) -> None:
    cp = sch.compiler_params
    if "lowering_semantics" in cp.model_fields_set and cp.lowering_semantics != "lane":
        problems.add(("schedule", "compiler_params", "lowering_semantics"),
                     "the Pallas attention backward is written for Lane semantics (explicit WGMMA register layouts); "
                     "remove lowering_semantics or set it to lane")
    if cp.unsafe_no_auto_barriers:
        problems.add(("schedule", "compiler_params", "unsafe_no_auto_barriers"),
                     "the Pallas attention backward stages P^T and dS^T through SMEM that its wgmmas read and relies "
                     "on Mosaic GPU's automatic barriers there; remove unsafe_no_auto_barriers")
    for name in ("profile_space", "profile_dir"):
        if getattr(cp, name):
            problems.add(("schedule", "compiler_params", name),
                         f"the Pallas attention backward takes no profiler buffer; remove {name}")


def _cuda(op, names, dims, block_q: int, block_kv: int, stages: int, hw: Hardware,
          problems: Problems) -> CudaBackward | None:
    """The CUDA kernel (backends: cuda): one launch of 128-thread blocks, dK/dV blocks (64 keys of one kv head,
    streaming the group's Q, dO, O and lse in block_q rows through a cp.async ring of `stages`) then dQ blocks (64
    queries, streaming K and V in block_kv rows); each warp owns 16 rows and accumulates in mma.sync fragments."""
    b, sq, hq, skv, hkv, d, dtype = dims
    isz = ITEMSIZE[dtype]
    if d not in (64, 128):
        problems.add(("op", "inputs", names[0], "shape", 3),
                     f"the CUDA attention backward takes head_dim 64 or 128 (a warp's dK and dV fragments of "
                     f"16 x {d} f32 do not fit its registers); got {d}; use backends: [pallas] or a smaller head_dim")
        return None
    dkv_regs = d + block_q + CUDA_REG_OVERHEAD     # dK, dV (16 x D f32 a warp: D / 2 each) + S^T, dP^T (block_q / 2)
    dq_regs = d + block_kv + CUDA_REG_OVERHEAD      # dQ (D / 2) + S, dP (block_kv / 2) + the K fragments (measured)
    bad = False
    for n, need, what, block in ((names[0], dkv_regs, "dK/dV", "block_q"), (names[1], dq_regs, "dQ", "block_kv")):
        if need > REG_LIMIT:
            problems.add(("schedule", "in_specs", n, "block_shape", 0),
                         f"the CUDA kernel's {what} thread holds about {need} registers with {block} = "
                         f"{block_q if block == 'block_q' else block_kv} at head_dim {d}, over {REG_LIMIT}; legal "
                         f"here: {block} <= {(REG_LIMIT - CUDA_REG_OVERHEAD - d) // 64 * 64}"
                         f" (or backends: [pallas])")
            bad = True
    tile, qstep, kvstep = ROWS * d * isz, block_q * d * isz, block_kv * d * isz
    dkv_stage = 3 * qstep + block_q * 4
    dq_stage = 2 * kvstep
    dkv_ring, dq_ring = 2 * tile, 3 * tile
    dkv_delta, dq_delta = dkv_ring + stages * dkv_stage, dq_ring + stages * dq_stage
    smem = max(dkv_delta + block_q * 4, dq_delta + ROWS * 4) + 1024
    if smem > hw.smem_per_block:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"the CUDA kernel needs {smem} B of SMEM with {stages} stages, over the {hw.smem_per_block} B "
                     f"a block may have; use fewer stages or smaller blocks")
        bad = True
    if bad:
        return None
    return CudaBackward(
        dkv_blocks=(skv // ROWS) * hkv * b, dq_blocks=(sq // ROWS) * hq * b,
        q_strides=_strides(op.layout, sq, hq, d), kv_strides=_strides(op.layout, skv, hkv, d), tile_bytes=tile,
        q_step_bytes=qstep, kv_step_bytes=kvstep, dkv_stage_bytes=dkv_stage, dq_stage_bytes=dq_stage,
        dkv_ring=dkv_ring, dkv_delta=dkv_delta, dq_ring=dq_ring, dq_delta=dq_delta, dkv_regs=dkv_regs,
        dq_regs=dq_regs, smem_bytes=smem)


def _assemble(spec, names, dims, ranges: dict, block_q: int, block_kv: int, regs, smem,
              cuda, fused: Fused | None) -> AttentionBackwardPlan:
    """The plan; with dynamic sizes its extents are Dims (plan/dims.py) the kernels compute from the call's sizes,
    its FLOP and byte counts at the largest sizes."""
    op, sch = spec.op, spec.schedule
    b, sq, hq, skv, hkv, d, dtype = dims
    isz = ITEMSIZE[dtype]
    sizes = size_values(op.sizes)
    shapes = {n: tuple(resolve_shape(o.shape, sizes, (), Problems())) for n, o in {**op.inputs, **op.outputs}.items()}
    inputs = tuple(AttnOperand(n, f"in_{n}", r, op.inputs[n].dtype, CTYPE[op.inputs[n].dtype],
                               ITEMSIZE[op.inputs[n].dtype], shapes[n]) for n, r in zip(names[:6], ROLES_IN))
    outputs = tuple(AttnOperand(n, f"out_{n}", r, dtype, CTYPE[dtype], isz, shapes[n])
                    for n, r in zip(names[6:], ROLES_OUT))
    scale = op.scale if op.scale is not None else 1.0 / math.sqrt(d)
    alignment = causal_alignment(op.causal)
    # dynamic sequence lengths take top-left or one size for both (_check_dynamic): the offset is 0 then
    offset = causal_offset_of(alignment, sq, skv) if X.is_static(sq) and X.is_static(skv) or alignment is None else 0
    top = {n: X.upper(v, ranges) for n, v in (("b", b), ("hq", hq), ("sq", sq), ("skv", skv))}
    stages, dkv_smem, dq_smem = smem
    kname = "attn_bwd_{}_{}_d{}_q{}_kv{}_s{}{}".format(spec.name, dtype, d, block_q, block_kv, stages,
                                                       "_fa3" if fused else "")
    pallas_blocks = (skv // (ROWS * fused.consumers) if fused else (skv // ROWS) * regs[2]) * hkv * b
    return AttentionBackwardPlan(
        launch=KernelLaunch(
            name=spec.name, family="attention_backward", kernel_name=kname, backends=tuple(sch.backends),
            threads=CUDA_THREADS, smem_bytes=cuda.smem_bytes if cuda else fused.smem_bytes if fused else max(dkv_smem, dq_smem),
            kernel_args=tuple(KernelArg("ptr", i) for i in range(9)) + tuple(KernelArg("i32", -1, value=X.size(n))
                                                                              for n in ranges) if cuda else (),
            num_blocks=cuda.dkv_blocks + cuda.dq_blocks if cuda else pallas_blocks, blocks_per_sm=1,
            dynamic_sizes=tuple(ranges.values())),
        sizes=dict(op.sizes), constants={},
        batch=b, heads_q=hq, heads_kv=hkv, seq_q=sq, seq_kv=skv, head_dim=d,
        layout=op.layout, causal=alignment is not None, causal_alignment=alignment,
        causal_offset=offset if offset is not None else 0, scale=scale, scale_log2=scale * math.log2(math.e),
        dtype=dtype, inputs=inputs, outputs=outputs, block_q=block_q, block_kv=block_kv, stages=stages,
        q_blocks=sq // block_q, kv_blocks=skv // block_kv, q_rows_blocks=sq // ROWS, kv_rows_blocks=skv // ROWS,
        d_split=regs[2], dkv_regs=regs[0], dq_regs=regs[1], dkv_smem_bytes=dkv_smem, dq_smem_bytes=dq_smem,
        approx_math=sch.compiler_params.approx_math,
        flops=backward_flops(top["b"], top["hq"], top["sq"], top["skv"], d, alignment), cuda=cuda,
        bytes_moved=sum(math.prod(X.upper(x, ranges) for x in o.shape) * o.itemsize for o in inputs + outputs),
        fused=fused is not None,
        consumers=fused.consumers if fused else 1, consumer_regs=fused.budget if fused else 0,
        producer_regs=PRODUCER_REGS if fused else 0, fused_regs=fused.regs if fused else 0,
        fused_smem_bytes=fused.smem_bytes if fused else 0)
