"""The rowwise plan: every number the templates print, the body as validated trees."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ...plan.launch import KernelLaunch, inline_field
from ...plan.dims import DimLike
from ...plan.exprs import PlanExpr


@dataclass(frozen=True)
class RowOperand:
    name: str
    role: str                   # "in" | "out"
    kind: str                   # "row" [M, N] | "col" [N] (along the row) | "per_row" [M] / [M, 1] | "partial" [P, N]
                                # | "scalar" [1] (op.reduction mean / sum: an output reduced over the rows, or an
                                # input that reaches every row as that reduction's adjoint)
    dtype: str
    shape: tuple[DimLike, ...]
    itemsize: int
    ctype: str                  # its storage type in the CUDA source
    cname: str                  # its identifier in generated code (in_x / out_y)
    block: tuple[int, ...]      # the Pallas block of one pipeline step (rows_per_block rows)

    @property
    def shape_text(self) -> str:
        return ", ".join(str(x) for x in self.shape)

    @property
    def block2d(self) -> bool:
        """A two-dimensional Pallas block: a per-row operand [M, 1] (else [M]), a column one [1, N] (else [N])."""
        return len(self.block) == 2

    @property
    def integer(self) -> bool:
        """A class index input (i32 / i64)."""
        return self.dtype in ("i32", "i64")

    @property
    def word_elements(self) -> bool:
        """One element a 32-bit word (f32): a 16-byte access's elements are its words."""
        return self.itemsize == 4


@dataclass(frozen=True)
class RowReduction:
    index: int
    op: str                     # sum | mean | max | min | logsumexp | take
    combine: str                # sum | max | min | lse (the cross-thread combination)
    arg: PlanExpr               # the per-element term (over body names and earlier reductions' placeholders)
    index_arg: PlanExpr | None  # take's column (one value a row)
    level: int                  # the sweep over the row it is computed in (1..levels)
    statement: int              # computed just before this statement


class RowLevel(NamedTuple):
    """One sweep over the row kept on chip and the reductions computed in it (what the CUDA template prints of it)."""
    number: int                 # 1..levels
    index: int                  # number - 1: its place among a row's SMEM partials
    reductions: tuple[RowReduction, ...]
    lse: tuple[RowReduction, ...]       # its log-sum-exp reductions (a second pass over the row)
    partials: tuple[tuple[RowReduction, int, int], ...]   # each reduction with its f32 partial slot in a row's
                                # partials, and the next (an lse's sum: (max, sum) take two slots)
    ops: str                    # its reductions' ops, listed
    lead_only: bool             # the last level, no row or partial output: only the row's first warp combines


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
    ignore_index: int = field(default=-100, metadata={"omit_default": True})   # rows whose class index is this
    reduction: str = field(default="none", metadata={"omit_default": True})    # none | mean | sum ([1] operands)

    @property
    def operands(self) -> tuple[RowOperand, ...]:
        return self.inputs + self.outputs

    @property
    def partials(self) -> int:
        """P: the blocks of the partial-sum outputs [P, N] (the grid, exactly); 0 when there are none."""
        return next((o.shape[0] for o in self.outputs if o.kind == "partial"), 0)

    # --- derived numbers the templates print (computed here: the templates do no arithmetic)
    @property
    def cluster(self) -> int:
        """CTAs a row block (a thread-block cluster splits the row's columns); 1: no cluster."""
        return self.launch.cluster_dims[0]

    @property
    def clustered(self) -> bool:
        return self.cluster > 1

    @property
    def last_rank(self) -> int:
        return self.cluster - 1

    @property
    def streams(self) -> bool:
        """The row streams through the registers in segments (else it stays on chip whole)."""
        return self.segments > 1

    @property
    def vectorized(self) -> bool:
        """A thread accesses 16-byte vectors (vec > 1; else one element: a ragged row)."""
        return self.vec > 1

    @property
    def cross_warp(self) -> bool:
        """Several warps share a row: its partials meet in SMEM."""
        return self.warps_per_row > 1

    @property
    def inv_n(self) -> float:
        """1 / N: a mean's factor."""
        return 1.0 / self.n

    def _of_kind(self, operands, kind: str) -> tuple[RowOperand, ...]:
        return tuple(o for o in operands if o.kind == kind)

    @property
    def row_inputs(self) -> tuple[RowOperand, ...]:
        return self._of_kind(self.inputs, "row")

    @property
    def col_inputs(self) -> tuple[RowOperand, ...]:
        return self._of_kind(self.inputs, "col")

    @property
    def per_row_inputs(self) -> tuple[RowOperand, ...]:
        return self._of_kind(self.inputs, "per_row")

    @property
    def row_outputs(self) -> tuple[RowOperand, ...]:
        return self._of_kind(self.outputs, "row")

    @property
    def partial_outputs(self) -> tuple[RowOperand, ...]:
        return self._of_kind(self.outputs, "partial")

    @property
    def index_inputs(self) -> tuple[RowOperand, ...]:
        """The class-index inputs (i32 / i64): a row where one equals ignore_index is ignored."""
        return tuple(o for o in self.inputs if o.integer)

    @property
    def scalar_inputs(self) -> tuple[RowOperand, ...]:
        """[1] inputs: one value for every row, scaled by the reduction's adjoint (mean: 1 / the rows counted)."""
        return self._of_kind(self.inputs, "scalar")

    @property
    def scalar_outputs(self) -> tuple[RowOperand, ...]:
        """[1] outputs: the rows' values reduced (op.reduction sum / mean)."""
        return self._of_kind(self.outputs, "scalar")

    @property
    def one_a_row_outputs(self) -> tuple[RowOperand, ...]:
        """Outputs of one value a row in the kernels: [M] ones and [1] ones before their reduction."""
        return tuple(o for o in self.outputs if o.kind in ("per_row", "scalar"))

    @property
    def count_slot(self) -> int:
        """The word of a workspace slot (and of the block's partials) that holds the count of rows not ignored:
        after one sum for each [1] output."""
        return len(self.scalar_outputs)

    @property
    def input_count(self) -> int:
        return len(self.inputs)

    @property
    def ws_stride(self) -> int:
        """f32 words of a block's slot in the reduction's workspace (its sums, then its count; 16-byte slots)."""
        return -(-(len(self.scalar_outputs) + 1) // 4) * 4

    @property
    def pallas_wraps(self) -> bool:
        """The Pallas module's make() wraps the kernel in a jax function: [1] operands (the kernel reads and writes
        them one value a row, the function broadcasts the inputs and reduces the outputs)."""
        return bool(self.scalar_inputs or self.scalar_outputs)

    def ignore_fits(self, dtype: str) -> bool:
        """Whether ignore_index is a value of `dtype` (else no row of it is ignored)."""
        bits = 31 if dtype == "i32" else 63
        return -(1 << bits) <= self.ignore_index < (1 << bits)

    @property
    def ignore_literal(self) -> str:
        """ignore_index as a C++ 64-bit literal."""
        v = self.ignore_index
        return f"({v + 1}LL - 1)" if v == -(1 << 63) else f"{v}LL"      # -2^63 is no literal of C++

    @property
    def words(self) -> dict[str, int]:
        """Operand name -> the 16-byte words of one vector access of it (vec elements)."""
        return {o.name: self.vec * o.itemsize // 16 for o in self.operands}

    @property
    def ring_words(self) -> tuple[tuple[RowOperand, int], ...]:
        """The row inputs with their first 16-byte word of an access in a prefetch ring slot (at least one word
        each), in order."""
        at, out = 0, []
        for o in self.row_inputs:
            out.append((o, at))
            at += max(1, self.words[o.name])
        return tuple(out)

    @property
    def ring_access_words(self) -> int:
        """16-byte words of one access, the row inputs together (a ring slot's words a vector)."""
        return sum(max(1, self.words[o.name]) for o in self.row_inputs)

    @property
    def cluster_partials(self) -> int:
        """f32s of SMEM before the partials a cluster's CTAs read (after the row's warps' own, when they share it)."""
        if not self.cross_warp:
            return 0
        return 2 * self.levels * self.rows_per_block * self.steps * self.warps_per_row * self.red_slots

    @property
    def level_list(self) -> tuple[RowLevel, ...]:
        """The sweeps over the row, each with its reductions and their SMEM partial slots."""
        leads = not any(o.kind in ("row", "partial") for o in self.outputs)
        levels = []
        for number in range(1, self.levels + 1):
            here = tuple(r for r in self.reductions if r.level == number)
            partials, k = [], 0
            for r in here:
                partials.append((r, k, k + 1))
                k += 2 if r.combine == "lse" else 1
            levels.append(RowLevel(number, number - 1, here, tuple(r for r in here if r.combine == "lse"),
                                   tuple(partials), ", ".join(r.op for r in here), leads and number == self.levels))
        return tuple(levels)

    def varying_below(self, level: int) -> tuple[tuple[str, PlanExpr], ...]:
        """The statements that vary along the row and read no reduction of `level` or deeper: what an element of a
        level-`level` sweep computes."""
        return tuple((t, v) for t, v in self.body if self.body_varies[t] and self.body_level[t] < level)

    def scalars_at(self, level: int) -> tuple[tuple[str, PlanExpr], ...]:
        """The statements of one value a row known once `level`'s reductions are (level 0: before any)."""
        return tuple((t, v) for t, v in self.body if not self.body_varies[t] and self.body_level[t] == level)

    @property
    def profiled(self) -> bool:
        """Mosaic GPU's in-kernel profiler is on (the Pallas module then makes its directory)."""
        return self.profile_space > 0

    @property
    def output_names(self) -> str:
        return ", ".join(o.name for o in self.outputs)

    @property
    def pallas_refs(self) -> tuple[tuple[RowOperand, int], ...]:
        """Each input with its first ref among a Pallas pipeline step's: a per-row input's one, the others' one a
        chunk (pallas_chunks)."""
        at, out = 0, []
        for o in self.inputs:
            out.append((o, at))
            at += 1 if o.kind in ("per_row", "scalar") else self.pallas_chunks
        return tuple(out)

    def reductions_before(self, statement: int) -> tuple[RowReduction, ...]:
        """The reductions computed just before body statement `statement`."""
        return tuple(r for r in self.reductions if r.statement == statement)

    @property
    def output_level(self) -> int:
        """The output pass's level: past every sweep (levels + 1), so every statement is known."""
        return self.levels + 1

    @property
    def summed_outputs(self) -> tuple[str, ...]:
        """Outputs that verify compares by their sum over the first axis (the P partial sums: how the column sums
        split among the blocks is the kernel's)."""
        return tuple(o.name for o in self.outputs if o.kind == "partial")
