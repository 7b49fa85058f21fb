"""The attention forward on Blackwell (schedule.target: sm_100a): the Pallas (Mosaic GPU) rendering's rules and its
plan record (`AttnTcgen05Plan`, plan.tcgen05), rendered by templates/attention/pallas_sm_100a.py.j2.

The kernel (jax 0.11.2, Lane lowering semantics) has two warpgroups a CTA and one 128-row query block a tile.
Warpgroup 0 is split by `plgpu.warp_map`: warp 0 loads the Q tile and streams K and V blocks into a
`max_concurrent_steps`-deep SMEM ring by TMA; warp 1 issues the tcgen05 MMAs: S = Q K^T (M 128, N block_kv, both
operands in SMEM) into an f32 S buffer in tensor memory (TMEM, double-buffered when the columns allow, so the next
block's S is computed under this block's softmax), and O += P V with P read from TMEM (the TS form: P bf16 / f16
packed two a 32-bit TMEM cell, V from SMEM) into the f32 O accumulator in TMEM. Warpgroup 1, the softmax, owns the
128 rows (thread = row, the TCGEN05 register layout): it loads S (`async_load_tmem`), keeps the running max and sum
in base 2, rescales O in TMEM 64 columns at a time once the previous P V is done, writes P (`async_store_tmem`,
`commit_tmem`) and hands it to the MMA warp; after a tile's last block it normalises O, stages it in the Q tile and
stores it (and the log-sum-exp rows) by TMA.

NOT RUN on Blackwell hardware: lowered for sm_100a on the CPU (the MLIR holds the tcgen05 / TMEM operations) and run
in Mosaic GPU's interpreter against float64 (tests/families/attention/test_attention_sm100_pallas.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...frontend.model import ITEMSIZE
from ...plan.common import Problems, SmemMap
from ...plan.hardware import Hardware
from ...plan.legality import SMEM_SLACK, check_hopper_only, check_no_cluster, smem_detail
from .in_specs import check_in_specs
from .records import Blocks, Dims, Names

ROWS = 128                    # query rows a tile: one tcgen05.mma M, the 128 TMEM lanes (thread = row)
THREADS = 256                 # warpgroup 0: TMA warp + MMA warp; warpgroup 1: the softmax
CHUNK = 64                    # O columns a TMEM load / store of the rescale and the epilogue (one 128-byte swizzle)
BLOCK_KV_UNIT = 64            # block_kv: multiples of 64 (the 128-byte swizzle of the K / V tiles) ...
BLOCK_KV_MAX = 256            # ... up to the tcgen05.mma N of S = Q K^T
BARRIER_BYTES = 8

# Hopper-only schedule fields: written on sm_100a, each is a located error saying what the sm_100a kernel does
HOPPER_ONLY = (
    (("pipeline", "num_compute_wgs"), "one softmax warpgroup owns the tile's 128 query rows (thread = row) and the "
                                      "MMAs are issued by one warp, not by consumer warpgroups"),
    (("pipeline", "memory_registers"), "the sm_100a kernel sets no setmaxnreg budgets (S and O are in TMEM, not in "
                                       "registers)"),
    (("pipeline", "compute_registers"), "the sm_100a kernel sets no setmaxnreg budgets (S and O are in TMEM, not in "
                                        "registers)"),
    (("barriers",), "there is no consumer ping-pong to schedule: one MMA warp issues every tcgen05.mma, and S is "
                    "double-buffered in TMEM so the next block's S = Q K^T runs under this block's softmax"),
)


@dataclass(frozen=True)
class AttnTcgen05Plan:
    """What the Pallas sm_100a attention template needs beyond the shared attention plan."""
    rows: int                 # query rows a tile (TMEM lanes): 128
    s_buffers: int            # S buffers in TMEM (2: S of block j + 1 under the softmax of block j)
    s_cols: int               # TMEM columns of the S buffers (s_buffers x block_kv, f32)
    p_cols: int               # TMEM columns of P (block_kv / 2: two 16-bit values a 32-bit cell)
    o_cols: int               # TMEM columns of the O accumulator (head_dim, f32)
    tmem_cols: int            # columns tcgen05.alloc takes: a power of two >= 32 over their sum
    chunk: int                # O columns a TMEM load / store (the rescale, the epilogue)
    sm_count: int             # the B200's SMs: the persistent grid where jax sees no GPU
    interpretable: str = ""   # "" or why Mosaic GPU's interpreter cannot run it


def tmem_columns(block_kv: int, head_dim: int, s_buffers: int) -> tuple[int, int, int]:
    """(S, P, O) TMEM columns: f32 S buffers, 16-bit P packed two a column, f32 O."""
    return s_buffers * block_kv, block_kv // 2, head_dim


def check_target(spec, problems: Problems) -> None:
    """On sm_100a: the Pallas rendering only, no Hopper-only field, no backward pass yet."""
    sch = spec.schedule
    if sch.target != "sm_100a":
        return
    if "cuda" in sch.backends:
        from ...plan.defaults import written
        where = ("schedule", "backends") if written(spec, ("schedule", "backends")) else ("schedule", "target")
        problems.add(where, "the attention family's CUDA kernel is Hopper's (wgmma with S, P and O in registers); on "
                            "sm_100a attention has the Pallas rendering only (tcgen05 with S and O in TMEM): write "
                            "backends: [pallas], or target: sm_90a")
    check_hopper_only(spec, HOPPER_ONLY, sch.target, problems)
    if sch.pipeline.kind != "warp_specialized":
        problems.add(("schedule", "pipeline", "kind"), f"the sm_100a attention kernel is warp-specialized (a TMA warp, "
                                                       f"a tcgen05 MMA warp, a softmax warpgroup); got "
                                                       f"{sch.pipeline.kind}: write warp_specialized or leave it out")
    if getattr(spec, "backward", None) is not None:
        problems.add(("backward",), "the attention backward kernels are Hopper's (sm_90a): remove the backward "
                                    "section, or write target: sm_90a")


def plan_blocks(sch, names: Names, dims: Dims, problems: Problems) -> Blocks:
    """block_q 128 (one tcgen05.mma M a tile); block_kv from k's in_spec, else 128 (64 at head_dim 256, for SMEM)."""
    d = dims.d
    qs, ks = (sch.in_specs.get(n) for n in (names.q, names.k))
    block_q = qs.block_shape[0] if qs is not None else ROWS
    block_kv = ks.block_shape[0] if ks is not None else (128 if d <= 128 else 64)
    check_in_specs(sch, names, d, block_kv, problems)
    if block_q != ROWS:
        problems.add(("schedule", "in_specs", names.q, "block_shape", 0),
                     f"on sm_100a a tile is {ROWS} query rows (one tcgen05.mma M, the {ROWS} TMEM lanes of S and O), "
                     f"got {block_q}")
    if block_kv % BLOCK_KV_UNIT or not BLOCK_KV_UNIT <= block_kv <= BLOCK_KV_MAX:
        problems.add(("schedule", "in_specs", names.k, "block_shape", 0),
                     f"on sm_100a block_kv is the N of S = Q K^T's tcgen05.mma and the K of O += P V's, taken in "
                     f"{BLOCK_KV_UNIT}-key groups of the 128-byte swizzle: a multiple of {BLOCK_KV_UNIT} from "
                     f"{BLOCK_KV_UNIT} to {BLOCK_KV_MAX}, got {block_kv}")
    return Blocks(1, block_q, block_kv)


def check_problem(op, names: Names, dims: Dims, blocks: Blocks, problems: Problems) -> None:
    """Fixed sizes, whole blocks."""
    for n in dims.ranges:
        problems.add(("op", "sizes", n), f"the sm_100a attention kernel takes fixed sizes only (one package per "
                                         f"size); give {n} a fixed value, or write target: sm_90a")
    if dims.ranges:
        return
    for seq, block, what, name in ((dims.sq, blocks.block_q, "q", names.q), (dims.skv, blocks.block_kv, "kv",
                                                                            names.k)):
        if seq % block:
            problems.add(("op", "inputs", name, "shape"),
                         f"the sm_100a attention kernel takes whole blocks only: S{what} = {seq} must be a multiple of "
                         f"block_{what} = {block}; pad the sequence, or write target: sm_90a")


def plan_smem(sch, blocks: Blocks, dims: Dims, with_lse: bool, s_buffers: int, hw: Hardware,
              problems: Problems) -> tuple[SmemMap, int]:
    """The Q tile (O's staging at the end of a tile), the K and V rings, the log-sum-exp rows, the mbarriers."""
    stages = sch.pipeline.max_concurrent_steps
    isz = ITEMSIZE[dims.dtype]
    m = SmemMap()
    m.alloc("q", ROWS * dims.d * isz, note="Q tile, then O staged for the TMA store")
    m.alloc("k", blocks.block_kv * dims.d * isz, stages, note="K stages")
    m.alloc("v", blocks.block_kv * dims.d * isz, stages, note="V stages")
    if with_lse:
        m.alloc("lse", ROWS * 4, align=16, note="the log-sum-exp rows for their TMA store")
    for nm, count, note in (("q_full", 1, "Q landed"), ("q_empty", 1, "O's TMA store read the Q tile"),
                            ("k_full", stages, "a K stage landed"), ("k_empty", stages, "S = Q K^T read it"),
                            ("v_full", stages, "a V stage landed"), ("v_empty", stages, "O += P V read it"),
                            ("s_full", s_buffers, "an S buffer is in TMEM"), ("p_full", 1, "P and the rescaled O are in TMEM"),
                            ("o_done", 1, "O += P V is done"), ("o_empty", 1, "the epilogue read O")):
        m.alloc(nm, BARRIER_BYTES, count, align=8, note="mbarrier: " + note)
    nbytes = m.top + SMEM_SLACK
    if nbytes > hw.smem_per_block:
        kv = 2 * blocks.block_kv * dims.d * isz
        fit = max((hw.smem_per_block - (nbytes - stages * kv)) // kv, 0)
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     f"SMEM needed is {nbytes} B ({smem_detail(m)}), over the {hw.name}'s {hw.smem_per_block} B a "
                     f"block; {fit} stage(s) would fit, or use a smaller block_kv")
    return m, nbytes


def plan_tmem(names: Names, blocks: Blocks, dims: Dims, hw: Hardware, problems: Problems) -> AttnTcgen05Plan | None:
    """S double-buffered when its two buffers, P and O fit the TMEM's columns; single, else a located error."""
    for s_buffers in (2, 1):
        s, p, o = tmem_columns(blocks.block_kv, dims.d, s_buffers)
        if s + p + o <= hw.tmem_columns:
            return AttnTcgen05Plan(rows=ROWS, s_buffers=s_buffers, s_cols=s, p_cols=p, o_cols=o,
                                   tmem_cols=max(32, 1 << (s + p + o - 1).bit_length()), chunk=CHUNK,
                                   sm_count=hw.sm_count)
    problems.add(("schedule", "in_specs", names.k, "block_shape", 0),
                 f"TMEM holds {hw.tmem_columns} columns x {hw.tmem_lanes} lanes a CTA; S (f32, block_kv = "
                 f"{blocks.block_kv} columns), P ({blocks.block_kv // 2} columns, 16-bit packed) and O (f32, head_dim "
                 f"= {dims.d} columns) need {s + p + o} even with one S buffer; use block_kv "
                 f"{_largest_fit(dims.d, hw)} or less")
    return None


def _largest_fit(d: int, hw: Hardware) -> int:
    fit = [b for b in range(BLOCK_KV_UNIT, BLOCK_KV_MAX + 1, BLOCK_KV_UNIT) if sum(tmem_columns(b, d, 1)) <= hw.tmem_columns]
    return max(fit) if fit else 0


def check_limits(sch, grid, names: Names, problems: Problems) -> None:
    """What the Pallas sm_100a rendering cannot express: the dynamic loop, other lowering semantics, the profiler,
    unsafe_no_auto_barriers, a cluster."""
    if grid.dynamic:
        problems.add(("schedule", "persistent", "loop"), "the sm_100a attention walks its tiles with nd_loop (block i "
                                                         "takes tiles i, i + grid, ...); loop: dynamic (a tile counter) "
                                                         "is the Hopper CUDA kernel's: write loop: nd_loop or none")
    cp = sch.compiler_params
    if "lowering_semantics" in cp.model_fields_set and cp.lowering_semantics != "lane":
        problems.add(("schedule", "compiler_params", "lowering_semantics"),
                     "the sm_100a attention is written for Lane semantics (explicit TCGEN05 register layouts, thread "
                     "= row); remove lowering_semantics or set it to lane")
    if cp.unsafe_no_auto_barriers:
        problems.add(("schedule", "compiler_params", "unsafe_no_auto_barriers"),
                     "the sm_100a attention's softmax warpgroup stages O in SMEM for a TMA store and relies on Mosaic "
                     "GPU's automatic barriers there; remove unsafe_no_auto_barriers")
    for name in ("profile_space", "profile_dir"):
        if getattr(cp, name):
            problems.add(("schedule", "compiler_params", name),
                         f"the sm_100a attention takes no profiler buffer; remove {name}")
    check_no_cluster(sch.cluster, "attention CTAs share no operand here", problems)
    for n in names.inputs:
        if n == "interpret":
            problems.add(("op", "inputs", n), "'interpret' is the generated Pallas function's own keyword argument; "
                                              "choose another name")


def tmem_map(p) -> list[tuple[int, int, str]]:
    """The TMEM columns of the sm_100a attention kernel, like the SMEM map: (first column, columns, what); columns
    are 32-bit cells of all 128 lanes (lane = query row)."""
    t = p.tcgen05
    out, col = [], 0
    for i in range(t.s_buffers):
        out.append((col, p.block_kv, f"S[{i}]: f32 scores of a key block ({t.rows} rows x {p.block_kv} keys)"
                    + ("; even blocks" if i == 0 and t.s_buffers > 1 else "; odd blocks" if i else "")))
        col += p.block_kv
    out.append((col, t.p_cols, f"P: {p.dtype} probabilities, two a 32-bit column ({t.rows} x {p.block_kv}), the A "
                               f"operand of O += P V"))
    col += t.p_cols
    out.append((col, t.o_cols, f"O: the f32 accumulator ({t.rows} rows x head_dim {p.head_dim})"))
    col += t.o_cols
    if col < t.tmem_cols:
        out.append((col, t.tmem_cols - col, "allocated, unused (tcgen05.alloc takes a power of two of columns)"))
    return out


__all__ = ["AttnTcgen05Plan", "check_target", "plan_blocks", "check_problem", "plan_smem", "plan_tmem",
           "check_limits", "tmem_map", "HOPPER_ONLY", "ROWS", "THREADS"]
