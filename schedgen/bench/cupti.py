"""Kernel time through CUPTI's activity API, by NVIDIA's own binding (`cupti-python`): the start and end stamps
the GPU gives every kernel, device copy and memset the process launches, on any stream, whoever launched it (our
cubin and its workspace memset, cuBLAS, cuDNN, XLA, Triton, the copy peer's cuMemcpyDtoD). The one basis every
contender's ratio stands on (`schedgen.bench.timing`): a copy is timed on the same clock as a kernel.

`pip install cupti-python` (matching the CUDA major version of the driver's libcupti: 13.x for CUDA 13). Where it
is missing or CUPTI does not load, `why_unavailable()` says why and `kernel_ms` returns None: the timing falls back
to CUDA events, and the record names the clock it used.
"""
from __future__ import annotations

import statistics
import threading
from typing import Any, Callable

_lock = threading.Lock()
_state: dict[str, Any] = {}


def _setup() -> dict[str, Any]:
    """Register the activity buffers once per process; {'error': why} where CUPTI cannot be used."""
    with _lock:
        if _state:
            return _state
        try:
            from cupti import cupti
        except Exception as exc:  # not installed, or its libcupti does not load
            _state["error"] = f"cupti-python unavailable ({type(exc).__name__}: {exc})"
            return _state
        records: list[tuple[int, int]] = []
        kinds = (cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY, cupti.ActivityKind.MEMSET)

        def requested():
            return 8 << 20, 0

        def completed(activities):
            records.extend((a.start, a.end) for a in activities if a.kind in kinds)

        try:
            cupti.activity_register_callbacks(requested, completed)
        except Exception as exc:
            _state["error"] = f"CUPTI activity callbacks refused ({type(exc).__name__}: {exc})"
            return _state
        _state.update(cupti=cupti, kinds=kinds, records=records, error=None)
        return _state


def why_unavailable() -> str | None:
    """Why CUPTI kernel time cannot be had in this process, or None when it can."""
    return _setup().get("error")


def version() -> str | None:
    try:
        from importlib import metadata
        return metadata.version("cupti-python")
    except Exception:
        return None


def per_call(stamps: list[tuple[int, int]], calls: int) -> float:
    """Milliseconds of kernel time per call from (start, end) nanosecond stamps: the median over calls when every
    call launched the same number of kernels (stamps in launch order), else the mean."""
    stamps = sorted(stamps)
    if len(stamps) % calls == 0:
        per = len(stamps) // calls
        return statistics.median(sum(e - s for s, e in stamps[i * per:(i + 1) * per]) for i in range(calls)) / 1e6
    return sum(e - s for s, e in stamps) / calls / 1e6


def kernel_ms(call: Callable[[int], Any], calls: int, sync: Callable[[], None]) -> float | None:
    """GPU time per call of `calls` calls (`call(i)` launches call i; `sync()` waits for them): its kernels, device
    copies and memsets; None where CUPTI is unavailable or saw none."""
    st = _setup()
    if st.get("error"):
        return None
    cupti, kinds, records = st["cupti"], st["kinds"], st["records"]
    sync()
    with _lock:
        cupti.activity_flush_all(1)
        records.clear()
        for kind in kinds:
            cupti.activity_enable(kind)
        try:
            for i in range(calls):
                call(i)
            sync()
        finally:
            cupti.activity_flush_all(1)
            for kind in kinds:
                cupti.activity_disable(kind)
        got = list(records)
        records.clear()
    return per_call(got, calls) if got else None
