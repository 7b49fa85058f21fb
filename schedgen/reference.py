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

from .runtime.arrays import DTYPES
from . import registry as families

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


def magnitude_for(dtype: str, magnitude: float) -> float:
    """The scale of a large-magnitude input set for an input of `dtype`: `magnitude`, but at most 1/64 of the
    dtype's largest finite value (fp8 e4m3 stops at 448: N(0,1) x 1e3 would saturate it)."""
    if magnitude == 1.0 or not is_float(dtype):
        return 1.0
    import ml_dtypes
    return float(min(magnitude, float(ml_dtypes.finfo(DTYPES[dtype]).max) / 64))


def random_inputs(spec, sizes: Mapping[str, int], seed: int | None = None,
                  magnitude: float = 1.0) -> dict[str, np.ndarray]:
    """Fresh random inputs (normal, or uniform in [0.5, 2) when the body takes logs or roots), never zeros; with
    `magnitude`, every floating-point input scaled by it (capped per dtype: `magnitude_for`), the large-magnitude
    input set of `verify --magnitude`."""
    rng = np.random.default_rng(seed)
    own = families.of(spec).random_inputs
    if own is not None:                       # inputs that must be valid (grouped_matmul's group offsets)
        return own(spec, sizes, rng, magnitude)
    positive = bool(POSITIVE_DOMAIN & set(_functions(_body_text(spec))))
    # a multi-device op: every operand per device, stacked along a leading device axis
    count = families.of(spec).devices(spec.op)
    devices = (count,) if count > 1 else ()
    out = {}
    for name, operand in spec.op.inputs.items():
        shape = devices + shape_of(operand, sizes)
        if positive:
            data = rng.uniform(0.5, 2.0, shape).astype(np.float32)
        else:
            data = rng.standard_normal(shape, dtype=np.float32)
        if is_float(operand.dtype):
            data *= np.float32(magnitude_for(operand.dtype, magnitude))
        out[name] = data.astype(DTYPES[operand.dtype])
    return out


def is_float(dtype: str) -> bool:
    """Whether an operand dtype of a spec is a floating-point one (the ones a magnitude scales)."""
    return dtype in TOLERANCE


def _body_text(spec) -> str:
    """The elementwise code of a spec (a map's body, a matmul's epilogue), from its family."""
    return families.of(spec).elementwise(spec.op)


def _functions(body: str) -> list[str]:
    import ast
    return [n.func.id for n in ast.walk(ast.parse(body)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


def shape_of(operand, sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else sizes[d] for d in operand.shape)


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


def sample_rows(total: int, count: int = SAMPLE_ROWS, seed: int | None = None) -> np.ndarray:
    """`count` distinct sorted row indices in [0, total): the first and last row (edge tiles) and random others."""
    if total <= count:
        return np.arange(total, dtype=np.int64)
    rng = np.random.default_rng(seed)
    inner = rng.choice(np.arange(1, total - 1, dtype=np.int64), size=count - 2, replace=False)
    return np.sort(np.concatenate([np.array([0, total - 1], np.int64), inner]))


def product_f64(a: np.ndarray, b: np.ndarray, chunk_bytes: int = 256 << 20) -> np.ndarray:
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


def reference(spec, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray],
              **options) -> dict[str, np.ndarray | Sampled]:
    """The family's float64 reference. Options (e.g. matmul's `seed` for the sampled rows, `sample`, `rows`)
    go to the family's function; the map family takes none and returns full arrays."""
    return families.of(spec).reference(spec, sizes, inputs, **options)


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
    out, ref = np.asarray(out), np.asarray(ref)
    if out.size != ref.size:
        raise ValueError(f"output shape {list(out.shape)} is not the reference's {list(ref.shape)}")
    sums = _parallel_slabs(_squares, out.reshape(-1), ref.reshape(-1))
    if any(s is None for s in sums):
        return math.inf
    num = math.sqrt(sum(s[0] for s in sums))
    den = math.sqrt(sum(s[1] for s in sums))
    return num / den if den else num


SLAB = 1 << 22   # elements a worker converts to float64 at a time (32 MiB)


def _squares(out: np.ndarray, ref: np.ndarray) -> tuple[float, float] | None:
    """(sum of (out - ref)^2, sum of ref^2) over one slab in float64; None where out is not finite there."""
    o = out.astype(np.float64)
    if not np.all(np.isfinite(o)):
        return None
    r = ref.astype(np.float64, copy=False)
    d = o - r
    return float(np.dot(d, d)), float(np.dot(r, r))


def _parallel_slabs(fn, *arrays: np.ndarray) -> list:
    """fn over matching slabs of flat arrays, on a few threads where they are large (numpy's casts and ufuncs let
    go of the GIL: the float64 check of a 1 GiB output takes seconds, not tens of them, on a many-core host)."""
    n = arrays[0].size
    starts = range(0, max(n, 1), SLAB)
    if n <= SLAB:
        return [fn(*arrays)]
    import os
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1, len(starts))) as pool:
        return list(pool.map(lambda i: fn(*(a[i:i + SLAB] for a in arrays)), starts))
