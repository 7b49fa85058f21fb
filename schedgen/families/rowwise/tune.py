"""The rowwise family's tune aliases and default tune space."""
from __future__ import annotations

from .. import TuneSpace


def _bs(*parts):
    return ("schedule", *parts)


def rowwise_aliases(spec) -> dict[str, tuple]:
    """`rows`: the rows a block of every BlockSpec the spec gives (their first dimension); `stages`: the rows a row
    group keeps in flight; `warpgroups`; `num_blocks`."""
    op, sch = spec.op, spec.schedule
    rows = tuple((_bs(group, name, "block_shape"), 0) for group in ("out_specs", "in_specs")
                 for name, bs in getattr(sch, group).items()
                 if name in (op.outputs if group == "out_specs" else op.inputs)
                 and not (len(bs.block_shape) == 1 and _is_col(op, group, name)))
    return {"rows": rows, "stages": ((_bs("pipeline", "max_concurrent_steps"), None),),
            "warpgroups": ((_bs("num_warpgroups"), None),), "num_blocks": ((_bs("persistent", "num_blocks"), None),)}


def _is_col(op, group, name) -> bool:
    o = (op.outputs if group == "out_specs" else op.inputs)[name]
    return len(o.shape) == 1 and o.shape[0] == next(iter(o2.shape[-1] for o2 in (op.inputs | op.outputs).values()
                                                         if len(o2.shape) == 2))


def rowwise_space(spec) -> TuneSpace:
    """Warpgroups (1, 2, 4) with rows a block (1, 2, 4: each row keeps whole warps), and 1 or 2 rows in flight;
    combinations whose row does not fit the registers are errors the tuner prunes."""
    sch = spec.schedule
    params: dict[str, tuple] = {"warpgroups": tuple(sorted({1, 2, 4, sch.num_warpgroups}))}
    if rowwise_aliases(spec)["rows"]:
        cur = next(bs.block_shape[0] for g in ("out_specs", "in_specs") for bs in getattr(sch, g).values())
        params["rows"] = tuple(sorted({1, 2, 4, cur}))
    if sch.pipeline.kind != "none":
        params["stages"] = tuple(sorted({1, 2, sch.pipeline.max_concurrent_steps}))
    return TuneSpace(params, ("rows <= 4 * warpgroups",), "the rows a block, the warps a row and the rows in flight")
