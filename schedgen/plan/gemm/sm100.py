"""The sm_100a (Blackwell) GEMM planner: tcgen05.mma with the f32 accumulator in tensor memory (TMEM). What the
planner checks and adds for that target (`Sm100`, its record `Tcgen05Mma`: plan.mma).

The sm_100a kernel (templates/matmul/cuda_sm_100a.cu.j2) is persistent and warp-specialized, 192 threads a CTA: warp 0
streams lhs / rhs blocks into the SMEM stage ring by TMA (one elected thread), warp 1 allocates the tensor memory
(TMEM) and one of its threads issues tcgen05.mma (cta_group::1, kind::f16 for bf16 / f16 inputs: K 16 an
instruction, kind::f8f6f4 for e4m3 / e5m2: K 32; M 128, N tile_n)
with the f32 accumulator in TMEM, and tcgen05.commit arrives on the stage's `empty` barrier when the MMAs reading
it are done and on the accumulator's `acc_full` barrier when a tile is complete. The accumulator is double-buffered
in TMEM (two tile_n-column halves), so warps 2-5, the epilogue warpgroup (TMEM lanes 32 x (warp % 4) ..), read tile
t with tcgen05.ld (32x32b shape: thread = row, 32 columns a load) + tcgen05.wait::ld while the MMAs of tile t + 1
run; they apply the epilogue body, convert, and write each row's chunk (a 128-byte row: 32 f32 or 64 bf16 / f16
columns) into the warp's SMEM staging tile, swizzled as the output's TMA tensor map reads it (128 B: the 32 rows of
a warp hit all the banks), and one thread of the warp stores the warp's 32 x cols chunk by TMA (a bulk group per
chunk; `epilogue.buffers` staging tiles a warp, reused once the store B chunks back has read its tile). The TMEM
buffer is freed (acc_empty) right after the tile's last tcgen05.ld, before its last chunk is converted and stored.
Tiles are walked by a static persistent loop (nd_loop) or claimed by cluster launch control (persistent.loop:
dynamic: clusterlaunchcontrol.try_cancel / query_cancel).
Sizes as on sm_90a: partial tiles (TMA zero-fills the loads past M, N, K; the output tensor map clips the stores) and
dynamic sizes (`int sz_*` kernel arguments; the tile grid, tile count and k-steps computed from them at kernel entry;
the runtime builds the tensor maps and the grid per call from the launch record's extents).

No sm_100a GEMM kernel has run on Blackwell hardware: the CUDA kernels are compiled to sm_100a cubins and their
SASS is checked on the CPU.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import dims as D
from ..common import Problems, SmemBuffer, cdiv
from ..defaults import written
from ..hardware import Hardware
from ..launch import inline_field
from ..legality import check_hopper_only
from .epilogue import check_smem_operands
from .operands import tensor_map
from .records import Cluster, Dims, EpilogueStaging, Layout, Pipeline, Tile
from .sm90 import Wgmma
from .sm100_pallas import Tcgen05Plan, tcgen05_plan

THREADS = 192                 # warp 0: TMA, warp 1: TMEM allocation + MMA issue, warps 2-5: the epilogue warpgroup
EPI_WARP0 = 2                 # the first epilogue warp; warp w reads TMEM lanes 32 x (w % 4) .. + 31
LD_COLS = 32                  # columns of one tcgen05.ld.32x32b.x32 (32 registers a thread)
EPI_ROWS = 32                 # rows of a staged chunk: one epilogue warp's TMEM lanes (each warp stores its own)
EPI_WARPS = 4
EPI_ROW_BYTES = 128           # a staged chunk row at most: the widest TMA swizzle (bank-conflict-free st.shared)
MMA_K_BYTES = 32              # K of one tcgen05.mma: 32 bytes (16 bf16 / f16, 32 e4m3 / e5m2)
# input dtype -> (the tcgen05.mma kind, its A / B type code in the instruction descriptor); D type codes
MMA_KIND = {"f16": ("f16", 0), "bf16": ("f16", 1), "f8e4m3": ("f8f6f4", 0), "f8e5m2": ("f8f6f4", 1)}
D_TYPE = {"f16": 0, "f32": 1}
# the SMEM descriptor's swizzle-mode field (bits 61-63) on sm_100 (not Hopper's 2-bit codes)
SWIZZLE_MODE = {0: 0, 128: 2, 64: 4, 32: 6}

# the backends whose sm_100a rendering is not written yet: backend -> why (a located error at schedule.target); both
# are rendered (CUDA: templates/matmul/cuda_sm_100a.cu.j2; Pallas: templates/matmul/pallas_sm_100a.py.j2, its own rules in sm100_pallas.py)
UNRENDERED: dict[str, str] = {}

# Hopper-only schedule fields: written on sm_100a, each is a located error saying what the sm_100a kernel does
HOPPER_ONLY = (
    (("pipeline", "num_compute_wgs"), "one epilogue warpgroup reads the accumulator from TMEM (the MMA is issued by "
                                      "one thread, not by consumer warpgroups)"),
    (("pipeline", "wg_axis"), "the whole tile is one tcgen05.mma accumulator in TMEM; no warpgroup splits it"),
    (("pipeline", "consumer_schedule"), "the accumulator is double-buffered in TMEM, so the epilogue of one tile runs "
                                        "under the MMAs of the next (what pingpong does on Hopper)"),
    (("pipeline", "memory_registers"), "the sm_100a kernel sets no setmaxnreg budgets (the accumulator is in TMEM, "
                                       "not in registers)"),
    (("pipeline", "compute_registers"), "the sm_100a kernel sets no setmaxnreg budgets (the accumulator is in TMEM, "
                                        "not in registers)"),
)


@dataclass(frozen=True)
class BlackwellPlan:
    """What the sm_100a template needs beyond the shared matmul plan."""
    cta_group: int            # 1: tcgen05.mma.cta_group::1 (one CTA's tile); 2: a CTA pair's
    mma_m: int                # the instruction's M (128 a CTA)
    mma_n: int                # the instruction's N (tile_n)
    mma_kind: str             # f16 (bf16 / f16 inputs) or f8f6f4 (e4m3 / e5m2)
    mma_k: int                # the instruction's K: 32 bytes of inputs (16 or 32 elements)
    k_mmas: int               # tcgen05.mma instructions a stage (tile_k / mma_k)
    idesc: int                # the instruction descriptor (instruction_descriptor documents its fields)
    acc_stages: int           # accumulator buffers in TMEM (2: the epilogue overlaps the next tile's MMAs)
    tmem_cols: int            # TMEM columns allocated (a power of two >= 32, at most 512)
    desc_swizzle_a: int       # the SMEM descriptors' swizzle-mode field (bits 61-63)
    desc_swizzle_b: int
    smem_bytes: int           # dynamic SMEM: the stage ring, the epilogue staging tiles, the barriers, the TMEM
                              # slot, the CLC responses (+ 1 KiB alignment slack)
    stage_bytes: int          # one stage: lhs then rhs block
    a_stage_bytes: int
    epi_cols: int             # columns of a staged chunk (epilogue.tile [32, cols]): 128 B a row where tile_n allows
    epi_chunks: int           # chunks a tile row (tile_n / epi_cols)
    epi_lds: int              # tcgen05.ld.32x32b.x32 a chunk (epi_cols / 32)
    epi_buffers: int          # staging tiles a warp (epilogue.buffers)
    epi_swizzle: int          # the staging tile's swizzle = the output tensor map's (its row bytes)
    epi_bytes: int            # one staging tile: 32 rows x epi_cols
    off_epi: int              # SMEM offset of the staging tiles: warp w's buffer b at off_epi + (w x buffers + b) x
                              # epi_bytes (1 KiB aligned: the swizzle pattern follows the address bits)
    off_full: int             # SMEM offsets: the stage barriers full[S] / empty[S], the accumulator barriers
    off_empty: int            # acc_full[A] / acc_empty[A], the cluster-launch-control barriers clc_full[2] /
    off_acc_full: int         # clc_empty[2], the TMEM address slot, the two 16-byte CLC responses
    off_acc_empty: int
    off_clc_full: int
    off_clc_empty: int
    off_tmem_slot: int
    off_clc_resp: int
    rows: int                 # the output rows (TMEM lanes) one CTA holds: 128
    a_sub_bytes: int          # one CTA's SMEM sub-block strides (a swizzle row wide), the descriptors' K / N steps
    b_sub_bytes: int
    a_boxes: tuple            # one CTA's TMA boxes: (smem offset, element offset), unless a 2-CTA cluster multicasts
    b_boxes: tuple
    dynamic: bool             # tiles claimed by cluster launch control (persistent.loop: dynamic)


def instruction_descriptor(in_dtype: str, acc_dtype: str, m: int, n: int, k_major_a: bool, k_major_b: bool) -> int:
    """The 32-bit instruction descriptor of tcgen05.mma kind::f16 and kind::f8f6f4 (PTX ISA, "Instruction descriptor
    format for .kind::tf32, .kind::f16, .kind::f8f6f4 and .kind::i8"): bits 0-1 sparsity selector (0), 2 sparsity
    (0: dense), 3 saturate (0), 4-5 D type (0 f16, 1 f32), 6 reserved, 7-9 A type and 10-12 B type (kind::f16: 0
    f16, 1 bf16; kind::f8f6f4: 0 e4m3, 1 e5m2), 13 / 14 negate A / B (0), 15 / 16 transpose A / B (0: K-major, 1:
    MN-major), 17-22 N >> 3, 23 reserved, 24-28 M >> 4, 29 reserved, 30-31 max shift (0: not .ws)."""
    ab = MMA_KIND[in_dtype][1]
    return (D_TYPE[acc_dtype] << 4 | ab << 7 | ab << 10
            | (0 if k_major_a else 1) << 15 | (0 if k_major_b else 1) << 16 | (n >> 3) << 17 | (m >> 4) << 24)


def check_target(spec, op, sch, hw: Hardware, problems: Problems) -> None:
    """On sm_100a: every listed backend must have an sm_100a rendering, and no Hopper-only field is written."""
    for backend in sch.backends:
        if backend in UNRENDERED:
            problems.add(("schedule", "target"), f"{UNRENDERED[backend]}; write backends: [cuda], or target: sm_90a")
    check_hopper_only(spec, HOPPER_ONLY, sch.target, problems)
    if spec.schedule.epilogue.store == "direct":
        problems.add(("schedule", "epilogue", "store"), "the sm_100a kernel stores every output tile by TMA from an "
                                                        "SMEM staging tile (the tensor map clips a partial tile's rows "
                                                        "and columns past M and N): write store: tma or leave it out")
    check_smem_operands(sch, "the sm_100a kernel's epilogue warpgroup reads its operands from global memory", problems)
    if sch.pipeline.kind != "warp_specialized":
        problems.add(("schedule", "pipeline", "kind"), f"the sm_100a matmul kernel is warp-specialized (a TMA producer "
                                                       f"warp, a tcgen05 MMA thread, an epilogue warpgroup); got "
                                                       f"{sch.pipeline.kind}: write warp_specialized or leave it out")
    for nm in sch.barriers:
        problems.add(("schedule", "barriers", nm), "the sm_100a kernel's mbarriers (full, empty, acc_full, acc_empty) "
                                                   "are its own, one arrival each (tcgen05.commit, TMA) or the 128 "
                                                   "epilogue threads: remove this entry")
    for nm in sch.in_specs:
        if written(spec, ("schedule", "in_specs", nm, "delay_release")):
            problems.add(("schedule", "in_specs", nm, "delay_release"),
                         "delay_release keeps wgmma groups in flight on Hopper; on sm_100a tcgen05.commit frees "
                         "each stage when its MMAs are done: leave it out, or write target: sm_90a")
    if getattr(spec, "backward", None) is not None:
        problems.add(("backward",), "the sm_100a matmul kernel keeps no value for a backward pass yet: remove the "
                                    "backward section, or write target: sm_90a")


def _check_problem(op, dims, tile, problems: Problems) -> None:
    """What the sm_100a kernel takes of the problem: 2-D sizes, fixed or dynamic, whole or partial tiles (TMA
    zero-fills the loads past M, N, K and clips the stores; block_tile asks for out_of_bounds: zero), bf16 / f16 /
    e4m3 / e5m2 in (fp8: per-tensor or per-row / per-column scales in the epilogue, no block scales), a K-major lhs,
    one output."""
    if dims.in_dtype not in MMA_KIND:
        problems.add(("op", "inputs", op.lhs, "dtype"), f"the sm_100a matmul kernel takes bf16 / f16 inputs "
                                                         f"(tcgen05.mma kind::f16) or f8e4m3 / f8e5m2 (kind::f8f6f4), "
                                                         f"got {dims.in_dtype}")
    if getattr(op, "block_scales", None) is not None:
        problems.add(("op", "block_scales"), "the sm_100a matmul kernel scales fp8 products in the epilogue only "
                                             "(per-tensor [1] or per-row [M, 1] / per-column [N] operands: out = acc "
                                             "* sa * sb); 128 x 128 block scales applied in the k-loop are rendered "
                                             "for sm_90a: remove block_scales, or write target: sm_90a")
    if dims.out_dtype not in ("bf16", "f16", "f32"):
        problems.add(("op", "outputs"), f"the sm_100a matmul kernel stores bf16, f16 or f32, got {dims.out_dtype}")
    for nm in list(op.outputs)[1:]:
        problems.add(("op", "outputs", nm), "the sm_100a matmul kernel stores one output (its epilogue stages one "
                                            "tile at a time, and nothing keeps a value for a backward pass): remove "
                                            "this output, or write target: sm_90a")
    if not isinstance(dims.batch, int) or dims.batch != 1:
        problems.add(("op", "inputs", op.lhs, "shape"), "the sm_100a matmul kernel takes 2-D operands (no batch "
                                                        "dimension) yet; write target: sm_90a for a batched matmul")
    if op.transpose_lhs:
        problems.add(("op", "transpose_lhs"), "the sm_100a matmul kernel reads a K-major lhs [M, K] only (its "
                                              "MN-major SMEM layout is not rendered, for any input type): store lhs "
                                              "[M, K] and remove transpose_lhs (transpose it beforehand, e.g. "
                                              "a.T.contiguous())")


def _cta_group(op, sch, tile, lay, cl, hw: Hardware, problems: Problems) -> int:
    """1: each CTA its own 128-row tcgen05.mma (a 2-CTA cluster shares a tile by multicast); 2: a 256-row tile
    (out block [256, N]) on a [2, 1] cluster, one tcgen05.mma.cta_group::2 for the CTA pair, each CTA holding 128 rows
    of the lhs and half of the rhs columns. The MMA shape's rules (hw.mma_shapes) for the group."""
    group = 2 if tile.tm == 256 else 1
    if group == 2 and (cl.cm, cl.cn, cl.ck) != (2, 1, 1):
        problems.add(("schedule", "cluster"), f"a 256-row tile on sm_100a is a CTA pair's tcgen05.mma.cta_group::2: "
                                              f"write cluster: [2, 1] (got {list(sch.cluster)}), or a 128-row tile")
    if group == 2 and tile.b_spec is not None and tile.b_spec.collective_axes:
        problems.add(("schedule", "in_specs", op.rhs, "collective_axes"),
                     "the CTA pair's tcgen05.mma.cta_group::2 splits the rhs tile between the CTAs (each loads half "
                     "of its columns); nothing is multicast: remove collective_axes")
    shapes = {(g, m): (lo, hi, step) for g, m, lo, hi, step in hw.mma_shapes}
    mma_m = 128 * group
    if (group, mma_m) not in shapes or tile.tm not in (128, 256):
        problems.add(("schedule", "out_specs"), f"on sm_100a a CTA's tile is 128 rows (one tcgen05.mma M = 128, its "
                                                f"accumulator all 128 TMEM lanes), or a [2, 1] cluster's 256 "
                                                f"(cta_group::2); got tile_m {tile.tm}")
        return group
    lo, hi, step = shapes[(group, mma_m)]
    unit = max(step, LD_COLS) if group == 1 else max(step, LD_COLS, 2 * (lay.atom_b if not lay.k_major_b else 8))
    if not (lo <= tile.tn <= hi and tile.tn % unit == 0):
        problems.add(("schedule", "out_specs"), f"on sm_100a tile_n is the tcgen05.mma.cta_group::{group} N: a "
                                                f"multiple of {unit} from {max(lo, unit)} to {hi} (the epilogue loads "
                                                f"32 columns at a time" + (", and each CTA of the pair holds half of "
                                                                           "the rhs columns" if group == 2 else "")
                                                + f"), got {tile.tn}")
    return group


def epilogue_cols(epi, tile_n: int, osz: int) -> int:
    """The staged chunk's columns: epilogue.tile's where written, else a 128-byte row (32 f32, 64 bf16 / f16
    columns: the 128 B swizzle) where they divide tile_n, else one tcgen05.ld's 32."""
    if epi.tile is not None:
        return epi.tile[1]
    widest = EPI_ROW_BYTES // osz
    return widest if tile_n % widest == 0 else LD_COLS


def staging_bytes(cols: int, osz: int, buffers: int) -> int:
    """The epilogue's SMEM staging tiles: `buffers` a warp of 32 rows x `cols`."""
    return EPI_WARPS * buffers * EPI_ROWS * cols * osz


def acc_buffers(tile_n: int, hw: Hardware) -> int:
    """Accumulator buffers in TMEM: two tile_n-column buffers where they fit its columns."""
    return 2 if 2 * tile_n <= hw.tmem_columns else 1


def smem_layout(stages: int, stage: int, staging: int, acc_stages: int) -> tuple[dict, int]:
    """The sm_100a kernel's SMEM from the 1 KiB-aligned base: the ring, the epilogue staging tiles (1 KiB aligned),
    the barriers, the TMEM slot, the two CLC responses. Returns the offsets and the dynamic SMEM it needs (+ the 1
    KiB alignment slack)."""
    offs = {"epi": cdiv(stages * stage, 1024) * 1024}
    off = offs["epi"] + staging
    for name, count in (("full", stages), ("empty", stages), ("acc_full", acc_stages), ("acc_empty", acc_stages),
                        ("clc_full", 2), ("clc_empty", 2)):
        offs[name] = off
        off += 8 * count
    off = cdiv(off, 16) * 16
    offs["tmem_slot"], offs["clc_resp"] = off, off + 16
    return offs, off + 16 + 32 + 1024


def ring_depth_that_fits(hw: Hardware, stage: int, staging: int, acc_stages: int) -> int:
    """The deepest ring of `stage`-byte stages whose kernel fits the block's SMEM beside `staging` bytes (0: none)."""
    n = 0
    while smem_layout(n + 1, stage, staging, acc_stages)[1] <= hw.smem_per_block:
        n += 1
    return n


def _epilogue(sch, dims, tile, problems: Problems) -> tuple[int, int]:
    """The staged chunk (epilogue.tile: [32, cols], cols a multiple of 32 dividing tile_n, at most 128 B a row) and
    the staging tiles a warp (epilogue.buffers)."""
    cols = epilogue_cols(sch.epilogue, tile.tn, dims.osz)
    if sch.epilogue.tile is not None:
        rows = sch.epilogue.tile[0]
        widest = EPI_ROW_BYTES // dims.osz
        if rows != EPI_ROWS:
            problems.add(("schedule", "epilogue", "tile", 0), f"on sm_100a each epilogue warp stages and stores its "
                                                              f"own {EPI_ROWS} rows (its TMEM lanes): the chunk is "
                                                              f"{EPI_ROWS} rows, got {rows}")
        if cols % LD_COLS or tile.tn % cols or cols * dims.osz > EPI_ROW_BYTES:
            legal = [c for c in range(LD_COLS, widest + 1, LD_COLS) if tile.tn % c == 0]
            problems.add(("schedule", "epilogue", "tile", 1), f"on sm_100a a staged chunk is whole tcgen05.ld loads "
                                                              f"of {LD_COLS} columns, divides tile_n {tile.tn} and is "
                                                              f"at most {EPI_ROW_BYTES} B ({widest} {dims.out_dtype}) "
                                                              f"a row: {' or '.join(map(str, legal))}; got {cols}")
    return cols, sch.epilogue.buffers


def blackwell_plan(op, sch, dims, tile, lay, cl, pipe, hw: Hardware, problems: Problems) -> BlackwellPlan | None:
    """The sm_100a numbers, each rule a located problem naming sm_100a (what the kernel takes and what is legal)."""
    bad = len(problems)
    _check_problem(op, dims, tile, problems)
    if cl.ck > 1:
        problems.add(("schedule", "cluster"), "split-K clusters ([1, 1, S]) are a Hopper kernel's; the sm_100a kernel "
                                              "takes cluster [1], [2, 1] or [1, 2]")
    elif cl.csize > 1 and sch.persistent.loop == "dynamic":
        problems.add(("schedule", "persistent", "loop"), "on sm_100a, cluster launch control (loop: dynamic) claims "
                                                         "one CTA's tile: with a 2-CTA cluster use loop: nd_loop, or "
                                                         "cluster [1]")
    group = _cta_group(op, sch, tile, lay, cl, hw, problems)
    if tile.tk * dims.isz % MMA_K_BYTES:
        problems.add(("schedule", "in_specs", op.lhs, "block_shape"), f"tile_k must be a multiple of "
                                                                      f"{MMA_K_BYTES // dims.isz} (one tcgen05.mma "
                                                                      f"K for {dims.in_dtype}), got {tile.tk}")
    if sch.persistent.loop == "dynamic" and sch.persistent.num_blocks != "auto":
        problems.add(("schedule", "persistent", "num_blocks"), "with loop: dynamic the sm_100a kernel launches a CTA a "
                                                               "tile and claims tiles by cluster launch control; "
                                                               "num_blocks: auto (the default), or loop: nd_loop")
    if sch.persistent.loop == "none":
        problems.add(("schedule", "persistent", "loop"), "the sm_100a kernel is persistent (its TMEM accumulator is "
                                                         "allocated once a CTA): nd_loop or dynamic (cluster launch "
                                                         "control)")
    epi_cols, buffers = _epilogue(sch, dims, tile, problems)
    if len(problems) > bad:
        return None
    acc_stages = acc_buffers(tile.tn, hw)
    cols = max(32, 1 << (acc_stages * tile.tn - 1).bit_length())
    rows_a, cols_b = tile.tm // group, tile.tn // group    # what one CTA holds (cta_group::2: half of each)
    a_stage = rows_a * tile.tk * dims.isz
    stage = a_stage + cols_b * tile.tk * dims.isz
    # one CTA's TMA boxes (smem offset, element offset) one swizzle row wide: the lhs by K atoms; the rhs by K atoms
    # (K-major) or by its columns' atoms (N-major), and the sub-block stride the descriptors step by
    a_sub = rows_a * lay.swz_a
    b_sub = (cols_b if lay.k_major_b else tile.tk) * lay.swz_b
    a_boxes = tuple((i * a_sub, i * lay.atom_a) for i in range(tile.tk // lay.atom_a))
    b_boxes = tuple((i * b_sub, i * lay.atom_b) for i in range((tile.tk if lay.k_major_b else cols_b) // lay.atom_b))
    epi_bytes = EPI_ROWS * epi_cols * dims.osz
    staging = staging_bytes(epi_cols, dims.osz, buffers)
    offs, smem = smem_layout(pipe.stages, stage, staging, acc_stages)
    if smem > hw.smem_per_block:
        fit = ring_depth_that_fits(hw, stage, staging, acc_stages)
        fewer = ring_depth_that_fits(hw, stage, staging // buffers, acc_stages) if buffers > 1 else 0
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"{pipe.stages} stages of {stage} B and the epilogue's {staging} B of staging tiles ({EPI_WARPS} "
                     f"warps x {buffers} x {EPI_ROWS} x {epi_cols} {dims.out_dtype}) need {smem} B of SMEM with the "
                     f"barriers, over the {hw.name}'s {hw.smem_per_block} B a block ({sch.target}); {fit} stages "
                     f"would fit" + (f" ({fewer} with epilogue.buffers: 1)" if fewer > fit else ""))
        return None
    return BlackwellPlan(
        cta_group=group, mma_m=128 * group, mma_n=tile.tn, mma_kind=MMA_KIND[dims.in_dtype][0],
        mma_k=MMA_K_BYTES // dims.isz, k_mmas=tile.tk * dims.isz // MMA_K_BYTES,
        idesc=instruction_descriptor(dims.in_dtype, "f32", 128 * group, tile.tn, lay.k_major_a, lay.k_major_b),
        rows=rows_a, a_sub_bytes=a_sub, b_sub_bytes=b_sub, a_boxes=a_boxes, b_boxes=b_boxes,
        acc_stages=acc_stages, tmem_cols=cols,
        desc_swizzle_a=SWIZZLE_MODE[lay.swz_a], desc_swizzle_b=SWIZZLE_MODE[lay.swz_b],
        smem_bytes=smem, stage_bytes=stage, a_stage_bytes=a_stage, **{f"off_{k}": v for k, v in offs.items()},
        epi_cols=epi_cols, epi_chunks=tile.tn // epi_cols, epi_lds=epi_cols // LD_COLS, epi_buffers=buffers,
        epi_swizzle=epi_cols * dims.osz, epi_bytes=epi_bytes,
        dynamic=sch.persistent.loop == "dynamic")


def sm100_smem(bw: BlackwellPlan, stages: int) -> tuple[SmemBuffer, ...]:
    """The sm_100a kernel's SMEM map as the plan's smem_buffers (explain --draw draws it like the Hopper kernel's)."""
    bars = [SmemBuffer("full", bw.off_full, 8, stages, "mbarriers: the stage's TMA bytes landed"),
            SmemBuffer("empty", bw.off_empty, 8, stages, "mbarriers: tcgen05.commit, the stage's MMAs are done"),
            SmemBuffer("acc_full", bw.off_acc_full, 8, bw.acc_stages, "mbarriers: a tile's accumulator is in TMEM"),
            SmemBuffer("acc_empty", bw.off_acc_empty, 8, bw.acc_stages, "mbarriers: the epilogue has read it")]
    if bw.dynamic:
        bars += [SmemBuffer("clc_full", bw.off_clc_full, 8, 2, "mbarriers: a try_cancel response landed"),
                 SmemBuffer("clc_empty", bw.off_clc_empty, 8, 2, "mbarriers: every role has read it"),
                 SmemBuffer("clc_resp", bw.off_clc_resp, 16, 2, "cluster-launch-control responses")]
    epi = SmemBuffer("epi", bw.off_epi, bw.epi_bytes, EPI_WARPS * bw.epi_buffers,
                     f"epilogue staging: {bw.epi_buffers} a warp of {EPI_ROWS} x {bw.epi_cols}, swizzle "
                     f"{bw.epi_swizzle} B, read by its TMA store")
    return (SmemBuffer("ring", 0, bw.stage_bytes, stages, "lhs then rhs block a stage"), epi, *bars,
            SmemBuffer("tmem", bw.off_tmem_slot, 4, 1, "the address tcgen05.alloc returns"))


# ------------------------------------------------------------------------------------------- the plan's records


@dataclass(frozen=True)
class Tcgen05Mma:
    """plan.mma on sm_100a: the CUDA tcgen05 kernel's numbers (`blackwell`) and, with pallas in schedule.backends, the
    Pallas (Mosaic GPU) kernel's (`tcgen05`, sm100_pallas.py). `wgmma` holds the sm_90a wgmma numbers of the same
    tile, which plan.json has shown for every matmul plan (sm_100a's too, at its top level); nothing reads them."""
    blackwell: BlackwellPlan
    wgmma: Wgmma = inline_field()
    tcgen05: Tcgen05Plan | None = dataclasses.field(default=None, metadata={"omit_default": True})

    @property
    def not_interpretable(self) -> str:
        """Why Mosaic GPU's interpreter cannot run the Pallas kernel ('' when it can, or when there is none)."""
        return self.tcgen05.interpretable if self.tcgen05 is not None else ""


class Sm100:
    """The sm_100a generation: the tcgen05 kernel's own rules and numbers, checked after the shared phases, and the
    plan's records that differ from the wgmma kernel's (the launch, the SMEM map, the epilogue's staging tiles)."""
    mma = "tcgen05"

    def schedule_spec(self, spec):
        """The spec the shared phases plan: a dynamic loop is claimed by cluster launch control over a grid of one
        CTA a tile, which they plan as an nd_loop."""
        sch = spec.schedule
        if sch.persistent.loop != "dynamic":
            return spec
        pers = sch.persistent.model_copy(update={"loop": "nd_loop"})
        return spec.model_copy(update={"schedule": sch.model_copy(update={"persistent": pers})})

    def wgmma_problems(self, problems: Problems) -> Problems:
        """The wgmma kernel's phases run for their numbers only: their rules do not apply (check has the tcgen05
        kernel's own)."""
        return Problems()

    def check(self, spec, op, dims: Dims, tile: Tile, lay: Layout, cl: Cluster, pipe: Pipeline, hw: Hardware,
              problems: Problems) -> tuple[BlackwellPlan | None, Tcgen05Plan | None]:
        """What the spec (as written) may say on sm_100a, the CUDA kernel's numbers and the Pallas kernel's."""
        sch = spec.schedule
        check_target(spec, op, sch, hw, problems)
        bw = blackwell_plan(op, sch, dims, tile, lay, cl, pipe, hw, problems)
        return bw, tcgen05_plan(op, sch, dims, tile, cl, pipe, bw, hw, problems)

    def finish(self, plan, state: tuple[BlackwellPlan, Tcgen05Plan | None], spec, hw: Hardware):
        """The tcgen05 kernel's own block, SMEM, name and epilogue records; a CTA pair's tiles."""
        bw, tc = state
        plan = sm100_records(plan, bw, tc)
        return cta_pair(plan, spec, hw) if bw.cta_group == 2 else plan


SM100 = Sm100()


def sm100_records(plan, bw: BlackwellPlan, tc: Tcgen05Plan | None):
    """sm_100a: its own block, SMEM and name; CLC launches a CTA a tile and claims the rest; the output's tensor
    map has the staging tile's box (a warp's 32 rows x epi_cols, its swizzle), and the plan's epilogue record is that
    epilogue's (a staging tile a warp, stored by TMA)."""
    cl = plan.cluster
    args = plan.launch.kernel_args
    out = args[2]
    o = plan.operands[out.operand]
    out_map = tensor_map(out.operand, o.shape, o.dtype, EPI_ROWS, bw.epi_cols, bw.epi_swizzle)
    # the lhs box is the CTA's whole 128 rows (half of them where a [1, 2] cluster multicasts it), also for an M
    # below the tile: each stage's full barrier expects the whole box's bytes, zero-filled past M
    a = args[0]
    lhs = tensor_map(a.operand, a.shape, a.dtype, bw.rows // (2 if cl.multicast == "lhs" else 1), a.box[-1],
                     a.swizzle)
    launch = dataclasses.replace(
        plan.launch, threads=THREADS, smem_bytes=bw.smem_bytes,
        kernel_name=f"{plan.launch.kernel_name.split('_wg')[0]}_sm100_cg{bw.cta_group}"
        + (f"_c{cl.cluster_m}x{cl.cluster_n}" if cl.cluster_size > 1 else "") + ("_clc" if bw.dynamic else ""),
        kernel_args=(lhs, args[1], out_map, *args[3:]),
        **({"num_blocks": plan.tiles.num_tiles * cl.cluster_size, "auto_blocks": False} if bw.dynamic else {}))
    ring = dataclasses.replace(plan.pipeline, smem_buffers=sm100_smem(bw, plan.pipeline.stages),
                               stage_tx_bytes=bw.stage_bytes)
    layout = dataclasses.replace(plan.layout, a_box_rows=bw.rows, a_compact=False, a_zero_bytes=0)
    staging = EpilogueStaging(
        epi_rows=EPI_ROWS, epi_cols=bw.epi_cols, epi_buffers=bw.epi_buffers, epi_swizzle=bw.epi_swizzle,
        epi_bytes=bw.epi_bytes, epi_store="tma", epi_chunks_m=1, epi_chunks_n=bw.epi_chunks, epi_n8=bw.epi_cols // 8,
        epi_row_bytes=bw.epi_swizzle, epi_swizzle_mask=bw.epi_swizzle // 16 - 1, epi_pending=bw.epi_buffers - 1,
        epi_uneven=bw.epi_chunks % bw.epi_buffers != 0)
    return dataclasses.replace(plan, launch=launch, pipeline=ring, layout=layout, staging=staging,
                               mma=Tcgen05Mma(blackwell=bw, wgmma=plan.mma, tcgen05=tc))


def cta_pair(plan, spec, hw: Hardware):
    """sm_100a's tcgen05.mma.cta_group::2: the [2, 1] cluster's tile is the 256-row tile itself (the shared phases
    counted two of them a cluster; each CTA's lhs box is its 128 rows: sm100_records)."""
    pers = spec.schedule.persistent
    tiles = plan.tiles
    num_tiles = tiles.tiles_m * tiles.tiles_n
    pairs = D.dmin(num_tiles, hw.sm_count // 2 if pers.num_blocks == "auto" else max(pers.num_blocks // 2, 1))
    return dataclasses.replace(plan, tiles=dataclasses.replace(tiles, num_tiles=num_tiles,
                                                               cluster_tiles_m=tiles.tiles_m),
                               launch=dataclasses.replace(plan.launch, num_blocks=2 * pairs))


__all__ = ["BlackwellPlan", "Tcgen05Mma", "Sm100", "SM100", "blackwell_plan", "check_target",
           "instruction_descriptor", "THREADS"]
