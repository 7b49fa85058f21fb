"""The rowwise family's tune aliases and default tune space."""
from __future__ import annotations

from ...registry import TuneSpace


def _bs(*parts):
    return ("schedule", *parts)


def rowwise_aliases(spec) -> dict[str, tuple]:
    """`rows`: the rows a block (the first output's BlockSpec, the one the kernels read); `stages`: the rows a row
    group keeps in flight; `warpgroups`; `num_blocks`."""
    op, sch = spec.op, spec.schedule
    out0 = next(iter(op.outputs))
    rows = ((_bs("out_specs", out0, "block_shape"), 0),) if out0 in sch.out_specs else ()
    return {"rows": rows, "stages": ((_bs("pipeline", "max_concurrent_steps"), None),),
            "warpgroups": ((_bs("num_warpgroups"), None),), "num_blocks": ((_bs("persistent", "num_blocks"), None),)}


def rowwise_space(spec) -> TuneSpace:
    """Warpgroups (1, 2, 4) with rows a block (1, 2, 4: each row keeps whole warps), and 1 or 2 rows in flight;
    combinations whose row does not fit the registers are errors the tuner prunes. Warpgroups are the CUDA
    kernel's: with no cuda backend the space leaves them to the planner (written there they are an error)."""
    sch = spec.schedule
    cuda = "cuda" in sch.backends
    params: dict[str, tuple] = {"warpgroups": tuple(sorted({1, 2, 4, sch.num_warpgroups}))} if cuda else {}
    if rowwise_aliases(spec)["rows"]:
        cur = sch.out_specs[next(iter(spec.op.outputs))].block_shape[0]
        params["rows"] = tuple(sorted({1, 2, 4, cur}))
    if sch.pipeline.kind != "none":
        params["stages"] = tuple(sorted({1, 2, sch.pipeline.max_concurrent_steps}))
    return TuneSpace(params, ("rows <= 4 * warpgroups",) if cuda else (),
                     "the rows a block, the warps a row and the rows in flight" if cuda else
                     "the rows a block and the rows in flight (the warps are the planner's: the Pallas kernel reads "
                     "no thread count)")
