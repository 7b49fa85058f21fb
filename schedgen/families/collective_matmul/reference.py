"""The collective_matmul family's float64 reference and its --small sizes."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ... import reference as shared
from ...reference import Sampled, product_f64, sample_rows


def collective_matmul_reference(spec, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray], *,
                                rows: np.ndarray | None = None, sample: bool | None = None,
                                seed: int | None = None) -> dict[str, np.ndarray | Sampled]:
    """float64 `out_d = all_gather(lhs) @ rhs_d` on every device d of the mesh.

    Inputs are stacked over devices (random_inputs does it): lhs [D, M, K] (device j's rows of the gathered matrix at
    [j]), rhs [D, K, N]; the result is [D, M_total, N] with device d's out at [d], the gathered rows in device order
    (device j's at j x M). Full unless the work (D x M_total x N x K multiply-adds) is above SAMPLE_ABOVE or
    `sample=True` or `rows` is given: then a `Sampled` reference of rows of the result viewed as [D * M_total, N]
    (flat row r: device r // M_total, gathered row r % M_total)."""
    op = spec.op
    d_count = op.mesh.num_devices
    a = np.asarray(inputs[op.lhs])
    b = np.asarray(inputs[op.rhs])
    if a.ndim != 3 or a.shape[0] != d_count or b.ndim != 3 or b.shape[0] != d_count:
        raise ValueError(f"collective inputs are stacked per device: lhs [{d_count}, M, K], rhs [{d_count}, K, N]; got "
                         f"{list(a.shape)} and {list(b.shape)}")
    gathered = a.reshape(-1, a.shape[-1])                    # [M_total, K]: device j's rows at j x M
    m_total, n = gathered.shape[0], b.shape[-1]
    out_name = next(iter(op.outputs))
    if rows is None and (sample or (sample is None and d_count * m_total * n * a.shape[-1] > shared.SAMPLE_ABOVE)):
        rows = sample_rows(d_count * m_total, shared.SAMPLE_ROWS, seed)
    if rows is None:
        full = np.stack([product_f64(gathered, b[d]) for d in range(d_count)])
        return {out_name: full}
    flat = np.unique(np.asarray(rows, dtype=np.int64))
    parts = []
    for d in range(d_count):
        local = flat[(flat // m_total) == d] % m_total
        if local.size:
            parts.append(product_f64(gathered[local], b[d]))
    return {out_name: Sampled(flat, np.concatenate(parts, axis=0), (d_count, m_total, n))}


def small_sizes(spec, plan, tiles_per_dim: int) -> dict[str, int]:
    """Per-device M, N, K of `tiles` tiles each (the step's matmul tiles), and the output's rows to match."""
    op = spec.op
    mm = plan.mm
    lhs, rhs, out = op.inputs[op.lhs].shape, op.inputs[op.rhs].shape, next(iter(op.outputs.values())).shape
    want = {lhs[0]: min(plan.m, mm.tiles.tile_m * tiles_per_dim), lhs[1]: min(plan.k, mm.tiles.tile_k * tiles_per_dim),
            rhs[1]: min(plan.n, mm.tiles.tile_n * tiles_per_dim)}
    if isinstance(lhs[0], str):
        want[out[0]] = plan.num_devices * want[lhs[0]]
    return {dim: v for dim, v in want.items() if isinstance(dim, str)}
