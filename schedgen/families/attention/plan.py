"""Planner of the `attention` family: flash-attention forward on Hopper tensor cores.

One CTA computes `block_q` query rows of one (batch, head): a TMA producer warpgroup loads the Q tile once and
streams K and V blocks (`block_kv` keys each) through `max_concurrent_steps` stages on separate full/empty
mbarrier rings; each of the 1-3 consumer warpgroups owns 64 query rows, computes S = Q K^T with wgmma from
SMEM, runs the online softmax in registers (exp2, row max/sum across the quad), and feeds P from registers as
the A operand of O += P V. With `barriers.schedule` (2 arrivals) the two consumers take turns issuing their
MMAs, so one's softmax overlaps the other's tensor-core work (ping-pong). Every rule is checked here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import reserved
from ...frontend.model import ITEMSIZE
from ...plan.common import (
    CTYPE,
    KernelArg,
    Problems,
    SmemBuffer,
    SmemMap,
    resolve_shape,
)
from ...plan.hardware import Hardware

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

WGMMA_M = 64
DTYPES = ("bf16", "f16")
HEAD_DIMS = (64, 128, 256)
# registers a consumer thread needs beside S, O and P (addresses, row max / sum, loop state): ptxas fits
# block_kv 192 at head_dim 128 (96 + 64 + 48 + 32 = 240 of 240) and 3 consumers at head_dim 64 (64 + 32 + 32 + 32
# = 160 of 160) without spills; it serializes wgmma at block_kv 256 with head_dim 64 (128 + 32 + 64 = 224 of 240)
# and at block_kv 96, head_dim 128 on 160 registers (48 + 64 + 24 = 136). Low budgets can still spill: the build
# reports ptxas' verdict (build.compiler_verdicts)
REG_OVERHEAD = 32
# softmax code-shape choices, from A/B runs on the H200 (bench/attn_gpu.py --ab, 2026-12-02): the row max / sum in
# one accumulator chain each (4 chains measured 0-2% slower at every head_dim), and warps whose rows kept their
# running max skip the O rescale from head_dim 256 (a vote and a branch against D/2 multiplies a thread: +3% at
# D = 256 with 64-key blocks, -1 to -3% at D = 64 and 128)
ROW_CHAINS = 1
SKIP_RESCALE_MIN_D = 256
# lpt tile order: the share of the L2 that one section's K and V may fill (FlashAttention-3 takes 32 of the H100's
# 50 MB); Q, O and the other sections' tails pass through the rest
L2_SECTION = 0.625
# producer registers when it claims tiles dynamically: with 24 ptxas spills three values (H200 build, 2026-12-03)
DYNAMIC_PRODUCER_REGS = 32
MODULE_NAMES = frozenset({"make", "run_into"})


@dataclass(frozen=True)
class AttnOperand:
    name: str
    cname: str
    role: str            # "q" | "k" | "v" | "o" | "lse"
    dtype: str
    ctype: str
    itemsize: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class AttentionPlan:
    family: str
    name: str
    kernel_name: str
    sizes: dict
    constants: dict
    backends: tuple[str, ...]
    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_kv: int
    head_dim: int
    layout: str
    causal: bool
    scale: float
    scale_log2: float          # scale * log2(e): the softmax runs in base 2
    dtype: str
    with_lse: bool
    inputs: tuple[AttnOperand, ...]
    outputs: tuple[AttnOperand, ...]
    block_q: int               # query rows per CTA (64 per consumer warpgroup)
    block_kv: int
    stages: int
    num_consumers: int
    pingpong: bool
    q_blocks: int
    kv_blocks: int
    num_tiles: int             # q blocks x heads x batch
    persistent: bool           # a grid of one CTA per SM walking the tiles (else one CTA a tile)
    dynamic: bool              # persistent, each CTA claiming its next tile from a GMEM counter (else t += grid)
    row_chains: int            # independent accumulator chains of the softmax's row max and row sum
    skip_rescale: bool         # warps whose rows kept their running max skip the O rescale
    o_staging: bool            # O staged in its own SMEM buffer (persistent, where it fits), else in the Q tile
    tile_order: str            # "row_major": q blocks fastest, then heads, then batch (causal: q blocks reversed);
                               # "lpt": longest tiles first, (batch, head) fastest within sections (see tile_of)
    section_heads: int         # lpt: (batch, q head) pairs per section, whose K/V fit in the L2 together
    slabs: int                 # head_dim / 64: TMA boxes (128 B swizzled) per row block
    q_bytes: int
    kv_stage_bytes: int
    s_regs: int
    o_regs: int
    producer_regs: int
    consumer_regs: int
    threads: int
    smem_buffers: tuple[SmemBuffer, ...]
    smem_bytes: int
    kernel_args: tuple[KernelArg, ...]
    num_blocks: int
    auto_blocks: bool
    blocks_per_sm: int
    cluster_dims: tuple[int, int, int]
    approx_math: bool
    flops: int
    bytes_moved: int

    @property
    def operands(self) -> tuple[AttnOperand, ...]:
        return self.inputs + self.outputs

    @property
    def tma_ranks(self) -> list[int]:
        return sorted({len(a.shape) for a in self.kernel_args if a.kind == "tmap"})

    @property
    def sections(self) -> int:
        """lpt: sections of (batch, q head) pairs; the last one may hold fewer (last_section_heads)."""
        return -(-(self.batch * self.heads_q) // self.section_heads)

    @property
    def last_section_heads(self) -> int:
        return self.batch * self.heads_q - (self.sections - 1) * self.section_heads

    def kv_end(self, qb: int) -> int:
        """Key blocks that query block qb reads (causal: up to the diagonal of its last row)."""
        if not self.causal:
            return self.kv_blocks
        return min(self.kv_blocks, ((qb + 1) * self.block_q + self.seq_kv - self.seq_q + self.block_kv - 1)
                   // self.block_kv)


def tile_of(p: AttentionPlan, t: int) -> tuple[int, int, int]:
    """(batch, q head, q block) of tile t: the reference for sg_tile / _tile in the templates.

    row_major: q blocks fastest (reversed when causal: the longest rows of a head first), then heads, then batch,
    so consecutive CTAs share one head's K/V in L2. lpt: the (batch, q head) pairs are cut into sections of
    `section_heads` whose K/V fit in the L2 together; within a section tiles go q block slowest, from the last (the
    most keys when causal) down, (batch, head) fastest, so every section starts its longest tiles first and the
    hardware's in-order block dispatch packs the short ones into the tail (longest-processing-time-first)."""
    qbs = p.q_blocks
    if p.tile_order == "lpt":
        sec, r = divmod(t, p.section_heads * qbs)
        here = p.last_section_heads if sec == p.sections - 1 else p.section_heads
        qb = qbs - 1 - r // here
        u = sec * p.section_heads + r % here
        return u // p.heads_q, u % p.heads_q, qb
    qb = t % qbs
    u = t // qbs
    if p.causal:
        qb = qbs - 1 - qb
    return u // p.heads_q, u % p.heads_q, qb


def plan_attention(spec: SpecFile, hw: Hardware) -> tuple[AttentionPlan | None, Problems]:
    op, sch = spec.op, spec.schedule
    problems = Problems()
    sizes = dict(op.sizes)
    pipe = sch.pipeline

    names = list(op.inputs)
    outs = list(op.outputs)
    seen: dict[str, str] = {}
    for group, ns in (("sizes", op.sizes), ("inputs", op.inputs), ("outputs", op.outputs)):
        for n in ns:
            if n in seen:
                problems.add(("op", group, n), f"name '{n}' is already used in op.{seen[n]}")
            seen[n] = group
            if n in MODULE_NAMES and group != "inputs":   # (input names: schedgen.reserved, below)
                problems.add(("op", group, n), f"'{n}' is reserved by the generated module; choose another name")
    for path, message in reserved.reserved_problems(spec):
        problems.add(path, message)
    q_name, k_name, v_name = names
    o_name = outs[0]
    lse_name = outs[1] if len(outs) > 1 else None

    before = len(problems)
    shapes = {n: resolve_shape(o.shape, sizes, ("op", "inputs", n, "shape"), problems) for n, o in op.inputs.items()}
    shapes.update({n: resolve_shape(o.shape, sizes, ("op", "outputs", n, "shape"), problems) for n, o in op.outputs.items()})
    if len(problems) != before:
        return None, problems
    for n in names + [o_name]:
        if len(shapes[n]) != 4:
            problems.add(("op", "inputs" if n in op.inputs else "outputs", n, "shape"),
                         f"attention operands are 4-D ({'[B, S, H, D]' if op.layout == 'bshd' else '[B, H, S, D]'}); "
                         f"got {len(shapes[n])} dimensions")
    if len(problems) != before:
        return None, problems

    def bshd(shape):
        return shape if op.layout == "bshd" else (shape[0], shape[2], shape[1], shape[3])

    b, sq, hq, d = bshd(shapes[q_name])
    bk, skv, hkv, dk = bshd(shapes[k_name])
    bv, sv, hv, dv = bshd(shapes[v_name])
    lay = "[B, S, H, D]" if op.layout == "bshd" else "[B, H, S, D]"
    if (bk, dk) != (b, d):
        problems.add(("op", "inputs", k_name, "shape"), f"k {lay} must share B = {b} and D = {d} with q")
    if (bv, sv, hv, dv) != (bk, skv, hkv, dk):
        problems.add(("op", "inputs", v_name, "shape"), f"v must have k's shape {list(shapes[k_name])}, got {list(shapes[v_name])}")
    if shapes[o_name] != shapes[q_name]:
        problems.add(("op", "outputs", o_name, "shape"), f"the output has q's shape {list(shapes[q_name])}")
    if hkv and hq % hkv:
        problems.add(("op", "inputs", k_name, "shape"), f"q heads ({hq}) must be a multiple of kv heads ({hkv}) "
                                                        f"(grouped-query attention)")
    if d not in HEAD_DIMS:
        problems.add(("op", "inputs", q_name, "shape", 3), f"head_dim {d} is not supported; legal: 64, 128, 256")
    if op.scale is not None and op.scale <= 0:
        problems.add(("op", "scale"), f"the softmax scale must be positive (the running max is taken on scaled "
                                      f"scores), got {op.scale}")
    if op.causal and sq > skv:
        problems.add(("op", "causal"), f"causal attention aligns the last query with the last key; it needs "
                                       f"Sq <= Skv, got Sq = {sq}, Skv = {skv}")
    dtype = op.inputs[q_name].dtype
    for n in names:
        if op.inputs[n].dtype not in DTYPES:
            problems.add(("op", "inputs", n, "dtype"), f"attention takes bf16 or f16, got {op.inputs[n].dtype}")
        elif op.inputs[n].dtype != dtype:
            problems.add(("op", "inputs", n, "dtype"), f"q, k and v share one dtype; q is {dtype}")
    if op.outputs[o_name].dtype != dtype:
        problems.add(("op", "outputs", o_name, "dtype"), f"the output has the inputs' dtype ({dtype})")
    if lse_name is not None:
        want = (b, hq, sq)
        if shapes[lse_name] != want or op.outputs[lse_name].dtype != "f32":
            problems.add(("op", "outputs", lse_name), f"the log-sum-exp output is f32 [B, Hq, Sq] = {list(want)}")
    if len(problems) != before:
        return None, problems

    # --- blocks
    nc = pipe.num_compute_wgs
    if pipe.kind != "warp_specialized":
        problems.add(("schedule", "pipeline", "kind"), "attention is warp-specialized (a TMA producer and 1-3 "
                                                       "consumer warpgroups): set pipeline.kind: warp_specialized")
    if nc > 3:
        problems.add(("schedule", "pipeline", "num_compute_wgs"), f"1 to 3 consumer warpgroups, got {nc}")
        nc = 3
    qs, ks, vs = (sch.in_specs.get(n) for n in names)
    block_q = qs.block_shape[0] if qs is not None else WGMMA_M * nc
    block_kv = ks.block_shape[0] if ks is not None else (128 if d <= 128 else 64)
    for n, bs, want in ((q_name, qs, None), (k_name, ks, None), (v_name, vs, block_kv)):
        if bs is None:
            continue
        path = ("schedule", "in_specs", n, "block_shape")
        if len(bs.block_shape) != 2 or bs.block_shape[1] != d:
            problems.add(path, f"a block is [rows, head_dim] = [..., {d}]")
        if want is not None and bs.block_shape[0] != want:
            problems.add((*path, 0), f"v's block has k's {want} rows")
        if bs.index_map is not None:
            problems.add(("schedule", "in_specs", n, "index_map"), "attention derives its index maps from the tile "
                                                                   "order; remove index_map")
    for n in sch.in_specs:
        if n not in names:
            problems.add(("schedule", "in_specs", n), f"no input named '{n}'; inputs are {', '.join(names)}")
    if block_q != WGMMA_M * nc:
        problems.add(("schedule", "in_specs", q_name, "block_shape", 0),
                     f"each consumer warpgroup owns {WGMMA_M} query rows (one wgmma M block): block_q is "
                     f"{WGMMA_M * nc} with {nc} consumer(s), got {block_q}")
    if block_kv % 16 or not 16 <= block_kv <= 256:
        problems.add(("schedule", "in_specs", k_name, "block_shape", 0),
                     f"block_kv is the N of S = Q K^T's wgmma and the K of O += P V's: a multiple of 16 in [16, 256], "
                     f"got {block_kv}")
    if sq % block_q and "pallas" in sch.backends:
        problems.add(("op", "inputs", q_name, "shape"), f"Sq = {sq} is not a multiple of block_q = {block_q}: the "
                                                        f"CUDA kernel clips a ragged last query block, the Pallas one "
                                                        f"does not yet; pad the sequence, pick a block_q that divides "
                                                        f"{sq}, or set schedule.backends: [cuda]")
    if skv % block_kv and "pallas" in sch.backends:
        problems.add(("op", "inputs", k_name, "shape"), f"Skv = {skv} is not a multiple of block_kv = {block_kv}: the "
                                                        f"CUDA kernel masks a ragged last key block, the Pallas one "
                                                        f"does not yet; pad the keys, pick a block_kv that divides "
                                                        f"{skv}, or set schedule.backends: [cuda]")

    # a persistent grid: nd_loop strides over the tiles (CTA i takes i, i + grid, ...); dynamic claims each next tile
    # from an atomic counter in GMEM (the CUDA kernel's rendering of dynamic_scheduling_loop on Hopper, which has
    # no cluster launch control), so CTAs that drew short causal tiles take more of them
    persistent = sch.persistent.loop in ("nd_loop", "dynamic") and "loop" in sch.persistent.model_fields_set
    dynamic = persistent and sch.persistent.loop == "dynamic"

    # --- registers and SMEM
    s_regs, o_regs = block_kv // 2, d // 2
    budget = hw.regs_per_block(128 * (1 + nc))
    # the producer that claims tiles keeps the counter's address and the claimed index beside the loads' coordinates
    min_preg = DYNAMIC_PRODUCER_REGS if dynamic else 24
    preg = pipe.memory_registers or min_preg
    creg = pipe.compute_registers or min(256, (budget // 128 - preg) // nc // 8 * 8)
    for fld, v in (("memory_registers", preg), ("compute_registers", creg)):
        if v % 8:
            problems.add(("schedule", "pipeline", fld), f"setmaxnreg takes a multiple of 8 registers, got {v}; use "
                                                        f"{v // 8 * 8} or {v // 8 * 8 + 8}")
    if preg < min_preg:
        problems.add(("schedule", "pipeline", "memory_registers"),
                     f"the producer of a dynamic persistent grid claims its tiles from a counter and needs "
                     f"{min_preg} registers (24 spill); give memory_registers: {min_preg} and at most "
                     f"{(budget // 128 - min_preg) // nc // 8 * 8} compute_registers")
    if 128 * (preg + nc * creg) > budget:
        problems.add(("schedule", "pipeline", "compute_registers"),
                     f"register budgets {preg} + {nc} x {creg} need {128 * (preg + nc * creg)} registers; a block "
                     f"of {128 * (1 + nc)} threads holds {budget} (at most {(budget // 128 - preg) // nc // 8 * 8} "
                     f"per consumer with {preg} for the producer)")
    need = s_regs + o_regs + block_kv // 4 + REG_OVERHEAD
    if need > min(creg, 255):
        problems.add(("schedule", "in_specs", k_name, "block_shape", 0),
                     f"a consumer thread holds S ({s_regs}), O ({o_regs}) and P ({block_kv // 4}) registers plus about "
                     f"{REG_OVERHEAD}: {need}, over its budget of {min(creg, 255)}; use a smaller block_kv")
    stages = pipe.max_concurrent_steps
    if stages < 1:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"), "at least one K/V stage")
    isz = ITEMSIZE[dtype]
    slabs = d // 64
    q_bytes = block_q * d * isz
    kv_bytes = block_kv * d * isz

    def smem_map(o_staging: bool) -> SmemMap:
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
    # a persistent CTA stages O in its own buffer where SMEM allows, so the next tile's Q loads under the epilogue
    o_staging = persistent and smem_map(True).top + 1024 <= hw.smem_per_block
    smem = smem_map(o_staging)
    smem_bytes = smem.top + 1024
    if smem_bytes > hw.smem_per_block:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"SMEM needed is {smem_bytes} B (Q {q_bytes} B + 2 x {stages} x {kv_bytes} B of K/V), over "
                     f"{hw.smem_per_block} B; use fewer stages or a smaller block_kv")
    pingpong = "schedule" in sch.barriers
    for bname, bar in sch.barriers.items():
        if bname != "schedule":
            problems.add(("schedule", "barriers", bname), "attention names one barrier, 'schedule' (the consumers' "
                                                          "ping-pong); the K/V rings are the planner's")
        elif nc < 2 or bar.num_arrivals != nc:
            problems.add(("schedule", "barriers", "schedule", "num_arrivals"),
                         f"the ping-pong schedule barrier hands the tensor cores round robin among the consumer "
                         f"warpgroups: num_arrivals = num_compute_wgs (2 or 3), got num_arrivals "
                         f"{bar.num_arrivals} with {nc} consumer warpgroup(s)")
    if any(c != 1 for c in sch.cluster):
        problems.add(("schedule", "cluster"), "attention CTAs share no operand here; use cluster: [1]")
    order = sch.persistent.tile_order if "tile_order" in sch.persistent.model_fields_set else \
        ("lpt" if op.causal else "row_major")
    if order == "planar_snake":
        problems.add(("schedule", "persistent", "tile_order"), "attention tiles go row_major (query blocks fastest) or "
                                                               "lpt (longest first, heads fastest in L2-sized sections); "
                                                               "planar_snake orders a 2-D grid of like tiles")
    # lpt sections: whole kv-head groups (the q heads that read one K/V) whose K and V fit in L2_SECTION of the L2,
    # as few sections as that allows, of equal size (a short last section would start its long tiles late)
    groups = b * hkv
    fit = max(1, int(hw.l2_bytes * L2_SECTION) // (2 * skv * d * ITEMSIZE[dtype]))
    sections = -(-groups // fit)
    section_heads = -(-groups // sections) * (hq // hkv)
    if persistent and "pallas" in sch.backends:
        problems.add(("schedule", "persistent", "loop"), f"the Pallas attention launches a block a tile; the "
                                                         f"persistent grid ({sch.persistent.loop}) is the CUDA "
                                                         f"kernel's (Mosaic GPU's dynamic_scheduling_loop needs "
                                                         f"Blackwell's cluster launch control): remove persistent.loop "
                                                         f"or set schedule.backends: [cuda]")
    if "pallas" in sch.backends:
        _pallas_limits(sch, names, block_kv, preg, creg, stages, nc, q_bytes, kv_bytes, smem_bytes,
                       lse_name is not None, hw, problems)
    if problems:
        return None, problems

    # --- tensor maps: 3-D views [batch, sequence, columns] of the 4-D arrays, so that TMA zero-fills a ragged last
    # block on load and clips it on store at each sequence's end (bshd: [B, S, H*D]; bhsd: [B*H, S, D])
    def view(shape, heads):
        bb, s_or_h, h_or_s, dd = shape
        return (bb * s_or_h, h_or_s, dd) if op.layout == "bhsd" else (bb, s_or_h, h_or_s * dd)

    inputs = tuple(AttnOperand(n, f"in_{n}", r, op.inputs[n].dtype, CTYPE[op.inputs[n].dtype], isz, shapes[n])
                   for n, r in zip(names, ("q", "k", "v")))
    outputs = [AttnOperand(o_name, f"out_{o_name}", "o", dtype, CTYPE[dtype], isz, shapes[o_name])]
    if lse_name:
        outputs.append(AttnOperand(lse_name, f"out_{lse_name}", "lse", "f32", "float", 4, shapes[lse_name]))
    outputs = tuple(outputs)

    def tmap(i: int, shape, heads: int, rows: int) -> KernelArg:
        v3 = view(shape, heads)
        return KernelArg("tmap", i, dtype, v3, (v3[1] * v3[2] * isz, v3[2] * isz, isz), (1, rows, 64), 128)

    args = [tmap(0, shapes[q_name], hq, WGMMA_M), tmap(1, shapes[k_name], hkv, block_kv),
            tmap(2, shapes[v_name], hkv, block_kv), tmap(3, shapes[o_name], hq, WGMMA_M)]
    if lse_name:
        args.append(KernelArg("ptr", 4))
    if dynamic:
        args.append(KernelArg("counter", -1))   # 2 u32: the next tile to claim, CTAs done (zero between launches)
    scale = op.scale if op.scale is not None else 1.0 / math.sqrt(d)
    q_blocks, kv_blocks = -(-sq // block_q), -(-skv // block_kv)   # ragged last blocks: clipped / masked
    flops = 4 * b * hq * sq * skv * d // (2 if op.causal else 1)
    bytes_moved = sum(math.prod(o.shape) * o.itemsize for o in inputs + outputs)
    kname = "attn_{}_{}_d{}_q{}_kv{}_s{}_wg{}{}{}".format(spec.name, dtype, d, block_q, block_kv, stages, nc,
                                                         "_pp" if pingpong else "", ("_dyn" if dynamic else "_persist") if persistent else "")
    plan = AttentionPlan(
        family="attention", name=spec.name, kernel_name=kname, sizes=sizes, constants={},
        backends=tuple(sch.backends), batch=b, heads_q=hq, heads_kv=hkv, seq_q=sq, seq_kv=skv, head_dim=d,
        layout=op.layout, causal=op.causal, scale=scale, scale_log2=scale * math.log2(math.e), dtype=dtype,
        with_lse=lse_name is not None, inputs=inputs, outputs=outputs, block_q=block_q, block_kv=block_kv,
        stages=stages, num_consumers=nc, pingpong=pingpong, q_blocks=q_blocks, kv_blocks=kv_blocks,
        num_tiles=q_blocks * hq * b, tile_order=order, section_heads=section_heads, slabs=slabs, q_bytes=q_bytes,
        kv_stage_bytes=kv_bytes, s_regs=s_regs, o_regs=o_regs, producer_regs=preg, consumer_regs=creg,
        threads=128 * (1 + nc), smem_buffers=tuple(smem.buffers), smem_bytes=smem_bytes, kernel_args=tuple(args),
        num_blocks=q_blocks * hq * b, auto_blocks=persistent, persistent=persistent, dynamic=dynamic, o_staging=o_staging,
        row_chains=max(1, min(ROW_CHAINS, block_kv // 8)), skip_rescale=d >= SKIP_RESCALE_MIN_D, blocks_per_sm=1, cluster_dims=(1, 1, 1),
        approx_math=sch.compiler_params.approx_math, flops=flops, bytes_moved=bytes_moved,
    )
    return plan, problems


def _pallas_limits(sch, names, block_kv: int, preg: int, creg: int, stages: int, nc: int, q_bytes: int,
                   kv_bytes: int, smem_bytes: int, with_lse: bool, hw: Hardware, problems: Problems) -> None:
    """What the Pallas (Mosaic GPU) rendering of this family (schedgen/families/attention/templates/pallas.py.j2) cannot express;
    each message names the way out."""
    hint = "; or set schedule.backends: [cuda]"
    k_name = names[1]
    if nc > 2:
        problems.add(("schedule", "pipeline", "num_compute_wgs"),
                     f"the Pallas attention has 1 or 2 consumer warpgroups (its schedule barrier alternates two), got "
                     f"{nc}" + hint)
    # jax.experimental.mosaic.gpu.wgmma issues K in groups of one swizzle width: with the 128-byte swizzle of the
    # K / V tiles that is 64 elements, and block_kv is the K of O += P V (the planner reports other illegal values)
    if block_kv % 64 and block_kv % 16 == 0 and 16 <= block_kv <= 256:
        problems.add(("schedule", "in_specs", k_name, "block_shape", 0),
                     f"the Pallas attention needs block_kv a multiple of 64 (64, 128, 192 or 256): Mosaic GPU's wgmma "
                     f"takes the K of O += P V (= block_kv) in 64-element groups of the 128-byte swizzle; got "
                     f"{block_kv}" + hint)
    # plgpu.set_max_registers (setmaxnreg) takes multiples of 8
    for field, regs in (("memory_registers", preg), ("compute_registers", creg)):
        if regs % 8:
            problems.add(("schedule", "pipeline", field),
                         f"plgpu.set_max_registers takes a multiple of 8 registers, got {regs}; use "
                         f"{regs // 8 * 8} or {regs // 8 * 8 + 8}" + hint)
    # Pallas SMEM: Q/O tile, K and V rings, the log-sum-exp rows, the barriers (q, 4 rings, schedule), 1 KiB slack
    # (only what the planner's own SMEM check, smem_bytes, did not already report)
    smem = q_bytes + 2 * stages * kv_bytes + (nc * 64 * 4 if with_lse else 0) + 8 * (nc + 4 * stages + 1) + 1024
    if smem_bytes <= hw.smem_per_block < smem:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"the Pallas kernel needs {smem} B of SMEM (Q {q_bytes} B + 2 x {stages} x {kv_bytes} B of K/V"
                     f"{' + the log-sum-exp rows' if with_lse else ''}), over {hw.smem_per_block} B; use fewer stages "
                     f"or a smaller block_kv" + hint)
    cp = sch.compiler_params
    if "lowering_semantics" in cp.model_fields_set and cp.lowering_semantics != "lane":
        problems.add(("schedule", "compiler_params", "lowering_semantics"),
                     "the Pallas attention is written for Lane semantics (explicit WGMMA register layouts, as jax's "
                     "attention_mgpu); remove lowering_semantics or set it to lane" + hint)
    if cp.unsafe_no_auto_barriers:
        problems.add(("schedule", "compiler_params", "unsafe_no_auto_barriers"),
                     "the Pallas attention stages O through the Q tile that its wgmmas read and relies on Mosaic GPU's "
                     "automatic barriers there; remove unsafe_no_auto_barriers" + hint)
    if cp.profile_space:
        problems.add(("schedule", "compiler_params", "profile_space"),
                     "the Pallas attention takes no profiler buffer; remove profile_space" + hint)
    for n in names:
        if n == "interpret":
            problems.add(("op", "inputs", n), "'interpret' is the generated Pallas function's own keyword argument; "
                                              "choose another name" + hint)
