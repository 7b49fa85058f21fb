"""The sm_90a (Hopper) GEMM planner: `wgmma` from SMEM descriptors into f32 accumulators in registers.

The kernel is persistent and warp-specialized. One producer warpgroup (one elected thread) streams lhs / rhs blocks
through the stage ring by TMA; 1-2 consumer warpgroups split the output tile along M or N (cooperative), or each owns
whole tiles, the two taking alternate tiles (ping-pong), issue wgmma (m64nNk16, k32 for fp8) and store the tile in
`epilogue.tile` chunks staged through SMEM (or directly from registers). Here: the consumer warpgroups, their
setmaxnreg budgets, the epilogue's chunks, the SMEM map and barriers, and the plan's records of them (WarpRoles,
EpilogueStaging, StageRing) and of the wgmma instructions (`Wgmma`, plan.mma).

The sm_100a planner (sm100.py) runs these phases too, for the numbers every plan.json shows, without their rules."""
from __future__ import annotations

from dataclasses import dataclass

from .. import dims as D
from ..common import Problems, SmemMap
from ..hardware import Hardware
from ..legality import (
    check_setmaxnreg,
    check_smem_fit,
    profiler_smem_bytes,
    register_budget_problem,
    stages_that_fit,
)
from .operands import compact_lhs
from .records import (
    REG_OVERHEAD,
    WGMMA_K_BYTES,
    WGMMA_M,
    Cluster,
    Dims,
    EpilogueChunks,
    EpilogueStaging,
    Layout,
    Pipeline,
    Registers,
    Smem,
    StageRing,
    Tile,
    VectorSlots,
    Warpgroups,
    WarpRoles,
)


@dataclass(frozen=True)
class Wgmma:
    """plan.mma on sm_90a: the wgmma instructions of a consumer warpgroup, and split-K's hand-over of partial tiles
    (DSMEM reads of the peers' accumulator fragments)."""
    m_blocks: int              # wgmma M blocks (64 rows) per consumer
    wgmma_regs: int            # f32 accumulators per thread of one m64nN wgmma (wg_tile_n / 2)
    k_wgmmas: int              # wgmma K steps (16 elements each; 32 for fp8) per stage
    a_mblock_bytes: int        # K-major lhs: bytes between the 64-row wgmma M blocks of a stage
    wg_n8: int                 # n8 accumulator blocks across a consumer's columns (wg_tile_n / 8)
    red_full_arrivals: int     # split-K: rank 0's red_full barrier counts every peer consumer thread ((S-1) nc 128)
    red_empty_arrivals: int    # a peer's red_empty barrier counts rank 0's consumer threads (nc 128)
    red_q: int                 # split-K: 16-byte slots per 64-row M block of a consumer thread's fragment (wgmma_regs / 4)
    red_slots: int             # ... and per consumer thread (m_blocks x red_q)

    @property
    def not_interpretable(self) -> str:
        """Mosaic GPU's interpreter runs every sm_90a Pallas matmul."""
        return ""


class Sm90:
    """The sm_90a generation: the phases' own rules are the kernel's; nothing is added after them."""
    mma = "wgmma"

    def schedule_spec(self, spec):
        """The spec the shared phases plan: the one written."""
        return spec

    def wgmma_problems(self, problems: Problems) -> Problems:
        """Where the wgmma kernel's phases (consumer warpgroups, registers, epilogue chunks, SMEM map) report."""
        return problems

    def check(self, spec, op, dims: Dims, tile: Tile, lay: Layout, cl: Cluster, pipe: Pipeline, hw: Hardware,
              problems: Problems) -> None:
        """The generation's rules beyond the phases' (none on sm_90a)."""
        return None

    def finish(self, plan, state, spec, hw: Hardware):
        """The plan as the phases composed it."""
        return plan


SM90 = Sm90()


def warpgroups(op, pipe, tile: Tile, dims: Dims, problems: Problems) -> Warpgroups:
    """1-2 consumer warpgroups split the tile along M or N; each one's share is a legal wgmma shape."""
    tm, tn, tk = tile.tm, tile.tn, tile.tk
    nc = pipe.num_compute_wgs
    if pipe.kind != "warp_specialized":
        problems.add(("schedule", "pipeline", "kind"),
                     "the matmul family is warp-specialized (a TMA producer warpgroup and 1-2 wgmma consumers); set "
                     "pipeline.kind: warp_specialized")
    if nc > 2:
        problems.add(("schedule", "pipeline", "num_compute_wgs"), f"1 or 2 consumer warpgroups, got {nc}")
        nc = 2
    if pipe.consumer_schedule != "cooperative":
        return pingpong_warpgroups(op, pipe, tile, dims, problems)
    axis = (pipe.wg_axis or ("m" if tm // nc >= WGMMA_M and tm % (nc * WGMMA_M) == 0 else "n")).lower()
    if axis not in ("m", "n"):
        problems.add(("schedule", "pipeline", "wg_axis"), f"consumers split the tile along m or n, got '{pipe.wg_axis}'")
        axis = "m"
    wtm, wtn = (tm // nc, tn) if axis == "m" else (tm, tn // nc)
    if (axis == "m" and tm % nc) or wtm % WGMMA_M:
        problems.add(("schedule", "in_specs", op.lhs, "block_shape"),
                     f"each consumer warpgroup takes {wtm} rows of the {tm}-row tile; wgmma needs a multiple of {WGMMA_M} "
                     f"(tile_m a multiple of {WGMMA_M * (nc if axis == 'm' else 1)})")
    if axis == "n" and tn % nc:
        problems.add(("schedule", "in_specs", op.rhs, "block_shape"), f"tile_n {tn} does not split over {nc} consumers")
    if wtn % 8 or wtn > 256 or wtn < 8:
        problems.add(("schedule", "in_specs", op.rhs, "block_shape"),
                     f"each consumer's wgmma N is {wtn}; it must be a multiple of 8 between 8 and 256 "
                     f"(tile_n {tn}{' split over ' + str(nc) + ' consumers' if axis == 'n' else ''})")
    if tk % (WGMMA_K_BYTES // dims.isz):
        problems.add(("schedule", "in_specs", op.lhs, "block_shape"),
                     f"tile_k {tk} must be a multiple of wgmma's K ({WGMMA_K_BYTES // dims.isz} for {dims.in_dtype})")
    return Warpgroups(nc, axis, wtm, wtn)


def pingpong_warpgroups(op, pipe, tile: Tile, dims: Dims, problems: Problems) -> Warpgroups:
    """Ping-pong: two consumer warpgroups, each owning whole tiles (tile_m / 64 wgmma M-blocks of m64n<tile_n>),
    taking alternate tiles of the block's sequence; nothing splits the tile."""
    tm, tn, tk = tile.tm, tile.tn, tile.tk
    what = pipe.consumer_schedule
    if pipe.num_compute_wgs != 2:
        problems.add(("schedule", "pipeline", "num_compute_wgs"),
                     f"consumer_schedule: {what} alternates tiles between two consumer warpgroups; got "
                     f"{pipe.num_compute_wgs}: write num_compute_wgs: 2 (left out, the planner picks 1 for a 64-row "
                     f"tile), or use consumer_schedule: cooperative")
    if pipe.wg_axis is not None:
        problems.add(("schedule", "pipeline", "wg_axis"),
                     f"with consumer_schedule: {what} each consumer owns a whole {tm} x {tn} tile: nothing is split "
                     f"along an axis; leave wg_axis out")
    if tm % WGMMA_M:
        problems.add(("schedule", "in_specs", op.lhs, "block_shape"),
                     f"each consumer warpgroup takes the whole {tm}-row tile in wgmma M-blocks of {WGMMA_M} rows: "
                     f"tile_m must be a multiple of {WGMMA_M}")
    if tn % 8 or tn > 256 or tn < 8:
        problems.add(("schedule", "in_specs", op.rhs, "block_shape"),
                     f"each consumer's wgmma N is the tile's {tn} columns; it must be a multiple of 8 between 8 and 256")
    if tk % (WGMMA_K_BYTES // dims.isz):
        problems.add(("schedule", "in_specs", op.lhs, "block_shape"),
                     f"tile_k {tk} must be a multiple of wgmma's K ({WGMMA_K_BYTES // dims.isz} for {dims.in_dtype})")
    return Warpgroups(2, "m", tm, tn, what)


def epilogue_chunks(epi, wg: Warpgroups, dims: Dims, hw: Hardware, problems: Problems) -> EpilogueChunks:
    """The output tile is stored in (64 x cols) chunks staged through SMEM by TMA, or directly from registers."""
    osz = dims.osz
    if epi.tile is not None:
        er, ec = epi.tile
    else:
        er, ec = WGMMA_M, min(wg.wtn, 128 // osz)
    direct = epi.store == "direct"
    epi_swz = 0
    if not direct:
        if er != WGMMA_M:
            problems.add(("schedule", "epilogue", "tile", 0), f"epilogue chunks are one wgmma M block tall: {WGMMA_M} rows, got {er}")
        if ec <= 0 or ec % 16 or wg.wtn <= 0 or wg.wtn % ec:
            problems.add(("schedule", "epilogue", "tile", 1),
                         f"epilogue chunk width {ec} must be a multiple of 16 dividing each consumer's {wg.wtn} columns")
        epi_swz = ec * osz if ec * osz in hw.swizzles else 0
        if ec * osz > 128:
            problems.add(("schedule", "epilogue", "tile", 1), f"epilogue chunk rows are {ec * osz} B; at most 128 B (the "
                                                              f"widest swizzle): use at most {128 // osz} columns")
    if direct and not D.divisible(dims.n, 2, dims.ranges):
        problems.add(("schedule", "epilogue", "store"), f"direct stores write column pairs; N = {dims.n} is odd"
                     + (" at some calls (declare multiple_of: 2)" if isinstance(dims.n, D.Dim) else "")
                     + ": use store: tma")
    return EpilogueChunks(er, ec, direct, epi_swz, er * ec * osz)


def registers(pipe, wg: Warpgroups, hw: Hardware, problems: Problems) -> Registers:
    """setmaxnreg budgets of the producer and the consumers, within the registers the block is launched with
    (`__launch_bounds__(threads, 1)`); the accumulators fit a consumer thread's."""
    nc = wg.nc
    threads = 128 * (1 + nc)
    preg = pipe.memory_registers or (40 if nc == 2 else 56)
    creg = pipe.compute_registers or (232 if nc == 2 else 240)
    acc_regs = wg.wtm * wg.wtn // 128
    check_setmaxnreg({"memory_registers": preg, "compute_registers": creg}, problems)
    if (message := register_budget_problem(preg, nc, creg, hw)) is not None:
        problems.add(("schedule", "pipeline", "compute_registers"), message)
    if acc_regs + REG_OVERHEAD > min(creg, 255):
        how = ("each consumer owns a whole tile in ping-pong: use a tile of at most "
               f"{(min(creg, 255) - REG_OVERHEAD) * 128} elements (128 x 128 or 64 x 256 fit), or "
               "consumer_schedule: cooperative") if wg.pingpong else "use a smaller tile or more consumers"
        problems.add(("schedule", "pipeline", "compute_registers"),
                     f"each consumer thread holds {acc_regs} f32 accumulators ({wg.wtm} x {wg.wtn} / 128) plus about "
                     f"{REG_OVERHEAD} working registers, over its budget of {min(creg, 255)}; {how}")
    return Registers(threads, preg, creg, acc_regs, hw.regs_per_block(threads))


def smem_map(sch, tile: Tile, isz: int, stages: int, nc: int, cluster: Cluster, chunks: EpilogueChunks,
             hw: Hardware, problems: Problems, lay: Layout, a_rows: int, vecs: VectorSlots | None = None) -> Smem:
    """The lhs / rhs stage rings (`a_rows`: the lhs rows a stage loads, lhs_stage_rows; a compact lhs ring where a
    static M is below a one-block tile), the output staging buffers, a split-K cluster's partial tile, the epilogue
    operands' SMEM slots (`vecs`: epilogue.operands: smem) and the barriers; they must fit a block's SMEM."""
    vecs = vecs or VectorSlots()
    compact = compact_lhs(tile, a_rows)
    a_stage = (a_rows * tile.tk if compact else tile.tm * tile.tk) * isz
    b_stage = tile.tn * tile.tk * isz
    buffers = sch.epilogue.buffers
    smem = SmemMap()
    smem.alloc("a", a_stage, stages, note=f"lhs stage ring ({a_rows} of {tile.tm} rows a box: compact)" if compact
               else "lhs stage ring")
    tail = (tile.tm - a_rows) * lay.swz_a if compact else 0
    if tail:
        smem.alloc("a_tail", tail, align=1024, note="zeros: the last lhs box's 64-row window runs on into it")
    smem.alloc("b", b_stage, stages, note="rhs stage ring")
    if not chunks.direct:
        smem.alloc("epi", chunks.nbytes, buffers * nc, note="output staging per consumer")
    partial = tile.tm * tile.tn * 4 if cluster.ck > 1 else 0
    if partial:
        smem.alloc("red", partial, note="split-K: this CTA's f32 partial tile, read by rank 0 through DSMEM")
    if vecs.slots:
        smem.alloc("vec", vecs.slot_bytes, vecs.slots, align=16,
                   note=f"epilogue operands a tile ({', '.join(v.name for v in vecs.vectors)}), copied by producer warp 1")
    # consumers reading a stage: each multicast stage is read in every CTA of the cluster
    readers = (1 if sch.pipeline.consumer_schedule != "cooperative" else nc) * (cluster.csize if cluster.multicast
                                                                                else 1)
    full_arr, empty_arr = barrier_arrivals(sch, stages, readers, problems)
    smem.alloc("full", 8, stages, align=8, note="TMA landed (expect_tx)")
    smem.alloc("empty", 8, stages, align=8, note=f"stage free ({readers} consumer arrival{'s' if readers > 1 else ''})")
    if partial:
        smem.alloc("red_full", 8, align=8, note=f"rank 0: the peers' partials written ({(cluster.ck - 1) * nc * 128} "
                                                f"thread arrivals)")
        smem.alloc("red_empty", 8, align=8, note=f"a peer: rank 0 has read its partial ({nc * 128} thread arrivals)")
    if vecs.slots:
        smem.alloc("vec_full", 8, vecs.slots, align=8, note=f"operand slot copied ({vecs.fill_threads} cp.async arrivals)")
        smem.alloc("vec_empty", 8, vecs.slots, align=8, note=f"operand slot read ({vecs.readers * 128} thread arrivals)")
    profile = profiler_smem_bytes(sch.compiler_params.profile_space, nc + 1)
    if profile:
        smem.alloc("profile", profile, note="Mosaic GPU's profiler events (compiler_params.profile_space)")
    staging = (0 if chunks.direct else chunks.nbytes * buffers * nc) + partial
    fit = stages_that_fit(hw, staging + 16 * stages + profile + tail + vecs.nbytes, a_stage + b_stage)
    nbytes = check_smem_fit(smem, hw, ("schedule", "pipeline", "max_concurrent_steps"), problems,
                            f"at most {fit} stages fit this tile" + (" beside the profiler's "
                                                                      f"{profile} B" if profile else ""))
    return Smem(tuple(smem.buffers), nbytes, full_arr, empty_arr, a_stage, b_stage, a_rows)


def barrier_arrivals(sch, stages: int, consumers: int, problems: Problems) -> tuple[int, int]:
    """The 'full' and 'empty' rings: one barrier per stage; their arrivals (1 TMA, one per consumer warpgroup reading
    the stage, in each CTA of the cluster) unless schedule.barriers says otherwise."""
    full_arr, empty_arr = 1, consumers
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
    return full_arr, empty_arr


# ------------------------------------------------------------------------------------------- the plan's records


def wgmma_record(dims: Dims, tile: Tile, wg: Warpgroups, lay: Layout, cl: Cluster) -> Wgmma:
    return Wgmma(m_blocks=wg.wtm // WGMMA_M, wgmma_regs=wg.wtn // 2, k_wgmmas=tile.tk // (WGMMA_K_BYTES // dims.isz),
                 a_mblock_bytes=WGMMA_M * lay.swz_a, wg_n8=wg.wtn // 8,
                 red_full_arrivals=(cl.ck - 1) * wg.nc * 128, red_empty_arrivals=wg.nc * 128, red_q=wg.wtn // 8,
                 red_slots=wg.wtm // WGMMA_M * (wg.wtn // 8))


def warp_roles(wg: Warpgroups, regs: Registers) -> WarpRoles:
    return WarpRoles(num_consumers=wg.nc, consumer_schedule=wg.schedule, wg_axis=wg.axis, wg_tile_m=wg.wtm,
                     wg_tile_n=wg.wtn, producer_regs=regs.preg, consumer_regs=regs.creg, block_regs=regs.block,
                     acc_regs=regs.acc_regs)


def staging_record(epi, chunks: EpilogueChunks, wg: Warpgroups, dims: Dims, outputs: int) -> EpilogueStaging:
    """The consumers' epilogue: chunks of a consumer's tile staged through `epilogue.buffers` SMEM buffers each (a
    second output takes a slot of each chunk too: `outputs`)."""
    chunks_m, chunks_n = wg.wtm // chunks.rows, wg.wtn // chunks.cols
    return EpilogueStaging(
        epi_rows=chunks.rows, epi_cols=chunks.cols, epi_buffers=epi.buffers, epi_swizzle=chunks.swizzle,
        epi_bytes=chunks.nbytes, epi_store=epi.store, epi_chunks_m=chunks_m, epi_chunks_n=chunks_n,
        epi_n8=chunks.cols // 8, epi_row_bytes=chunks.cols * dims.osz,
        epi_swizzle_mask=chunks.swizzle // 16 - 1 if chunks.swizzle else 0, epi_pending=epi.buffers - 1,
        epi_uneven=chunks_m * chunks_n * outputs % epi.buffers != 0)


def stage_ring(pipe: Pipeline, smem: Smem, tile: Tile, dims: Dims) -> StageRing:
    """The ring: a stage's TMA bytes (the lhs rows it loads and the rhs block), its barriers' arrivals, the SMEM map."""
    return StageRing(stages=pipe.stages, delay_release=pipe.delay,
                     stage_tx_bytes=smem.a_rows * tile.tk * dims.isz + smem.b_stage,
                     full_arrivals=smem.full_arrivals, empty_arrivals=smem.empty_arrivals, smem_buffers=smem.buffers)
