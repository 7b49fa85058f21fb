"""Run built kernels on fresh random inputs, outputs poisoned first, against the float64 numpy reference."""
from __future__ import annotations

import math
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .build import Built, build_spec, package
from .cuda.arrays import DTYPES
from .reference import Sampled, random_inputs, reference, rel_error, tolerance
from .runtime import Kernel, load_package

POISON_BYTE = 0xFF  # all-ones is NaN in every float format we emit


@dataclass(frozen=True)
class Check:
    spec: str
    backend: str
    output: str
    shape: dict
    dtype: str
    rel_error: float
    tolerance: float
    ok: bool
    note: str = ""
    skipped: bool = False     # not run here (e.g. a multi-device kernel on a machine without its GPUs); never ok

    def row(self) -> dict:
        return asdict(self)


def small_overrides(built: Built, tiles_per_dim: int = 2) -> dict[str, int]:
    """Sizes giving a few tiles per grid dimension (for interpret mode): size = block x tiles.

    Map plans: each named output dimension becomes block x min(tiles, grid). Matmul plans: see `_small_matmul`.
    `built` needs only `.spec` and `.plan` (a Built, or anything holding a spec and its plan)."""
    plan = built.plan
    if plan.family == "matmul":
        return _small_matmul(built.spec, plan, tiles_per_dim)
    if plan.family == "attention":
        return _small_attention(built.spec, plan, tiles_per_dim)
    if plan.family == "collective_matmul":
        return _small_collective(built.spec, plan, tiles_per_dim)
    out = {}
    out_operand = built.spec.op.outputs[plan.outputs[0].name]
    for dim, block, grid in zip(out_operand.shape, plan.block, plan.grid):
        if isinstance(dim, str) and dim not in out:
            out[dim] = block * min(tiles_per_dim, grid)
    return out


def _shrink(size: int, unit: int, tiles: int) -> int:
    """`tiles` units (a ragged size keeps its remainder: tiles - 1 whole units plus the remainder), never more
    than `size`."""
    if size <= unit * tiles:
        return size
    rem = size % unit
    return unit * tiles if rem == 0 else unit * (tiles - 1) + rem


def _small_attention(spec, plan, tiles_per_dim: int) -> dict[str, int]:
    """Attention sizes of a few blocks: Sq and Skv of `tiles` blocks (Skv - Sq kept for causal alignment), one
    batch, two kv heads (q heads keep their group size)."""
    op = spec.op
    qn, kn, _ = list(op.inputs)
    qs, ks = list(op.inputs[qn].shape), list(op.inputs[kn].shape)
    if op.layout == "bhsd":
        qs = [qs[0], qs[2], qs[1], qs[3]]
        ks = [ks[0], ks[2], ks[1], ks[3]]
    out: dict[str, int] = {}
    unit = math.lcm(plan.block_q, plan.block_kv)
    sq = min(plan.seq_q, unit * tiles_per_dim)
    want = {qs[0]: 1, qs[1]: sq, ks[1]: min(plan.seq_kv, sq + (plan.seq_kv - plan.seq_q)),
            qs[2]: min(plan.heads_q, 2 * (plan.heads_q // plan.heads_kv)), ks[2]: min(plan.heads_kv, 2)}
    for dim, value in want.items():
        if isinstance(dim, str) and dim not in out:
            out[dim] = value
    return out


def _small_matmul(spec, plan, tiles_per_dim: int) -> dict[str, int]:
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
    for dim, unit in ((m_dim, plan.tile_m * plan.cluster_m), (o[-2], plan.tile_m * plan.cluster_m),
                      (n_dim, plan.tile_n * plan.cluster_n), (o[-1], plan.tile_n * plan.cluster_n),
                      (ka_dim, plan.tile_k), (kb_dim, plan.tile_k)):
        if isinstance(dim, str):
            units[dim] = math.lcm(units.get(dim, 1), unit)
    out = {dim: _shrink(plan.sizes[dim], unit, tiles_per_dim) for dim, unit in units.items()}
    if len(o) == 3 and isinstance(o[0], str) and o[0] not in out:
        out[o[0]] = min(plan.sizes[o[0]], tiles_per_dim)
    return out


def _small_collective(spec, plan, tiles_per_dim: int) -> dict[str, int]:
    """Per-device M, N, K of `tiles` tiles each (the step's matmul tiles), and the output's rows to match."""
    op = spec.op
    mm = plan.mm
    lhs, rhs, out = op.inputs[op.lhs].shape, op.inputs[op.rhs].shape, next(iter(op.outputs.values())).shape
    want = {lhs[0]: min(plan.m, mm.tile_m * tiles_per_dim), lhs[1]: min(plan.k, mm.tile_k * tiles_per_dim),
            rhs[1]: min(plan.n, mm.tile_n * tiles_per_dim)}
    if isinstance(lhs[0], str):
        want[out[0]] = plan.num_devices * want[lhs[0]]
    return {dim: v for dim, v in want.items() if isinstance(dim, str)}


def poisoned_outputs(plan) -> list[np.ndarray]:
    outs = []
    for o in plan.outputs:
        raw = np.full(math.prod(o.shape) * o.itemsize, POISON_BYTE, np.uint8)
        outs.append(raw.view(DTYPES[o.dtype]).reshape(o.shape))
    return outs


def device_buffers(plan, inputs: Mapping[str, np.ndarray]) -> tuple[list, list]:
    """Device copies of the inputs and NaN-poisoned device outputs, in the plan's argument order."""
    from .cuda import driver
    driver.ensure_context()
    bufs_in = []
    for o in plan.inputs:
        buf = driver.Buffer(inputs[o.name].nbytes)
        buf.upload(np.ascontiguousarray(inputs[o.name]))
        bufs_in.append(buf)
    bufs_out = []
    for o in plan.outputs:
        buf = driver.Buffer(math.prod(o.shape) * o.itemsize)
        buf.fill_bytes(POISON_BYTE)
        bufs_out.append(buf)
    return bufs_in, bufs_out


def run_cuda(kernel: Kernel, plan, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Upload, poison the device outputs, launch, download."""
    from .cuda import driver
    bufs_in, bufs_out = device_buffers(plan, inputs)
    kernel._launcher([b.ptr for b in bufs_in], [b.ptr for b in bufs_out], 0)()
    driver.synchronize()
    outs = []
    for o, buf in zip(plan.outputs, bufs_out):
        host = np.empty(o.shape, DTYPES[o.dtype])
        buf.download(host)
        outs.append(host)
    return outs


def interpret_params():
    from jax.experimental.pallas import mosaic_gpu as plgpu
    return plgpu.InterpretGPUParams(detect_races=True)


def races_found() -> bool | None:
    """Whether the last interpreted kernel raced (jax's interpreter only prints it; read its flag)."""
    try:
        from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks
        return bool(gpu_callbacks._races.races_found)
    except Exception:
        return None


def run_pallas(kernel: Kernel, plan, inputs: Mapping[str, np.ndarray], interpret: bool) -> tuple[list[np.ndarray], str]:
    import jax.numpy as jnp
    mod = kernel.pallas_module()
    ins = [jnp.asarray(inputs[o.name]) for o in plan.inputs]
    outs = [jnp.asarray(o) for o in poisoned_outputs(plan)]
    res = mod.run_into(ins, outs, interpret=interpret_params() if interpret else None)
    note = ""
    if interpret:
        raced = races_found()
        note = {True: "RACE detected by the interpreter", False: "interpreted, no races", None: "interpreted"}[raced]
    return [np.asarray(r) for r in res], note


def verify_built(built: Built, backends: Sequence[str], *, interpret: bool = False, seed: int | None = None,
                 kernel: Kernel | None = None) -> list[Check]:
    plan = built.plan
    if plan.family == "collective_matmul":
        return verify_collective(built, backends, interpret=interpret, seed=seed)
    if kernel is None:
        folder = Path(tempfile.mkdtemp(prefix="schedgen-verify-"))
        kernel = load_package(package(built, folder))
    inputs = random_inputs(built.spec, plan.sizes, seed)
    refs = reference(built.spec, plan.sizes, inputs, seed=seed)   # big matmuls: Sampled rows (rel_error reads them)
    k = plan.k if plan.family == "matmul" else 0                  # f32 accumulation depth (tolerance)
    checks = []
    for backend in backends:
        if backend not in plan.backends:
            continue
        note = ""
        try:
            if backend == "cuda":
                outs = run_cuda(kernel, plan, inputs)
            else:
                outs, note = run_pallas(kernel, plan, inputs, interpret)
        except Exception as exc:  # reported as a failed check, never a traceback
            for o in plan.outputs:
                checks.append(Check(plan.name, backend, o.name, dict(plan.sizes), o.dtype, math.inf,
                                    tolerance(o.dtype, plan.approx_math, k), False, f"{type(exc).__name__}: {exc}"))
            continue
        for o, out in zip(plan.outputs, outs):
            ref = refs[o.name]
            err = rel_error(out, ref)
            tol = tolerance(o.dtype, plan.approx_math, k)
            ok = err <= tol and "RACE" not in note
            cnote = "; ".join(x for x in (note, f"{len(ref.rows)} sampled rows") if x) if isinstance(ref, Sampled) else note
            checks.append(Check(plan.name, backend, o.name, dict(plan.sizes), o.dtype, err, tol, ok, cnote))
    return checks


def verify_file(path: str, backends: Sequence[str], overrides: Mapping[str, Any] | None = None, *,
                interpret: bool = False, small: bool = False, seed: int | None = None) -> list[Check]:
    built = build_spec(path, overrides)
    if small:
        built = build_spec(path, {**small_overrides(built), **(overrides or {})})
    return verify_built(built, backends, interpret=interpret, seed=seed)


INTERPRET_NO_COLLECTIVES = ("Mosaic GPU interpret mode (jax 0.11.2) has no semaphores or remote refs; verified on "
                            "GPUs only (bench/multi_gpu.py)")


def verify_collective(built: Built, backends: Sequence[str], *, interpret: bool = False,
                      seed: int | None = None, devices: Sequence[int] | None = None) -> list[Check]:
    """A multi-device kernel on the GPUs of this machine (one process drives them all), against float64 numpy on
    sampled rows of every device's output; skipped (and said why) where the GPUs or the interpreter cannot run it."""
    from . import multidevice
    plan = built.plan
    out = plan.outputs[0]
    k = plan.k
    tol = tolerance(out.dtype, plan.approx_math, k)
    inputs = random_inputs(built.spec, plan.sizes, seed)
    refs = reference(built.spec, plan.sizes, inputs, seed=seed)
    ref = refs[out.name]
    checks = []

    def check(backend: str, run) -> Check:
        try:
            got = run()
        except Exception as exc:  # reported as a failed check, never a traceback
            return Check(plan.name, backend, out.name, dict(plan.sizes), out.dtype, math.inf, tol, False,
                         f"{type(exc).__name__}: {exc}")
        err = rel_error(got, ref)
        note = f"{plan.num_devices} devices" + (f"; {len(ref.rows)} sampled rows" if isinstance(ref, Sampled) else "")
        return Check(plan.name, backend, out.name, dict(plan.sizes), out.dtype, err, tol, err <= tol, note)

    for backend in backends:
        if backend not in plan.backends:
            continue
        if backend == "pallas" and interpret:
            why = INTERPRET_NO_COLLECTIVES
        else:
            ok, why = multidevice.can_run(plan, devices)
            why = "" if ok else why
        if why:
            checks.append(Check(plan.name, backend, out.name, dict(plan.sizes), out.dtype, math.nan, tol, False,
                                f"not run: {why}", skipped=True))
            continue
        if backend == "cuda":
            cubin = built.files["kernel.cubin"]
            # two launches: the second reuses the gather buffers and semaphores (epoch 2) on fresh poisoned outputs
            checks.append(check("cuda", lambda: multidevice.run_cuda(plan, cubin, inputs, devices, launches=2)))
        else:
            def pallas():
                folder = Path(tempfile.mkdtemp(prefix="schedgen-verify-"))
                return multidevice.run_pallas(load_package(package(built, folder)).pallas_module(), plan, inputs)
            checks.append(check("pallas", pallas))
    return checks
