"""Verifying the collective matmul on the GPUs of this machine (one process drives them all)."""
from __future__ import annotations

import functools
import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from ...verify import Check


INTERPRET_NO_COLLECTIVES = ("Mosaic GPU interpret mode (jax 0.11.2) has no semaphores or remote refs; verified on "
                            "GPUs only (bench/multi_gpu.py)")


def verify_collective(built, backends: Sequence[str], *, interpret: bool = False,
                      seed: int | None = None, devices: Sequence[int] | None = None) -> list[Check]:
    """A multi-device kernel on the GPUs of this machine (one process drives them all), against float64 numpy on
    sampled rows of every device's output; skipped (and said why) where the GPUs or the interpreter cannot run it."""
    from ...build import package
    from ...reference import Sampled, random_inputs, reference, rel_error, tolerance
    from ...runtime import multidevice
    from ...runtime.kernel import load_package
    from ...verify import Check
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
            return Check(plan.launch.name, backend, out.name, dict(plan.sizes), out.dtype, math.inf, tol, False,
                         f"{type(exc).__name__}: {exc}")
        err = rel_error(got, ref)
        note = f"{plan.num_devices} devices" + (f"; {len(ref.rows)} sampled rows" if isinstance(ref, Sampled) else "")
        return Check(plan.launch.name, backend, out.name, dict(plan.sizes), out.dtype, err, tol, err <= tol, note)

    for backend in backends:
        if backend not in plan.launch.backends:
            continue
        if backend == "pallas" and interpret:
            why = INTERPRET_NO_COLLECTIVES
        else:
            ok, why = multidevice.can_run(plan, devices)
            why = "" if ok else why
        if why:
            checks.append(Check(plan.launch.name, backend, out.name, dict(plan.sizes), out.dtype, math.nan, tol, False,
                                f"not run: {why}", skipped=True))
            continue
        if backend == "cuda":
            cubin = built.files["kernel.cubin"]
            # two launches: the second reuses the gather buffers and semaphores (epoch 2) on fresh poisoned outputs
            # (bound now, not looked up when called: check() calls it at once, but a lambda over the loop's `cubin`
            # would read whichever value the loop left if it ever ran later)
            checks.append(check("cuda", functools.partial(multidevice.run_cuda, plan, cubin, inputs, devices,
                                                          launches=2)))
        else:
            def pallas():
                folder = Path(tempfile.mkdtemp(prefix="schedgen-verify-"))
                return multidevice.run_pallas(load_package(package(built, folder)).pallas_module(), plan, inputs)
            checks.append(check("pallas", pallas))
    return checks
