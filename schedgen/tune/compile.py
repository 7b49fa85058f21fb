"""Parallel candidate builds: a pool of spawned processes running NVRTC, and the keys of the toolchain."""
from __future__ import annotations

import multiprocessing
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Mapping

from ..cache import Cache, key_of
from ..supervise import exit_with_parent


def _quiet_worker(parent: int | None = None) -> None:
    """Pool and runner workers leave Ctrl-C to the parent, which stops them; a pool worker exits when the process
    `parent` ends (a killed `schedgen tune` leaves no compile running behind it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:
        exit_with_parent(parent)


def compile_candidate(spec_path: str, overrides: Mapping[str, Any], cache_root: str | None):
    """Build one candidate (NVRTC; runs in a pool worker): (Built, worker pid, seconds)."""
    from ..build import build_spec
    t0 = time.monotonic()
    built = build_spec(spec_path, overrides, cache=Cache(Path(cache_root)) if cache_root else None)
    return built, os.getpid(), time.monotonic() - t0


def cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_workers(measuring: bool = True) -> int:
    """Every CPU for a dry run; one left for the GPU worker's launches and timing otherwise."""
    return max(1, cpus() - (1 if measuring else 0))


def max_workers() -> int:
    """The most compile processes a pool may have: twice the CPUs this process may use (NVRTC is CPU-bound: more
    only queue, each process holding its memory)."""
    return 2 * cpus()


def workers_problem(workers: int) -> str:
    """Why `workers` compile processes cannot be started ('' when they can): a whole number in 1..max_workers()."""
    most = max_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= most:
        return (f"{workers!r} compile processes: give a whole number from 1 to {most} (twice the {cpus()} CPUs this "
                f"process may use)")
    return ""


def compile_pool(workers: int | None = None, measuring: bool = True) -> ProcessPoolExecutor:
    """A pool of `workers` spawned compile processes (default: default_workers); ValueError for a count out of
    1..max_workers()."""
    if workers is not None:
        why = workers_problem(workers)
        if why:
            raise ValueError(f"workers: {why}")
    return ProcessPoolExecutor(max_workers=workers or default_workers(measuring),
                               mp_context=multiprocessing.get_context("spawn"), initializer=_quiet_worker,
                               initargs=(os.getpid(),))


def toolchain_info() -> tuple[dict, str]:
    from ..build import toolchain
    from ..render import templates_hash
    tools = {k: str(v) for k, v in toolchain().items()}
    tools["templates"] = templates_hash()[:16]
    return tools, key_of(tools)


def result_key(cfg_key: str, backend: str, gpu: str, driver: str, tool_key: str) -> str:
    return key_of({"config": cfg_key, "backend": backend, "gpu": gpu, "driver": driver, "toolchain": tool_key})


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else repr(exc)
