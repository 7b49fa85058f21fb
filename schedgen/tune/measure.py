"""The measuring step: runners that time and verify built candidates. The default, `WorkerRunner`, runs them in one
long-lived supervised worker process (schedgen/supervise.py) with a timeout per job."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from ..cache import digest
from ..supervise import CRASH, ERROR, TIMEOUT, Supervisor
from .db import canonical

DEFAULT_TIMEOUT = 30.0          # seconds per candidate run (a healthy one takes well under a second)
VERIFY_TIMEOUT = 600.0
START_TIMEOUT = 300.0           # the worker's imports and CUDA context


@dataclass(frozen=True)
class Result:
    """What a runner says about one candidate."""
    status: str                 # "ok" | "hang" | "fault"
    time_ms: float | None = None
    detail: str = ""
    extra: dict = field(default_factory=dict)


class Runner(Protocol):
    """Measures built candidates. `env` names the machine: gpu, driver (part of every database key)."""
    env: dict

    def start(self) -> None: ...
    def measure(self, built, backend: str) -> Result: ...
    def verify(self, built, backend: str) -> Result: ...     # extra: {"ok": bool, "rel_error": float}
    def close(self) -> None: ...


class WorkerRunner:
    """Runs `measure(built, backend, options) -> {"time_ms": ..}` and `verify(...) -> {"ok": .., "rel_error": ..}`
    in one long-lived spawned worker under the process supervisor (schedgen/supervise.py), with a timeout per job.
    The supervisor's outcomes become the database's statuses: a timeout is a `hang` (its worker killed), a crash or
    an exception a `fault`; either way the next job gets a fresh worker. The functions must be importable (module
    level). `worker_env`: environment variables of the worker (PoolRunner pins each of its workers to one GPU with
    CUDA_VISIBLE_DEVICES); `env` names the machine (gpu, driver: part of every database key)."""

    def __init__(self, measure: Callable | None = None, verify: Callable | None = None, *,
                 setup: Callable | None = None, timeout: float = DEFAULT_TIMEOUT,
                 verify_timeout: float = VERIFY_TIMEOUT, start_timeout: float = START_TIMEOUT,
                 options: Mapping[str, Any] | None = None, env: Mapping[str, Any] | None = None,
                 worker_env: Mapping[str, str] | None = None):
        default = measure is None
        self.measure_fn = measure or gpu_measure
        self.verify_fn = verify or gpu_verify
        self.setup_fn = setup if setup is not None or not default else gpu_setup
        self.timeout, self.verify_timeout, self.start_timeout = timeout, verify_timeout, start_timeout
        self.options = dict(options or {})
        self.env = dict(env) if env is not None else gpu_environment()
        self.worker = Supervisor(self.setup_fn, (self.options,), start_timeout=start_timeout,
                                 env=dict(worker_env or {}))

    @property
    def starts(self) -> int:
        """Workers started so far (a hang or fault replaces the worker)."""
        return self.worker.starts

    def start(self) -> None:
        self.worker.start()             # returns at once: the worker's start-up overlaps the first compiles

    def _call(self, fn: Callable, built, backend: str, timeout: float) -> Result:
        ready = self.worker.started()
        if not ready.ok:
            why = {TIMEOUT: f"did not start within {self.start_timeout:g} s", CRASH: f"died while starting "
                   f"({ready.detail})", ERROR: f"could not start: {ready.detail}"}[ready.status]
            raise RuntimeError(f"the runner's worker {why}")
        got = self.worker.call(fn, built, backend, self.options, timeout=timeout)
        if got.status == TIMEOUT:
            return Result("hang", detail=got.detail)
        if not got.ok:
            return Result("fault", detail=got.detail)
        value = dict(got.value or {})
        return Result("ok", value.pop("time_ms", None), value.pop("detail", ""), value)

    def measure(self, built, backend: str) -> Result:
        return self._call(self.measure_fn, built, backend, self.timeout)

    def verify(self, built, backend: str) -> Result:
        return self._call(self.verify_fn, built, backend, self.verify_timeout)

    def close(self) -> None:
        self.worker.close()


# ---------------------------------------------------------------------------------------------- the GPU runner

_GPU: dict = {}     # the worker's state: device inputs of the current operand set, the packaging folder


def gpu_environment() -> dict:
    """GPU name, driver and clocks (nvidia-smi, else the driver API), as the bench rows record them."""
    from ..bench import environment
    return environment()


def gpu_setup(options: Mapping[str, Any]) -> None:
    from ..runtime import driver
    driver.ensure_context()
    from ..bench import cupti
    cupti.why_unavailable()     # CUPTI set up once here rather than inside the first timed job


def _gpu_kernel(built):
    import tempfile

    from ..build import package
    from ..plan import to_json
    from ..runtime import load_package
    root = Path(_GPU.setdefault("dir", tempfile.mkdtemp(prefix="schedgen-tune-")))
    return load_package(package(built, root / digest(to_json(built.plan).encode())[:16]))


def gpu_measure(built, backend: str, options: Mapping[str, Any]) -> dict:
    """Time one built candidate (runs in the worker). Device inputs are made once per operand set and reused by
    every candidate of the same op and sizes; big inputs are rotated as `schedgen bench` does."""
    from .. import bench
    from ..bench.case import our_pallas
    from ..bench.timing import block_for
    from ..runtime import driver
    from ..reference import random_inputs
    from ..verify import device_buffers
    plan = built.plan
    iters, warmup = int(options.get("iters", 30)), int(options.get("warmup", 5))
    kernel = _gpu_kernel(built)
    ident = canonical([[o.name, o.dtype, list(o.shape)] for o in (*plan.inputs, *plan.outputs)])
    if _GPU.get("ident") != ident:
        _GPU.pop("sets", None)
        host = random_inputs(built.spec, plan.sizes, seed=1)
        n = bench.input_sets(plan)           # the family's rule, as `schedgen bench` rotates them
        _GPU.update(ident=ident, host=host, sets=[device_buffers(plan, host) for _ in range(n)])
    sets = _GPU["sets"]
    if backend == "cuda":
        launchers = [kernel._launcher([b.ptr for b in ins], [b.ptr for b in outs], 0) for ins, outs in sets]
        t = bench.time_stream_fn(lambda i: launchers[i](), len(launchers), warmup=warmup, iters=iters)
        driver.synchronize()
    else:
        c, held = our_pallas(kernel, plan, _GPU["host"], len(sets))
        t = bench.interleaved([c], block=block_for(iters), warmup=warmup)[c.name]
        del held
    return {"time_ms": t["time_ms"], "timing": t.get("timing"), "cupti_ms": t.get("cupti_ms"), "sets": len(sets)}


def gpu_verify(built, backend: str, options: Mapping[str, Any]) -> dict:
    """The candidate against the float64 numpy reference (fresh inputs, poisoned outputs)."""
    from ..verify import verify_built
    checks = verify_built(built, [backend], kernel=_gpu_kernel(built))
    return {"ok": bool(checks) and all(c.ok for c in checks),
            "rel_error": max((c.rel_error for c in checks), default=None),
            "detail": "; ".join(c.note for c in checks if c.note)}
