"""Schedule fields the attention backward kernels do not read: each one set to a value other than its default is a
located error (the spec would otherwise say something the kernels do not do). The kernels read block_q and
block_kv (q's and k's in_specs), pipeline.max_concurrent_steps and compiler_params.approx_math, and pipeline.kind:
emit_pipeline (two Pallas kernels; the mma.sync CUDA kernel) or warp_specialized (each backend's warp-specialized form:
the one-kernel Pallas backward, the wgmma CUDA kernel), which read num_compute_wgs; the CUDA one also reads
memory_registers, compute_registers (the Pallas one sets its own budgets) and delta (the Pallas backward always
computes delta before its kernels)."""
from __future__ import annotations

from ...plan.common import Problems
from ...plan.unread import NO_GRID, Unread, UnreadTable, check_unread as _check

WS = "warp_specialized"   # each backend's warp-specialized form (fused.py, wgmma.py): they read num_compute_wgs
_ONE_WG = ("a block of the emit_pipeline forms is one warpgroup of 64 rows that issues its own TMA ring (no producer "
           "warpgroup)")
_BUDGETS = ("the emit_pipeline forms have no producer warpgroup and keep the compiler's register allocation; the "
            "one-kernel Pallas form (warp_specialized) sets its own budgets (producer 40, consumers 232 / 256)")


def _budget_unread(s, field: str) -> bool:
    """memory_registers / compute_registers written where no kernel reads them: only the CUDA wgmma kernel does."""
    return getattr(s.pipeline, field) is not None and (s.pipeline.kind != WS or "pallas" in s.backends)


def _wgmma_built(s) -> bool:
    """Whether the spec builds the wgmma CUDA kernel (the one that reads pipeline.delta)."""
    return s.pipeline.kind == WS and "cuda" in s.backends


SCHEDULE = NO_GRID + (
    Unread(("num_warpgroups",), lambda s: s.num_warpgroups != 1, _ONE_WG, "1 (the default)"),
    Unread(("out_specs",), lambda s: bool(s.out_specs),
           "the gradients' blocks are the kernels' rows (64 keys or queries of one head), stored by TMA",
           "leave out_specs out"),
    Unread(("pipeline", "kind"), lambda s: s.pipeline.kind not in ("emit_pipeline", WS),
           "the backward always streams its blocks through a TMA ring",
           f"emit_pipeline (the default) or {WS} (one Pallas kernel with dQ summed by TMA reduce-add; the CUDA "
           f"wgmma kernel with a TMA producer warpgroup)"),
    Unread(("pipeline", "num_compute_wgs"), lambda s: s.pipeline.num_compute_wgs != 1 and s.pipeline.kind != WS,
           _ONE_WG, f"1 (the default), or kind: {WS} (1 or 2 consumers of 64 keys)"),
    Unread(("pipeline", "memory_registers"), lambda s: _budget_unread(s, "memory_registers"), _BUDGETS,
           f"leave it out, or kind: {WS} with backends: [cuda]"),
    Unread(("pipeline", "compute_registers"), lambda s: _budget_unread(s, "compute_registers"), _BUDGETS,
           f"leave it out, or kind: {WS} with backends: [cuda]"),
    Unread(("pipeline", "delta"), lambda s: s.pipeline.delta != "in_kernel" and not _wgmma_built(s),
           "delta = rowsum(dO * O) comes from a preprocessing step only in the warp-specialized CUDA (wgmma) kernel; "
           "the Pallas backward always computes it before its kernel(s) (a jnp step) and the mma.sync CUDA kernel "
           "(emit_pipeline) in each block",
           f"in_kernel (the default), or kind: {WS} with cuda in backends"),
    Unread(("persistent", "loop"), lambda s: "loop" in s.persistent.model_fields_set,
           "each kernel launches one block a (64 rows, head, batch) tile", "leave persistent out"),
    Unread(("persistent", "num_blocks"), lambda s: s.persistent.num_blocks != "auto",
           "each kernel launches one block a tile", "auto (the default)"),
    Unread(("persistent", "tile_order"), lambda s: s.persistent.tile_order != "row_major",
           "the blocks are a grid of (64 rows, head, batch)", "row_major (the default)"),
)

BLOCK_SPEC = (
    Unread(("memory_space",), lambda b: b.memory_space != "smem",
           "the tiles go to SMEM by TMA (wgmma reads them there)", "smem (the default)"),
    Unread(("transforms", "tiling"), lambda b: b.transforms.tiling is not None,
           "the tiles are 64-column TMA boxes with the 128-byte swizzle, the layout wgmma reads", "leave tiling out"),
    Unread(("transforms", "swizzle"), lambda b: b.transforms.swizzle not in ("auto", 128),
           "the tiles are 64-column TMA boxes with the 128-byte swizzle, the layout wgmma reads",
           "128 or auto (the default)"),
    Unread(("transforms", "transpose"), lambda b: b.transforms.transpose is not None,
           "the wgmma descriptors read each tile in the major order its product needs", "leave transpose out"),
    Unread(("delay_release",), lambda b: b.delay_release != 0,
           "a ring stage is refilled as soon as the step that read it is done", "0 (the default)"),
    Unread(("collective_axes",), lambda b: bool(b.collective_axes),
           "the blocks share no operand (cluster: [1]), so nothing is multicast", "leave collective_axes out"),
    Unread(("out_of_bounds",), lambda b: b.out_of_bounds != "reject",
           "the sequences are multiples of the blocks (the planner checks it)", "reject (the default)"),
)

TABLE = UnreadTable("attention_backward", schedule=SCHEDULE, in_spec=BLOCK_SPEC)


def check_unread(sch, inputs: tuple[str, ...], problems: Problems) -> None:
    _check(sch, TABLE, inputs, (), problems)
