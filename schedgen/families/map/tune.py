"""The map family's tune aliases: short knob names for fields that move together. Each alias maps to the
(field path, list index or None) pairs it sets; `schedgen.tune.aliases` turns them into knobs."""
from __future__ import annotations


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
