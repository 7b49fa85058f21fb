"""Hardware and naming rules every family's planner checks, each stated once.

Small functions over plain numbers: a `*_problem` function returns the message of a broken rule (or None) and
leaves locating it to the caller; a `check_*` function adds the located problem itself. Messages say what is
wrong and what would be legal. `problems` is a `schedgen.plan.common.Problems` (this module imports nothing from
common, which builds on it).
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

from .. import reserved
from ..frontend import expr as ex
from .hardware import Hardware

# ------------------------------------------------------------------------------------------------ names


def check_unique_names(groups: Iterable[tuple[str, Iterable[str]]], problems) -> dict[str, str]:
    """One namespace over the op's name groups (sizes, constants, inputs, outputs, in the order given): a name
    used twice is reported at its second use, `op.<group>.<name>`. Returns name -> the group that last used it."""
    seen: dict[str, str] = {}
    for group, names in groups:
        for nm in names:
            if nm in seen:
                problems.add(("op", group, nm), f"name '{nm}' is already used in op.{seen[nm]}")
            seen[nm] = group
    return seen


def check_reserved_names(spec, problems) -> None:
    """The spec name and input names that generated code would break on (the one list: schedgen.reserved)."""
    for path, message in reserved.reserved_problems(spec):
        problems.add(path, message)


def check_sizes_int32(sizes: Mapping[str, int], problems, what: str = "the kernel's 32-bit coordinates") -> None:
    """Every op size fits the kernels' 32-bit int index math."""
    for nm, v in sizes.items():
        if v > ex.MAX_INT:
            problems.add(("op", "sizes", nm), f"size {v} does not fit {what}")


# ---------------------------------------------------------------------------------------------- cluster


def check_profiler(compiler_params, backends: Sequence[str], problems) -> None:
    """compiler_params.profile_space / profile_dir: Mosaic GPU's in-kernel profiler (Pallas only), both or neither."""
    space, where = compiler_params.profile_space, compiler_params.profile_dir
    path = ("schedule", "compiler_params")
    if space and not where:
        problems.add((*path, "profile_space"), "the profiler needs compiler_params.profile_dir, the directory its "
                                               "trace is written to (e.g. profile_dir: profiles)")
    if where and not space:
        problems.add((*path, "profile_dir"), "profile_dir has no effect without compiler_params.profile_space (the "
                                             "profiler's events per warpgroup, e.g. 2048); set it or remove "
                                             "profile_dir")
    if space and "cuda" in backends:
        problems.add((*path, "profile_space"), "in-kernel profiling is a Pallas (Mosaic GPU) feature; the CUDA "
                                               "backend has none in this release (time it with `schedgen bench`, "
                                               "or Nsight Compute): set schedule.backends: [pallas] to profile")


def profiler_smem_bytes(profile_space: int, warpgroups: int) -> int:
    """The SMEM of Mosaic GPU's profiler (jax 0.11.2: profile_space ranges per warpgroup, 2 events a range, 2 int32
    entries an event, one buffer per warpgroup of the block); 0 without profiling."""
    return profile_space * 2 * 2 * 4 * warpgroups


def check_no_cluster(cluster: Sequence[int], why: str, problems) -> None:
    """A family whose CTAs share no operand takes no thread-block cluster: `why` says what there is nothing of
    to share, the message ends with the fix."""
    if any(c != 1 for c in cluster):
        problems.add(("schedule", "cluster"), f"{why}; use cluster: [1]")


# -------------------------------------------------------------------------------------------- registers

SETMAXNREG_STEP = 8        # setmaxnreg takes a multiple of 8 registers a thread ...
SETMAXNREG_MIN = 24        # ... from 24 ...
SETMAXNREG_MAX = 256       # ... to 256


def setmaxnreg_problem(regs: int, suggest: bool = False, instruction: str = "setmaxnreg") -> str | None:
    """What is wrong with a setmaxnreg register count, or None. `suggest` names the two nearest legal counts;
    `instruction` is what the message calls it (the Pallas kernels' plgpu.set_max_registers)."""
    if regs % SETMAXNREG_STEP:
        low = regs // SETMAXNREG_STEP * SETMAXNREG_STEP
        return (f"{instruction} takes a multiple of {SETMAXNREG_STEP} registers, got {regs}"
                + (f"; use {low} or {low + SETMAXNREG_STEP}" if suggest else ""))
    if not SETMAXNREG_MIN <= regs <= SETMAXNREG_MAX:
        return f"{instruction} takes {SETMAXNREG_MIN} to {SETMAXNREG_MAX} registers, got {regs}"
    return None


def check_setmaxnreg(budgets: Mapping[str, int], problems, path: Sequence = ("schedule", "pipeline"),
                     suggest: bool = False) -> None:
    """Each per-warpgroup budget (field name -> registers a thread) is a legal setmaxnreg count."""
    for fld, regs in budgets.items():
        message = setmaxnreg_problem(regs, suggest)
        if message:
            problems.add((*path, fld), message)


def max_consumer_regs(total: int, producer_regs: int, consumers: int) -> int:
    """The largest setmaxnreg count each of `consumers` warpgroups can take when one producer warpgroup keeps
    `producer_regs` and the block holds `total` registers."""
    return (total // 128 - producer_regs) // consumers // SETMAXNREG_STEP * SETMAXNREG_STEP


def register_budget_problem(producer_regs: int, consumers: int, consumer_regs: int, hw: Hardware) -> str | None:
    """A producer warpgroup and `consumers` consumer warpgroups after setmaxnreg must fit the registers the block
    was launched with (`__launch_bounds__(threads, 1)`: Hardware.regs_per_block, not the SM's file): setmaxnreg.inc
    past them waits for registers that never come."""
    threads = 128 * (1 + consumers)
    budget = hw.regs_per_block(threads)
    need = 128 * (producer_regs + consumers * consumer_regs)
    if need <= budget:
        return None
    return (f"register budgets {producer_regs} + {consumers} x {consumer_regs} need {need} registers; a block of "
            f"{threads} threads holds {budget} (at most {max_consumer_regs(budget, producer_regs, consumers)} per "
            f"consumer with {producer_regs} for the producer)")


# ---------------------------------------------------------------------------------------------- targets


def check_hopper_only(spec, fields: Iterable[tuple[tuple, str]], target: str, problems) -> None:
    """Hopper (sm_90a) schedule fields written in a spec planned for `target`: a located error at each, saying what
    the `target` kernel does instead. `fields`: (path under schedule, what the kernel does there)."""
    from .defaults import written
    for path, what in fields:
        if written(spec, ("schedule", *path)):
            problems.add(("schedule", *path), f"{'.'.join(path)} is a Hopper (sm_90a) field; on {target} {what}: "
                                              f"leave it out, or write target: sm_90a")


# ------------------------------------------------------------------------------------------------- SMEM

SMEM_SLACK = 1024          # to align the dynamic SMEM base to the 1 KiB swizzle atom


def smem_detail(smem) -> str:
    """The buffers of a SmemMap and their bytes, for messages."""
    return ", ".join(f"{b.name} {b.bytes * b.count} B" for b in smem.buffers)


def stages_that_fit(hw: Hardware, fixed_bytes: int, stage_bytes: int) -> int:
    """How many pipeline stages of `stage_bytes` fit beside `fixed_bytes` (and the slack) in a block's SMEM."""
    return (hw.smem_per_block - SMEM_SLACK - fixed_bytes) // stage_bytes


def check_smem_fit(smem, hw: Hardware, path: Sequence, problems, fix: str) -> int:
    """The dynamic SMEM a SmemMap needs (its top plus the slack) fits a block; else a problem at `path` listing
    the buffers, ending with `fix` (what fits, or what to shrink). Returns the bytes needed."""
    nbytes = smem.top + SMEM_SLACK
    if nbytes > hw.smem_per_block:
        problems.add(tuple(path), f"SMEM needed is {nbytes} B ({smem_detail(smem)}), over the {hw.name}'s "
                                  f"{hw.smem_per_block} B per block; {fix}")
    return nbytes


# -------------------------------------------------------------------------------------------------- TMA

TMA_INNER_BYTES = 16       # a tiled tensor map's inner box extent and its global strides: multiples of 16 B


def tma_inner_bytes_problem(elems: int, itemsize: int) -> str | None:
    """The inner (minor) extent of a TMA box is a multiple of 16 bytes."""
    nbytes = elems * itemsize
    if nbytes % TMA_INNER_BYTES == 0:
        return None
    return (f"the minor block dimension is {elems} x {itemsize} B = {nbytes} B; TMA needs a multiple of "
            f"{TMA_INNER_BYTES} B (use a multiple of {TMA_INNER_BYTES // math.gcd(TMA_INNER_BYTES, itemsize)} elements)")


def tma_stride_problem(what: str, stride: int, itemsize: int) -> str | None:
    """A tensor map's global strides (bytes between the rows of `what`) are multiples of 16 bytes."""
    if stride % TMA_INNER_BYTES == 0:
        return None
    return (f"{what} are {stride} B apart; TMA needs a multiple of {TMA_INNER_BYTES} B (pad the minor dimension to a "
            f"multiple of {TMA_INNER_BYTES // math.gcd(TMA_INNER_BYTES, itemsize)} elements)")


def tma_box_fits(extent: int, hw: Hardware) -> bool:
    """A TMA box holds at most hw.tma_max_box (256) elements along each dimension."""
    return extent <= hw.tma_max_box


def check_tma_box_extent(extent: int, hw: Hardware, path: Sequence, problems, message: str | None = None) -> None:
    """One box dimension within the TMA limit; `message` replaces the default wording."""
    if not tma_box_fits(extent, hw):
        problems.add(tuple(path), message or f"TMA boxes are at most {hw.tma_max_box} elements per dimension, "
                                             f"got {extent}")


# ---------------------------------------------------------------------------------------------- swizzle


def legal_swizzles(minor_bytes: int, hw: Hardware) -> str:
    """The swizzles (bytes) that divide the swizzled dimension's bytes, for messages."""
    return ", ".join(str(s) for s in hw.swizzles if minor_bytes % s == 0)


def widest_swizzle(minor_bytes: int, hw: Hardware) -> int:
    """The widest swizzle the minor dimension's bytes allow (what an MMA operand wants); 0 if none does."""
    for s in sorted(hw.swizzles, reverse=True):
        if minor_bytes % s == 0:
            return s
    return 0


def swizzle_problem(swizzle: int, minor_bytes: int, hw: Hardware, what: str = "the minor block dimension's bytes",
                    none: str = "none (use 0)") -> str | None:
    """A swizzle of `swizzle` bytes needs the swizzled dimension's bytes to be a multiple of it (0: no swizzle)."""
    if not swizzle or minor_bytes % swizzle == 0:
        return None
    return (f"swizzle {swizzle} needs {what} ({minor_bytes} B) to be a multiple of {swizzle}; legal here: "
            f"{legal_swizzles(minor_bytes, hw) or none}")


def choose_swizzle(requested, minor_bytes: int, hw: Hardware, path: Sequence, problems,
                   what: str = "the minor block dimension's bytes", none: str = "none (use 0)") -> int:
    """The swizzle a BlockSpec asks for ("auto" or None: the widest legal one), checked against the swizzled
    dimension's bytes; a problem at `path` (the transforms.swizzle field) when it does not divide them."""
    if requested is None or requested == "auto":
        return widest_swizzle(minor_bytes, hw)
    message = swizzle_problem(requested, minor_bytes, hw, what, none)
    if message:
        problems.add(tuple(path), message)
    return requested
