"""Run built kernels on fresh random inputs, outputs poisoned first, against the float64 numpy reference."""
from __future__ import annotations

import math
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from . import registry as families
from .build import Built, build_spec, package
from .errors import SpecErrors
from .plan.common import shown_sizes
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
    magnitude: float = 1.0    # the scale of the inputs (1: N(0, 1); 1e3: the large-magnitude set)

    def row(self) -> dict:
        return asdict(self)

    @property
    def result(self) -> str:
        """What the verify table's last column says: ok, SKIP (not run here) or FAIL."""
        return "ok" if self.ok else "SKIP" if self.skipped else "FAIL"


def unavailable(backend: str, *, interpret: bool = False, target: str = "sm_90a") -> str:
    """Why `backend` cannot run a kernel on this machine ('' when it can): the reason of a SKIP row, in verify and in
    bench. Both backends need a Hopper GPU and its driver, Pallas unless `interpret` (Mosaic GPU interpret mode runs
    on the CPU). Asked of the CUDA driver only: jax is not started here (it would take the GPU's memory before the
    CUDA run; a jax without GPU support on a GPU machine is a FAIL with jax's own error)."""
    if backend not in ("cuda", "pallas"):
        return f"unknown backend {backend!r}"
    if backend == "pallas" and interpret:
        return ""
    from .runtime import driver
    # both backends' kernels are built for the target's GPU (the CUDA cubin, and the Pallas kernel Mosaic GPU compiles
    # for it): an sm_100a package refuses a Hopper GPU
    cuda_target = target
    ok, what = driver.available(cuda_target)
    hint = "; --interpret runs the Pallas kernel on the CPU" if backend == "pallas" else ""
    if not ok:
        return f"{what}{hint}"                          # "CUDA unavailable: <the driver's reason>"
    if cuda_target == "sm_90a" and not what.rsplit("sm_", 1)[-1].startswith("9"):
        return f"the kernels are built for Hopper (sm_90a); this GPU is {what}{hint}"
    return ""


def skipped(plan, backend: str, why: str) -> list[Check]:
    """One SKIP row per output of `plan`: `backend` was not run here, and why (never ok, never a failure). The row
    type verify prints and bench can reuse (`Check.row()` is its dict)."""
    k = _depth(plan, {r.name: r.max for r in plan.launch.dynamic_sizes})
    return [Check(plan.launch.name, backend, o.name, shown_sizes(plan), o.dtype, math.nan,
                  tolerance(o.dtype, plan.approx_math, k), False, f"not run: {why}", skipped=True)
            for o in plan.outputs]


# ---- the sizes a check calls a kernel at

VERIFY_CAP = 4096          # the largest value verify picks for one dynamic size
VERIFY_VOLUME = 1 << 24    # and for the product of all of them (inputs stay a few hundred MiB at most)


def legal_size(r, target: int) -> int:
    """The legal value of range r nearest below `target` (or its min)."""
    v = max(r.min, min(r.max, target)) // r.multiple_of * r.multiple_of
    return max(v, r.min)


def call_sizes(plan, count: int = 3, small: Mapping[str, int] | None = None) -> list[dict[str, int]]:
    """The sizes to verify a plan at: its fixed sizes and, for a kernel with dynamic sizes, `count` assignments from
    one package: a large one (each size at most VERIFY_CAP, together at most VERIFY_VOLUME; `small`: the family's
    few-tiles sizes, for interpret mode), one about 3/4 of it plus one (not a multiple of a tile where the range
    allows it), and a small one. Every dynamic size is scaled alike, so relations the spec keeps between them
    (Skv - Sq, num_devices x M) keep their direction."""
    ranges = {r.name: r for r in plan.launch.dynamic_sizes}
    fixed = {n: v for n, v in plan.sizes.items() if n not in ranges}
    if not ranges:
        return [dict(fixed)]
    base = {n: legal_size(r, (small or {}).get(n, VERIFY_CAP)) for n, r in ranges.items()}
    while math.prod(base.values()) > VERIFY_VOLUME:
        big = max(base, key=lambda n: base[n] / ranges[n].min)
        if base[big] <= ranges[big].min:
            break
        base[big] = legal_size(ranges[big], base[big] // 2)
    variants = [base, {n: legal_size(ranges[n], v * 3 // 4 + 1) for n, v in base.items()},
                {n: legal_size(ranges[n], max(1, v // 8) + 1) for n, v in base.items()}]
    out: list[dict[str, int]] = []
    for v in variants:
        if v not in out:
            out.append(v)
    return [dict(fixed, **v) for v in out[:max(1, count)]]


FIT_BYTES = 4 << 30        # verify --edges: the largest sizes whose operands (inputs and outputs) fit in this


def operand_bytes(plan, sizes: Mapping[str, int]) -> int:
    """The bytes of every input and output of `plan` at a call's sizes."""
    from .plan import dims
    return sum(math.prod(dims.evaluate(d, sizes) for d in o.shape) * o.itemsize
               for o in (*plan.inputs, *plan.outputs))


def edge_sizes(plan, fit_bytes: int = FIT_BYTES) -> list[dict[str, int]]:
    """The sizes `verify --edges` calls one dynamic-size package at: every dynamic size at the smallest legal value,
    a ragged assignment (about 3/4 of the largest plus one, off every tile where the range allows), and the largest
    legal assignment whose operands fit in `fit_bytes` (each size at its max, the one furthest above its min halved
    until they fit). A fixed-size plan: its own sizes."""
    ranges = {r.name: r for r in plan.launch.dynamic_sizes}
    fixed = {n: v for n, v in plan.sizes.items() if n not in ranges}
    if not ranges:
        return [dict(fixed)]
    largest = {n: legal_size(r, r.max) for n, r in ranges.items()}
    while operand_bytes(plan, {**fixed, **largest}) > fit_bytes:
        big = max(largest, key=lambda n: largest[n] / ranges[n].min)
        if largest[big] <= ranges[big].min:
            break
        largest[big] = legal_size(ranges[big], largest[big] // 2)
    smallest = {n: legal_size(r, r.min) for n, r in ranges.items()}
    ragged = {n: legal_size(ranges[n], v * 3 // 4 + 1) for n, v in largest.items()}
    out: list[dict[str, int]] = []
    for v in (smallest, ragged, largest):
        if v not in out:
            out.append(v)
    return [dict(fixed, **v) for v in out]


def _output_shapes(plan, kernel: Kernel | None, sizes: Mapping[str, int]) -> list[tuple[int, ...]]:
    if kernel is not None:
        return list(kernel.output_shapes(dict(sizes)))
    return [tuple(int(d) for d in o.shape) for o in plan.outputs]


def poisoned_outputs(plan, shapes: Sequence[tuple[int, ...]] | None = None) -> list[np.ndarray]:
    outs = []
    for o, shape in zip(plan.outputs, shapes or [tuple(o.shape) for o in plan.outputs]):
        raw = np.full(math.prod(shape) * o.itemsize, POISON_BYTE, np.uint8)
        outs.append(raw.view(DTYPES[o.dtype]).reshape(shape))
    return outs


def device_buffers(plan, inputs: Mapping[str, np.ndarray],
                   shapes: Sequence[tuple[int, ...]] | None = None) -> tuple[list, list]:
    """Device copies of the inputs and NaN-poisoned device outputs, in the plan's argument order."""
    from .runtime import driver
    driver.ensure_context()
    bufs_in = []
    for o in plan.inputs:
        buf = driver.Buffer(inputs[o.name].nbytes)
        buf.upload(np.ascontiguousarray(inputs[o.name]))
        bufs_in.append(buf)
    bufs_out = []
    for o, shape in zip(plan.outputs, shapes or [tuple(o.shape) for o in plan.outputs]):
        buf = driver.Buffer(math.prod(shape) * o.itemsize)
        buf.fill_bytes(POISON_BYTE)
        bufs_out.append(buf)
    return bufs_in, bufs_out


def run_cuda(kernel: Kernel, plan, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Upload, poison the device outputs, launch at the call's sizes, download."""
    from .runtime import driver
    call = kernel.bind([inputs[o.name].shape for o in plan.inputs])
    shapes = kernel.output_shapes(call)
    bufs_in, bufs_out = device_buffers(plan, inputs, shapes)
    kernel._launcher([b.ptr for b in bufs_in], [b.ptr for b in bufs_out], 0, sizes=call)()
    driver.synchronize()
    outs = []
    for o, shape, buf in zip(plan.outputs, shapes, bufs_out):
        host = np.empty(shape, DTYPES[o.dtype])
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
    ins = [jnp.asarray(inputs[o.name]) for o in plan.inputs]
    call = kernel.bind([inputs[o.name].shape for o in plan.inputs])
    outs = [jnp.asarray(o) for o in poisoned_outputs(plan, kernel.output_shapes(call))]
    # through the package's own Pallas call path: one kernel per sizes, cached (the module's run_into jits anew)
    res = kernel._pallas.run_into(ins, outs, interpret=interpret_params() if interpret else None)
    note = ""
    if interpret:
        raced = races_found()
        note = {True: "RACE detected by the interpreter", False: "interpreted, no races", None: "interpreted"}[raced]
    return [np.asarray(r) for r in res], note


def verify_built(built: Built, backends: Sequence[str], *, interpret: bool = False, seed: int | None = None,
                 kernel: Kernel | None = None, count: int = 3,
                 small: Mapping[str, int] | None = None, at: Sequence[Mapping[str, int]] | None = None,
                 magnitude: float = 1.0) -> list[Check]:
    """Every backend asked for, at each of `call_sizes(plan, count, small)` (or each of `at`: whole size
    assignments) with one package for all of them; inputs scaled by `magnitude` (verify --magnitude)."""
    plan = built.plan
    family = families.of(plan)
    order = {b: i for i, b in enumerate(backends)}
    absent = [b for b in backends if b not in plan.launch.backends]
    checks = [c for b in absent
              for c in skipped(plan, b, f"the spec has no {b} backend (schedule.backends: {', '.join(plan.launch.backends)})")]
    backends = [b for b in backends if b in plan.launch.backends]
    if family.verify is not None:                       # a family that verifies its own way (multi-device)
        checks += family.verify(built, backends, interpret=interpret, seed=seed)
        return sorted(checks, key=lambda c: order.get(c.backend, len(order)))
    if not backends:
        return checks
    if kernel is None:
        folder = Path(tempfile.mkdtemp(prefix="schedgen-verify-"))
        kernel = load_package(package(built, folder))
    for sizes in at or call_sizes(plan, count, small):
        checks += _verify_at(built, kernel, backends, dict(sizes), interpret, seed, magnitude)
    return sorted(checks, key=lambda c: order[c.backend])


def _depth(plan, sizes: Mapping[str, int]) -> int:
    """The family's f32 accumulation depth (it sets the tolerance) at a call's sizes (an extent when dynamic)."""
    from .plan import dims
    return dims.evaluate(families.of(plan).accumulation(plan), sizes)


def _in_range(plan, refs: Mapping[str, Any]) -> bool:
    """Whether every reference output is finite and within its output dtype's range (with a 2x margin)."""
    import ml_dtypes
    for o in plan.outputs:
        ref = refs[o.name]
        vals = np.asarray(ref.values if isinstance(ref, Sampled) else ref)
        if o.dtype in DTYPES and np.issubdtype(vals.dtype, np.floating) and vals.size:
            top = float(ml_dtypes.finfo(DTYPES[o.dtype]).max) / 2 if o.dtype != "f32" else 1e37
            if not np.all(np.isfinite(vals)) or float(np.max(np.abs(vals))) > top:
                return False
    return True


def _inputs_and_references(built: Built, sizes: dict[str, int], seed: int | None,
                           magnitude: float) -> tuple[dict, dict, float]:
    """Fresh inputs at `magnitude` and their float64 references. A large-magnitude set whose outputs would leave
    an output dtype's range (a long f16 product of values ~1e3) is drawn again at 1/8 of the scale, down to 1."""
    while True:
        inputs = random_inputs(built.spec, sizes, seed, magnitude)
        refs = reference(built.spec, sizes, inputs, seed=seed)   # big matmuls: Sampled rows (rel_error reads them)
        if magnitude <= 1.0 or _in_range(built.plan, refs):
            return inputs, refs, magnitude
        magnitude = max(1.0, magnitude / 8)


def _verify_at(built: Built, kernel: Kernel, backends: Sequence[str], sizes: dict[str, int], interpret: bool,
               seed: int | None, magnitude: float = 1.0) -> list[Check]:
    plan = built.plan
    checks = []
    inputs, refs, magnitude = _inputs_and_references(built, sizes, seed, magnitude)
    k = _depth(plan, sizes)                                  # f32 accumulation depth (tolerance)
    for backend in backends:
        note = ""
        try:
            if backend == "cuda":
                outs = run_cuda(kernel, plan, inputs)
            else:
                outs, note = run_pallas(kernel, plan, inputs, interpret)
        except Exception as exc:  # reported as a failed check, never a traceback
            for o in plan.outputs:
                checks.append(Check(plan.launch.name, backend, o.name, dict(sizes), o.dtype, math.inf,
                                    tolerance(o.dtype, plan.approx_math, k), False, f"{type(exc).__name__}: {exc}",
                                    magnitude=magnitude))
            continue
        summed = set(getattr(plan, "summed_outputs", ()))   # outputs of partial sums: any split of them is right
        for o, out in zip(plan.outputs, outs):
            ref = refs[o.name]
            if o.name in summed:
                out, ref = np.asarray(out, np.float64).sum(axis=0), np.asarray(ref, np.float64).sum(axis=0)
            err = rel_error(out, ref)
            tol = tolerance(o.dtype, plan.approx_math, k)
            ok = err <= tol and "RACE" not in note
            cnote = "; ".join(x for x in (note, f"{len(ref.rows)} sampled rows") if x) if isinstance(ref, Sampled) else note
            checks.append(Check(plan.launch.name, backend, o.name, dict(sizes), o.dtype, err, tol, ok, cnote,
                                magnitude=magnitude))
    return checks


def small_overrides(built: Built, tiles_per_dim: int = 2) -> dict[str, int]:
    """Sizes giving a few tiles per grid dimension (for interpret mode), as the spec's family chooses them.
    `built` needs only `.spec` and `.plan` (a Built, or anything holding a spec and its plan)."""
    return families.of(built.plan).small_sizes(built.spec, built.plan, tiles_per_dim)


def verify_here(built: Built, backends: Sequence[str], *, interpret: bool = False,
                seed: int | None = None, count: int = 3, small: Mapping[str, int] | None = None,
                kernel: Kernel | None = None, at: Sequence[Mapping[str, int]] | None = None,
                magnitude: float = 1.0) -> list[Check]:
    """verify_built for the backends this machine can run, and a SKIP row saying why for each other one (no GPU,
    for Pallas none without `interpret`): what `schedgen verify` prints. A multi-device family decides for itself."""
    plan = built.plan
    if families.of(plan).multi_device:
        return verify_built(built, backends, interpret=interpret, seed=seed)
    why = {b: unavailable(b, interpret=interpret, target=plan.launch.target) for b in backends if b in plan.launch.backends}
    if interpret and "pallas" in why and not why["pallas"]:
        # a Pallas kernel Mosaic GPU's interpreter cannot simulate (the plan says why: not_interpretable)
        why["pallas"] = getattr(plan, "not_interpretable", "")
    run = [b for b in backends if not why.get(b)]
    checks = verify_built(built, run, interpret=interpret, seed=seed, count=count, small=small, kernel=kernel,
                          at=at, magnitude=magnitude) if run else []
    checks += [c for b, w in why.items() if w for c in skipped(plan, b, w)]
    order = {b: i for i, b in enumerate(backends)}
    return sorted(checks, key=lambda c: order[c.backend])


def static_variants(built: Built, path: str, overrides: Mapping[str, Any] | None, count: int) -> list[Built]:
    """Up to `count - 1` more builds of a fixed-size spec at other sizes (-D overrides): every size of 256 or more
    halved, then at about 3/4 of it, rounded down to the smallest of 8, 16, ..., 512 that the planner accepts (the
    finest step the spec's tiles and ragged-edge rules allow); a variant no rounding makes legal is left out."""
    fixed = {n: v for n, v in built.plan.sizes.items() if isinstance(v, int)
             and n not in {r.name for r in built.plan.launch.dynamic_sizes}}
    out: list[Built] = []
    seen = [fixed]
    half = [lambda v: v // 2]
    three_quarters = [lambda v, m=m: max(m, (v * 3 // 4) // m * m) for m in (8, 16, 32, 64, 128, 256, 512)]
    for scales in (half, three_quarters):
        if len(out) >= count - 1:
            break
        for scale in scales:
            # the large extents move (rows, columns, sequences); batch, heads and head_dim (< 256) stay
            sizes = {n: scale(v) if v >= 256 else v for n, v in fixed.items()}
            if sizes in seen:
                continue
            seen.append(sizes)
            try:
                out.append(build_spec(path, {**(overrides or {}), **sizes}))
                break
            except SpecErrors:
                continue
    return out


def verify_file(path: str, backends: Sequence[str], overrides: Mapping[str, Any] | None = None, *,
                interpret: bool = False, small: bool = False, seed: int | None = None, sizes: int = 1,
                edges: bool = False, magnitude: float | None = None) -> list[Check]:
    """Verify one spec. A dynamic-size spec is built once and called at `max(sizes, 3)` assignments of its dynamic
    sizes (with `small`: the family's few-tiles sizes for them; with `edges`: the smallest, a ragged and the largest
    that fits, `edge_sizes`); a fixed-size spec at its own sizes and, with `sizes` > 1, rebuilt at up to
    `sizes - 1` others (static_variants). With `magnitude`, once more at one of those sizes (the ragged one of a
    dynamic spec) on inputs scaled by it (|x| ~ 1e3: large-magnitude rounding, overflow, exp of big logits)."""
    built = build_spec(path, overrides)
    dynamic = {r.name for r in built.plan.launch.dynamic_sizes}
    few = None
    if small:
        few = small_overrides(built)
        fixed_small = {n: v for n, v in few.items() if n not in dynamic}
        if fixed_small:
            built = build_spec(path, {**fixed_small, **(overrides or {})})
    if dynamic:
        at = edge_sizes(built.plan) if edges and not small else call_sizes(built.plan, max(sizes, 3), few)
        checks = verify_here(built, backends, interpret=interpret, seed=seed, at=at)
        if magnitude and not families.of(built.plan).multi_device:
            checks += verify_here(built, backends, interpret=interpret, seed=seed, at=[at[min(1, len(at) - 1)]],
                                  magnitude=magnitude)
        return checks
    checks = verify_here(built, backends, interpret=interpret, seed=seed)
    if magnitude and not families.of(built.plan).multi_device:
        checks += verify_here(built, backends, interpret=interpret, seed=seed, magnitude=magnitude)
    for other in static_variants(built, path, overrides, sizes) if sizes > 1 else []:
        checks += verify_here(other, backends, interpret=interpret, seed=seed)
    return checks
