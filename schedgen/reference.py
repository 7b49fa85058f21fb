"""The numpy reference of each family (float64), fresh random inputs, and per-dtype tolerances."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from .cuda.arrays import DTYPES
from .spec import expr as ex
from .spec.model import SpecFile

# ||out - ref|| / ||ref|| allowed for each output dtype (rounding of the result dominates).
TOLERANCE = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2, "f8e4m3": 8e-2, "f8e5m2": 1.6e-1}
APPROX_TOLERANCE = {"f32": 2e-4}   # approx_math (ex2.approx, tanh.approx) on f32 outputs
POSITIVE_DOMAIN = {"log", "log2", "sqrt", "rsqrt"}


def tolerance(dtype: str, approx_math: bool) -> float:
    if approx_math:
        return max(TOLERANCE[dtype], APPROX_TOLERANCE.get(dtype, 0.0))
    return TOLERANCE[dtype]


def random_inputs(spec: SpecFile, sizes: Mapping[str, int], seed: int | None = None) -> dict[str, np.ndarray]:
    """Fresh random inputs (normal, or uniform in [0.5, 2) when the body takes logs or roots), never zeros."""
    rng = np.random.default_rng(seed)
    positive = bool(POSITIVE_DOMAIN & set(_functions(spec.op.body)))
    out = {}
    for name, operand in spec.op.inputs.items():
        shape = shape_of(operand, sizes)
        if positive:
            data = rng.uniform(0.5, 2.0, shape).astype(np.float32)
        else:
            data = rng.standard_normal(shape, dtype=np.float32)
        out[name] = data.astype(DTYPES[operand.dtype])
    return out


def _functions(body: str) -> list[str]:
    import ast
    return [n.func.id for n in ast.walk(ast.parse(body)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


def shape_of(operand, sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else sizes[d] for d in operand.shape)


def map_reference(spec: SpecFile, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    op = spec.op
    body = ex.parse_body(op.body, inputs=list(op.inputs), outputs=list(op.outputs), constants=list(op.constants))
    env = {n: np.asarray(a, dtype=np.float64) for n, a in inputs.items()}
    env.update({n: float(v) for n, v in op.constants.items()})
    outs = ex.eval_numpy(body, env)
    return {n: np.broadcast_to(v, shape_of(op.outputs[n], sizes)) for n, v in outs.items()}


REFERENCES = {"map": map_reference}


def reference(spec: SpecFile, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return REFERENCES[spec.op.kind](spec, sizes, inputs)


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere (an unwritten, poisoned element) gives inf."""
    out = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        return math.inf
    num = float(np.linalg.norm((out - ref).ravel()))
    den = float(np.linalg.norm(np.asarray(ref, dtype=np.float64).ravel()))
    return num / den if den else num
