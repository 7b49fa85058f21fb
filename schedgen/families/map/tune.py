"""The map family's tune aliases: short knob names for fields that move together. Each alias maps to the
(field path, list index or None) pairs it sets; `schedgen.tune.aliases` turns them into knobs. And its default tune
space (`map_space`): what `schedgen tune` searches for a spec with no tune section."""
from __future__ import annotations

from ...registry import TuneSpace
from ...plan import dims as D
from ...plan.common import dynamic_ranges, size_values


def _bs(*parts: str) -> tuple[str, ...]:
    return ("schedule", *parts)


def target(path: tuple[str, ...], index: int | None = None) -> tuple[tuple[str, ...], int | None]:
    """One field an alias sets (plain data; the tuner makes a `Target` of it)."""
    return (path, index)


def map_aliases(spec) -> dict[str, tuple]:
    """The map family: `block_<size>` ties every block dimension that runs along that output dimension (broadcast
    dimensions keep their 1), plus the pipeline and loop knobs."""
    op, sch = spec.op, spec.schedule
    out_shape = list(next(iter(op.outputs.values())).shape)
    rank = len(out_shape)
    aliases: dict[str, tuple] = {}
    for d, dim in enumerate(out_shape):
        targets = []
        for group, operands in (("in_specs", op.inputs), ("out_specs", op.outputs)):
            for nm, operand in operands.items():
                r = len(operand.shape)
                di = d - (rank - r)
                if di >= 0 and operand.shape[di] == dim and dim != 1:
                    targets.append(target(_bs(group, nm, "block_shape"), di - r))
        aliases[f"block_{dim}" if isinstance(dim, str) else f"block_{d}"] = tuple(targets)
    aliases["stages"] = (target(_bs("pipeline", "max_concurrent_steps")),) + (
        (target(_bs("barriers", "full", "num_barriers")),) if "full" in sch.barriers else ())
    aliases["warpgroups"] = (target(_bs("num_warpgroups")),)
    for f in ("tile_order", "minor_dim", "tile_width", "num_blocks"):
        aliases[f] = (target(_bs("persistent", f)),)
    return aliases


# ============================================================================================== the default space
STAGES = (2, 3, 4)
WARPGROUPS = (1, 2)
TMA_MAX_BOX = 256          # elements a TMA box spans per dimension


def map_space(spec) -> TuneSpace:
    """The default tune space of a map spec (the spec completed with the planner's picks): the output block's rows
    (its next-to-last dimension, `block_<size>`: every operand that runs along it follows) halved, as picked and
    doubled, the TMA ring's depth (2, 3, 4) and the warpgroups (1, 2), each with the planner's pick: at most 18
    points. The row's 512 bytes stay as picked (the minor dimension is what TMA and the stores vectorise). Rows
    past the array, past a TMA box, or that do not divide it where the picked block rejects ragged edges are
    left out. A 1-D output has only the ring and the warpgroups to tune."""
    op, sch = spec.op, spec.schedule
    out0 = next(iter(op.outputs), None)
    bs = sch.out_specs.get(out0) if out0 is not None else None
    if bs is None:
        return TuneSpace(why="the planner picked no output block to tune around")
    params: dict[str, tuple] = {}
    shape = list(op.outputs[out0].shape)
    if len(shape) >= 2 and len(bs.block_shape) == len(shape) and shape[-2] != 1:
        d, dim, rows = len(shape) - 2, shape[-2], bs.block_shape[-2]
        extent = size_values(op.sizes).get(dim) if isinstance(dim, str) else dim
        ranges = dynamic_ranges(op.sizes)
        if extent is not None:
            top = D.upper(extent, ranges)
            tried = sorted({max(1, rows // 2), rows, rows * 2})
            keep = tuple(v for v in tried if v == rows or (
                v <= TMA_MAX_BOX and v < 2 * top and (bs.out_of_bounds != "reject" or D.divisible(extent, v, ranges))))
            if len(keep) > 1:
                params[f"block_{dim}" if isinstance(dim, str) else f"block_{d}"] = keep
    if sch.pipeline.kind != "none" and sch.pipeline.data_path == "tma":   # the register path has no ring
        params["stages"] = tuple(sorted(set(STAGES) | {sch.pipeline.max_concurrent_steps}))
    if "cuda" not in sch.backends:     # the CUDA kernel's warpgroups: written with no cuda they are an error
        return TuneSpace(params, (), "the block's rows and the TMA ring's depth (the Pallas kernel reads no "
                                     "thread count)")
    params["warpgroups"] = tuple(sorted(set(WARPGROUPS) | {sch.num_warpgroups}))
    return TuneSpace(params, (), "the block's rows, the TMA ring's depth and the warpgroups")
