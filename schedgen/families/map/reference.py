"""The map family's float64 reference (the body evaluated by numpy over float64 inputs) and its --small sizes."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ...frontend import expr as ex
from ...plan import dims
from ...reference import shape_of


def map_reference(spec, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray],
                  **_options) -> dict[str, np.ndarray]:
    op = spec.op
    body = ex.parse_body(op.body, inputs=list(op.inputs), outputs=list(op.outputs), constants=list(op.constants))
    env = {n: np.asarray(a, dtype=np.float64) for n, a in inputs.items()}
    env.update({n: float(v) for n, v in op.constants.items()})
    outs = ex.eval_numpy(body, env)
    return {n: np.broadcast_to(v, shape_of(op.outputs[n], sizes)) for n, v in outs.items()}


def small_sizes(spec, plan, tiles_per_dim: int) -> dict[str, int]:
    """Each named output dimension becomes block x min(tiles, grid)."""
    out = {}
    out_operand = spec.op.outputs[plan.outputs[0].name]
    ranges = {r.name: r for r in plan.launch.dynamic_sizes}
    for dim, block, grid in zip(out_operand.shape, plan.block, plan.grid):
        if isinstance(dim, str) and dim not in out:
            out[dim] = block * min(tiles_per_dim, dims.upper(grid, ranges))
            if dim in ranges:   # a legal value of the dynamic size: its step, and at most its max
                r = ranges[dim]
                out[dim] = max(r.min, min(r.max, out[dim] // r.multiple_of * r.multiple_of))
    return out
