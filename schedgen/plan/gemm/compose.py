"""The GEMM plan composed from its phases' records: the launch header and one record per part of the kernel
(records.py lists them). The records every plan.json shows are built here for each generation; the generation's
planner then finishes the plan with its own (sm100.Sm100.finish)."""
from __future__ import annotations

import math

from .. import dims as D
from ..common import dynamic_ranges
from ..launch import KernelLaunch
from .operands import cluster_record, operand_layout
from .records import (
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
from .schedule import tile_grid
from .sm90 import stage_ring, staging_record, warp_roles, wgmma_record


def compose_plan(kind: str, spec, dims: Dims, tile: Tile, wg: Warpgroups, lay: Layout, cl: Cluster,
                 chunks: EpilogueChunks, regs: Registers, pipe: Pipeline, smem: Smem, loop: TileLoop,
                 code: EpilogueCode, inputs, outputs, args) -> MatmulPlan:
    """The plan: every number the templates use, from the phases' records. `kind` is the family planning it: its
    launch header's family and the first word of the kernel's name."""
    op, sch = spec.op, spec.schedule
    layout = operand_layout(tile, lay, smem, pipe.stages, regs.threads)
    kname = "{}_{}_{}_{}x{}x{}_s{}_wg{}_c{}x{}".format(kind, spec.name, dims.in_dtype, tile.tm, tile.tn, tile.tk,
                                                        pipe.stages, wg.nc, cl.cm, cl.cn)
    if cl.ck > 1:
        kname += f"x{cl.ck}"
    if wg.pingpong:
        kname += "_pp"
    params = sch.compiler_params
    return MatmulPlan(
        launch=KernelLaunch(name=spec.name, family=kind, kernel_name=kname, backends=tuple(sch.backends),
                            threads=regs.threads, smem_bytes=smem.nbytes, num_blocks=loop.clusters * cl.csize,
                            blocks_per_sm=1, kernel_args=args, auto_blocks=loop.auto, cluster_dims=(cl.csize, 1, 1),
                            dynamic_sizes=tuple(dynamic_ranges(op.sizes).values()), target=sch.target),
        sizes=dict(op.sizes), constants=dict(op.constants), batch=dims.batch, m=dims.m, n=dims.n, k=dims.k,
        lhs_batched=dims.lhs_batched, rhs_batched=dims.rhs_batched, in_dtype=dims.in_dtype, out_dtype=dims.out_dtype,
        transpose_lhs=op.transpose_lhs, transpose_rhs=op.transpose_rhs, inputs=inputs, outputs=outputs,
        extras=dims.extra_ops,
        tiles=tile_grid(sch, tile, cl, loop, pipe),
        cluster=cluster_record(tile, cl, layout),
        pipeline=stage_ring(pipe, smem, tile, dims),
        layout=layout,
        warps=warp_roles(wg, regs),
        staging=staging_record(sch.epilogue, chunks, wg, dims, len(outputs)),
        mma=wgmma_record(dims, tile, wg, lay, cl),
        epilogue=code.statements, epilogue_roles=code.roles, identity_epilogue=code.identity,
        pair_loads=bool(dims.extra_ops) and D.divisible(dims.n, 2, dims.ranges),
        approx_math=params.approx_math, lowering_semantics=params.lowering_semantics,
        profile_space=params.profile_space, profile_dir=params.profile_dir,
        flops=2 * dims.batch * dims.m * dims.n * dims.k,
        bytes_moved=sum((math.prod(o.shape) * o.itemsize for o in inputs + outputs), 0),
    )
