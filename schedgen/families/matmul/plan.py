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

import dataclasses
import math
from typing import TYPE_CHECKING

from ...plan.common import (
    Problems,
    dynamic_ranges,
)
from ...plan import dims as D
from ...plan.hardware import Hardware
from ...plan.launch import KernelLaunch
from .blackwell import EPI_ROWS, THREADS as SM100_THREADS, blackwell_plan, check_target, sm100_smem
from .blockscale import check_block_scaled_schedule, scale_prefetch_of
from .stream_k import check_stream_k, workspace_arg
from .tcgen05 import tcgen05_plan
from .smem_operands import vector_slots
from .unread import check_unread
from .operands import check_names, epilogue_code, mat_operands, parse_epilogue, problem_dims
from .records import (
    WGMMA_K_BYTES,
    WGMMA_M,
    Cluster,
    Dims,
    EpilogueChunks,
    EpilogueCode,
    Layout,
    MatmulPlan,
    Pipeline,
    Registers,
    Smem,
    Tile,
    TileLoop,
    Warpgroups,
)
from .schedule import (
    backend_limits,
    block_tile,
    cluster_shape,
    epilogue_chunks,
    compact_lhs,
    kernel_args,
    lhs_stage_rows,
    pipeline,
    registers,
    smem_layouts,
    smem_map,
    tensor_map,
    tile_loop,
    warpgroups,
)

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile


# ------------------------------------------------------------------------------------ the records of the phases


# --------------------------------------------------------------------------------------------- the planner


def plan_matmul(spec: SpecFile, hw: Hardware) -> tuple[MatmulPlan | None, Problems]:
    """The phases in order, each checking its own rules; every problem is collected, and a phase whose inputs are
    broken stops the planner before it runs."""
    problems = Problems()
    op, sch = spec.op, spec.schedule
    written_spec = spec
    if sch.target == "sm_100a":
        # a dynamic loop is claimed by cluster launch control over a grid of one CTA a tile (the static phases plan
        # it as nd_loop); the output's tensor map is the sm_100a staging tile's (_sm100)
        static_loop = "nd_loop" if sch.persistent.loop == "dynamic" else sch.persistent.loop
        sch = sch.model_copy(update={"persistent": sch.persistent.model_copy(update={"loop": static_loop})})
        spec = spec.model_copy(update={"schedule": sch})
    out_name, extras = check_names(spec, problems)
    body = parse_epilogue(op, out_name, extras, problems)
    if problems and (op.lhs not in op.inputs or op.rhs not in op.inputs):
        return None, problems
    dims = problem_dims(op, out_name, extras, problems, sch.target)
    if dims is None:
        return None, problems
    tile = block_tile(op, sch, out_name, dims, problems)
    check_unread(op, sch, out_name, problems)
    # the consumer warpgroups, their registers, the epilogue's SMEM chunks and the SMEM map are the Hopper kernel's:
    # on sm_100a their rules do not apply (blackwell_plan checks the tcgen05 kernel's own)
    hopper = Problems() if sch.target == "sm_100a" else problems
    wg = warpgroups(op, sch.pipeline, tile, dims, hopper)
    layout = smem_layouts(op, tile, wg, dims.isz, hw, problems)
    cluster = cluster_shape(op, sch, tile, dims, layout, problems)
    chunks = epilogue_chunks(sch.epilogue, wg, dims, hw, hopper)
    regs = registers(sch.pipeline, wg, hw, hopper)
    pipe = pipeline(op, sch.pipeline, tile, dims.k, problems)
    vecs = vector_slots(sch, dims.extra_ops, tile.tm, tile.tn, wg.nc, wg.pingpong, hopper)
    smem = smem_map(sch, tile, dims.isz, pipe.stages, wg.nc, cluster, chunks, hw, hopper, layout,
                    lhs_stage_rows(tile, layout, cluster, dims.m), vecs)
    loop = tile_loop(sch.persistent, dims.batch, cluster, hw, problems, dims.ranges)
    backend_limits(op, sch, tile, dims, problems, layout)
    stream_k = check_stream_k(op, sch, dims, cluster, hw, problems)
    partial_sums = check_block_scaled_schedule(op, sch, tile, wg, regs.creg, pipe.delay, dims, problems)
    check_target(written_spec, op, sch, hw, problems)
    bw = blackwell_plan(op, written_spec.schedule, dims, tile, layout, cluster, pipe, hw, problems)
    tc = tcgen05_plan(op, written_spec.schedule, dims, tile, cluster, pipe, bw, hw, problems)
    if problems or body is None:
        return None, problems
    code = epilogue_code(op, body, out_name, extras)
    inputs, outputs = mat_operands(op, out_name, dims)
    args = kernel_args(op, out_name, inputs + outputs, tile, layout, cluster, chunks, hw, problems, dims.ranges,
                       smem.a_rows)
    if problems:
        return None, problems
    result = launch_record(spec, dims, tile, wg, layout, cluster, chunks, regs, pipe, smem, loop, code,
                           inputs, outputs, args)
    prefetch = scale_prefetch_of(op, sch)
    if partial_sums != 1 or prefetch:
        suffix = ("_ps2" if partial_sums != 1 else "") + ("_pf" if prefetch else "")
        result = dataclasses.replace(result, partial_sums=partial_sums, scale_prefetch=prefetch,
                                     launch=_renamed(result.launch, suffix))
    if vecs.slots:
        result = dataclasses.replace(result, epi_vectors=vecs, launch=_renamed(result.launch, "_vs"))
    if stream_k:
        ws = workspace_arg(result.launch.num_blocks, tile.tm, tile.tn, wg.nc)
        launch = _renamed(result.launch, "_sk", kernel_args=result.launch.kernel_args + (ws,))
        result = dataclasses.replace(result, stream_k=True, launch=launch, sk_flag_words=ws.zero // 4,
                                     sk_slot_floats=tile.tm * tile.tn, sk_quads=result.wgmma_regs // 4)
    if bw is not None:
        result = _sm100(result, bw, spec, cluster, loop, pipe, inputs + outputs, hw)
        if tc is not None:
            result = dataclasses.replace(result, tcgen05=tc)
    return result, problems


def _renamed(launch: KernelLaunch, suffix: str, **changes) -> KernelLaunch:
    """The launch header with `suffix` on its kernel's name (a variant of the kernel), and `changes`."""
    return dataclasses.replace(launch, kernel_name=launch.kernel_name + suffix, **changes)


def _sm100(result: MatmulPlan, bw, spec: SpecFile, cluster, loop, pipe, operands, hw: Hardware) -> MatmulPlan:
    """sm_100a: its own block, SMEM and name; CLC launches a CTA a tile and claims the rest; the output's tensor
    map has the staging tile's box (a warp's 32 rows x epi_cols, its swizzle), and the plan's epi_* fields are that
    epilogue's (a staging tile a warp, stored by TMA)."""
    args = result.launch.kernel_args
    out = args[2]
    o = operands[out.operand]
    out_map = tensor_map(out.operand, o.shape, o.dtype, EPI_ROWS, bw.epi_cols, bw.epi_swizzle)
    # the lhs box is the CTA's whole 128 rows (half of them where a [1, 2] cluster multicasts it), also for an M
    # below the tile: each stage's full barrier expects the whole box's bytes, zero-filled past M
    a = args[0]
    lhs = tensor_map(a.operand, a.shape, a.dtype, bw.rows // (2 if cluster.multicast == "lhs" else 1), a.box[-1],
                     a.swizzle)
    launch = dataclasses.replace(
        result.launch, threads=SM100_THREADS, smem_bytes=bw.smem_bytes,
        kernel_name=f"{result.launch.kernel_name.split('_wg')[0]}_sm100_cg{bw.cta_group}"
        + (f"_c{cluster.cm}x{cluster.cn}" if cluster.csize > 1 else "") + ("_clc" if bw.dynamic else ""),
        kernel_args=(lhs, args[1], out_map, *args[3:]),
        **({"num_blocks": loop.num_tiles * cluster.csize, "auto_blocks": False} if bw.dynamic else {}))
    result = dataclasses.replace(
        result, launch=launch, blackwell=bw, smem_buffers=sm100_smem(bw, pipe.stages),
        stage_tx_bytes=bw.stage_bytes, a_box_rows=bw.rows, a_compact=False, a_zero_bytes=0,
        epi_rows=EPI_ROWS, epi_cols=bw.epi_cols, epi_buffers=bw.epi_buffers, epi_swizzle=bw.epi_swizzle,
        epi_bytes=bw.epi_bytes, epi_store="tma", epi_chunks_m=1, epi_chunks_n=bw.epi_chunks, epi_n8=bw.epi_cols // 8,
        epi_row_bytes=bw.epi_swizzle, epi_swizzle_mask=bw.epi_swizzle // 16 - 1, epi_pending=bw.epi_buffers - 1,
        epi_uneven=bw.epi_chunks % bw.epi_buffers != 0)
    return _cta_pair(result, spec, cluster, hw) if bw.cta_group == 2 else result


def _cta_pair(result: MatmulPlan, spec: SpecFile, cluster, hw: Hardware) -> MatmulPlan:
    """sm_100a's tcgen05.mma.cta_group::2: the [2, 1] cluster's tile is the 256-row tile itself (the Hopper phases
    counted two of them a cluster; each CTA's lhs box is its 128 rows: _sm100)."""
    pers = spec.schedule.persistent
    num_tiles = cluster.tiles_m * cluster.tiles_n
    pairs = D.dmin(num_tiles, hw.sm_count // 2 if pers.num_blocks == "auto" else max(pers.num_blocks // 2, 1))
    return dataclasses.replace(result, num_tiles=num_tiles, cluster_tiles_m=cluster.tiles_m,
                               launch=dataclasses.replace(result.launch, num_blocks=2 * pairs))


# --------------------------------------------------------------------------------- names and the epilogue body


# ----------------------------------------------------------------------------------------- operands and dtypes


# ----------------------------------------------------------------------------------- the tile and the warpgroups


# ------------------------------------------------------------------------------------------ SMEM layouts


# ------------------------------------------------------------------------------------- cluster and multicast


# -------------------------------------------------------------------------------------------------- epilogue


# ---------------------------------------------------------------------------------------- registers, pipeline


# ------------------------------------------------------------------------------------------------- SMEM map


# ------------------------------------------------------------------------------------- the loop over tiles


# ------------------------------------------------------------------------------ operands, tensor maps, the record


def launch_record(spec: SpecFile, dims: Dims, tile: Tile, wg: Warpgroups, lay: Layout, cl: Cluster,
                  chunks: EpilogueChunks, regs: Registers, pipe: Pipeline, smem: Smem, loop: TileLoop,
                  code: EpilogueCode, inputs, outputs, args) -> MatmulPlan:
    """The plan: every number the templates use, from the phases' records."""
    op, sch = spec.op, spec.schedule
    tm, tn, tk = tile.tm, tile.tn, tile.tk
    a_rows = smem.a_rows                                  # the lhs rows a stage loads (a compact ring: fewer)
    compact = compact_lhs(tile, a_rows)
    a_sub = (a_rows if compact else tm if lay.k_major_a else tk) * lay.swz_a
    b_sub = (tn if lay.k_major_b else tk) * lay.swz_b
    # a stage is cut into TMA boxes one swizzle row wide along its swizzled dimension (K, or M / N for MN-major)
    a_boxes = tuple((i * a_sub, i * lay.atom_a) for i in range((tk if lay.k_major_a else tm) // lay.atom_a))
    b_boxes = tuple((i * b_sub, i * lay.atom_b) for i in range((tk if lay.k_major_b else tn) // lay.atom_b))
    # the multicast operand: each CTA of the pair loads half of its stage (K-major: a half of the rows / columns in
    # every box; MN-major: half of the boxes)
    mc_tile, mc_swz, mc_boxes, mc_k_major = {"lhs": (tm, lay.swz_a, a_boxes, lay.k_major_a),
                                             "rhs": (tn, lay.swz_b, b_boxes, lay.k_major_b)}.get(
        cl.multicast, (0, 0, (), False))
    if not mc_k_major:
        mc_tile = 0
    elif cl.multicast:
        mc_boxes = ()
    chunks_m, chunks_n = wg.wtm // chunks.rows, wg.wtn // chunks.cols
    kname = "matmul_{}_{}_{}x{}x{}_s{}_wg{}_c{}x{}".format(spec.name, dims.in_dtype, tm, tn, tk, pipe.stages, wg.nc,
                                                           cl.cm, cl.cn)
    if cl.ck > 1:
        kname += f"x{cl.ck}"
    if wg.pingpong:
        kname += "_pp"
    return MatmulPlan(
        launch=KernelLaunch(name=spec.name, family="matmul", kernel_name=kname, backends=tuple(sch.backends),
                            threads=regs.threads, smem_bytes=smem.nbytes, num_blocks=loop.clusters * cl.csize,
                            blocks_per_sm=1, kernel_args=args, auto_blocks=loop.auto, cluster_dims=(cl.csize, 1, 1),
                            dynamic_sizes=tuple(dynamic_ranges(op.sizes).values()), target=sch.target),
        sizes=dict(op.sizes), constants=dict(op.constants), batch=dims.batch, m=dims.m, n=dims.n, k=dims.k, lhs_batched=dims.lhs_batched,
        rhs_batched=dims.rhs_batched, in_dtype=dims.in_dtype, out_dtype=dims.out_dtype,
        transpose_lhs=op.transpose_lhs, transpose_rhs=op.transpose_rhs,
        inputs=inputs, outputs=outputs, extras=dims.extra_ops,
        tile_m=tm, tile_n=tn, tile_k=tk, stages=pipe.stages, delay_release=pipe.delay, num_consumers=wg.nc,
        consumer_schedule=wg.schedule, wg_axis=wg.axis, wg_tile_m=wg.wtm, wg_tile_n=wg.wtn, m_blocks=wg.wtm // WGMMA_M, acc_regs=regs.acc_regs,
        wgmma_regs=wg.wtn // 2, k_wgmmas=tk // (WGMMA_K_BYTES // dims.isz),
        swizzle_a=lay.swz_a, swizzle_b=lay.swz_b, atom_a=lay.atom_a, atom_b=lay.atom_b, k_major_a=lay.k_major_a,
        k_major_b=lay.k_major_b, a_stage_bytes=smem.a_stage, b_stage_bytes=smem.b_stage, a_sub_bytes=a_sub,
        b_sub_bytes=b_sub, a_boxes=a_boxes, b_boxes=b_boxes, a_mblock_bytes=WGMMA_M * lay.swz_a, a_lbo=1 if lay.k_major_a else a_sub, a_sbo=8 * lay.swz_a,
        b_lbo=1 if lay.k_major_b else b_sub, b_sbo=8 * lay.swz_b,
        cluster_m=cl.cm, cluster_n=cl.cn, cluster_size=cl.csize,
        multicast=cl.multicast, mc_rank_bytes=mc_tile // 2 * mc_swz, mc_rank_elems=mc_tile // 2,
        mc_rank_boxes=len(mc_boxes) // 2, split_k=cl.ck, red_full_arrivals=(cl.ck - 1) * wg.nc * 128,
        red_empty_arrivals=wg.nc * 128, red_q=wg.wtn // 8, red_slots=wg.wtm // WGMMA_M * (wg.wtn // 8),
        epi_rows=chunks.rows, epi_cols=chunks.cols, epi_buffers=sch.epilogue.buffers, epi_swizzle=chunks.swizzle,
        epi_bytes=chunks.nbytes, epi_store=sch.epilogue.store, epi_chunks_m=chunks_m, epi_chunks_n=chunks_n,
        epi_n8=chunks.cols // 8, epi_row_bytes=chunks.cols * dims.osz,
        epi_swizzle_mask=chunks.swizzle // 16 - 1 if chunks.swizzle else 0, epi_pending=sch.epilogue.buffers - 1,
        epi_uneven=chunks_m * chunks_n * len(outputs) % sch.epilogue.buffers != 0, wg_n8=wg.wtn // 8,
        epilogue=code.statements, epilogue_roles=code.roles, identity_epilogue=code.identity, ragged=tile.ragged,
        pair_loads=bool(dims.extra_ops) and D.divisible(dims.n, 2, dims.ranges),
        tiles_m=cl.tiles_m, tiles_n=cl.tiles_n, cluster_tiles_m=cl.tiles_m // cl.cm, cluster_tiles_n=cl.tiles_n // cl.cn,
        num_tiles=loop.num_tiles, k_iters=pipe.k_iters,
        tile_order=sch.persistent.tile_order, minor_dim=sch.persistent.minor_dim,
        tile_width=sch.persistent.tile_width,
        producer_regs=regs.preg, consumer_regs=regs.creg, block_regs=regs.block,
        smem_buffers=smem.buffers, full_arrivals=smem.full_arrivals,
        empty_arrivals=smem.empty_arrivals,
        stage_tx_bytes=a_rows * tk * dims.isz + smem.b_stage, a_box_rows=a_rows, a_compact=compact,
        a_zero_bytes=(tm - a_rows) * lay.swz_a, a_zero_offset=a_rows * lay.swz_a,
        a_zero_boxes=1 if compact else pipe.stages * len(a_boxes), zero_step=regs.threads * 16,
        approx_math=sch.compiler_params.approx_math, lowering_semantics=sch.compiler_params.lowering_semantics,
        profile_space=sch.compiler_params.profile_space, profile_dir=sch.compiler_params.profile_dir, flops=2 * dims.batch * dims.m * dims.n * dims.k,
        bytes_moved=sum((math.prod(o.shape) * o.itemsize for o in inputs + outputs), 0),
    )


