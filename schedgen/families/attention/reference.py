"""The attention family's float64 reference and its --small sizes."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ... import reference as shared
from ...reference import Sampled, sample_rows, shape_of
from .records import causal_alignment, causal_offset_of


def attention_reference(spec, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray], *,
                        sample: bool | None = None, seed: int | None = None) -> dict[str, np.ndarray | Sampled]:
    """float64 softmax(scale q k^T [+ causal mask]) v, and the natural-log log-sum-exp of each score row.

    The causal mask lets query i see keys j <= i (top_left) or j <= i + Skv - Sq (bottom_right, `causal: true`).

    Full arrays unless the problem has more than SAMPLE_ABOVE multiply-adds (or `sample=True`): then the
    output is a `Sampled` reference of SAMPLE_ROWS (batch, query, head) rows — each row one query's D values,
    the output viewed as [B*S*H, D] (bshd) or [B*H*S, D] (bhsd) — and the log-sum-exp of two whole
    (batch, head) rows, computed in query chunks."""
    op = spec.op
    qn, kn, vn = list(op.inputs)
    outs = list(op.outputs)

    def bshd(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)
        return a if op.layout == "bshd" else a.transpose(0, 2, 1, 3)

    q, k, v = bshd(inputs[qn]), bshd(inputs[kn]), bshd(inputs[vn])
    b, sq, hq, d = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    scale = op.scale if op.scale is not None else 1.0 / math.sqrt(d)
    offset = causal_offset_of(causal_alignment(op.causal), sq, skv)

    def rows_of(bi: int, hi: int, qi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(out [len(qi), D], lse [len(qi)]) for queries qi of batch bi, head hi."""
        kk, vv = k[bi, :, hi // group], v[bi, :, hi // group]
        s = (q[bi, qi, hi] @ kk.T) * scale
        if offset is not None:
            s = np.where(np.arange(skv)[None, :] > (qi[:, None] + offset), -np.inf, s)
        mx = s.max(axis=1, keepdims=True)
        p = np.exp(s - mx)
        den = p.sum(axis=1, keepdims=True)
        return (p @ vv) / den, (mx + np.log(den))[:, 0]

    work = b * hq * sq * skv * d
    if not (sample or (sample is None and work > shared.SAMPLE_ABOVE)):
        o = np.empty((b, sq, hq, d))
        lse = np.empty((b, hq, sq))
        for bi in range(b):
            for hi in range(hq):
                o[bi, :, hi], lse[bi, hi] = rows_of(bi, hi, np.arange(sq))
        res = {outs[0]: o if op.layout == "bshd" else o.transpose(0, 2, 1, 3)}
        if len(outs) > 1:
            res[outs[1]] = lse
        return res
    o_shape = shape_of(op.outputs[outs[0]], sizes)
    rows = sample_rows(b * sq * hq, seed=seed)
    vals = np.empty((len(rows), d))
    for i, r in enumerate(rows):
        if op.layout == "bshd":
            bi, rest = divmod(int(r), sq * hq)
            qi, hi = divmod(rest, hq)
        else:
            bi, rest = divmod(int(r), hq * sq)
            hi, qi = divmod(rest, sq)
        vals[i] = rows_of(bi, hi, np.array([qi]))[0][0]
    res: dict[str, np.ndarray | Sampled] = {outs[0]: Sampled(rows, vals, tuple(o_shape))}
    if len(outs) > 1:
        lrows = sample_rows(b * hq, count=2, seed=seed)
        lvals = np.empty((len(lrows), sq))
        for i, r in enumerate(lrows):
            bi, hi = divmod(int(r), hq)
            for c in range(0, sq, 1024):
                lvals[i, c:c + 1024] = rows_of(bi, hi, np.arange(c, min(sq, c + 1024)))[1]
        res[outs[1]] = Sampled(lrows, lvals, (b, hq, sq))
    return res


def small_sizes(spec, plan, tiles_per_dim: int) -> dict[str, int]:
    """Attention sizes of a few blocks: Sq of `tiles` blocks, Skv keeping Skv - Sq (the bottom-right offset) or, with
    no offset to keep, in proportion to Sq (so Sq > Skv stays so), one batch, two kv heads (q heads keep their group size). A dynamic size takes the nearest value its range allows
    (the plan is taken at the largest sizes, the result rounded up to the size's multiple_of within min..max)."""
    ranges = {r.name: r for r in plan.launch.dynamic_sizes}
    if ranges:
        plan = plan.at({n: r.max for n, r in ranges.items()})
    op = spec.op
    qn, kn, _ = list(op.inputs)
    qs, ks = list(op.inputs[qn].shape), list(op.inputs[kn].shape)
    if op.layout == "bhsd":
        qs = [qs[0], qs[2], qs[1], qs[3]]
        ks = [ks[0], ks[2], ks[1], ks[3]]
    out: dict[str, int] = {}
    unit = math.lcm(plan.block_q, plan.block_kv)
    sq = min(plan.seq_q, unit * tiles_per_dim)
    if plan.causal_alignment == "bottom_right" or plan.seq_q == plan.seq_kv:
        skv = sq + (plan.seq_kv - plan.seq_q)  # Skv - Sq kept: the bottom-right mask's offset
    else:   # no offset to keep (top-left, no mask): Skv in proportion (Sq > Skv stays so), ragged as it was
        skv = max(1, sq * plan.seq_kv // plan.seq_q // plan.block_kv) * plan.block_kv + plan.seq_kv % plan.block_kv
    want = {qs[0]: 1, qs[1]: sq, ks[1]: min(plan.seq_kv, skv),
            qs[2]: min(plan.heads_q, 2 * (plan.heads_q // plan.heads_kv)), ks[2]: min(plan.heads_kv, 2)}
    for dim, value in want.items():
        if isinstance(dim, str) and dim not in out:
            r = ranges.get(dim)
            out[dim] = value if r is None else min(r.max, max(r.min, -(-value // r.multiple_of) * r.multiple_of))
    return out
