"""The numpy reference of each family (float64), fresh random inputs, and per-dtype tolerances.

A reference maps each output name to either a full float64 array, or a `Sampled` reference: float64 values of
some output rows only (big matmuls, where the full float64 product would take minutes). `rel_error` and
`schedgen.verify` compare an output against either kind; `Sampled.pick(out)` selects the rows it holds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .cuda.arrays import DTYPES
from .spec import expr as ex
from .spec.model import SpecFile

# ||out - ref|| / ||ref|| allowed for each output dtype (rounding of the result dominates).
TOLERANCE = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2, "f8e4m3": 8e-2, "f8e5m2": 1.6e-1}
APPROX_TOLERANCE = {"f32": 2e-4}   # approx_math (ex2.approx, tanh.approx) on f32 outputs
POSITIVE_DOMAIN = {"log", "log2", "sqrt", "rsqrt"}


# f32 accumulation over K terms (tensor cores add k16 slices with truncation): a relative error growing like
# sqrt(K) x a few f32 ulps. Only matters for f32 outputs; bf16/f16 rounding of the result dominates otherwise.
ACCUM_ULPS = 8 * 2.0 ** -23

SAMPLE_ROWS = 256           # output rows a sampled matmul reference computes
SAMPLE_ABOVE = 2 ** 31      # multiply-adds (B x M x N x K) above which the matmul reference is sampled


def tolerance(dtype: str, approx_math: bool, k: int = 0) -> float:
    """Allowed relative error of an output of `dtype`; `k` > 0: the output sums `k` products in f32 (matmul)."""
    tol = TOLERANCE[dtype]
    if approx_math:
        tol = max(tol, APPROX_TOLERANCE.get(dtype, 0.0))
    if k > 0:
        tol = max(tol, ACCUM_ULPS * math.sqrt(k))
    return tol


def random_inputs(spec: SpecFile, sizes: Mapping[str, int], seed: int | None = None) -> dict[str, np.ndarray]:
    """Fresh random inputs (normal, or uniform in [0.5, 2) when the body takes logs or roots), never zeros."""
    rng = np.random.default_rng(seed)
    positive = bool(POSITIVE_DOMAIN & set(_functions(_body_text(spec))))
    # a multi-device op: every operand per device, stacked along a leading device axis
    devices = (spec.op.mesh.num_devices,) if spec.op.kind == "collective_matmul" else ()
    out = {}
    for name, operand in spec.op.inputs.items():
        shape = devices + shape_of(operand, sizes)
        if positive:
            data = rng.uniform(0.5, 2.0, shape).astype(np.float32)
        else:
            data = rng.standard_normal(shape, dtype=np.float32)
        out[name] = data.astype(DTYPES[operand.dtype])
    return out


def _body_text(spec: SpecFile) -> str:
    """The elementwise code of a spec: a map's body, a matmul's epilogue."""
    if spec.op.kind == "matmul":
        return spec.op.epilogue or ""
    if spec.op.kind in ("attention", "collective_matmul"):
        return ""
    return spec.op.body


def _functions(body: str) -> list[str]:
    import ast
    return [n.func.id for n in ast.walk(ast.parse(body)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


def shape_of(operand, sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else sizes[d] for d in operand.shape)


def map_reference(spec: SpecFile, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray],
                  **_options) -> dict[str, np.ndarray]:
    op = spec.op
    body = ex.parse_body(op.body, inputs=list(op.inputs), outputs=list(op.outputs), constants=list(op.constants))
    env = {n: np.asarray(a, dtype=np.float64) for n, a in inputs.items()}
    env.update({n: float(v) for n, v in op.constants.items()})
    outs = ex.eval_numpy(body, env)
    return {n: np.broadcast_to(v, shape_of(op.outputs[n], sizes)) for n, v in outs.items()}


@dataclass(frozen=True)
class Sampled:
    """A reference of some output rows only.

    The output is viewed as a 2-D array of rows, `out.reshape(-1, out.shape[-1])` (a batch dimension folds into
    the rows: flat row `r` is batch `r // M`, row `r % M`); `rows` (sorted, distinct) index those rows and
    `values[i]` is the float64 reference of row `rows[i]`. Compare with `rel_error(out, sampled)`, which also
    checks that every element of the whole output is finite (no poisoned element left unwritten)."""
    rows: np.ndarray          # int64 [R]
    values: np.ndarray        # float64 [R, N]
    shape: tuple[int, ...]    # the full output shape

    def pick(self, out: np.ndarray) -> np.ndarray:
        """The rows of `out` this reference holds, as an [R, N] array."""
        out = np.asarray(out)
        if tuple(out.shape) != tuple(self.shape):
            raise ValueError(f"output shape {list(out.shape)} is not the reference's {list(self.shape)}")
        return out.reshape(-1, self.shape[-1])[self.rows]


def _dims(spec: SpecFile, sizes: Mapping[str, int]) -> dict[str, int]:
    """batch, m, n, k of a matmul spec (from the stored shapes and the transpose flags)."""
    op = spec.op
    a = shape_of(op.inputs[op.lhs], sizes)
    b = shape_of(op.inputs[op.rhs], sizes)
    o = shape_of(next(iter(op.outputs.values())), sizes)
    m, k = (a[-1], a[-2]) if op.transpose_lhs else (a[-2], a[-1])
    n = b[-2] if op.transpose_rhs else b[-1]
    return {"batch": o[0] if len(o) == 3 else 1, "m": m, "n": n, "k": k}


def sample_rows(total: int, count: int = SAMPLE_ROWS, seed: int | None = None) -> np.ndarray:
    """`count` distinct sorted row indices in [0, total): the first and last row (edge tiles) and random others."""
    if total <= count:
        return np.arange(total, dtype=np.int64)
    rng = np.random.default_rng(seed)
    inner = rng.choice(np.arange(1, total - 1, dtype=np.int64), size=count - 2, replace=False)
    return np.sort(np.concatenate([np.array([0, total - 1], np.int64), inner]))


def matmul_reference(spec: SpecFile, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray], *,
                     rows: np.ndarray | None = None, sample: bool | None = None,
                     seed: int | None = None) -> dict[str, np.ndarray | Sampled]:
    """float64 `epilogue(lhs @ rhs)` of a matmul spec.

    Full (an ndarray of the output's shape) unless the problem has more than SAMPLE_ABOVE multiply-adds
    (`sample=None`), `sample=True`, or `rows` is given: then a `Sampled` reference of SAMPLE_ROWS random output
    rows (or of `rows`: flat indices into the output viewed as [B*M, N]), every column, the full K sum."""
    op = spec.op
    d = _dims(spec, sizes)
    batch, m, n, k = d["batch"], d["m"], d["n"], d["k"]
    out_name = next(iter(op.outputs))
    out_shape = shape_of(op.outputs[out_name], sizes)
    if rows is None and (sample or (sample is None and batch * m * n * k > SAMPLE_ABOVE)):
        rows = sample_rows(batch * m, SAMPLE_ROWS, seed)
    flat = None if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
    extras = [nm for nm in op.inputs if nm not in (op.lhs, op.rhs)]
    body = ex.parse_body(op.epilogue or f"{out_name} = acc", inputs=["acc", *extras], outputs=[out_name],
                         constants=list(op.constants))
    a, b = inputs[op.lhs], inputs[op.rhs]
    parts = []
    for bi in range(batch):
        local = None if flat is None else flat[(flat // m) == bi] % m
        if local is not None and local.size == 0:
            continue
        a_b = a[bi] if a.ndim == 3 else a
        b_b = b[bi] if b.ndim == 3 else b
        a_rows = a_b.T if op.transpose_lhs else a_b          # a view [M, K]
        if local is not None:
            a_rows = a_rows[local]
        b_kn = b_b.T if op.transpose_rhs else b_b            # a view [K, N]
        acc = _product(a_rows, b_kn)
        env: dict = {"acc": acc}
        for nm in extras:
            env[nm] = _extra_rows(inputs[nm], bi, local, m)
        env.update({c: float(v) for c, v in op.constants.items()})
        val = ex.eval_numpy(body, env)[out_name]
        parts.append(np.broadcast_to(val, acc.shape))
    if flat is None:
        full = np.stack(parts) if len(out_shape) == 3 else parts[0]
        return {out_name: np.ascontiguousarray(full).reshape(out_shape)}
    return {out_name: Sampled(flat, np.concatenate(parts, axis=0), tuple(out_shape))}


def _product(a: np.ndarray, b: np.ndarray, chunk_bytes: int = 256 << 20) -> np.ndarray:
    """float64 a [R, K] @ b [K, N], converting b to float64 a slab of K at a time (bounded memory)."""
    r, k = a.shape
    n = b.shape[1]
    a64 = np.asarray(a, dtype=np.float64)
    step = max(1, chunk_bytes // max(1, 8 * n))
    if step >= k:
        return a64 @ np.asarray(b, dtype=np.float64)
    acc = np.zeros((r, n), np.float64)
    for k0 in range(0, k, step):
        acc += a64[:, k0:k0 + step] @ np.asarray(b[k0:k0 + step], dtype=np.float64)
    return acc


def _extra_rows(x: np.ndarray, bi: int, local: np.ndarray | None, m: int) -> np.ndarray:
    """An epilogue operand as float64 for batch `bi`, at rows `local` (all rows if None), broadcastable to
    [rows, N]: a row [N] / [1, N] as is; a column [M, 1], a full [M, N] or a batched [B, M, N] at those rows."""
    x = np.asarray(x)
    if x.ndim == 3:                     # [B, M, N]
        x = x[bi]
    if x.ndim == 2 and x.shape[0] == m and local is not None:
        x = x[local]
    return np.asarray(x, dtype=np.float64)


def attention_reference(spec: SpecFile, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray], *,
                        sample: bool | None = None, seed: int | None = None) -> dict[str, np.ndarray | Sampled]:
    """float64 softmax(scale q k^T [+ causal mask]) v, and the natural-log log-sum-exp of each score row.

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
    offset = skv - sq

    def rows_of(bi: int, hi: int, qi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(out [len(qi), D], lse [len(qi)]) for queries qi of batch bi, head hi."""
        kk, vv = k[bi, :, hi // group], v[bi, :, hi // group]
        s = (q[bi, qi, hi] @ kk.T) * scale
        if op.causal:
            s = np.where(np.arange(skv)[None, :] > (qi[:, None] + offset), -np.inf, s)
        mx = s.max(axis=1, keepdims=True)
        p = np.exp(s - mx)
        den = p.sum(axis=1, keepdims=True)
        return (p @ vv) / den, (mx + np.log(den))[:, 0]

    work = b * hq * sq * skv * d
    if not (sample or (sample is None and work > SAMPLE_ABOVE)):
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


def collective_matmul_reference(spec: SpecFile, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray], *,
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
    if rows is None and (sample or (sample is None and d_count * m_total * n * a.shape[-1] > SAMPLE_ABOVE)):
        rows = sample_rows(d_count * m_total, SAMPLE_ROWS, seed)
    if rows is None:
        full = np.stack([_product(gathered, b[d]) for d in range(d_count)])
        return {out_name: full}
    flat = np.unique(np.asarray(rows, dtype=np.int64))
    parts = []
    for d in range(d_count):
        local = flat[(flat // m_total) == d] % m_total
        if local.size:
            parts.append(_product(gathered[local], b[d]))
    return {out_name: Sampled(flat, np.concatenate(parts, axis=0), (d_count, m_total, n))}


REFERENCES = {"map": map_reference, "matmul": matmul_reference, "attention": attention_reference,
              "collective_matmul": collective_matmul_reference}


def reference(spec: SpecFile, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray],
              **options) -> dict[str, np.ndarray | Sampled]:
    """The family's float64 reference. Options (e.g. matmul's `seed` for the sampled rows, `sample`, `rows`)
    go to the family's function; the map family takes none and returns full arrays."""
    return REFERENCES[spec.op.kind](spec, sizes, inputs, **options)


def _all_finite(out: np.ndarray, chunk: int = 1 << 24) -> bool:
    """Whether every element is finite, in the array's own dtype, a slab at a time (no float64 copy of it all)."""
    flat = np.asarray(out).reshape(-1)
    return all(bool(np.all(np.isfinite(flat[i:i + chunk]))) for i in range(0, flat.size, chunk))


def rel_error(out: np.ndarray, ref: np.ndarray | Sampled) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere (an unwritten, poisoned element) gives inf.

    With a `Sampled` reference, finiteness is checked over the whole output and values over the sampled rows."""
    if isinstance(ref, Sampled):
        if not _all_finite(out):
            return math.inf
        out, ref = ref.pick(out), ref.values
    out = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        return math.inf
    num = float(np.linalg.norm((out - ref).ravel()))
    den = float(np.linalg.norm(np.asarray(ref, dtype=np.float64).ravel()))
    return num / den if den else num
