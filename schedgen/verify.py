"""Run built kernels on fresh random inputs, outputs poisoned first, against the float64 numpy reference."""
from __future__ import annotations

import math
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from . import families
from . import plan as planner
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

    @property
    def result(self) -> str:
        """What the verify table's last column says: ok, SKIP (not run here) or FAIL."""
        return "ok" if self.ok else "SKIP" if self.skipped else "FAIL"


def unavailable(backend: str, *, interpret: bool = False) -> str:
    """Why `backend` cannot run a kernel on this machine ('' when it can): the reason of a SKIP row, in verify and in
    bench. Both backends need a Hopper GPU and its driver, Pallas unless `interpret` (Mosaic GPU interpret mode runs
    on the CPU). Asked of the CUDA driver only: jax is not started here (it would take the GPU's memory before the
    CUDA run; a jax without GPU support on a GPU machine is a FAIL with jax's own error)."""
    if backend not in ("cuda", "pallas"):
        return f"unknown backend {backend!r}"
    if backend == "pallas" and interpret:
        return ""
    from .runtime import driver
    ok, what = driver.available()
    hint = "; --interpret runs the Pallas kernel on the CPU" if backend == "pallas" else ""
    if not ok:
        return f"{what}{hint}"                          # "CUDA unavailable: <the driver's reason>"
    if not what.rsplit("sm_", 1)[-1].startswith("9"):
        return f"the kernels are built for Hopper (sm_90a); this GPU is {what}{hint}"
    return ""


def skipped(plan, backend: str, why: str) -> list[Check]:
    """One SKIP row per output of `plan`: `backend` was not run here, and why (never ok, never a failure). The row
    type verify prints and bench can reuse (`Check.row()` is its dict)."""
    k = families.of(plan).accumulation(plan)
    return [Check(plan.name, backend, o.name, dict(plan.sizes), o.dtype, math.nan,
                  tolerance(o.dtype, plan.approx_math, k), False, f"not run: {why}", skipped=True)
            for o in plan.outputs]


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


def run_cuda(kernel: Kernel, plan, inputs: Mapping[str, np.ndarray],
             sizes: Mapping[str, int] | None = None) -> list[np.ndarray]:
    """Upload, poison the device outputs, launch (a dynamic package at `sizes`), download."""
    from .runtime import driver
    bufs_in, bufs_out = device_buffers(plan, inputs)
    kernel._launcher([b.ptr for b in bufs_in], [b.ptr for b in bufs_out], 0, sizes=dict(sizes or {}))()
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
                 kernel: Kernel | None = None, sizes: Sequence[Mapping[str, int]] | None = None) -> list[Check]:
    """Every backend of the built package against the reference; a package with dynamic sizes at each of `sizes`
    (default `dynamic_points`), all from this one build."""
    plan = built.plan
    family = families.of(plan)
    order = {b: i for i, b in enumerate(backends)}
    absent = [b for b in backends if b not in plan.backends]
    checks = [c for b in absent
              for c in skipped(plan, b, f"the spec has no {b} backend (schedule.backends: {', '.join(plan.backends)})")]
    backends = [b for b in backends if b in plan.backends]
    if family.verify is not None:                       # a family that verifies its own way (multi-device)
        checks += family.verify(built, backends, interpret=interpret, seed=seed)
        return sorted(checks, key=lambda c: order.get(c.backend, len(order)))
    if not backends:
        return checks
    if kernel is None:
        folder = Path(tempfile.mkdtemp(prefix="schedgen-verify-"))
        kernel = load_package(package(built, folder))
    if not getattr(plan, "dynamic_sizes", ()):
        checks += checks_at(built.spec, plan, kernel, backends, interpret=interpret, seed=seed)
        return sorted(checks, key=lambda c: order[c.backend])
    for at in dynamic_points(plan) if sizes is None else sizes:
        # ONE built package at several sizes: the shapes, inputs and reference of the spec at those sizes
        spec_at = spec_at_sizes(built.spec, at)
        checks += checks_at(spec_at, planner.plan(spec_at, built.source), kernel, backends, interpret=interpret,
                            seed=seed, sizes=at)
    return sorted(checks, key=lambda c: order[c.backend])


def dynamic_points(plan) -> list[dict[str, int]]:
    """Where verify runs a dynamic package by default: every dynamic size at its min, at the middle of its range
    rounded down to its multiple_of plus one multiple_of (with multiple_of 1 an odd size, which no tile divides:
    the ragged edge where the spec allows one), and at its max."""
    ranges = plan.dynamic_sizes

    def mid(r) -> int:
        v = (r.min + r.max) // 2 // r.multiple_of * r.multiple_of + r.multiple_of
        return min(max(v, r.min), r.max)
    points = [{r.name: r.min for r in ranges}, {r.name: mid(r) for r in ranges}, {r.name: r.max for r in ranges}]
    return [p for i, p in enumerate(points) if p not in points[:i]]


def spec_at_sizes(spec, at: Mapping[str, int]):
    """The spec with the dynamic sizes `at` fixed (the shapes of one call of a dynamic package)."""
    sizes = {**spec.op.sizes, **{k: int(v) for k, v in at.items()}}
    return spec.model_copy(update={"op": spec.op.model_copy(update={"sizes": sizes})})


def checks_at(spec, plan, kernel: Kernel, backends: Sequence[str], *, interpret: bool = False,
              seed: int | None = None, sizes: Mapping[str, int] | None = None) -> list[Check]:
    """Each backend of `kernel` on random inputs of `plan`'s (static) shapes against the reference; `sizes`: the
    dynamic sizes the kernel is launched at (its package is a dynamic one)."""
    checks: list[Check] = []
    family = families.of(plan)
    inputs = random_inputs(spec, plan.sizes, seed)
    refs = reference(spec, plan.sizes, inputs, seed=seed)         # big matmuls: Sampled rows (rel_error reads them)
    k = family.accumulation(plan)                                 # f32 accumulation depth (tolerance)
    dyn_note = "dynamic package at " + ", ".join(f"{n}={v}" for n, v in sizes.items()) if sizes else ""
    for backend in backends:
        note = ""
        try:
            if backend == "cuda":
                outs = run_cuda(kernel, plan, inputs, sizes)
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
            cnote = "; ".join(x for x in (dyn_note, cnote) if x)
            checks.append(Check(plan.name, backend, o.name, dict(plan.sizes), o.dtype, err, tol, ok, cnote))
    return checks


def small_overrides(built: Built, tiles_per_dim: int = 2) -> dict[str, int]:
    """Sizes giving a few tiles per grid dimension (for interpret mode), as the spec's family chooses them.
    `built` needs only `.spec` and `.plan` (a Built, or anything holding a spec and its plan)."""
    return families.of(built.plan).small_sizes(built.spec, built.plan, tiles_per_dim)


def verify_here(built: Built, backends: Sequence[str], *, interpret: bool = False,
                seed: int | None = None) -> list[Check]:
    """verify_built for the backends this machine can run, and a SKIP row saying why for each other one (no GPU,
    for Pallas none without `interpret`): what `schedgen verify` prints. A multi-device family decides for itself."""
    plan = built.plan
    if families.of(plan).multi_device:
        return verify_built(built, backends, interpret=interpret, seed=seed)
    why = {b: unavailable(b, interpret=interpret) for b in backends if b in plan.backends}
    run = [b for b in backends if not why.get(b)]
    checks = verify_built(built, run, interpret=interpret, seed=seed) if run else []
    checks += [c for b, w in why.items() if w for c in skipped(plan, b, w)]
    order = {b: i for i, b in enumerate(backends)}
    return sorted(checks, key=lambda c: order[c.backend])


def verify_file(path: str, backends: Sequence[str], overrides: Mapping[str, Any] | None = None, *,
                interpret: bool = False, small: bool = False, seed: int | None = None) -> list[Check]:
    built = build_spec(path, overrides)
    if small:
        built = build_spec(path, {**small_overrides(built), **(overrides or {})})
    return verify_here(built, backends, interpret=interpret, seed=seed)


