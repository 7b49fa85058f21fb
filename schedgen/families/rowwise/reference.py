"""The rowwise family's float64 reference (the body evaluated by numpy, reductions along the last axis) and its
--small sizes."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ...frontend import expr as ex
from ...reference import POSITIVE_DOMAIN, _functions, magnitude_for, shape_of
from ...runtime.arrays import DTYPES
from . import body as rb
from .plan import INDEX_DTYPES, _kind, _shapes
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
    """float64: integer inputs (class indices) read as their column where 0 <= i < N and -1 elsewhere; a row whose
    class index is op.ignore_index gets 0 in every output; [1] outputs are the rows' values summed over the rows
    not ignored (mean: divided by their count), [1] inputs reach every row as that reduction's adjoint."""
    op = spec.op
    body, kinds = parsed(spec)
    n = next(shape_of(o, sizes)[-1] for nm, o in (op.inputs | op.outputs).items() if kinds.get(nm) == "row")
    m = next(shape_of(o, sizes)[0] for nm, o in (op.inputs | op.outputs).items() if kinds.get(nm) == "row")
    keep = np.ones(m, dtype=bool)             # the rows not ignored
    for name, o in op.inputs.items():
        if o.dtype in INDEX_DTYPES:
            keep &= np.asarray(inputs[name]).reshape(-1).astype(np.int64) != op.ignore_index
    count = float(keep.sum())
    env: dict = {}
    for name, a in inputs.items():
        if op.inputs[name].dtype in INDEX_DTYPES:
            i = np.asarray(a).astype(np.int64)
            a = np.where((i >= 0) & (i < n), i, -1)
        a = np.asarray(a, dtype=np.float64)
        if kinds.get(name) == "scalar":
            with np.errstate(all="ignore"):
                a = a.reshape(1, 1) / (count if op.reduction == "mean" else 1.0)
        env[name] = a.reshape(1, -1) if kinds.get(name) == "col" else a.reshape(-1, 1) if kinds.get(name) == "per_row" else a
    env.update({c: float(v) for c, v in op.constants.items()})
    outs = evaluate(body, env, n)
    result = {}
    for name, v in outs.items():
        shape = shape_of(op.outputs[name], sizes)
        if kinds.get(name) in ("row", "per_row", "partial"):     # ignored rows: 0 (where: their values may be inf)
            v = np.where(keep.reshape(-1, 1), np.broadcast_to(v, np.broadcast_shapes(np.shape(v), (m, 1))), 0.0)
        if kinds.get(name) == "scalar":
            rows = np.where(keep, np.broadcast_to(v, (m, 1)).reshape(-1), 0.0)
            with np.errstate(all="ignore"):
                result[name] = np.array([rows.sum() / (count if op.reduction == "mean" else 1.0)])
            continue
        if kinds.get(name) == "partial":     # one way to split the column sums in P rows: all in the first
            rows = np.broadcast_to(v, np.broadcast_shapes(np.shape(v), (1, n)))
            result[name] = np.zeros(shape)
            result[name][0] = rows.sum(axis=0)
            continue
        full = (shape[0], n) if kinds.get(name) == "row" else (shape[0], 1)
        result[name] = np.ascontiguousarray(np.broadcast_to(v, full).reshape(shape))
    return result


IGNORED_SHARE = 4        # random_inputs: about one row in this many gets ignore_index as its class index


def rowwise_random_inputs(spec, sizes: Mapping[str, int], rng, magnitude: float) -> dict[str, np.ndarray]:
    """reference.random_inputs' floats (normal, or uniform in [0.5, 2) for a body with logs or roots; scaled by
    `magnitude`), and class indices (i32 / i64 inputs) drawn from the row's columns, about one row in
    IGNORED_SHARE (at least one when M > 1) set to op.ignore_index."""
    op = spec.op
    _, kinds = parsed(spec)
    n = next(shape_of(o, sizes)[-1] for nm, o in (op.inputs | op.outputs).items() if kinds.get(nm) == "row")
    positive = bool(POSITIVE_DOMAIN & set(_functions(op.body)))
    out = {}
    for name, operand in op.inputs.items():
        shape = shape_of(operand, sizes)
        if operand.dtype in INDEX_DTYPES:
            idx = rng.integers(0, n, shape).reshape(-1)
            if idx.size > 1:
                ignored = rng.random(idx.size) < 1.0 / IGNORED_SHARE
                ignored[rng.integers(0, idx.size)] = True
                idx = np.where(ignored, op.ignore_index, idx)
            out[name] = idx.reshape(shape).astype(DTYPES[operand.dtype])
            continue
        data = rng.uniform(0.5, 2.0, shape).astype(np.float32) if positive else \
            rng.standard_normal(shape, dtype=np.float32)
        data *= np.float32(magnitude_for(operand.dtype, magnitude))
        out[name] = data.astype(DTYPES[operand.dtype])
    return out


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


__all__ = ["rowwise_reference", "rowwise_random_inputs", "small_sizes", "evaluate", "parsed", "_kind"]
