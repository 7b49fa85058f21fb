"""The CUDA map kernel's register path (schedule.pipeline.data_path: registers; issue 17): no SMEM ring, no TMA.

Each block walks the same tiles as the TMA kernel (the planned grid, tile order and persistent loop); a tile is cut
into chunks of 16 bytes of the narrowest dtype (`vec` elements), and each thread takes `unroll` chunks a batch
(chunk tid, tid + threads, ...), issuing every input's 16-byte global loads of all of them before any arithmetic,
then computes the body in f32 registers and stores 16-byte vectors. Resident blocks, not a ring, hide the latency:
`__launch_bounds__(threads, min_blocks)` keeps a thread within REGISTER_BUDGET registers so that min_blocks blocks
fit an SM. This module checks what the path needs (located errors) and records its numbers (RegisterPath)."""
from __future__ import annotations

from dataclasses import dataclass

from ...frontend.model import ITEMSIZE
from ...plan import dims
from ...plan.common import Problems
from ...plan.dims import DimLike
from ...plan.hardware import Hardware
from .operands import dim_prod

UNROLL = 4               # chunks a thread has in flight (every input's loads of them issued together) ...
LOAD_BUDGET = 128        # ... at most this many bytes of loaded data a thread (32 of its registers)
REGISTER_BUDGET = 64     # registers a thread may use: 65536 / (threads * 64) blocks an SM (256 threads: 4)
FIELD = ("schedule", "pipeline", "data_path")
_TMA = "or use data_path: tma (the default)"


@dataclass(frozen=True)
class RegisterPath:
    """What the register kernel prints: the batch shape, the occupancy bound, each operand's GMEM strides and which
    iteration dimensions may end in a partial block (their chunks are bounds-checked)."""
    unroll: int                        # chunks a thread loads before computing (a batch)
    chunks: int                        # 16-byte-of-the-narrowest-dtype chunks in a tile
    batches: int                       # batches of threads * unroll chunks a tile
    partial_batch: bool                # the last batch of a tile has fewer chunks than threads * unroll
    min_blocks: int                    # __launch_bounds__' second argument (blocks an SM at the register budget)
    strides: tuple[tuple[DimLike, ...], ...]   # per operand (inputs then outputs): element strides of its dims
    ragged: tuple[bool, ...]           # per iteration dimension: its extent may not be a multiple of the block
    why: str                           # explain's sentence

    @property
    def any_ragged(self) -> bool:
        """Some iteration dimension may end in a partial block."""
        return any(self.ragged)

    @property
    def masked(self) -> bool:
        """A chunk may lie outside the array (a partial batch, or a ragged dimension): each is tested."""
        return self.partial_batch or self.any_ragged


def check_registers(op, sch, iter_shape, space, problems: Problems) -> None:
    """Located errors for what the register path cannot do or would ignore: Pallas, the ring's fields, a row that
    is not a whole number of 16-byte vectors."""
    if sch.pipeline.data_path != "registers":
        return
    if "pallas" in sch.backends:
        problems.add(FIELD, "the Pallas map kernel streams tiles through emit_pipeline's TMA ring; data_path: "
                            "registers is the CUDA kernel's: set schedule.backends: [cuda], " + _TMA)
    pipe = sch.pipeline
    if pipe.kind != "emit_pipeline":
        problems.add(("schedule", "pipeline", "kind"), f"with data_path: registers there is no SMEM ring for kind "
                                                       f"{pipe.kind} to shape; legal: emit_pipeline (the default)")
    if pipe.max_concurrent_steps != 2:
        problems.add(("schedule", "pipeline", "max_concurrent_steps"),
                     "with data_path: registers there is no SMEM ring (each thread keeps "
                     f"{UNROLL} chunks of loads in flight instead); legal: leave it out (2, the default)")
    for name in sch.barriers:
        problems.add(("schedule", "barriers", name), "with data_path: registers there is no SMEM ring and no "
                                                     "mbarrier; legal: leave barriers out")
    _check_blocks(op, sch, problems)
    _check_rows(op, iter_shape, space, problems)


def _check_blocks(op, sch, problems: Problems) -> None:
    """A block's ring fields (swizzle, delay_release) and an input's NaN padding are not read: nothing is staged
    in SMEM and nothing beyond the array is loaded."""
    for group, names in (("in_specs", op.inputs), ("out_specs", op.outputs)):
        for n, bs in getattr(sch, group).items():
            if n not in names:
                continue
            path = ("schedule", group, n)
            if bs.transforms.swizzle != "auto":
                problems.add((*path, "transforms", "swizzle"), "with data_path: registers no block is staged in "
                                                               "SMEM; legal: auto (the default)")
            if bs.delay_release:
                problems.add((*path, "delay_release"), "with data_path: registers there are no pipeline stages to "
                                                       "keep; legal: 0 (the default)")
            if bs.out_of_bounds == "nan":
                problems.add((*path, "out_of_bounds"), "with data_path: registers a chunk past the array's edge is "
                                                       "neither loaded nor stored, so no padding is read; legal: zero "
                                                       "or reject")


def _check_rows(op, iter_shape, space, problems: Problems) -> None:
    """Every thread moves whole 16-byte vectors: the output row (and every input that has the minor dimension)
    must be a multiple of vec elements at every size in range, so a vector never straddles two rows."""
    vec = 16 // min(ITEMSIZE[o.dtype] for o in (op.inputs | op.outputs).values())
    extent = iter_shape[-1]
    if dims.divisible(extent, vec, space.ranges):
        return
    what = f"{extent}" if isinstance(extent, int) else f"the dynamic {extent} (declare multiple_of: {vec})"
    problems.add(FIELD, f"with data_path: registers each thread moves {vec} elements (16 B of the narrowest dtype) "
                        f"at once, and the output's rows are {what} elements, not always a multiple of {vec}; "
                        f"legal: rows of a multiple of {vec} elements, " + _TMA)


def plan_registers(op, sch, space, operands, vec: int, threads: int, hw: Hardware) -> RegisterPath:
    """The batch (UNROLL chunks a thread; fewer when the inputs' loads of them would pass LOAD_BUDGET bytes, or
    when a tile has fewer chunks), the occupancy bound and each operand's GMEM element strides."""
    chunks = dim_prod(space.block) // vec
    loaded = sum(o.itemsize if o.minor_bcast else vec * o.itemsize for o in operands if o.role == "in")
    unroll = max(1, min(UNROLL, LOAD_BUDGET // max(loaded, 1), chunks // threads))
    per_batch = threads * unroll
    batches = -(-chunks // per_batch)
    min_blocks = max(1, min(hw.max_threads_per_sm // threads, hw.max_blocks_per_sm,
                            65536 // (threads * REGISTER_BUDGET)))
    strides = tuple(tuple(dim_prod(o.shape[d + 1:]) for d in range(len(o.shape))) for o in operands)
    ragged = tuple(not dims.divisible(x, b, space.ranges) for x, b in zip(space.iter_shape, space.block))
    why = (f"data_path registers: 16-byte global loads and stores, {unroll} chunk{'s' if unroll > 1 else ''} of "
           f"{vec} elements a thread in flight (every input's loads before the arithmetic), no SMEM; "
           f"{min_blocks} blocks an SM (at most {REGISTER_BUDGET} registers a thread) hide the latency")
    if any(ragged):
        why += "; chunks past the array's edge are skipped (bounds-checked)"
    return RegisterPath(unroll, chunks, batches, chunks % per_batch != 0, min_blocks, strides, ragged, why)
