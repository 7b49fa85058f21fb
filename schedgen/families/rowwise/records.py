"""The rowwise plan: every number the templates print, the body as validated trees."""
from __future__ import annotations

from dataclasses import dataclass

from ...plan.launch import KernelLaunch, inline_field
from ...plan.dims import DimLike
from ...plan.exprs import PlanExpr


@dataclass(frozen=True)
class RowOperand:
    name: str
    role: str                   # "in" | "out"
    kind: str                   # "row" [M, N] | "col" [N] (along the row) | "per_row" [M] / [M, 1] | "partial" [P, N]
    dtype: str
    shape: tuple[DimLike, ...]
    itemsize: int
    ctype: str                  # its storage type in the CUDA source
    cname: str                  # its identifier in generated code (in_x / out_y)
    block: tuple[int, ...]      # the Pallas block of one pipeline step (rows_per_block rows)


@dataclass(frozen=True)
class RowReduction:
    index: int
    op: str                     # sum | mean | max | min | logsumexp | take
    combine: str                # sum | max | min | lse (the cross-thread combination)
    arg: PlanExpr               # the per-element term (over body names and earlier reductions' placeholders)
    index_arg: PlanExpr | None  # take's column (one value a row)
    level: int                  # the sweep over the row it is computed in (1..levels)
    statement: int              # computed just before this statement


@dataclass(frozen=True)
class RowwisePlan:
    launch: KernelLaunch = inline_field()   # the launch header (plan/launch.py; plan.json: its fields here)
    sizes: dict
    constants: dict
    m: DimLike                  # the row count (an extent when dynamic)
    n: int                      # the row length
    rows_per_block: int         # R: rows a CTA works on side by side (one per row group of warps)
    warps_per_row: int          # warps that share a row (its cross-warp reduction goes through SMEM)
    steps: int                  # S: rows each row group keeps in flight (pipeline.max_concurrent_steps)
    vec: int                    # elements per thread access (16 B of the narrowest row dtype, or 1 for ragged N)
    chunks: int                 # vectors of the row each thread holds (NV; per segment when the row streams)
    segments: int               # 1: the row stays on chip whole; more: it streams through in segments (one pass)
    row_regs: int               # 32-bit registers the kept rows take per thread (S x NV x the row inputs)
    num_warpgroups: int
    num_row_blocks: DimLike     # cdiv(M, R x S) (CUDA) row blocks
    pallas_tiles: DimLike       # cdiv(M, R): the Pallas pipeline's steps over the whole array
    pallas_blocks: DimLike
    persistent: bool
    levels: int                 # sweeps over the row kept on chip (the deepest reduction)
    inputs: tuple[RowOperand, ...]
    outputs: tuple[RowOperand, ...]
    body: tuple[tuple[str, PlanExpr], ...]   # reductions replaced by placeholders (_r<k>)
    body_level: dict            # target -> the deepest level it reads
    body_varies: dict           # target -> varies along the row
    body_roles: dict            # name -> operand | per_row | constant | temporary | output | reduction
    reductions: tuple[RowReduction, ...]
    red_slots: int              # f32 slots a row group's partials take in SMEM per level (lse: 2)
    prefetch: bool              # CUDA: the next piece of rows is copied to SMEM (cp.async) while this one is reduced
    ring_offset: int            # CUDA: bytes before the prefetch ring in the dynamic SMEM
    ring_slot_bytes: int        # CUDA: one of the ring's two slots (every thread's vectors of one piece)
    pallas_smem_bytes: int
    pallas_chunk: int           # Pallas: a row goes through SMEM in chunks of this many columns (a TMA box: <= 256)
    pallas_chunks: int          # chunks a row
    ragged_m: bool
    approx_math: bool
    lowering_semantics: str
    unsafe_no_auto_barriers: bool
    profile_space: int
    profile_dir: str
    bytes_moved: int

    @property
    def operands(self) -> tuple[RowOperand, ...]:
        return self.inputs + self.outputs

    @property
    def partials(self) -> int:
        """P: the blocks of the partial-sum outputs [P, N] (the grid, exactly); 0 when there are none."""
        return next((o.shape[0] for o in self.outputs if o.kind == "partial"), 0)

    @property
    def summed_outputs(self) -> tuple[str, ...]:
        """Outputs that verify compares by their sum over the first axis (the P partial sums: how the column sums
        split among the blocks is the kernel's)."""
        return tuple(o.name for o in self.outputs if o.kind == "partial")
