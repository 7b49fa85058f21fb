"""The attention_backward family's float64 reference (the explicit gradient formulas), its valid random inputs
(o and lse from q, k, v by the forward) and its --small sizes."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ...plan import dims as X

from ...reference import DTYPES, magnitude_for, shape_of
from ..attention.records import causal_alignment, causal_offset_of


def _names(op):
    q, k, v, o, do, lse = op.inputs
    dq, dk, dv = op.outputs
    return q, k, v, o, do, lse, dq, dk, dv


def _bshd(op, a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a if op.layout == "bshd" else a.transpose(0, 2, 1, 3)


def _mask(sq: int, skv: int, offset: int | None) -> np.ndarray | None:
    """[Sq, Skv] True where query i sees key j (j <= i + offset); None without a mask."""
    if offset is None:
        return None
    return np.arange(skv)[None, :] <= np.arange(sq)[:, None] + offset


def _scale(op, d: int) -> float:
    return op.scale if op.scale is not None else 1.0 / math.sqrt(d)


def attention_backward_reference(spec, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray], *,
                                 sample: bool | None = None, seed: int | None = None) -> dict[str, np.ndarray]:
    """float64 dq, dk, dv of o = softmax(scale q k^T [+ mask]) v, by the explicit formulas (FlashAttention-2's):
    P = exp(scale q k^T - lse) (0 where masked), dV = P^T dO, dP = dO V^T, delta = rowsum(dO * O),
    dS = P (dP - delta), dQ = scale dS K, dK = scale dS^T Q; dK and dV summed over the q heads of a kv head.
    Always the full arrays (`sample` and `seed` are accepted for the shared interface)."""
    op = spec.op
    qn, kn, vn, on, don, lsen, dqn, dkn, dvn = _names(op)
    q, k, v, o, do = (_bshd(op, inputs[n]) for n in (qn, kn, vn, on, don))
    lse = np.asarray(inputs[lsen], dtype=np.float64)
    b, sq, hq, d = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    scale = _scale(op, d)
    mask = _mask(sq, skv, causal_offset_of(causal_alignment(op.causal), sq, skv))
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for bi in range(b):
        for hi in range(hq):
            hk = hi // group
            kk, vv, qq, dd = k[bi, :, hk], v[bi, :, hk], q[bi, :, hi], do[bi, :, hi]
            p = np.exp(scale * (qq @ kk.T) - lse[bi, hi][:, None])
            if mask is not None:
                p = np.where(mask, p, 0.0)
            delta = (dd * o[bi, :, hi]).sum(axis=1)
            dv[bi, :, hk] += p.T @ dd
            ds = p * (dd @ vv.T - delta[:, None])
            dq[bi, :, hi] = scale * (ds @ kk)
            dk[bi, :, hk] += scale * (ds.T @ qq)

    def back(a):
        return a if op.layout == "bshd" else a.transpose(0, 2, 1, 3)

    return {dqn: back(dq), dkn: back(dk), dvn: back(dv)}


def forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, offset: int | None) -> tuple[np.ndarray,
                                                                                                      np.ndarray]:
    """float64 (o, lse) of the forward, [B, S, H, D] operands (the attention family's reference, restated for
    arrays: the random inputs and the tests use it)."""
    b, sq, hq, d = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    mask = _mask(sq, skv, offset)
    o, lse = np.empty(q.shape), np.empty((b, hq, sq))
    for bi in range(b):
        for hi in range(hq):
            s = scale * (q[bi, :, hi] @ k[bi, :, hi // group].T)
            if mask is not None:
                s = np.where(mask, s, -np.inf)
            mx = s.max(axis=1, keepdims=True)
            p = np.exp(s - mx)
            den = p.sum(axis=1, keepdims=True)
            o[bi, :, hi] = (p @ v[bi, :, hi // group]) / den
            lse[bi, hi] = (mx + np.log(den))[:, 0]
    return o, lse


def random_inputs(spec, sizes: Mapping[str, int], rng: np.random.Generator,
                  magnitude: float = 1.0) -> dict[str, np.ndarray]:
    """q, k, v, do normal (scaled by `magnitude`, capped per dtype); o and lse what the forward makes of q, k, v (a
    random lse would give meaningless P)."""
    op = spec.op
    qn, kn, vn, on, don, lsen, *_ = _names(op)
    out = {}
    for n in (qn, kn, vn, don):
        shape = shape_of(op.inputs[n], sizes)
        data = rng.standard_normal(shape, dtype=np.float32)
        data *= np.float32(magnitude_for(op.inputs[n].dtype, magnitude))
        out[n] = data.astype(DTYPES[op.inputs[n].dtype])
    q, k, v = (_bshd(op, out[n]) for n in (qn, kn, vn))
    sq, skv = q.shape[1], k.shape[1]
    o, lse = forward(q, k, v, _scale(op, q.shape[3]), causal_offset_of(causal_alignment(op.causal), sq, skv))
    out[on] = (o if op.layout == "bshd" else o.transpose(0, 2, 1, 3)).astype(DTYPES[op.inputs[on].dtype])
    out[lsen] = lse.astype(np.float32)
    return out


def accumulation(plan):
    """The f32 terms summed per gradient element (the family's `accumulation` hook, verify's tolerance): the longer
    of the two sequences, a Dim with dynamic sizes (verify evaluates it)."""
    return X.dmax(plan.seq_q, plan.seq_kv)


def small_sizes(spec, plan, tiles_per_dim: int) -> dict[str, int]:
    """A few blocks: Sq of `tiles` query blocks (Skv keeping Skv - Sq, or in proportion when no offset matters),
    one batch, at most two kv heads (the q heads keep their group size)."""
    op = spec.op
    qn, kn = list(op.inputs)[:2]
    qs, ks = list(op.inputs[qn].shape), list(op.inputs[kn].shape)
    if op.layout == "bhsd":
        qs = [qs[0], qs[2], qs[1], qs[3]]
        ks = [ks[0], ks[2], ks[1], ks[3]]
    ranges = {r.name: r for r in plan.launch.dynamic_sizes}

    def top(v):       # a dynamic extent at its largest
        return X.upper(v, ranges)

    seq_q, seq_kv, heads_q, heads_kv = top(plan.seq_q), top(plan.seq_kv), top(plan.heads_q), top(plan.heads_kv)
    unit = math.lcm(plan.block_q, plan.block_kv)
    sq = min(seq_q, unit * tiles_per_dim)
    if plan.causal_alignment == "bottom_right" or plan.seq_q == plan.seq_kv:
        skv = sq + (seq_kv - seq_q)
    else:
        skv = max(1, sq * seq_kv // seq_q // unit) * unit
    want = {qs[0]: 1, qs[1]: sq, ks[1]: min(seq_kv, skv),
            qs[2]: min(heads_q, 2 * plan.group), ks[2]: min(heads_kv, 2)}
    out = {}
    for dim, value in want.items():
        if isinstance(dim, str):
            r = ranges.get(dim)      # a dynamic size: the nearest legal value (its multiple, within min..max)
            out[dim] = value if r is None else min(r.max, max(r.min, -(-value // r.multiple_of) * r.multiple_of))
    return out
