"""The families' short knob names (`tile_n` sets the rhs and output BlockSpecs' N together), keyed by family.

`aliases_for(spec)` is the one entry point; a family without aliases has none (field paths still work).
"""
from __future__ import annotations

from typing import Callable

from ..spec.model import SpecFile
from .knobs import Target


def _bs(*parts: str) -> tuple[str, ...]:
    return ("schedule", *parts)


def matmul_aliases(spec: SpecFile) -> dict[str, tuple[Target, ...]]:
    """The matmul family's knobs that tie several fields (absent BlockSpecs are skipped when resolving)."""
    op, sch = spec.op, spec.schedule
    out = next(iter(op.outputs))
    a, b, o = _bs("in_specs", op.lhs, "block_shape"), _bs("in_specs", op.rhs, "block_shape"), \
        _bs("out_specs", out, "block_shape")
    m_a, k_a = (-1, -2) if op.transpose_lhs else (-2, -1)
    k_b, n_b = (-1, -2) if op.transpose_rhs else (-2, -1)
    stages = (Target(_bs("pipeline", "max_concurrent_steps")),) + tuple(
        Target(_bs("barriers", nm, "num_barriers")) for nm in ("full", "empty") if nm in sch.barriers)
    return {
        "tile_m": (Target(a, m_a), Target(o, -2)),
        "tile_n": (Target(b, n_b), Target(o, -1)),
        "tile_k": (Target(a, k_a), Target(b, k_b)),
        "stages": stages,
        "consumers": (Target(_bs("pipeline", "num_compute_wgs")),),
        "wg_axis": (Target(_bs("pipeline", "wg_axis")),),
        "cluster_m": (Target(_bs("cluster"), 0),),
        "cluster_n": (Target(_bs("cluster"), 1),),
        "delay_release": (Target(_bs("in_specs", op.lhs, "delay_release")),
                          Target(_bs("in_specs", op.rhs, "delay_release"))),
        "epilogue_m": (Target(_bs("epilogue", "tile"), 0),),
        "epilogue_n": (Target(_bs("epilogue", "tile"), 1),),
        "epilogue_buffers": (Target(_bs("epilogue", "buffers")),),
        "epilogue_store": (Target(_bs("epilogue", "store")),),
        "tile_order": (Target(_bs("persistent", "tile_order")),),
        "minor_dim": (Target(_bs("persistent", "minor_dim")),),
        "tile_width": (Target(_bs("persistent", "tile_width")),),
        "num_blocks": (Target(_bs("persistent", "num_blocks")),),
    }


def map_aliases(spec: SpecFile) -> dict[str, tuple[Target, ...]]:
    """The map family: `block_<size>` ties every block dimension that runs along that output dimension (broadcast
    dimensions keep their 1), plus the pipeline and loop knobs."""
    op, sch = spec.op, spec.schedule
    out_shape = list(next(iter(op.outputs.values())).shape)
    rank = len(out_shape)
    aliases: dict[str, tuple[Target, ...]] = {}
    for d, dim in enumerate(out_shape):
        targets = []
        for group, operands in (("in_specs", op.inputs), ("out_specs", op.outputs)):
            for nm, operand in operands.items():
                r = len(operand.shape)
                di = d - (rank - r)
                if di >= 0 and operand.shape[di] == dim and dim != 1:
                    targets.append(Target(_bs(group, nm, "block_shape"), di - r))
        aliases[f"block_{dim}" if isinstance(dim, str) else f"block_{d}"] = tuple(targets)
    aliases["stages"] = (Target(_bs("pipeline", "max_concurrent_steps")),) + (
        (Target(_bs("barriers", "full", "num_barriers")),) if "full" in sch.barriers else ())
    aliases["warpgroups"] = (Target(_bs("num_warpgroups")),)
    for f in ("tile_order", "minor_dim", "tile_width", "num_blocks"):
        aliases[f] = (Target(_bs("persistent", f)),)
    return aliases


ALIASES: dict[str, Callable[[SpecFile], dict[str, tuple[Target, ...]]]] = {"matmul": matmul_aliases,
                                                                           "map": map_aliases}


def aliases_for(spec: SpecFile) -> dict[str, tuple[Target, ...]]:
    """The short knob names of this spec's family (alias -> the fields it sets); {} for a family without any."""
    fn = ALIASES.get(spec.op.kind)
    return fn(spec) if fn is not None else {}
