"""Run built kernels on fresh random inputs, outputs poisoned first, against the float64 numpy reference."""
from __future__ import annotations

import math
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from . import families
from .build import Built, build_spec, package
from .runtime.arrays import DTYPES
from .reference import Sampled, random_inputs, reference, rel_error, tolerance
from .runtime.kernel import Kernel, load_package

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


def poisoned_outputs(plan) -> list[np.ndarray]:
    outs = []
    for o in plan.outputs:
        raw = np.full(math.prod(o.shape) * o.itemsize, POISON_BYTE, np.uint8)
        outs.append(raw.view(DTYPES[o.dtype]).reshape(o.shape))
    return outs


def device_buffers(plan, inputs: Mapping[str, np.ndarray]) -> tuple[list, list]:
    """Device copies of the inputs and NaN-poisoned device outputs, in the plan's argument order."""
    from .runtime import driver
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
    from .runtime import driver
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
    family = families.of(plan)
    if family.verify is not None:                       # a family that verifies its own way (multi-device)
        return family.verify(built, backends, interpret=interpret, seed=seed)
    if kernel is None:
        folder = Path(tempfile.mkdtemp(prefix="schedgen-verify-"))
        kernel = load_package(package(built, folder))
    inputs = random_inputs(built.spec, plan.sizes, seed)
    refs = reference(built.spec, plan.sizes, inputs, seed=seed)   # big matmuls: Sampled rows (rel_error reads them)
    k = family.accumulation(plan)                                 # f32 accumulation depth (tolerance)
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


def small_overrides(built: Built, tiles_per_dim: int = 2) -> dict[str, int]:
    """Sizes giving a few tiles per grid dimension (for interpret mode), as the spec's family chooses them.
    `built` needs only `.spec` and `.plan` (a Built, or anything holding a spec and its plan)."""
    return families.of(built.plan).small_sizes(built.spec, built.plan, tiles_per_dim)


def verify_file(path: str, backends: Sequence[str], overrides: Mapping[str, Any] | None = None, *,
                interpret: bool = False, small: bool = False, seed: int | None = None) -> list[Check]:
    built = build_spec(path, overrides)
    if small:
        built = build_spec(path, {**small_overrides(built), **(overrides or {})})
    return verify_built(built, backends, interpret=interpret, seed=seed)


