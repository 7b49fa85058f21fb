"""The grouped_matmul family's float64 reference (per group), its --small sizes and its random inputs: activations
and weights normal, the group operand skewed counts (a few large groups, some small, some empty) that cover every
row of T exactly."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ...frontend import expr as ex
from ... import reference as shared
from ...reference import Sampled, magnitude_for, product_f64, sample_rows, shape_of
from ...runtime.arrays import DTYPES


def group_rows(offsets: np.ndarray, fmt: str, groups: int) -> list[tuple[int, int]]:
    """(start, end) of each group's rows as the kernel reads the group operand (before clamping to 0..T)."""
    o = [int(v) for v in np.asarray(offsets).reshape(-1)]
    if fmt == "offsets":
        return [(o[g], o[g + 1]) for g in range(groups)]
    if fmt == "ends":
        return [(o[g - 1] if g else 0, o[g]) for g in range(groups)]
    out, row = [], 0
    for g in range(groups):
        out.append((row, row + max(o[g], 0)))
        row += max(o[g], 0)
    return out


def encode_counts(counts, fmt: str) -> np.ndarray:
    """The group operand (int32) of per-group row counts in the layout `fmt`."""
    counts = np.asarray(counts, dtype=np.int64)
    if fmt == "counts":
        return counts.astype(np.int32)
    ends = np.cumsum(counts)
    return (np.concatenate([[0], ends]) if fmt == "offsets" else ends).astype(np.int32)


def skewed_counts(total: int, groups: int, rng: np.random.Generator, empty: int | None = None) -> np.ndarray:
    """`groups` row counts summing to `total`: Zipf-like weights in random order (a few large groups, many small),
    `empty` groups (default: a quarter, at least one when groups > 1) with no rows."""
    if groups == 1:
        return np.array([total])
    empty = max(1, groups // 4) if empty is None else empty
    weights = 1.0 / np.arange(1, groups + 1) ** 1.1
    weights[rng.choice(groups, size=min(empty, groups - 1), replace=False)] = 0.0
    weights = weights[rng.permutation(groups)]
    share = weights / weights.sum() * total
    counts = np.floor(share).astype(np.int64)
    live = np.flatnonzero(weights > 0)
    for i in range(int(total - counts.sum())):      # the remainder, one row each, to the live groups
        counts[live[i % len(live)]] += 1
    return counts


# above this many elements an operand's random values come from random bits (a uniform sign, 8 binades, a uniform
# mantissa: zero mean, never 0 or NaN) rather than numpy's normal generator: MoE weights reach 2G elements, a minute
# of standard_normal on one core, a few seconds this way
FAST_ABOVE = 1 << 24
_LAYOUT = {"bf16": (7, 127, 0x807F), "f16": (10, 15, 0x83FF)}   # mantissa bits, exponent bias, sign | mantissa mask


def random_16bit(rng: np.random.Generator, shape, dtype: str, top: int) -> np.ndarray:
    """Random bf16 / f16 values of magnitude in [2^(top - 7), 2^(top + 1)) with a random sign, from random bits."""
    mbits, bias, keep = _LAYOUT[dtype]
    n = int(np.prod(shape))
    raw = rng.integers(0, 0xFFFF, n, dtype=np.uint16, endpoint=True)
    exp = raw >> mbits                         # in place from here: two arrays of n uint16 in all
    exp &= 7
    np.subtract(np.uint16(bias + top), exp, out=exp)
    exp <<= mbits
    raw &= keep
    raw |= exp
    del exp
    return raw.view(DTYPES[dtype]).reshape(shape)


def random_inputs(spec, sizes: Mapping[str, int], rng: np.random.Generator,
                  magnitude: float = 1.0) -> dict[str, np.ndarray]:
    """Normal operands (weights 8x smaller), each scaled by `magnitude` (capped per dtype), and valid group
    offsets."""
    op = spec.op
    out = {}
    for name, operand in op.inputs.items():
        shape = shape_of(operand, sizes)
        top = -3 if name == op.rhs else 0           # weights ~8x smaller: |out| moderate for long K
        scale = magnitude_for(operand.dtype, magnitude)
        if int(np.prod(shape)) > FAST_ABOVE and operand.dtype in _LAYOUT:
            # random bits with the exponent raised by log2(scale): the same magnitudes, scaled (a power of two)
            out[name] = random_16bit(rng, shape, operand.dtype, top + round(math.log2(scale)))
            continue
        data = rng.standard_normal(shape, dtype=np.float32) * np.float32(2.0 ** top * scale)
        out[name] = data.astype(DTYPES[operand.dtype])
    t = shape_of(op.inputs[op.lhs], sizes)[0]
    out[op.group_offsets] = encode_counts(skewed_counts(t, op.groups, rng), op.offsets_format)
    return out


def grouped_reference(spec, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray], *,
                      rows: np.ndarray | None = None, sample: bool | None = None,
                      seed: int | None = None) -> dict[str, np.ndarray | Sampled]:
    """float64 `epilogue(x[rows of g] @ w[g])` for every group. Full unless the problem has more than SAMPLE_ABOVE
    multiply-adds (`sample=None`), `sample=True` or `rows` is given: then a `Sampled` reference of those rows (or
    SAMPLE_ROWS random ones). Rows in no group (before the first group's start, from the last group's end to T)
    are zeros in every output, as the kernels write them. A second output (a value the epilogue keeps for a backward) is computed alongside. With
    `ragged: k`, `epilogue(x[rows of g]^T @ w[rows of g])` for every group ([G, M, N]; sampled rows of its [G x M, N]
    view); an empty group's block is epilogue(0)."""
    op = spec.op
    if op.ragged == "k":
        return _reference_k(spec, inputs, rows=rows, sample=sample, seed=seed)
    out_name = next(iter(op.outputs))
    names = list(op.outputs)
    x, w = inputs[op.lhs], inputs[op.rhs]
    t, k = x.shape
    n = w.shape[1] if op.transpose_rhs else w.shape[2]
    if rows is None and (sample or (sample is None and t * n * k > shared.SAMPLE_ABOVE)):
        rows = sample_rows(t, shared.SAMPLE_ROWS, seed)
    picked = np.arange(t, dtype=np.int64) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
    body = ex.parse_body(op.epilogue or f"{out_name} = acc", inputs=["acc"], outputs=names,
                         constants=list(op.constants))
    res = {nm: np.zeros((len(picked), n), np.float64) for nm in names}
    for g, (s, e) in enumerate(group_rows(inputs[op.group_offsets], op.offsets_format, op.groups)):
        s, e = min(max(s, 0), t), min(max(e, s), t)
        sel = np.flatnonzero((picked >= s) & (picked < e))
        if sel.size == 0:
            continue
        wg = w[g].T if op.transpose_rhs else w[g]
        env = {"acc": product_f64(x[picked[sel]], wg), **{c: float(v) for c, v in op.constants.items()}}
        got = ex.eval_numpy(body, env)
        for nm in names:
            res[nm][sel] = np.broadcast_to(got[nm], (sel.size, n))
    if rows is None:
        return res
    return {nm: Sampled(picked, r, (t, n)) for nm, r in res.items()}


def _reference_k(spec, inputs, *, rows=None, sample=None, seed=None) -> dict:
    """float64 out[g] = epilogue(x[rows of g]^T @ w[rows of g]), full or sampled rows of the [G x M, N] view."""
    op = spec.op
    out_name = next(iter(op.outputs))
    x, w = inputs[op.lhs], inputs[op.rhs]
    t, m = x.shape
    n = w.shape[1]
    g_count = op.groups
    if rows is None and (sample or (sample is None and t * m * n > shared.SAMPLE_ABOVE)):
        rows = sample_rows(g_count * m, shared.SAMPLE_ROWS, seed)
    picked = np.arange(g_count * m, dtype=np.int64) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
    body = ex.parse_body(op.epilogue or f"{out_name} = acc", inputs=["acc"], outputs=[out_name],
                         constants=list(op.constants))
    res = np.empty((len(picked), n), np.float64)
    for g, (s, e) in enumerate(group_rows(inputs[op.group_offsets], op.offsets_format, g_count)):
        s, e = min(max(s, 0), t), min(max(e, s), t)
        sel = np.flatnonzero(picked // m == g)
        if sel.size == 0:
            continue
        cols = picked[sel] % m
        acc = product_f64(np.ascontiguousarray(x[s:e, cols].T), w[s:e]) if e > s else np.zeros((sel.size, n))
        env = {"acc": acc, **{c: float(v) for c, v in op.constants.items()}}
        res[sel] = np.broadcast_to(ex.eval_numpy(body, env)[out_name], (sel.size, n))
    if rows is None:
        return {out_name: res.reshape(g_count, m, n)}
    return {out_name: Sampled(picked, res, (g_count, m, n))}


def small_sizes(spec, plan, tiles_per_dim: int) -> dict[str, int]:
    """A few tiles: T = tiles x tile_m x 2 (rows for every group to hold some, skewed), N = tiles x tile_n,
    K = tiles x tile_k (named sizes only; the group count is fixed). Ragged k: T = tiles x tile_k x G, M = tiles x
    tile_m, N = tiles x tile_n."""
    op = spec.op
    x, w = list(op.inputs[op.lhs].shape), list(op.inputs[op.rhs].shape)
    top = {nm: v if isinstance(v, int) else v.max for nm, v in plan.sizes.items()}
    out = {}
    if op.ragged == "k":        # x [T, M], w [T, N]: T the contraction (a few row blocks a group)
        units = ((x[0], plan.tile_k * op.groups), (x[1], plan.tile_m), (w[1], plan.tile_n))
    else:
        n_dim, k_dim = (w[1], w[2]) if op.transpose_rhs else (w[2], w[1])
        units = ((x[0], plan.tile_m * 2), (n_dim, plan.tile_n), (k_dim, plan.tile_k))
    for dim, unit in units:
        if isinstance(dim, str):
            out[dim] = min(top[dim], unit * tiles_per_dim)
    return out
