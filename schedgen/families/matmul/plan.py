"""Planner of the `matmul` family: `out = epilogue(lhs @ rhs)` on Hopper tensor cores.

The kernel is persistent and warp-specialized. One producer warpgroup (one elected thread) streams
(tile_m x tile_k) blocks of lhs and (tile_k x tile_n) blocks of rhs through a `max_concurrent_steps`-deep
ring of SMEM stages by TMA, on `full` / `empty` mbarrier rings; with a 2-CTA cluster the operand both
CTAs share is split between them and multicast. 1-2 consumer warpgroups split the (tile_m x tile_n)
output tile along M or N (`pipeline.wg_axis`), issue `wgmma` from SMEM descriptors with f32 accumulators
in registers, apply the epilogue, and store the tile in `epilogue.tile` chunks staged through
`epilogue.buffers` SMEM buffers by TMA. Tiles are visited by an nd_loop in row-major or planar-snake
order. Every hardware rule is checked here, located at the field that decides it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import reserved
from ...frontend import expr as ex
from ...frontend.model import ITEMSIZE
from ...plan.common import (
    CTYPE,
    KernelArg,
    Problems,
    SmemBuffer,
    SmemMap,
    cdiv,
    cxx_float,
    resolve_shape,
)
from ...plan.hardware import Hardware

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

WGMMA_M = 64
WGMMA_K_BYTES = 32            # one wgmma consumes 32 B of K (k16 for 16-bit inputs)
MMA_DTYPES = ("bf16", "f16")
OUT_DTYPES = ("bf16", "f16", "f32")
REG_OVERHEAD = 40             # registers a consumer thread needs beside its accumulators (addresses, epilogue)
DEFAULT_TILE = (128, 256, 64)


@dataclass(frozen=True)
class MatOperand:
    name: str
    cname: str
    role: str                 # "lhs" | "rhs" | "extra" | "out"
    dtype: str
    ctype: str
    itemsize: int
    shape: tuple[int, ...]
    bcast: str = ""           # extra operands: "row" ([N]), "col" ([M, 1]), "full" ([M, N]), "batch" ([B, M, N])


@dataclass(frozen=True)
class MatmulPlan:
    family: str
    name: str
    kernel_name: str
    sizes: dict
    constants: dict
    backends: tuple[str, ...]
    # the problem
    batch: int
    m: int
    n: int
    k: int
    lhs_batched: bool
    rhs_batched: bool
    in_dtype: str
    out_dtype: str
    transpose_lhs: bool        # lhs stored [K, M]: M-major for wgmma
    transpose_rhs: bool        # rhs stored [N, K]: K-major for wgmma (the default [K, N] is N-major)
    inputs: tuple[MatOperand, ...]
    outputs: tuple[MatOperand, ...]
    extras: tuple[MatOperand, ...]
    # the tiling
    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    delay_release: int         # wgmma groups kept in flight before a stage is released (0 or 1)
    num_consumers: int
    wg_axis: str               # "m" | "n": how the consumers split the tile
    wg_tile_m: int
    wg_tile_n: int
    m_blocks: int              # wgmma M blocks (64 rows) per consumer
    acc_regs: int              # f32 accumulators per consumer thread
    swizzle_a: int
    swizzle_b: int
    atom_a: int                # elements per swizzle row of lhs / rhs (swizzle bytes / itemsize)
    atom_b: int
    k_major_a: bool
    k_major_b: bool
    a_stage_bytes: int
    b_stage_bytes: int
    a_sub_bytes: int           # bytes of one TMA box of lhs / rhs inside a stage
    b_sub_bytes: int
    a_lbo: int
    a_sbo: int
    b_lbo: int
    b_sbo: int
    # cluster
    cluster_m: int
    cluster_n: int
    cluster_size: int
    cluster_dims: tuple[int, int, int]   # the launch's cluster shape: CTAs of a cluster are consecutive in x
    multicast: str             # "" | "lhs" | "rhs": the operand shared by the cluster, split and multicast
    # epilogue
    epi_rows: int
    epi_cols: int
    epi_buffers: int
    epi_swizzle: int
    epi_bytes: int
    epi_store: str             # "tma" | "direct"
    epilogue_cxx: tuple[tuple[str, str], ...]   # (target, C++ expression) over v_acc, v_<extra>, c_<const>
    epilogue_jnp: tuple[tuple[str, str], ...]
    temporaries: tuple[str, ...]
    constants_cxx: tuple[tuple[str, str], ...]
    identity_epilogue: bool
    ragged: bool               # M, N or K not a multiple of the tile (TMA zero-fills loads, clips stores)
    # the loop over tiles
    tiles_m: int
    tiles_n: int
    num_tiles: int             # in cluster units (each cluster computes cluster_m x cluster_n tiles at once)
    k_iters: int
    tile_order: str
    minor_dim: int
    tile_width: int
    num_blocks: int
    auto_blocks: bool          # the runtime lowers num_blocks to the clusters the GPU can hold at once
    blocks_per_sm: int
    # warp specialization
    threads: int
    producer_regs: int
    consumer_regs: int
    # SMEM
    smem_buffers: tuple[SmemBuffer, ...]
    smem_bytes: int
    full_arrivals: int
    empty_arrivals: int
    stage_tx_bytes: int
    kernel_args: tuple[KernelArg, ...]
    approx_math: bool
    lowering_semantics: str
    profile_space: int
    flops: int
    bytes_moved: int

    @property
    def operands(self) -> tuple[MatOperand, ...]:
        return self.inputs + self.outputs

    @property
    def tma_ranks(self) -> list[int]:
        return sorted({len(a.shape) for a in self.kernel_args if a.kind == "tmap"})


def _broadcast_kind(shape: tuple[int, ...], batch: int, m: int, n: int) -> str | None:
    if shape in ((n,), (1, n)):
        return "row"
    if shape == (m, 1):
        return "col"
    if shape == (m, n):
        return "full"
    if batch > 1 and shape == (batch, m, n):
        return "batch"
    return None


def check_operand_roles(op, problems: Problems) -> None:
    """op.lhs and op.rhs name two different inputs (the matmul and collective_matmul families)."""
    for role in ("lhs", "rhs"):
        nm = getattr(op, role)
        if nm not in op.inputs:
            problems.add(("op", role), f"op.{role} names input '{nm}', which is not among the inputs "
                                       f"({', '.join(op.inputs)}); set op.{role} to one of them")
    if op.lhs == op.rhs:
        problems.add(("op", "rhs"), f"lhs and rhs are both '{op.lhs}'; A @ A^T style products need two inputs here")


def plan_matmul(spec: SpecFile, hw: Hardware) -> tuple[MatmulPlan | None, Problems]:
    op, sch = spec.op, spec.schedule
    problems = Problems()
    sizes = dict(op.sizes)
    pipe, pers, epi = sch.pipeline, sch.persistent, sch.epilogue

    # --- names
    seen: dict[str, str] = {}
    for group, names in (("sizes", op.sizes), ("constants", op.constants), ("inputs", op.inputs), ("outputs", op.outputs)):
        for nm in names:
            if nm in seen:
                problems.add(("op", group, nm), f"name '{nm}' is already used in op.{seen[nm]}")
            seen[nm] = group
    for nm in list(op.outputs) + list(op.constants):
        if nm == "acc":   # the epilogue reads the accumulator as `acc`
            problems.add(("op", "outputs" if nm in op.outputs else "constants", nm),
                         f"'{nm}' is reserved (the accumulator); choose another name")
    for path, message in reserved.reserved_problems(spec):
        problems.add(path, message)
    check_operand_roles(op, problems)
    out_name = next(iter(op.outputs))
    extras = [nm for nm in op.inputs if nm not in (op.lhs, op.rhs)]

    # --- the epilogue body
    body = None
    text = op.epilogue or f"{out_name} = acc"
    try:
        body = ex.parse_body(text, inputs=["acc", *extras], outputs=[out_name], constants=list(op.constants))
    except ex.ExprError as err:
        problems.add(("op", "epilogue"), err.message, (err.line, err.col))
    for nm in extras:
        if body is not None and not any(nm in _names(v) for _, v in body.statements):
            problems.add(("op", "inputs", nm), f"input '{nm}' is neither lhs, rhs nor read by op.epilogue; "
                                               f"use it in the epilogue or remove it")
    if problems.__len__() and (op.lhs not in op.inputs or op.rhs not in op.inputs):
        return None, problems

    # --- shapes and dtypes
    before = len(problems)
    shapes = {nm: resolve_shape(o.shape, sizes, ("op", "inputs", nm, "shape"), problems) for nm, o in op.inputs.items()}
    shapes[out_name] = resolve_shape(op.outputs[out_name].shape, sizes, ("op", "outputs", out_name, "shape"), problems)
    if len(problems) != before:
        return None, problems
    a_shape, b_shape, o_shape = shapes[op.lhs], shapes[op.rhs], shapes[out_name]
    in_dtype = op.inputs[op.lhs].dtype
    for role, nm in (("lhs", op.lhs), ("rhs", op.rhs)):
        dt = op.inputs[nm].dtype
        if dt not in MMA_DTYPES:
            problems.add(("op", "inputs", nm, "dtype"),
                         f"{role} dtype {dt} is not supported by this family yet; legal: {', '.join(MMA_DTYPES)} "
                         f"(f32 accumulation)")
    if op.inputs[op.rhs].dtype != in_dtype:
        problems.add(("op", "inputs", op.rhs, "dtype"), f"lhs is {in_dtype} but rhs is {op.inputs[op.rhs].dtype}; "
                                                       f"wgmma takes one input type: make them equal")
    out_dtype = op.outputs[out_name].dtype
    if out_dtype not in OUT_DTYPES:
        problems.add(("op", "outputs", out_name, "dtype"), f"output dtype {out_dtype} is not supported; legal: "
                                                            f"{', '.join(OUT_DTYPES)}")
    for role, nm, shp in (("lhs", op.lhs, a_shape), ("rhs", op.rhs, b_shape)):
        if len(shp) not in (2, 3):
            problems.add(("op", "inputs", nm, "shape"), f"{role} must be 2-D, or 3-D with a leading batch dimension; "
                                                       f"got {len(shp)} dimensions")
    if len(o_shape) not in (2, 3):
        problems.add(("op", "outputs", out_name, "shape"), "the output must be [M, N] or [B, M, N]")
    if len(problems) != before:
        return None, problems
    m, ka = (a_shape[-1], a_shape[-2]) if op.transpose_lhs else (a_shape[-2], a_shape[-1])
    kb, n = (b_shape[-1], b_shape[-2]) if op.transpose_rhs else (b_shape[-2], b_shape[-1])
    k = ka
    a_lay = "[K, M]" if op.transpose_lhs else "[M, K]"
    b_lay = "[N, K]" if op.transpose_rhs else "[K, N]"
    if ka != kb:
        problems.add(("op", "inputs", op.rhs, "shape"),
                     f"contraction sizes differ: lhs {a_lay} = {list(a_shape[-2:])} has K = {ka}, rhs {b_lay} = "
                     f"{list(b_shape[-2:])} has K = {kb}" + ("" if op.transpose_rhs else
                                                           " (set op.transpose_rhs: true if rhs is stored [N, K])"))
    batch = o_shape[0] if len(o_shape) == 3 else 1
    lhs_batched, rhs_batched = len(a_shape) == 3, len(b_shape) == 3
    if tuple(o_shape[-2:]) != (m, n):
        problems.add(("op", "outputs", out_name, "shape"), f"the output must be [M, N] = [{m}, {n}], got {list(o_shape)}")
    if len(o_shape) == 2 and (lhs_batched or rhs_batched):
        problems.add(("op", "outputs", out_name, "shape"), "a batched lhs or rhs needs a batched output [B, M, N]")
    for role, nm, shp in (("lhs", op.lhs, a_shape), ("rhs", op.rhs, b_shape)):
        if len(shp) == 3 and shp[0] != batch:
            problems.add(("op", "inputs", nm, "shape", 0), f"{role} batch is {shp[0]} but the output's is {batch}")
    if len(o_shape) == 3 and not lhs_batched:
        problems.add(("op", "inputs", op.lhs, "shape"), "a batched output needs a batched lhs [B, M, K]")
    extra_ops = []
    for nm in extras:
        kind = _broadcast_kind(shapes[nm], batch, m, n)
        if kind is None:
            problems.add(("op", "inputs", nm, "shape"),
                         f"epilogue operand shape {list(shapes[nm])} is not one the epilogue reads: a row [N] = [{n}], "
                         f"a column [M, 1] = [{m}, 1], or a full [M, N] = [{m}, {n}]" + (f" or [B, M, N]" if batch > 1 else ""))
            kind = "row"
        dt = op.inputs[nm].dtype
        if dt not in ("bf16", "f16", "f32"):
            problems.add(("op", "inputs", nm, "dtype"), f"epilogue operands are bf16, f16 or f32, got {dt}")
        extra_ops.append(MatOperand(nm, f"in_{nm}", "extra", dt, CTYPE[dt], ITEMSIZE[dt], shapes[nm], kind))
    if len(problems) != before:
        return None, problems
    isz = ITEMSIZE[in_dtype]
    osz = ITEMSIZE[out_dtype]

    # --- the block tile: from the BlockSpecs (each as stored), defaults where absent
    tm, tn, tk = tile_from_block_specs(op, sch, out_name, problems)
    for nm in sch.in_specs:
        if nm not in (op.lhs, op.rhs):
            problems.add(("schedule", "in_specs", nm), f"only lhs '{op.lhs}' and rhs '{op.rhs}' are tiled by BlockSpecs; "
                                                      f"epilogue operands follow the output tile")
    for nm in sch.out_specs:
        if nm != out_name:
            problems.add(("schedule", "out_specs", nm), f"no output named '{nm}'; the output is '{out_name}'")
    for nm, bs in list(sch.in_specs.items()) + list(sch.out_specs.items()):
        if bs.memory_space != "smem":
            problems.add(("schedule", "in_specs" if nm in op.inputs else "out_specs", nm, "memory_space"),
                         f"matmul operands are staged in smem (wgmma reads SMEM descriptors); tmem is Blackwell-only")
        if bs.index_map is not None:
            problems.add(("schedule", "in_specs" if nm in op.inputs else "out_specs", nm, "index_map"),
                         "the matmul family derives its index maps from the tile order (persistent.tile_order); "
                         "remove index_map")
    a_spec, b_spec = sch.in_specs.get(op.lhs), sch.in_specs.get(op.rhs)
    oob = {bs.out_of_bounds for bs in (a_spec, b_spec) if bs is not None}
    ragged = m % tm != 0 or n % tn != 0 or k % tk != 0
    if "nan" in oob:
        problems.add(("schedule", "in_specs", op.lhs if a_spec and a_spec.out_of_bounds == "nan" else op.rhs,
                      "out_of_bounds"), "NaN padding would poison whole output rows; use zero (K padding must add 0)")
    if ragged and "zero" not in oob:
        problems.add(("schedule", "in_specs", op.lhs, "out_of_bounds"),
                     f"M, N, K = {m}, {n}, {k} are not all multiples of the tile {tm} x {tn} x {tk}; set "
                     f"out_of_bounds: zero on the lhs/rhs BlockSpecs (TMA zero-fills the edge) or use sizes that divide")

    # --- warpgroups and wgmma shapes
    nc = pipe.num_compute_wgs
    if pipe.kind != "warp_specialized":
        problems.add(("schedule", "pipeline", "kind"),
                     "the matmul family is warp-specialized (a TMA producer warpgroup and 1-2 wgmma consumers); set "
                     "pipeline.kind: warp_specialized")
    if nc > 2:
        problems.add(("schedule", "pipeline", "num_compute_wgs"), f"1 or 2 consumer warpgroups, got {nc}")
        nc = 2
    axis = (pipe.wg_axis or ("m" if tm // nc >= WGMMA_M and tm % (nc * WGMMA_M) == 0 else "n")).lower()
    if axis not in ("m", "n"):
        problems.add(("schedule", "pipeline", "wg_axis"), f"consumers split the tile along m or n, got '{pipe.wg_axis}'")
        axis = "m"
    wtm, wtn = (tm // nc, tn) if axis == "m" else (tm, tn // nc)
    if (tm if axis == "n" else tm) % (nc if axis == "m" else 1) or wtm % WGMMA_M:
        problems.add(("schedule", "in_specs", op.lhs, "block_shape"),
                     f"each consumer warpgroup takes {wtm} rows of the {tm}-row tile; wgmma needs a multiple of {WGMMA_M} "
                     f"(tile_m a multiple of {WGMMA_M * (nc if axis == 'm' else 1)})")
    if axis == "n" and tn % nc:
        problems.add(("schedule", "in_specs", op.rhs, "block_shape"), f"tile_n {tn} does not split over {nc} consumers")
    if wtn % 8 or wtn > 256 or wtn < 8:
        problems.add(("schedule", "in_specs", op.rhs, "block_shape"),
                     f"each consumer's wgmma N is {wtn}; it must be a multiple of 8 between 8 and 256 "
                     f"(tile_n {tn}{' split over ' + str(nc) + ' consumers' if axis == 'n' else ''})")
    if tk % (WGMMA_K_BYTES // isz):
        problems.add(("schedule", "in_specs", op.lhs, "block_shape"),
                     f"tile_k {tk} must be a multiple of wgmma's K ({WGMMA_K_BYTES // isz} for {in_dtype})")

    # --- SMEM layouts: K-major operands are cut into swizzle-wide K slabs, MN-major ones into swizzle-wide MN slabs
    k_major_a, k_major_b = not op.transpose_lhs, op.transpose_rhs
    swz_a = _swizzle(a_spec, tk if k_major_a else WGMMA_M, isz, ("schedule", "in_specs", op.lhs), problems, hw)
    swz_b = _swizzle(b_spec, tk if k_major_b else min(wtn, 64), isz, ("schedule", "in_specs", op.rhs), problems, hw)
    for bs, nm in ((a_spec, op.lhs), (b_spec, op.rhs)):
        if bs is not None and bs.transforms.transpose is not None:
            problems.add(("schedule", "in_specs", nm, "transforms", "transpose"),
                         f"say the stored layout with op.transpose_lhs / op.transpose_rhs; wgmma reads either major "
                         f"order from SMEM, so no SMEM transpose is needed")
        if bs is not None and bs.transforms.tiling is not None:
            sw = swz_a if nm == op.lhs else swz_b
            want = [8, sw // isz] if sw else None
            if list(bs.transforms.tiling) != want:
                problems.add(("schedule", "in_specs", nm, "transforms", "tiling"),
                             f"with swizzle {sw} the tiling is {want} (8 rows of swizzle/itemsize elements); omit it "
                             f"or write {want}")
    atom_a, atom_b = max(swz_a // isz, 1), max(swz_b // isz, 1)
    if k_major_a and tk % atom_a:
        problems.add(("schedule", "in_specs", op.lhs, "transforms", "swizzle"),
                     f"tile_k {tk} must be a multiple of the swizzle width ({swz_a} B = {atom_a} elements)")
    if k_major_b and tk % atom_b:
        problems.add(("schedule", "in_specs", op.rhs, "transforms", "swizzle"),
                     f"tile_k {tk} must be a multiple of the swizzle width ({swz_b} B = {atom_b} elements)")
    if not k_major_a and wtm % atom_a:
        problems.add(("schedule", "in_specs", op.lhs, "transforms", "swizzle"),
                     f"M-major lhs: each consumer's {wtm} rows must be a multiple of the swizzle width ({atom_a} elements)")
    if not k_major_b and (wtn % atom_b or tn % atom_b):
        problems.add(("schedule", "in_specs", op.rhs, "transforms", "swizzle"),
                     f"N-major rhs: each consumer's {wtn} columns must be a multiple of the swizzle width "
                     f"({swz_b} B = {atom_b} elements); use a smaller swizzle or a wider tile_n")
    if swz_a == 0 or swz_b == 0:
        problems.add(("schedule", "in_specs", op.lhs if swz_a == 0 else op.rhs, "transforms", "swizzle"),
                     "this family's SMEM descriptors use a swizzled layout; choose 32, 64 or 128 (or auto)")

    # --- cluster and multicast
    cl = list(sch.cluster) + [1] * (2 - len(sch.cluster))
    cm, cn = cl[0], cl[1]
    csize = cm * cn
    if len(sch.cluster) > 2 or csize > 2:
        problems.add(("schedule", "cluster"), f"clusters of 1x1, 2x1 or 1x2 CTAs are supported, got {list(sch.cluster)}")
        cm, cn, csize = 1, 1, 1
    multicast = "rhs" if cm == 2 else "lhs" if cn == 2 else ""
    tiles_m, tiles_n = cdiv(m, tm), cdiv(n, tn)
    if tiles_m % cm or tiles_n % cn:
        problems.add(("schedule", "cluster"), f"a {cm}x{cn} cluster needs the tile grid ({tiles_m} x {tiles_n}) divisible by it")
    shared_spec = b_spec if multicast == "rhs" else a_spec if multicast == "lhs" else None
    for nm, bs in ((op.lhs, a_spec), (op.rhs, b_spec)):
        if bs is not None and bs.collective_axes and (csize == 1 or bs is not shared_spec):
            problems.add(("schedule", "in_specs", nm, "collective_axes"),
                         "only the operand the cluster's CTAs share is multicast: rhs with cluster [2, 1], lhs with "
                         "[1, 2]" + ("; this launch has no cluster" if csize == 1 else ""))
    if multicast == "rhs" and (tn // 2) % (1 if k_major_b else atom_b):
        problems.add(("schedule", "cluster"), f"each CTA loads half of the rhs tile ({tn // 2} columns); it must be a "
                                              f"multiple of the swizzle width {atom_b}")
    if multicast == "lhs" and (tm // 2) % (8 if k_major_a else atom_a):
        problems.add(("schedule", "cluster"), f"each CTA loads half of the lhs tile ({tm // 2} rows); it must be a "
                                              f"multiple of {8 if k_major_a else atom_a}")

    # --- epilogue chunks
    if epi.tile is not None:
        er, ec = epi.tile
    else:
        er, ec = WGMMA_M, min(wtn, 128 // osz)
    direct = epi.store == "direct"
    epi_swz = 0
    if not direct:
        if er != WGMMA_M:
            problems.add(("schedule", "epilogue", "tile", 0), f"epilogue chunks are one wgmma M block tall: {WGMMA_M} rows, got {er}")
        if ec <= 0 or ec % 16 or wtn <= 0 or wtn % ec:
            problems.add(("schedule", "epilogue", "tile", 1),
                         f"epilogue chunk width {ec} must be a multiple of 16 dividing each consumer's {wtn} columns")
        epi_swz = ec * osz if ec * osz in hw.swizzles else 0
        if ec * osz > 128:
            problems.add(("schedule", "epilogue", "tile", 1), f"epilogue chunk rows are {ec * osz} B; at most 128 B (the "
                                                              f"widest swizzle): use at most {128 // osz} columns")
    epi_bytes = er * ec * osz
    if direct and n % 2:
        problems.add(("schedule", "epilogue", "store"), f"direct stores write column pairs; N = {n} is odd: use store: tma")

    # --- registers
    threads = 128 * (1 + nc)
    preg = pipe.memory_registers or (40 if nc == 2 else 56)
    creg = pipe.compute_registers or (232 if nc == 2 else 240)
    acc_regs = wtm * wtn // 128
    for fld, v in (("memory_registers", preg), ("compute_registers", creg)):
        if v % 8:
            problems.add(("schedule", "pipeline", fld), f"setmaxnreg takes a multiple of 8 registers, got {v}")
    if 128 * (preg + nc * creg) > hw.regs_per_sm:
        problems.add(("schedule", "pipeline", "compute_registers"),
                     f"register budgets {preg} + {nc} x {creg} per thread need {128 * (preg + nc * creg)} registers; "
                     f"the SM has {hw.regs_per_sm} (at most {(hw.regs_per_sm // 128 - preg) // nc // 8 * 8} per consumer "
                     f"thread with {preg} for the producer)")
    if acc_regs + REG_OVERHEAD > min(creg, 255):
        problems.add(("schedule", "pipeline", "compute_registers"),
                     f"each consumer thread holds {acc_regs} f32 accumulators ({wtm} x {wtn} / 128) plus about "
                     f"{REG_OVERHEAD} working registers, over its budget of {min(creg, 255)}; use a smaller tile or "
                     f"more consumers")

    # --- pipeline
    stages = pipe.max_concurrent_steps
    if stages < 2:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"), "the TMA ring needs at least 2 stages")
    k_iters = cdiv(k, tk)
    delay = max((bs.delay_release for bs in (a_spec, b_spec) if bs is not None), default=1)
    if a_spec is None and b_spec is None:
        delay = 1
    if delay > 1:
        problems.add(("schedule", "in_specs", op.lhs, "delay_release"),
                     "the CUDA kernel keeps at most one wgmma group in flight (delay_release 0 or 1)")
    if delay >= stages:
        problems.add(("schedule", "in_specs", op.lhs, "delay_release"), f"delay_release {delay} must be below the "
                                                                          f"{stages} stages")

    # --- SMEM map
    a_stage = tm * tk * isz
    b_stage = tn * tk * isz
    smem = SmemMap()
    smem.alloc("a", a_stage, stages, note="lhs stage ring")
    smem.alloc("b", b_stage, stages, note="rhs stage ring")
    if not direct:
        smem.alloc("epi", epi_bytes, epi.buffers * nc, note="output staging per consumer")
    full_arr, empty_arr = 1, nc * csize
    for bname, bar in sch.barriers.items():
        if bname not in ("full", "empty"):
            problems.add(("schedule", "barriers", bname), f"the matmul family's barriers are 'full' and 'empty'; got '{bname}'")
            continue
        if bar.num_barriers != stages:
            problems.add(("schedule", "barriers", bname, "num_barriers"),
                         f"'{bname}' has one barrier per stage: {stages}, got {bar.num_barriers}")
        if bname == "full":
            full_arr = bar.num_arrivals
        else:
            empty_arr = bar.num_arrivals
    smem.alloc("full", 8, stages, align=8, note="TMA landed (expect_tx)")
    smem.alloc("empty", 8, stages, align=8, note=f"stage free ({nc * csize} consumer arrivals)")
    smem_bytes = smem.top + 1024
    if smem_bytes > hw.smem_per_block:
        detail = ", ".join(f"{b.name} {b.bytes * b.count} B" for b in smem.buffers)
        fit = (hw.smem_per_block - 1024 - (0 if direct else epi_bytes * epi.buffers * nc) - 16 * stages) // (a_stage + b_stage)
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"SMEM needed is {smem_bytes} B ({detail}), over the {hw.name}'s {hw.smem_per_block} B per block; "
                     f"at most {fit} stages fit this tile")

    # --- tile loop
    if pers.loop == "dynamic":
        problems.add(("schedule", "persistent", "loop"), "dynamic work claiming pays where tiles differ in "
                                                         "length (the attention family's causal tiles); matmul tiles "
                                                         "are all alike: use nd_loop")
    num_tiles = batch * (tiles_m // max(cm, 1)) * (tiles_n // max(cn, 1))
    auto = pers.loop == "nd_loop" and pers.num_blocks == "auto"
    if pers.loop == "none":
        clusters = num_tiles
    elif pers.num_blocks == "auto":
        clusters = min(num_tiles, hw.sm_count // csize)
    else:
        if pers.num_blocks % csize:
            problems.add(("schedule", "persistent", "num_blocks"), f"num_blocks must be a multiple of the cluster size {csize}")
        clusters = min(num_tiles, max(pers.num_blocks // csize, 1))
    if pers.tile_order == "lpt":
        problems.add(("schedule", "persistent", "tile_order"), "lpt (longest tiles first) orders attention tiles; "
                                                               "matmul tiles are all alike: use row_major or planar_snake")
    for nm_, v in sizes.items():
        if v > ex.MAX_INT:
            problems.add(("op", "sizes", nm_), f"size {v} does not fit the kernel's 32-bit coordinates")
    if sch.compiler_params.lowering_semantics == "lane" and "pallas" in sch.backends:
        problems.add(("schedule", "compiler_params", "lowering_semantics"),
                     "the Pallas matmul uses warpgroup semantics (wgmma); remove lowering_semantics: lane")
    if "pallas" in sch.backends:
        _pallas_limits(op, sch, ragged, extra_ops, batch, problems)
    if problems or body is None:
        return None, problems

    # --- the epilogue as code
    names_cxx = {"acc": "v_acc", **{nm: f"v_{nm}" for nm in extras}, **{c: f"c_{c}" for c in op.constants}}
    names_jnp = {"acc": "v_acc", **{nm: f"v_{nm}" for nm in extras}, **{c: f"_c_{c}" for c in op.constants}}
    epi_cxx, epi_jnp, temps = [], [], []
    for target, value in body.statements:
        tname = "r_out" if target == out_name else f"t_{target}"
        if target != out_name:
            temps.append(tname)
        epi_cxx.append((tname, ex.render_cxx(value, names_cxx)))
        epi_jnp.append((tname, ex.render_jnp(value, names_jnp)))
        names_cxx[target] = tname
        names_jnp[target] = tname
    identity = len(body.statements) == 1 and epi_cxx[0][1] == "v_acc"

    inputs = []
    for nm in op.inputs:
        if nm == op.lhs:
            inputs.append(MatOperand(nm, f"in_{nm}", "lhs", in_dtype, CTYPE[in_dtype], isz, a_shape))
        elif nm == op.rhs:
            inputs.append(MatOperand(nm, f"in_{nm}", "rhs", in_dtype, CTYPE[in_dtype], isz, b_shape))
        else:
            inputs.append(next(e for e in extra_ops if e.name == nm))
    outputs = (MatOperand(out_name, f"out_{out_name}", "out", out_dtype, CTYPE[out_dtype], osz, o_shape),)
    idx = {o.name: i for i, o in enumerate(inputs + list(outputs))}

    # --- tensor maps: boxes as loaded (a multicast operand is loaded in halves)
    def tmap(nm: str, shape: tuple[int, ...], dtype: str, rows: int, cols: int, swz: int) -> KernelArg:
        it = ITEMSIZE[dtype]
        strides = tuple(int(math.prod(shape[d + 1:]) * it) for d in range(len(shape)))
        box = ((1,) if len(shape) == 3 else ()) + (rows, cols)
        return KernelArg("tmap", idx[nm], dtype, tuple(shape), strides, box, swz)

    a_rows = (tm // (2 if multicast == "lhs" else 1)) if k_major_a else tk
    a_cols = atom_a if k_major_a else atom_a
    b_rows = (tn // (2 if multicast == "rhs" else 1)) if k_major_b else tk
    args = [tmap(op.lhs, a_shape, in_dtype, a_rows, a_cols, swz_a),
            tmap(op.rhs, b_shape, in_dtype, b_rows, atom_b, swz_b),
            KernelArg("ptr", idx[out_name]) if direct else tmap(out_name, o_shape, out_dtype, er, ec, epi_swz)]
    for e in extra_ops:
        args.append(KernelArg("ptr", idx[e.name]))
    for d, (rows, cols) in ((op.lhs, (a_rows, a_cols)), (op.rhs, (b_rows, atom_b))):
        if rows > hw.tma_max_box:
            problems.add(("schedule", "in_specs", d, "block_shape"),
                         f"a TMA box holds at most {hw.tma_max_box} rows; this tile loads {rows}")
    if problems:
        return None, problems

    a_sub = (tm if k_major_a else tk) * swz_a
    b_sub = (tn if k_major_b else tk) * swz_b
    flops = 2 * batch * m * n * k
    bytes_moved = sum(math.prod(o.shape) * o.itemsize for o in inputs + list(outputs))
    kname = "matmul_{}_{}_{}x{}x{}_s{}_wg{}_c{}x{}".format(spec.name, in_dtype, tm, tn, tk, stages, nc, cm, cn)
    plan = MatmulPlan(
        family="matmul", name=spec.name, kernel_name=kname, sizes=sizes, constants=dict(op.constants),
        backends=tuple(sch.backends), batch=batch, m=m, n=n, k=k, lhs_batched=lhs_batched, rhs_batched=rhs_batched,
        in_dtype=in_dtype, out_dtype=out_dtype, transpose_lhs=op.transpose_lhs, transpose_rhs=op.transpose_rhs,
        inputs=tuple(inputs), outputs=outputs, extras=tuple(extra_ops),
        tile_m=tm, tile_n=tn, tile_k=tk, stages=stages, delay_release=delay, num_consumers=nc, wg_axis=axis,
        wg_tile_m=wtm, wg_tile_n=wtn, m_blocks=wtm // WGMMA_M, acc_regs=acc_regs,
        swizzle_a=swz_a, swizzle_b=swz_b, atom_a=atom_a, atom_b=atom_b, k_major_a=k_major_a, k_major_b=k_major_b,
        a_stage_bytes=a_stage, b_stage_bytes=b_stage, a_sub_bytes=a_sub, b_sub_bytes=b_sub,
        a_lbo=1 if k_major_a else a_sub, a_sbo=8 * swz_a, b_lbo=1 if k_major_b else b_sub, b_sbo=8 * swz_b,
        cluster_m=cm, cluster_n=cn, cluster_size=csize, cluster_dims=(csize, 1, 1), multicast=multicast,
        epi_rows=er, epi_cols=ec, epi_buffers=epi.buffers, epi_swizzle=epi_swz, epi_bytes=epi_bytes, epi_store=epi.store,
        epilogue_cxx=tuple(epi_cxx), epilogue_jnp=tuple(epi_jnp), temporaries=tuple(temps),
        constants_cxx=tuple((f"c_{c}", cxx_float(v)) for c, v in op.constants.items()),
        identity_epilogue=identity, ragged=ragged,
        tiles_m=tiles_m, tiles_n=tiles_n, num_tiles=num_tiles, k_iters=k_iters,
        tile_order=pers.tile_order, minor_dim=pers.minor_dim, tile_width=pers.tile_width,
        num_blocks=clusters * csize, auto_blocks=auto, blocks_per_sm=1,
        threads=threads, producer_regs=preg, consumer_regs=creg,
        smem_buffers=tuple(smem.buffers), smem_bytes=smem_bytes, full_arrivals=full_arr, empty_arrivals=empty_arr,
        stage_tx_bytes=a_stage + b_stage, kernel_args=tuple(args),
        approx_math=sch.compiler_params.approx_math, lowering_semantics=sch.compiler_params.lowering_semantics,
        profile_space=sch.compiler_params.profile_space, flops=flops, bytes_moved=bytes_moved,
    )
    return plan, problems


def _names(expr) -> frozenset[str]:
    return expr.names


def tile_from_block_specs(op, sch, out_name: str, problems: Problems) -> tuple[int, int, int]:
    """tile_m, tile_n, tile_k from the lhs/rhs/out BlockSpecs (each written in its stored order); they must agree."""
    got: dict[str, list[tuple[int, tuple]]] = {"m": [], "n": [], "k": []}
    for nm, dims in ((op.lhs, ("k", "m") if op.transpose_lhs else ("m", "k")),
                     (op.rhs, ("n", "k") if op.transpose_rhs else ("k", "n"))):
        bs = sch.in_specs.get(nm)
        if bs is None:
            continue
        shape = bs.block_shape
        path = ("schedule", "in_specs", nm, "block_shape")
        if len(shape) == 3 and shape[0] == 1:
            shape = shape[1:]
        elif len(shape) != 2:
            problems.add(path, f"a matmul block is 2-D ({' x '.join(d.upper() for d in dims)}), or 3-D with a leading 1 "
                               f"for the batch; got {len(shape)} dimensions")
            continue
        for d, v, i in zip(dims, shape, (len(bs.block_shape) - 2, len(bs.block_shape) - 1)):
            got[d].append((v, (*path, i)))
    bs = sch.out_specs.get(out_name)
    if bs is not None:
        shape = bs.block_shape[-2:]
        if len(bs.block_shape) not in (2, 3) or (len(bs.block_shape) == 3 and bs.block_shape[0] != 1):
            problems.add(("schedule", "out_specs", out_name, "block_shape"), "the output block is [tile_m, tile_n]")
        else:
            for d, v, i in zip(("m", "n"), shape, (len(bs.block_shape) - 2, len(bs.block_shape) - 1)):
                got[d].append((v, ("schedule", "out_specs", out_name, "block_shape", i)))
    out = []
    for d, default in zip(("m", "n", "k"), DEFAULT_TILE):
        vals = got[d]
        if not vals:
            out.append(default)
            continue
        v0 = vals[0][0]
        for v, path in vals[1:]:
            if v != v0:
                problems.add(path, f"tile_{d} is {v0} in one BlockSpec and {v} here; the blocks must agree")
        out.append(v0)
    return tuple(out)


def _swizzle(bs, minor_elems: int, isz: int, path: tuple, problems: Problems, hw: Hardware) -> int:
    minor_bytes = minor_elems * isz
    if bs is None or bs.transforms.swizzle == "auto":
        for s in sorted(hw.swizzles, reverse=True):
            if minor_bytes % s == 0:
                return s
        return 0
    s = bs.transforms.swizzle
    if s and minor_bytes % s:
        legal = [str(x) for x in hw.swizzles if minor_bytes % x == 0]
        problems.add((*path, "transforms", "swizzle"),
                     f"swizzle {s} needs the swizzled dimension's bytes ({minor_bytes} B) to be a multiple of {s}; "
                     f"legal here: {', '.join(legal) or 'none'}")
    return s


def _pallas_limits(op, sch, ragged: bool, extras, batch: int, problems: Problems) -> None:
    """What the Pallas (Mosaic GPU) rendering of this family cannot express; each names the way out."""
    hint = "; or set schedule.backends: [cuda]"
    if ragged:
        problems.add(("schedule", "backends"), "the Pallas matmul needs M, N, K multiples of the tile" + hint)
    if batch > 1:
        problems.add(("schedule", "backends"), "the Pallas matmul is not batched" + hint)
    # emit_pipeline_warp_specialized (jax 0.11.2) takes only the producer's budget and gives each consumer
    # min(256, (512 - memory_registers) / num_compute_wgs) rounded down to 8 (pipeline._compute_registers).
    pipe = sch.pipeline
    nc = min(pipe.num_compute_wgs, 2)
    preg = pipe.memory_registers or (40 if nc == 2 else 56)
    pallas_creg = int(min(256, (512 - preg) // nc) // 8 * 8)
    if pipe.compute_registers is not None and pipe.compute_registers != pallas_creg:
        problems.add(("schedule", "pipeline", "compute_registers"),
                     f"Pallas's emit_pipeline_warp_specialized derives the consumers' budget from memory_registers: "
                     f"min(256, (512 - {preg}) / {nc}) rounded down to 8 = {pallas_creg}; set compute_registers: "
                     f"{pallas_creg} or omit it" + hint)
    # its full / empty barriers are its own: one arrival per input TMA, one per consumer warpgroup (per CTA)
    for bname, bar in sch.barriers.items():
        default = 1 if bname == "full" else nc * math.prod(sch.cluster)
        if bname in ("full", "empty") and bar.num_arrivals != default:
            problems.add(("schedule", "barriers", bname, "num_arrivals"),
                         f"Pallas's emit_pipeline_warp_specialized allocates and counts its own '{bname}' barriers; "
                         f"leave num_arrivals at {default}" + hint)
    if sch.compiler_params.unsafe_no_auto_barriers:
        problems.add(("schedule", "compiler_params", "unsafe_no_auto_barriers"),
                     "the Pallas matmul's epilogue relies on Mosaic GPU's automatic warpgroup barriers between "
                     "register reads of SMEM and the TMA that overwrites it; remove unsafe_no_auto_barriers" + hint)
