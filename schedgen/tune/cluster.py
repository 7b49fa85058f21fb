"""The Ray backend (`schedgen tune --ray ADDRESS|auto|local`): tuning on the GPUs of a cluster through Ray, no
scheduler or RPC of our own. A trial is one Ray task that needs one GPU (`num_gpus=1`): on the worker it builds the
candidate from what the driver sends (the spec file's name and bytes, the candidate's overrides: workers share
nothing else with the driver), then measures it with the runner functions (gpu_measure, or a test's fake) in a
supervised process pinned to the GPU Ray gave the task, so that a hang or a fault is a status as on one node; it
returns a plain dict. A task whose worker dies (a lost node, the OOM killer) is run again by Ray (`max_retries`);
one that still fails is recorded as a fault. The driver writes every row (driver.py: `_RemoteTrials`).

Ray is imported here only, when a RayRunner is made; it is the `tune-cluster` extra, not a core dependency."""
from __future__ import annotations

import tempfile
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import SpecErrors, ToolchainError
from ..files import write_file
from ..frontend.load import read_spec_bytes
from .compile import _why
from .measure import (DEFAULT_TIMEOUT, START_TIMEOUT, VERIFY_TIMEOUT, Result, WorkerRunner, gpu_environment,
                      gpu_measure, gpu_setup, gpu_verify)
from .pool import visible_gpus
from .probe import PROBE_TIMEOUT, unreachable

TRIAL_RETRIES = 2               # runs of a trial after the first when its worker dies
EXTRA = "tune-cluster"


def import_ray():
    """Ray, or a one-line RuntimeError naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise RuntimeError(f"--ray needs Ray, which is not installed here: pip install 'schedgen[{EXTRA}]'") from None
    return ray


class RayRunner:
    """Trials as Ray tasks on the cluster at `address` (`auto`: the running cluster Ray finds, `local`: a new Ray
    instance on this machine, or `ray://host:port` / `host:port`, checked first by probe.unreachable within
    `probe_timeout` seconds); a Ray already initialised in this process is used as it is. `parallel` is the cluster's GPU count: the driver keeps that many trials in flight. `env` (gpu,
    driver) names the GPUs the results are keyed by: by default what a one-GPU probe task finds on the cluster.
    The functions and options are WorkerRunner's; they run on the workers, so they must be importable there."""

    def __init__(self, address: str = "auto", measure: Callable | None = None, verify: Callable | None = None, *,
                 setup: Callable | None = None, timeout: float = DEFAULT_TIMEOUT,
                 verify_timeout: float = VERIFY_TIMEOUT, start_timeout: float = START_TIMEOUT,
                 options: Mapping[str, Any] | None = None, env: Mapping[str, Any] | None = None,
                 retries: int = TRIAL_RETRIES, init: Mapping[str, Any] | None = None,
                 probe_timeout: float = PROBE_TIMEOUT):
        ray = self.ray = import_ray()
        self.texts: dict[str, bytes] = {}
        self.refs: set = set()
        self.own = not ray.is_initialized()
        if self.own:
            why = unreachable(address, probe_timeout)      # ray.init retries an empty address for ever
            if why is not None:
                raise RuntimeError(f"--ray {address}: no Ray cluster to use ({why}); start one (ray start --head) "
                                   f"or give --ray local for a Ray instance on this machine")
            try:
                ray.init(address=address, log_to_driver=False, **dict(init or {}))
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise RuntimeError(f"--ray {address}: no Ray cluster to use ({_why(exc)}); start one (ray start "
                                   f"--head) or give --ray local for a Ray instance on this machine") from None
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus < 1:
            self.close()
            raise RuntimeError(f"--ray {address}: the Ray cluster has no GPU resources to measure on")
        self.parallel = gpus
        default = measure is None
        self.job = {"measure": measure or gpu_measure, "verify": verify or gpu_verify,
                    "setup": setup if setup is not None or not default else gpu_setup, "options": dict(options or {}),
                    "timeout": timeout, "verify_timeout": verify_timeout, "start_timeout": start_timeout,
                    "env": dict(env) if env is not None else None}
        one_gpu = {"num_gpus": 1, "max_retries": retries, "max_calls": 0}   # max_calls 0: workers (and their
        self._trial = ray.remote(**one_gpu)(_trial)                         # warm GPU processes) are reused
        self._call = ray.remote(**one_gpu)(_call)
        self.retries = retries
        self.env = dict(env) if env is not None else ray.get(ray.remote(_probe).options(num_gpus=1).remote())

    def start(self) -> None:
        pass

    def trial(self, spec_path: str, cand, backend: str) -> Future:
        """Build and measure one candidate on a worker with a GPU: a future of {status, time_ms, detail, compiled,
        gpu, driver, task_s: seconds inside the task} (a task that fails even after its retries gives a fault)."""
        if spec_path not in self.texts:           # read once per run (a regular file, bounded: read_spec_bytes)
            self.texts[spec_path] = read_spec_bytes(spec_path)
        return self._future(self._trial.remote(Path(spec_path).name, self.texts[spec_path], cand.overrides, backend,
                                               self.job))

    def _future(self, ref) -> Future:
        self.refs.add(ref)
        out: Future = Future()

        def done(f: Future) -> None:
            self.refs.discard(ref)
            try:
                out.set_result(f.result())
            except Exception as exc:      # the task failed after its retries, or was cancelled
                out.set_result({"status": "fault", "detail": f"the Ray task failed (run {1 + self.retries} times "
                                                             f"at most): {_why(exc)}"[:2000]})
        ref.future().add_done_callback(done)
        return out

    def _result(self, what: str, built, backend: str) -> Result:
        got = self._future(self._call.remote(what, built, backend, self.job)).result()
        return Result(got["status"], got.get("time_ms"), got.get("detail", ""), got.get("extra", {}))

    def measure(self, built, backend: str) -> Result:
        return self._result("measure", built, backend)

    def verify(self, built, backend: str) -> Result:
        return self._result("verify", built, backend)

    def close(self) -> None:
        for ref in list(self.refs):
            try:
                self.ray.cancel(ref, force=True)
            except Exception:
                pass
        self.refs.clear()
        if self.own and self.ray.is_initialized():
            self.ray.shutdown()


# ---------------------------------------------------------------------------------------------- on the workers

_HERE: dict = {}        # the worker's measuring process: {"key": ..., "runner": WorkerRunner}


def _env_here(job: Mapping) -> dict:
    if job["env"] is not None:
        return dict(job["env"])
    env = gpu_environment()
    gpus = visible_gpus()           # the GPU Ray gave this task (CUDA_VISIBLE_DEVICES)
    if gpus and gpus[0].name:
        env["gpu"] = gpus[0].name
    return {"gpu": env.get("gpu"), "driver": env.get("driver")}


def _runner_here(job: Mapping) -> WorkerRunner:
    """This worker's supervised measuring process, pinned to the GPU of the current task; kept between tasks (a
    warm CUDA context) and replaced when Ray gives the worker another GPU or other functions."""
    import os
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    key = (cvd, job["measure"], job["verify"], job["setup"], repr(sorted(job["options"].items())), job["timeout"],
           job["verify_timeout"], job["start_timeout"])
    if _HERE.get("key") != key:
        if "runner" in _HERE:
            _HERE.pop("runner").close()
        _HERE["runner"] = WorkerRunner(job["measure"], job["verify"], setup=job["setup"], timeout=job["timeout"],
                                       verify_timeout=job["verify_timeout"], start_timeout=job["start_timeout"],
                                       options=job["options"], env=_env_here(job),
                                       worker_env={"CUDA_VISIBLE_DEVICES": cvd})
        _HERE["key"] = key
    return _HERE["runner"]


def _trial(name: str, text: bytes, overrides: Mapping[str, Any], backend: str, job: Mapping) -> dict:
    """One trial on a Ray worker: build the candidate from the spec's bytes and overrides, measure it."""
    import time

    from ..build import build_spec
    t0 = time.monotonic()
    runner = _runner_here(job)
    where = {"gpu": runner.env.get("gpu"), "driver": runner.env.get("driver")}
    with tempfile.TemporaryDirectory(prefix="schedgen-trial-") as tmp:
        path = Path(tmp) / name
        write_file(path, text)
        try:
            built = build_spec(str(path), overrides)
        except (SpecErrors, ToolchainError) as exc:
            return {"status": "compile_error", "detail": _why(exc).replace(str(path), name), "compiled": False,
                    "task_s": time.monotonic() - t0, **where}
        res = runner.measure(built, backend)
    return {"status": res.status, "time_ms": res.time_ms, "detail": res.detail, "compiled": True,
            "task_s": time.monotonic() - t0, **where}


def _call(what: str, built, backend: str, job: Mapping) -> dict:
    """measure or verify an already built candidate on a Ray worker (the winner's check)."""
    res = getattr(_runner_here(job), what)(built, backend)
    return {"status": res.status, "time_ms": res.time_ms, "detail": res.detail, "extra": dict(res.extra)}


def _probe() -> dict:
    """The gpu and driver of a worker with a GPU (the results' keys)."""
    return _env_here({"env": None})
