"""The epilogue's vector operands staged in SMEM (schedule.epilogue.operands: smem; issue 17).

A row operand ([N], e.g. a bias) or a column operand ([M, 1]) read in the epilogue costs an L2 round trip per
64-column chunk when each thread loads its values after the chunk's barrier, with the tensor cores idle. Staged, the
producer warpgroup's warp 1 (idle beside the TMA thread) copies each tile's slice of every such operand (tile_n
columns from n0, tile_m rows from m0) into an SMEM slot with 16-byte cp.async, zero-filled past N / M, and arrives on
the slot's `vec_full` mbarrier when the copies land (cp.async.mbarrier.arrive.noinc); the consumers wait on it before
the epilogue, read their values with ld.shared and arrive on `vec_empty` when done. A cooperative kernel has one slot
(the next tile's copies land under its k-loop); ping-pong has two, one a consumer, since a consumer's epilogue runs
under the other's k-loop. Only the tiles that run an epilogue are filled: split-K's rank 0, stream-K's units that
start at k-step 0."""
from __future__ import annotations

from ..common import Problems
from .records import MatOperand, StagedVector, VectorSlots

COPY_BYTES = 16            # one cp.async: 16 bytes (a vector slice is a multiple: tile_n and tile_m are multiples of 8)
STAGED = ("row", "col")    # the operands a tile reads a slice of


def vector_slots(sch, extras: tuple[MatOperand, ...], tm: int, tn: int, nc: int, pingpong: bool,
                 problems: Problems) -> VectorSlots:
    """The slots of schedule.epilogue.operands: smem for a tm x tn tile (none for global); a located error where
    nothing would be staged."""
    if sch.epilogue.operands != "smem":
        return VectorSlots()
    vectors, offset = [], 0
    for e in extras:
        if e.bcast not in STAGED:
            continue
        elems = tn if e.bcast == "row" else tm
        nbytes = elems * e.itemsize                      # bf16 / f16 / f32 and a multiple of 8 elements: 16-byte copies
        vectors.append(StagedVector(e.name, e.cname, e.bcast, e.dtype, e.itemsize, offset, elems,
                                    -(-nbytes // COPY_BYTES)))
        offset += -(-nbytes // COPY_BYTES) * COPY_BYTES
    if not vectors:
        others = ", ".join(f"{e.name} ({e.bcast})" for e in extras) or "none"
        problems.add(("schedule", "epilogue", "operands"),
                     f"operands: smem stages the epilogue's row ([N]) and column ([M, 1]) operands in SMEM; this "
                     f"epilogue reads none (its operands: {others}): use operands: global (the default)")
        return VectorSlots()
    return VectorSlots(tuple(vectors), 2 if pingpong else 1, offset, 1 if pingpong else nc)


def check_smem_operands(sch, why: str, problems: Problems) -> None:
    """A kernel that reads its epilogue operands from global memory only (`why` says which): operands: smem is a
    located error there."""
    if sch.epilogue.operands != "global":
        problems.add(("schedule", "epilogue", "operands"),
                     f"{why}; operands: smem is the sm_90a CUDA matmul kernel's: use operands: global (the default)")
