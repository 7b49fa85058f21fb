"""Planner of the `matmul` family: `out = epilogue(lhs @ rhs)` on Hopper (sm_90a, wgmma) or Blackwell (sm_100a,
tcgen05) tensor cores.

The kernel is persistent and warp-specialized. A producer (one elected thread) streams (tile_m x tile_k) blocks of
lhs and (tile_k x tile_n) blocks of rhs through a `max_concurrent_steps`-deep ring of SMEM stages by TMA, on `full` /
`empty` mbarrier rings; with a 2-CTA cluster the operand both CTAs share is split between them and multicast. On
sm_90a 1-2 consumer warpgroups split the (tile_m x tile_n) output tile along M or N (`pipeline.wg_axis`), issue
`wgmma` from SMEM descriptors with f32 accumulators in registers, apply the epilogue, and store the tile in
`epilogue.tile` chunks staged through `epilogue.buffers` SMEM buffers by TMA; on sm_100a one thread issues
tcgen05.mma into TMEM and an epilogue warpgroup stores the tile. Tiles are visited by an nd_loop in row-major or
planar-snake order. Every hardware rule is checked, located at the field that decides it.

The GEMM itself is planned by the shared GEMM package (schedgen/plan/gemm: its phases, records and the planner of
the target's MMA generation); this module reads the op (names, dtypes, shapes, the epilogue, block scales), adds
what only this family's kernel does (block-scaled fp8, stream-K, the epilogue's SMEM operand slots) and composes the
plan.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...plan import gemm
from ...plan.common import Problems
from ...plan.hardware import Hardware
from ...plan.launch import KernelLaunch
from .blockscale import check_block_scaled_schedule, scale_prefetch_of
from .operands import check_names, epilogue_code, mat_operands, parse_epilogue, problem_dims
from .stream_k import check_stream_k, workspace_arg
from .unread import check_unread

if TYPE_CHECKING:
    from ...frontend.specfile import SpecFile

KIND = "matmul"


def plan_matmul(spec: SpecFile, hw: Hardware) -> tuple[gemm.MatmulPlan | None, Problems]:
    """The phases in order, each checking its own rules; every problem is collected, and a phase whose inputs are
    broken stops the planner before it runs. The target's MMA generation (`gemm.generation`) says which rules of the
    wgmma kernel's phases apply, checks its own kernel and finishes the plan."""
    problems = Problems()
    gen = gemm.generation(spec.schedule.target)
    written_spec = spec
    spec = gen.schedule_spec(spec)
    op, sch = spec.op, spec.schedule
    out_name, extras = check_names(spec, problems)
    body = parse_epilogue(op, out_name, extras, problems)
    if problems and (op.lhs not in op.inputs or op.rhs not in op.inputs):
        return None, problems
    dims = problem_dims(op, out_name, extras, problems, sch.target)
    if dims is None:
        return None, problems
    tile = gemm.block_tile(op, sch, out_name, dims, problems)
    check_unread(op, sch, out_name, problems)
    # the consumer warpgroups, their registers, the epilogue's SMEM chunks and the SMEM map are the wgmma kernel's:
    # another generation plans them for their numbers only (gen.check has its kernel's own rules)
    wgmma_rules = gen.wgmma_problems(problems)
    wg = gemm.warpgroups(op, sch.pipeline, tile, dims, wgmma_rules)
    layout = gemm.smem_layouts(op, tile, wg, dims.isz, hw, problems)
    cluster = gemm.cluster_shape(op, sch, tile, dims, layout, problems)
    chunks = gemm.epilogue_chunks(sch.epilogue, wg, dims, hw, wgmma_rules)
    regs = gemm.registers(sch.pipeline, wg, hw, wgmma_rules)
    pipe = gemm.pipeline(op, sch.pipeline, tile, dims.k, problems)
    vecs = gemm.vector_slots(sch, dims.extra_ops, tile.tm, tile.tn, wg.nc, wg.pingpong, wgmma_rules)
    smem = gemm.smem_map(sch, tile, dims.isz, pipe.stages, wg.nc, cluster, chunks, hw, wgmma_rules, layout,
                         gemm.lhs_stage_rows(tile, layout, cluster, dims.m), vecs)
    loop = gemm.tile_loop(sch.persistent, dims.batch, cluster, hw, problems, dims.ranges)
    gemm.backend_limits(op, sch, tile, dims, problems, layout, kernel=KIND)
    stream_k = check_stream_k(op, sch, dims, cluster, hw, problems)
    partial_sums = check_block_scaled_schedule(op, sch, tile, wg, regs.creg, pipe.delay, dims, problems)
    own = gen.check(written_spec, op, dims, tile, layout, cluster, pipe, hw, problems)
    if problems or body is None:
        return None, problems
    code = epilogue_code(op, body, out_name, extras)
    inputs, outputs = mat_operands(op, out_name, dims)
    args = gemm.kernel_args(op, out_name, inputs + outputs, tile, layout, cluster, chunks, hw, problems, dims.ranges,
                            smem.a_rows)
    if problems:
        return None, problems
    result = gemm.compose_plan(KIND, spec, dims, tile, wg, layout, cluster, chunks, regs, pipe, smem, loop, code,
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
                                     sk_slot_floats=tile.tm * tile.tn, sk_quads=result.mma.wgmma_regs // 4)
    return gen.finish(result, own, spec, hw), problems


def _renamed(launch: KernelLaunch, suffix: str, **changes) -> KernelLaunch:
    """The launch header with `suffix` on its kernel's name (a variant of the kernel), and `changes`."""
    return dataclasses.replace(launch, kernel_name=launch.kernel_name + suffix, **changes)
