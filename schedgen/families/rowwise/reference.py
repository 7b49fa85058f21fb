"""The rowwise family's float64 reference (the body evaluated by numpy, reductions along the last axis) and its
--small sizes."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ...frontend import expr as ex
from ...reference import shape_of
from . import body as rb
from .plan import _kind, _shapes
from ...plan.common import Problems


def parsed(spec) -> tuple[rb.RowBody, dict]:
    op = spec.op
    kinds, _, _ = _shapes(op, Problems())
    kinds = kinds or {}
    body = rb.parse(op.body, inputs=list(op.inputs), outputs=list(op.outputs), constants=list(op.constants),
                    row_inputs=[n for n in op.inputs if kinds.get(n) in ("row", "col")])
    return body, kinds


def _reduce(op: str, arg: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op == "sum":
            return arg.sum(axis=-1, keepdims=True)
        if op == "mean":
            return arg.mean(axis=-1, keepdims=True)
        if op == "max":
            return arg.max(axis=-1, keepdims=True)
        if op == "min":
            return arg.min(axis=-1, keepdims=True)
        if op == "logsumexp":
            m = arg.max(axis=-1, keepdims=True)
            return m + np.log(np.exp(arg - m).sum(axis=-1, keepdims=True))
        cols = np.arange(arg.shape[-1])
        col = np.trunc(np.broadcast_to(idx, arg.shape[:-1] + (1,)))
        return np.where(cols == col, arg, 0.0).sum(axis=-1, keepdims=True)


def evaluate(body: rb.RowBody, env: Mapping[str, np.ndarray | float], n: int) -> dict[str, np.ndarray]:
    """float64 evaluation: rows [M, N], vectors [N], per-row values [M, 1]; every value [M, N] or [M, 1]."""
    values = dict(env)

    def run(expr: ex.Expr) -> np.ndarray:
        one = ex.Body(((" r", expr),), "", (" r",))
        return ex.eval_numpy(one, values)[" r"]

    for i, (target, expr) in enumerate(body.statements):
        for r in body.reductions:
            if r.statement == i:
                arg = np.broadcast_to(run(r.arg), np.broadcast_shapes(run(r.arg).shape, (1, n)))
                idx = run(r.index_arg) if r.index_arg is not None else None
                values[rb.PLACEHOLDER.format(r.index)] = _reduce(r.op, arg, idx)
        values[target] = run(expr)
    return {o: values[o] for o in body.outputs}


def rowwise_reference(spec, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray],
                      **_options) -> dict[str, np.ndarray]:
    op = spec.op
    body, kinds = parsed(spec)
    n = next(shape_of(o, sizes)[-1] for nm, o in (op.inputs | op.outputs).items() if kinds.get(nm) == "row")
    env: dict = {}
    for name, a in inputs.items():
        a = np.asarray(a, dtype=np.float64)
        env[name] = a.reshape(1, -1) if kinds.get(name) == "col" else a.reshape(-1, 1) if kinds.get(name) == "per_row" else a
    env.update({c: float(v) for c, v in op.constants.items()})
    outs = evaluate(body, env, n)
    result = {}
    for name, v in outs.items():
        shape = shape_of(op.outputs[name], sizes)
        if kinds.get(name) == "partial":     # one way to split the column sums in P rows: all in the first
            rows = np.broadcast_to(v, np.broadcast_shapes(np.shape(v), (1, n)))
            result[name] = np.zeros(shape)
            result[name][0] = rows.sum(axis=0)
            continue
        full = (shape[0], n) if kinds.get(name) == "row" else (shape[0], 1)
        result[name] = np.ascontiguousarray(np.broadcast_to(v, full).reshape(shape))
    return result


def small_sizes(spec, plan, tiles_per_dim: int) -> dict[str, int]:
    """M: a few row blocks and a partial one when the blocks allow it (odd M); N: kept below 2048 (a multiple of
    the vector width), so the Pallas interpreter and numpy stay quick."""
    op = spec.op
    out: dict[str, int] = {}
    kinds, m, n = _shapes(op, Problems())
    row = next(o for nm, o in (op.inputs | op.outputs).items() if kinds and kinds.get(nm) == "row")
    m_name, n_name = row.shape[0], row.shape[1]
    step = plan.rows_per_block * plan.steps
    ranges = {r.name: r for r in plan.launch.dynamic_sizes}
    if isinstance(m_name, str):
        want = step * tiles_per_dim
        if m_name in ranges:
            r = ranges[m_name]
            want = max(r.min, min(r.max, want // r.multiple_of * r.multiple_of))
        out[m_name] = want
    if isinstance(n_name, str):
        out[n_name] = min(n, 1024) if n % 8 == 0 or n < 1024 else 1000
    return out


__all__ = ["rowwise_reference", "small_sizes", "evaluate", "parsed", "_kind"]
