"""Run built kernels on fresh random inputs, outputs poisoned first, against the float64 numpy reference."""
from __future__ import annotations

import inspect
import math
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import ml_dtypes
import numpy as np

from . import registry as families
from .autodiff.graph import evaluate, sum_to
from .build import Built, build_spec, package
from .errors import SpecErrors
from .plan.common import shown_sizes
from .runtime.arrays import DTYPES
from .reference import Sampled, random_inputs, reference, rel_error, shape_of, tolerance
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
                 magnitude: float = 1.0, backward: bool = True) -> list[Check]:
    """Every backend asked for, at each of `call_sizes(plan, count, small)` (or each of `at`: whole size
    assignments) with one package for all of them; inputs scaled by `magnitude` (verify --magnitude). A spec with
    a `backward` section: each of its gradients too, a row each (`backward=False`: the forward's rows only)."""
    plan = built.plan
    family = families.of(plan)
    order = {b: i for i, b in enumerate(backends)}
    absent = [b for b in backends if b not in plan.launch.backends]
    checks = []
    for b in absent:
        why = f"the spec has no {b} backend (schedule.backends: {', '.join(plan.launch.backends)})"
        checks += skipped(plan, b, why) + (backward_skipped(built, b, why) if backward else [])
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
        if backward and getattr(built, "backward", None) is not None:   # each gradient of the spec's backward, at the same sizes
            checks += verify_backward_at(built, kernel, backends, dict(sizes), interpret, seed, magnitude)
    return sorted(checks, key=lambda c: order[c.backend])


def _depth(plan, sizes: Mapping[str, int]) -> int:
    """The family's f32 accumulation depth (it sets the tolerance) at a call's sizes (an extent when dynamic)."""
    from .plan import dims
    return dims.evaluate(families.of(plan).accumulation(plan), sizes)


def _fits(vals: np.ndarray, dtype: str) -> bool:
    """Whether float64 reference values are finite and within `dtype`'s range (with a 2x margin)."""
    if dtype not in DTYPES or not np.issubdtype(vals.dtype, np.floating) or not vals.size:
        return True
    top = float(ml_dtypes.finfo(DTYPES[dtype]).max) / 2 if dtype != "f32" else 1e37
    return bool(np.all(np.isfinite(vals))) and float(np.max(np.abs(vals))) <= top


def _in_range(plan, refs: Mapping[str, Any]) -> bool:
    """Whether every reference output is finite and within its output dtype's range (with a 2x margin)."""
    return all(_fits(np.asarray(refs[o.name].values if isinstance(refs[o.name], Sampled) else refs[o.name]), o.dtype)
               for o in plan.outputs)


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
    checks += [c for b, w in why.items() if w for c in skipped(plan, b, w) + backward_skipped(built, b, w)]
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


# ---- the backward pass: each gradient of a spec with a `backward` section against the float64 reference backward

GRAD_PREFIX = "grad:"      # a gradient's row in the verify table: grad:<input> (the graph's name for it)


def _full_reference(spec, sizes: Mapping[str, int], inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The family's float64 reference as full arrays (never Sampled: the backward's steps read the whole value)."""
    fn = families.of(spec).reference
    params = inspect.signature(fn).parameters
    kw = {"sample": False} if "sample" in params else {}
    out = fn(spec, sizes, inputs, **kw)
    return {k: np.asarray(v.values if isinstance(v, Sampled) else v, dtype=np.float64) for k, v in out.items()}


def _as_f64(values: Mapping[str, Any]) -> dict[str, Any]:
    """Floating-point arrays as float64 (what the references compute in); integer ones (group offsets) as they are."""
    out = {}
    for k, v in values.items():
        a = np.asarray(v)
        out[k] = a.astype(np.float64) if a.dtype.kind == "f" or a.dtype in _FLOAT_DTYPES else a
    return out


_FLOAT_DTYPES = tuple(np.dtype(DTYPES[d]) for d in ("bf16", "f16", "f8e4m3", "f8e5m2"))


def _step_specs(built: Built) -> dict[str, Any]:
    return {n: b.spec for n, b in built.backward.steps.items()}


def _rounded(value: np.ndarray, dtype: str) -> np.ndarray:
    """`value` rounded to `dtype` (what a kernel reads), as that dtype."""
    return np.asarray(value).astype(DTYPES[dtype])


def _grad_writers(graph) -> dict[str, list[str]]:
    """Each gradient in graph.grads -> the steps whose outputs add into it."""
    out: dict[str, list[str]] = {g: [] for g in graph.grads}
    for s in graph.steps:
        for tgt in s.outputs.values():
            if tgt.startswith("grad:") and tgt[5:] in out and s.name not in out[tgt[5:]]:
                out[tgt[5:]].append(s.name)
    return out


def _grad_tolerance(built: Built, grad: str, sizes: Mapping[str, int]) -> float:
    """A gradient's tolerance: its input's dtype, approx_math and the deepest f32 accumulation of the steps that
    write it (a step's `accumulation` at the call's sizes)."""
    steps = built.backward.steps
    graph = built.backward.graph
    # a gradient no step writes: zero, or passed through (the upstream gradient itself: no arithmetic at all)
    writers = _grad_writers(graph)[grad] or ([] if grad in graph.passthrough else list(steps))
    dtype = built.spec.op.inputs[grad].dtype
    k = max((_depth(steps[w].plan, sizes) for w in writers), default=0)
    approx = any(steps[w].plan.approx_math for w in writers)
    return tolerance(dtype, approx, k)


def _reference_gradients(built: Built, sizes: Mapping[str, int], inputs: Mapping[str, Any],
                         outputs: Mapping[str, Any], upstream: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The float64 gradients: the backward graph run with each step's family reference (a gradient no step writes
    is absent: zero)."""
    specs = _step_specs(built)

    def run(step, values):
        return _full_reference(specs[step.name], sizes, _as_f64(values))

    with np.errstate(over="ignore"):        # exp of masked-out scores (the reference zeroes them after)
        return evaluate(built.backward.graph, _as_f64(inputs), _as_f64(outputs), _as_f64(upstream), run)


F32_NOISE = 2.0 ** -23     # the relative noise of the conditioning test: about an f32 ulp


def _conditioned(built: Built, sizes: Mapping[str, int], inputs, outputs, upstream, refs, seed) -> bool:
    """Whether the reference gradients move by less than a quarter of their tolerance when every value the
    backward reads moves by about an f32 ulp (relative noise F32_NOISE): a kernel computing in f32 can then meet
    the tolerance. A large-magnitude set fails it where the backward is ill-conditioned in f32 (attention's P =
    exp(s - lse) recomputed from logits ~1e6 at |q|, |k| ~ 1e3)."""
    rng = np.random.default_rng(None if seed is None else seed + 2)

    def noisy(values):
        return {k: v * (1 + F32_NOISE * rng.standard_normal(np.shape(v))) if v.dtype == np.float64 else v
                for k, v in _as_f64(values).items()}

    moved = _reference_gradients(built, sizes, noisy(inputs), noisy(outputs), noisy(upstream))
    for g, ref in refs.items():
        if rel_error(moved[g], ref) > _grad_tolerance(built, g, sizes) / 4:
            return False
    return True


def backward_case(built: Built, sizes: Mapping[str, int], seed: int | None,
                  magnitude: float = 1.0) -> tuple[dict, dict, dict, dict, float]:
    """Fresh forward inputs at `magnitude`, the forward's outputs (the float64 reference rounded to each output's
    dtype: what the backward's steps read, for the kernels and the reference alike), N(0, 1) upstream gradients of
    the user's outputs, and the float64 reference gradients (the graph run with each step's family reference).
    A large-magnitude set whose gradients leave their dtype's range, or are ill-conditioned in f32 arithmetic
    (`_conditioned`), is drawn again at 1/8 of the scale, down to 1 (as the forward's check scales down a set
    whose outputs would overflow). Returns (inputs, outputs, upstream, reference gradients, the magnitude used)."""
    bw = built.backward
    fwd = bw.forward
    rng = np.random.default_rng(None if seed is None else seed + 1)
    upstream = {n: _rounded(rng.standard_normal(shape_of(o, sizes)), o.dtype) for n, o in bw.written.op.outputs.items()}
    while True:
        inputs = random_inputs(fwd, sizes, seed, magnitude)
        outs64 = _full_reference(fwd, sizes, _as_f64(inputs))
        outputs = {n: _rounded(outs64[n], o.dtype) for n, o in fwd.op.outputs.items()}
        refs = _reference_gradients(built, sizes, inputs, outputs, upstream)
        if magnitude <= 1.0:
            return inputs, outputs, upstream, refs, magnitude
        fine = all(_fits(v, fwd.op.inputs[g].dtype) for g, v in refs.items())
        if fine and _conditioned(built, sizes, inputs, outputs, upstream, refs, seed):
            return inputs, outputs, upstream, refs, magnitude
        magnitude = max(1.0, magnitude / 8)


def run_step(kernel: Kernel, plan, values: Mapping[str, np.ndarray], backend: str,
             interpret: bool) -> tuple[dict[str, np.ndarray], str]:
    """One backward step's kernel on `backend` (outputs poisoned first, as the forward's check): {output: array}
    and the interpreter's note."""
    ins = {o.name: _rounded(values[o.name], o.dtype) for o in plan.inputs}
    if backend == "cuda":
        outs, note = run_cuda(kernel, plan, ins), ""
    else:
        outs, note = run_pallas(kernel, plan, ins, interpret)
    return {o.name: out for o, out in zip(plan.outputs, outs)}, note


def backward_unavailable(built: Built, backend: str, interpret: bool) -> str:
    """Why the backward's steps cannot run on `backend` here ('' when they can): a step without that backend, or
    a step the Pallas interpreter cannot simulate."""
    for name, b in built.backward.steps.items():
        if backend not in b.plan.launch.backends:
            return (f"backward step {name} has no {backend} backend (its backends: "
                    f"{', '.join(b.plan.launch.backends)})")
        if backend == "pallas" and interpret and getattr(b.plan, "not_interpretable", ""):
            return f"backward step {name}: {b.plan.not_interpretable}"
    return ""


def backward_skipped(built: Built, backend: str, why: str, sizes: Mapping[str, int] | None = None) -> list[Check]:
    """One SKIP row per gradient of a spec's backward (none without a backward section)."""
    if getattr(built, "backward", None) is None:
        return []
    shown = dict(sizes) if sizes is not None else shown_sizes(built.plan)
    at = sizes if sizes is not None else {r.name: r.max for r in built.plan.launch.dynamic_sizes} | dict(
        (n, v) for n, v in built.plan.sizes.items() if isinstance(v, int))
    return [Check(built.plan.launch.name, backend, f"{GRAD_PREFIX}{g}", shown, built.spec.op.inputs[g].dtype,
                  math.nan, _grad_tolerance(built, g, at), False, f"not run: {why}", skipped=True)
            for g in built.backward.graph.grads]


def verify_backward_at(built: Built, kernel: Kernel, backends: Sequence[str], sizes: dict[str, int],
                       interpret: bool, seed: int | None, magnitude: float = 1.0) -> list[Check]:
    """Every gradient of the spec's backward at one call's sizes on each backend: the step kernels chained as the
    runtime chains them (autodiff.graph.evaluate; a broadcast operand's gradient summed back, each gradient cast to
    its input's dtype), fed the rounded float64 forward outputs and N(0, 1) upstream gradients, against the graph
    run with the families' float64 references (`backward_case`). A gradient no step writes is zero in both."""
    bw = built.backward
    name = built.plan.launch.name
    asked = magnitude
    inputs, outputs, upstream, refs, magnitude = backward_case(built, sizes, seed, magnitude)
    scaled = (f"|x| {asked:g} -> {magnitude:g} (above it the gradients leave their dtype's range or are "
              f"ill-conditioned in f32)") if magnitude != asked else ""
    step_kernels = kernel.backward.steps if kernel.backward is not None else {}
    checks = []
    for backend in backends:
        why = backward_unavailable(built, backend, interpret)
        if why:
            checks += backward_skipped(built, backend, why, sizes)
            continue
        notes: list[str] = []

        def run(step, values, _backend=backend, _notes=notes):
            got, note = run_step(step_kernels[step.name], bw.steps[step.name].plan, values, _backend, interpret)
            if note:
                _notes.append(note)
            return got

        def reduce(v, to):
            return sum_to(np.asarray(v, np.float32), to)

        try:
            got = evaluate(bw.graph, inputs, outputs, upstream, run,
                           add=lambda a, b: np.asarray(a, np.float32) + np.asarray(b, np.float32), reduce=reduce,
                           arange=lambda n: np.arange(n, dtype=np.float32))
            error = ""
        except Exception as exc:  # reported as a failed check, never a traceback
            got, error = {}, f"{type(exc).__name__}: {exc}"
        raced = any("RACE" in n for n in notes)
        note = "RACE detected by the interpreter" if raced else (notes[0] if notes else "")
        for g in bw.graph.grads:
            dtype = bw.forward.op.inputs[g].dtype
            tol = _grad_tolerance(built, g, sizes)
            if error:
                checks.append(Check(name, backend, f"{GRAD_PREFIX}{g}", dict(sizes), dtype, math.inf, tol, False,
                                    error, magnitude=magnitude))
                continue
            ref = refs.get(g)
            want = np.zeros(inputs[g].shape) if ref is None else ref
            out = got.get(g)
            out = np.zeros(inputs[g].shape, DTYPES[dtype]) if out is None else _rounded(out, dtype)
            err = rel_error(out, want) if np.any(want) or np.any(np.asarray(out, np.float64)) else 0.0
            checks.append(Check(name, backend, f"{GRAD_PREFIX}{g}", dict(sizes), dtype, err, tol,
                                err <= tol and not raced, "; ".join(x for x in ("backward", scaled, note) if x),
                                magnitude=magnitude))
    return checks
