"""The matmul family's tune aliases: short knob names for fields that move together. Each alias maps to the
(field path, list index or None[, values]) targets it sets; `schedgen.tune.aliases` turns them into knobs."""
from __future__ import annotations

from .schedule import CLUSTER_AXIS


def _bs(*parts: str) -> tuple[str, ...]:
    return ("schedule", *parts)


def target(path: tuple[str, ...], index: int | None = None, values: tuple | None = None) -> tuple:
    """One field an alias sets (plain data; the tuner makes a `Target` of it); with `values`, (knob value, field
    value) pairs: the field follows the knob (knobs.Target)."""
    return (path, index) if values is None else (path, index, values)


# the operand a 2-CTA cluster shares is multicast (collective_axes: [cluster]); on a 1-CTA launch nothing is
SHARED = ((1, []), (2, [CLUSTER_AXIS]))


def matmul_aliases(spec) -> dict[str, tuple]:
    """The matmul family's knobs that tie several fields (absent BlockSpecs are skipped when resolving)."""
    op, sch = spec.op, spec.schedule
    out = next(iter(op.outputs))
    a, b, o = _bs("in_specs", op.lhs, "block_shape"), _bs("in_specs", op.rhs, "block_shape"), \
        _bs("out_specs", out, "block_shape")
    m_a, k_a = (-1, -2) if op.transpose_lhs else (-2, -1)
    k_b, n_b = (-1, -2) if op.transpose_rhs else (-2, -1)
    stages = (target(_bs("pipeline", "max_concurrent_steps")),) + tuple(
        target(_bs("barriers", nm, "num_barriers")) for nm in ("full", "empty") if nm in sch.barriers)
    return {
        "tile_m": (target(a, m_a), target(o, -2)),
        "tile_n": (target(b, n_b), target(o, -1)),
        "tile_k": (target(a, k_a), target(b, k_b)),
        "stages": stages,
        "consumers": (target(_bs("pipeline", "num_compute_wgs")),),
        "wg_axis": (target(_bs("pipeline", "wg_axis")),),
        "cluster_m": (target(_bs("cluster"), 0), target(_bs("in_specs", op.rhs, "collective_axes"), None, SHARED)),
        "cluster_n": (target(_bs("cluster"), 1), target(_bs("in_specs", op.lhs, "collective_axes"), None, SHARED)),
        "delay_release": (target(_bs("in_specs", op.lhs, "delay_release")),
                          target(_bs("in_specs", op.rhs, "delay_release"))),
        "epilogue_m": (target(_bs("epilogue", "tile"), 0),),
        "epilogue_n": (target(_bs("epilogue", "tile"), 1),),
        "epilogue_buffers": (target(_bs("epilogue", "buffers")),),
        "epilogue_store": (target(_bs("epilogue", "store")),),
        "tile_order": (target(_bs("persistent", "tile_order")),),
        "minor_dim": (target(_bs("persistent", "minor_dim")),),
        "tile_width": (target(_bs("persistent", "tile_width")),),
        "num_blocks": (target(_bs("persistent", "num_blocks")),),
    }
