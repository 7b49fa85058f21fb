"""What the map planner picks for the schedule fields a spec does not write.

The bundled specs (specs/add_bf16.yaml, gelu_bias_bf16.yaml, scale_f32.toml) are the model: blocks of 32 rows of
512 bytes (bf16 [32, 256], f32 [1, 32, 128]), two warpgroups, a 4-stage TMA ring, a persistent grid. A block
dimension that cannot divide its array without getting tiny is padded instead (out_of_bounds: zero on every
operand it cuts, as the bundled dynamic-size specs do). A field the spec writes is never replaced.
"""
from __future__ import annotations

import math

from ...frontend.model import ITEMSIZE, BlockSpec
from ...plan import dims as D
from ...plan.common import Problems, dynamic_ranges, resolve_shape, size_values
from ...plan.defaults import Pick, written
from ...plan.hardware import Hardware
from ...plan.legality import stages_that_fit
from .operands import broadcasts

ROW_BYTES = 512          # the minor block dimension's bytes (bf16: 256 elements)
ROWS = 32                # the next dimension's block
TMA_MAX_BOX = 256        # elements a TMA box spans per dimension
STAGES = 4
OUT_BUFFERS = 2          # the planner double-buffers each output block
MIN_BLOCK = 8            # a divisor below this (and below the extent) is padded instead
MIN_ROW_BYTES = 128      # the same for the minor dimension, in bytes


def map_defaults(spec, hw: Hardware) -> list[Pick]:
    """Picks for the fields the spec leaves out (plan.defaults applies the ones not written)."""
    op, sch = spec.op, spec.schedule
    if not op.outputs:
        return []
    out0 = next(iter(op.outputs))
    shapes = _shapes(op)
    if shapes is None or written(spec, ("schedule", "out_specs", out0)) or \
            not all(broadcasts(shapes[n], shapes[out0]) for n in op.inputs) or \
            any(shapes[n] != shapes[out0] for n in op.outputs) or len(shapes[out0]) > 3:
        return []                               # the planner reports a bad op; a written block is the user's
    ranges = dynamic_ranges(op.sizes)
    iter_shape = shapes[out0]
    isz = {n: ITEMSIZE[o.dtype] for n, o in (op.inputs | op.outputs).items()}
    vec = 16 // min(isz.values())
    rows = ROWS
    while True:
        block, ragged = _block(iter_shape, ITEMSIZE[op.outputs[out0].dtype], vec, rows, ranges)
        stage = sum(math.prod(_operand_block(shapes[n], iter_shape, block)) * isz[n] for n in op.inputs)
        staging = sum(math.prod(block) * isz[n] * OUT_BUFFERS for n in op.outputs)
        fit = stages_that_fit(hw, staging + 8 * STAGES, max(stage, 1))
        if fit >= 2 or rows == 1:
            break
        rows //= 2
    why = f"{'x'.join(map(str, block))} blocks of {out0} (the bundled map specs' 32 rows of {ROW_BYTES} B)"
    why += "; the last blocks are zero-padded (out_of_bounds: zero)" if ragged else ""
    picks = []
    for n in list(op.outputs) + list(op.inputs):
        group = "out_specs" if n in op.outputs else "in_specs"
        oblock = _operand_block(shapes[n], iter_shape, block)
        cut = any(not D.divisible(x, b, ranges) for x, b in zip(shapes[n], oblock))
        if n != out0 and not cut:
            continue                            # the planner's default: the broadcast of the output block
        if written(spec, ("schedule", group, n)):
            continue
        picks.append(Pick(("schedule", group, n), BlockSpec(block_shape=list(oblock),
                                                             out_of_bounds="zero" if cut else "reject"),
                          why if n == out0 else "the output's block, zero-padded at the edge"))
    if not written(spec, ("schedule", "pipeline", "max_concurrent_steps")) and sch.pipeline.kind != "none" \
            and sch.pipeline.data_path == "tma":   # the register path has no ring to size
        stages = max(2, min(STAGES, fit))
        picks.append(Pick(("schedule", "pipeline", "max_concurrent_steps"), stages,
                          f"{stages} TMA stages of {stage} B" + ("" if stages == STAGES else " (what fits in SMEM)")))
    if not written(spec, ("schedule", "num_warpgroups")) and math.prod(block) >= 2 * 128 * vec:
        picks.append(Pick(("schedule", "num_warpgroups"), 2, f"256 threads, {math.prod(block) // 256} elements each "
                                                             f"per block"))
    return picks


def _shapes(op) -> dict | None:
    problems = Problems()
    sizes = size_values(op.sizes)
    shapes = {n: resolve_shape(o.shape, sizes, ("op", n), problems) for n, o in (op.inputs | op.outputs).items()}
    return None if problems else shapes


def _block(shape, isz: int, vec: int, rows: int, ranges) -> tuple[tuple[int, ...], bool]:
    """A block of the iteration shape: `rows` x ROW_BYTES in the last two dimensions, 1 before; each dimension the
    largest power of two up to that which divides the extent, or (when that would be tiny) padded."""
    rank = len(shape)
    targets = [1] * max(rank - 2, 0) + ([rows] if rank >= 2 else []) + [min(ROW_BYTES // isz, TMA_MAX_BOX)]
    block, ragged = [], False
    for d, (extent, target) in enumerate(zip(shape, targets)):
        last = d == rank - 1
        top = D.upper(extent, ranges)
        b = target
        while b > 1 and not (D.divisible(extent, b, ranges) and (not last or b % vec == 0)):
            b //= 2
        tiny = b * isz < MIN_ROW_BYTES if last else b < MIN_BLOCK
        if (not tiny or b >= min(top, target)) and (not last or b % vec == 0):
            block.append(b)
            continue
        ragged = True                           # pad: the smallest power of two covering the extent, up to target
        b = max(vec if last else 1, min(target, 1 << max(top - 1, 0).bit_length()))
        block.append(b)
    return tuple(block), ragged


def _operand_block(shape, iter_shape, block) -> tuple[int, ...]:
    """The planner's block of an operand: the output block, 1 where the operand broadcasts."""
    off = len(iter_shape) - len(shape)
    return tuple(1 if shape[d] == 1 and iter_shape[off + d] != 1 else block[off + d] for d in range(len(shape)))
