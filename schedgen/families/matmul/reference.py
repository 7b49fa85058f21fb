"""The matmul family's float64 reference and its --small sizes."""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ... import reference as shared
from ...reference import Sampled, product_f64, sample_rows, shape_of
from ...frontend import expr as ex
from .blockscale import SCALE_BLOCK, block_scale_names
from ...plan.gemm import FP8_DTYPES


# fp8 wgmma adds its k32 products into the f32 accumulator keeping fewer mantissa bits of the running sum than f32's
# 23 (about 14: DeepSeek-V3's report, section 3.3.2, measured on H800), so an fp8 product's f32 accumulation error
# grows 2^9 times faster with K than the shared model assumes (schedgen/reference.py ACCUM_ULPS x sqrt(K)): verify
# counts each of its K terms as 4^9 f32 terms (tolerance 8 x 2^-14 x sqrt(K): 0.031 at K = 4096). The Pallas
# interpreter accumulates in f32 and is held to the same bound.
FP8_ACCUM_BITS = 14


def accumulation(plan):
    """The f32 accumulation depth verify's tolerance assumes (the family's `accumulation` hook): K, or for fp8
    inputs K x 4^(23 - FP8_ACCUM_BITS) (their wgmma's shorter running sum)."""
    if plan.in_dtype in FP8_DTYPES:
        return plan.k * 4 ** (23 - FP8_ACCUM_BITS)
    return plan.k


def _dims(spec, sizes: Mapping[str, int]) -> dict[str, int]:
    """batch, m, n, k of a matmul spec (from the stored shapes and the transpose flags)."""
    op = spec.op
    a = shape_of(op.inputs[op.lhs], sizes)
    b = shape_of(op.inputs[op.rhs], sizes)
    o = shape_of(next(iter(op.outputs.values())), sizes)
    m, k = (a[-1], a[-2]) if op.transpose_lhs else (a[-2], a[-1])
    n = b[-2] if op.transpose_rhs else b[-1]
    return {"batch": o[0] if len(o) == 3 else 1, "m": m, "n": n, "k": k}


def matmul_reference(spec, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray], *,
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
    names = list(op.outputs)                              # the output, then a saved value (same shape)
    out_shape = shape_of(op.outputs[out_name], sizes)
    if rows is None and (sample or (sample is None and batch * m * n * k > shared.SAMPLE_ABOVE)):
        rows = sample_rows(batch * m, shared.SAMPLE_ROWS, seed)
    flat = None if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
    scales = block_scale_names(op)
    extras = [nm for nm in op.inputs if nm not in (op.lhs, op.rhs) and nm not in scales]
    body = ex.parse_body(op.epilogue or f"{out_name} = acc", inputs=["acc", *extras], outputs=names,
                         constants=list(op.constants))
    a, b = inputs[op.lhs], inputs[op.rhs]
    parts: dict[str, list] = {nm: [] for nm in names}
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
        acc = product_f64(a_rows, b_kn) if not scales else block_scaled_f64(op, a_rows, b_kn, inputs, local)
        env: dict = {"acc": acc}
        for nm in extras:
            env[nm] = _extra_rows(inputs[nm], bi, local, m)
        env.update({c: float(v) for c, v in op.constants.items()})
        vals = ex.eval_numpy(body, env)
        for nm in names:
            parts[nm].append(np.broadcast_to(vals[nm], acc.shape))
    if flat is None:
        return {nm: np.ascontiguousarray(np.stack(parts[nm]) if len(out_shape) == 3 else parts[nm][0]).reshape(out_shape)
                for nm in names}
    return {nm: Sampled(flat, np.concatenate(parts[nm], axis=0), tuple(out_shape)) for nm in names}


def block_scaled_f64(op, a_rows: np.ndarray, b_kn: np.ndarray, inputs, local) -> np.ndarray:
    """sum over 128-K blocks kb of (a[:, kb] @ b[kb, :]) x scale_a[row, kb] x scale_b[col // 128, kb], in float64
    (op.block_scales: the fp8 values as given, the scales as stored)."""
    bs = op.block_scales
    sa = np.asarray(inputs[bs.lhs], np.float64)
    sb = np.asarray(inputs[bs.rhs], np.float64)
    if local is not None:
        sa = sa[local]
    k, n = b_kn.shape
    acc = np.zeros((a_rows.shape[0], n))
    cols = np.arange(n) // SCALE_BLOCK
    for kb in range(-(-k // SCALE_BLOCK)):
        ks = slice(kb * SCALE_BLOCK, min(k, (kb + 1) * SCALE_BLOCK))
        acc += product_f64(a_rows[:, ks], b_kn[ks, :]) * sa[:, kb:kb + 1] * sb[cols, kb][None, :]
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


def _shrink(size: int, unit: int, tiles: int) -> int:
    """`tiles` units (a ragged size keeps its remainder: tiles - 1 whole units plus the remainder), never more
    than `size`."""
    if size <= unit * tiles:
        return size
    rem = size % unit
    return unit * tiles if rem == 0 else unit * (tiles - 1) + rem


def small_sizes(spec, plan, tiles_per_dim: int) -> dict[str, int]:
    """Matmul sizes of a few tiles: M = tile_m x cluster_m x tiles, N = tile_n x cluster_n x tiles,
    K = tile_k x tiles, a batch of at most `tiles`. Sizes not a multiple of their unit keep their remainder, so a
    ragged spec stays ragged (and a cluster still divides the tile grid). A size name used for several roles
    (a square [N, N] operand) gets a multiple of every role's unit."""
    op = spec.op
    a = list(op.inputs[op.lhs].shape)
    b = list(op.inputs[op.rhs].shape)
    o = list(next(iter(op.outputs.values())).shape)
    m_dim, ka_dim = (a[-1], a[-2]) if plan.transpose_lhs else (a[-2], a[-1])
    kb_dim, n_dim = (b[-1], b[-2]) if plan.transpose_rhs else (b[-2], b[-1])
    units: dict[str, int] = {}
    grid, cl = plan.tiles, plan.cluster
    for dim, unit in ((m_dim, grid.tile_m * cl.cluster_m), (o[-2], grid.tile_m * cl.cluster_m),
                      (n_dim, grid.tile_n * cl.cluster_n), (o[-1], grid.tile_n * cl.cluster_n),
                      (ka_dim, grid.tile_k), (kb_dim, grid.tile_k)):
        if isinstance(dim, str):
            units[dim] = math.lcm(units.get(dim, 1), unit)
    top = {nm: v if isinstance(v, int) else v.max for nm, v in plan.sizes.items()}   # a dynamic size: its max
    out = {dim: _shrink(top[dim], unit, tiles_per_dim) for dim, unit in units.items()}
    if len(o) == 3 and isinstance(o[0], str) and o[0] not in out:
        out[o[0]] = min(top[o[0]], tiles_per_dim)
    out.update(_scale_block_sizes(op, out, kb_dim, n_dim))
    return out


def _scale_block_sizes(op, out: dict, k_dim, n_dim) -> dict:
    """The block-scale shapes' size names (KB = cdiv(K, 128), NB = cdiv(N, 128)) at the shrunk K and N."""
    scales = block_scale_names(op)
    if not scales or not isinstance(k_dim, str) or not isinstance(n_dim, str):
        return {}
    k, n = out.get(k_dim), out.get(n_dim)
    got = {}
    for nm, side in scales.items():
        shape = op.inputs[nm].shape
        if len(shape) != 2:
            continue
        if side == "lhs" and isinstance(shape[1], str) and k is not None:
            got[shape[1]] = -(-k // SCALE_BLOCK)
        if side == "rhs" and isinstance(shape[0], str) and n is not None:
            got[shape[0]] = -(-n // SCALE_BLOCK)
        if side == "rhs" and isinstance(shape[1], str) and k is not None:
            got[shape[1]] = -(-k // SCALE_BLOCK)
    return got


# what the benchmark peers (peers.py, fp8_peers.py) check their outputs with

def check_peer(out, ref, dtype: str, k: int) -> dict:
    """A peer's output against the float64 reference, at verify's tolerance for a k-term f32 sum."""
    err = shared.rel_error(out, ref)
    return {"rel_error": err, "verified": bool(err <= shared.tolerance(dtype, False, k))}


def epilogue_body(spec):
    """The spec's epilogue parsed and checked as the float64 reference parses it (`out = acc` where it has none)."""
    op = spec.op
    out_name = next(iter(op.outputs))
    return ex.parse_body(op.epilogue or f"{out_name} = acc", inputs=["acc", *epilogue_operands(spec)],
                         outputs=[out_name], constants=list(op.constants))


def epilogue_operands(spec) -> list[str]:
    """The epilogue's operands (every input but lhs and rhs), in the spec's order: the function's arguments."""
    op = spec.op
    return [nm for nm in op.inputs if nm not in (op.lhs, op.rhs)]
