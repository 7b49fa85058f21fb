"""One timing primitive: interleaved rounds of blocks of launches, the median over rounds.

Every contender (our kernels, the peers) runs a block of `block` launches in each round, one contender after
the other within the round, so that they all see the same clock and thermal state (the H200 lowers its clocks
under sustained matrix load: peers timed one after the other in separate passes differ by up to 10% from that
alone). A block is timed by each of the contender's clocks:

- `cuda-events`: CUDA events around the block on the contender's stream (our CUDA kernel, cuBLAS, torch);
- `cupti`: CUPTI kernel time per call (`schedgen.bench.cupti`, NVIDIA's cupti-python: every kernel the process
  launches, on any stream), where that is available; the basis of every ratio;
- `wall`: wall-clock over the block with the device synchronised at both ends (jax launches on XLA's streams,
  which CUDA events on our stream do not see).

`schedgen bench`, `tune`'s measurement and the bench/ scripts all time through `interleaved`.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..plan.hardware import L2_BYTES

ROUNDS = 5
ROTATE_BYTES = 200 << 20      # matmul: rotate input copies while 3 x one set's input bytes is below this
MAX_SETS = 8
# the key of each clock's median in a contender's result
CLOCK_KEYS = {"cuda-events": "events_ms", "cupti": "cupti_ms", "wall": "wall_ms"}


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def sets_for(nbytes: int) -> int:
    """How many input sets to rotate through so that L2 (60 MB) cannot hold them all."""
    return max(1, min(MAX_SETS, math.ceil(3 * L2_BYTES / max(1, nbytes))))


def matmul_sets(in_bytes: int) -> int:
    """Input copies to rotate through: 1 when 3 x the inputs outgrow ROTATE_BYTES (L2 cannot flatter them),
    else enough copies to cover ROTATE_BYTES, at most MAX_SETS."""
    if 3 * in_bytes >= ROTATE_BYTES:
        return 1
    return max(2, min(MAX_SETS, math.ceil(ROTATE_BYTES / max(1, in_bytes))))


@dataclass
class Contender:
    """One thing to time. `call(i)` launches call i (it picks input set i % sets itself); `stream` is the CUDA
    stream it launches on, None where jax launches it (on XLA's streams); `sync()` waits for its last call;
    `scope()`, where given, a context entered around its warm-up and around each of its blocks, outside every
    clock (torch's SDPA backend choice, say: set once per block, not once per launch)."""
    name: str
    call: Callable[[int], Any]
    stream: int | None = 0
    sync: Callable[[], None] | None = None
    scope: Callable[[], contextlib.AbstractContextManager] | None = None

    def within(self) -> contextlib.AbstractContextManager:
        """Its scope as a context manager to enter (a no-op one where it has none)."""
        return self.scope() if self.scope is not None else contextlib.nullcontext()

    @property
    def clocks(self) -> tuple[str, ...]:
        """Its clocks, the first available one giving time_ms."""
        return ("cuda-events", "cupti") if self.stream is not None else ("cupti", "wall")

    def wait(self) -> None:
        if self.sync is not None:
            self.sync()
        elif self.stream is not None:
            from ..runtime import driver
            driver.synchronize(self.stream)


# ---------------------------------------------------------------------------------------------- clocks

def cupti_ms(call: Callable[[int], Any], calls: int, sync: Callable[[], None]) -> float | None:
    """Kernel time per call (CUPTI activity records through NVIDIA's cupti-python: every kernel the process
    launches, on any stream), or None where CUPTI is not available (`cupti.why_unavailable`)."""
    from . import cupti
    return cupti.kernel_ms(call, calls, sync)


def _events_block(c: Contender, start: int, n: int) -> float | None:
    from ..runtime import driver

    def block() -> None:
        for j in range(n):
            c.call(start + j)
    return driver.time_ms(block, warmup=0, iters=1, stream=c.stream)[0] / n


def _cupti_block(c: Contender, start: int, n: int) -> float | None:
    return cupti_ms(lambda j: c.call(start + j), n, c.wait)


def _wall_block(c: Contender, start: int, n: int) -> float | None:
    c.wait()
    t0 = time.perf_counter()
    for j in range(n):
        c.call(start + j)
    c.wait()
    return (time.perf_counter() - t0) * 1e3 / n


# (contender, first call index, calls) -> ms per call, or None where the clock is not available
Clock = Callable[[Contender, int, int], "float | None"]
CLOCKS: dict[str, Clock] = {"cuda-events": _events_block, "cupti": _cupti_block, "wall": _wall_block}


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else repr(exc)


def interleaved(contenders: Sequence[Contender], *, block: int, rounds: int = ROUNDS, warmup: int = 3,
                clocks: Mapping[str, Clock] | None = None) -> dict[str, dict]:
    """Time the contenders in `rounds` rounds; in each round every contender runs one block of `block` launches
    (call indices continue from round to round, so the input sets rotate), timed by each of its clocks.

    Returns per contender: time_ms (the median over rounds of its CUPTI kernel time where that answered, else of
    its first available clock), timing (that clock's name), the median of every clock that answered (events_ms, cupti_ms, wall_ms), rounds, block and spread
    ((max - min) / median of the time_ms clock); or {"time_ms": None, "error": why} for one that raised (it
    leaves the remaining rounds; the others go on)."""
    clocks = dict(CLOCKS if clocks is None else clocks)
    samples: dict[str, dict[str, list[float]]] = {c.name: {k: [] for k in c.clocks if k in clocks} for c in contenders}
    dead: dict[str, str] = {}
    unavailable: set[tuple[str, str]] = set()
    for c in contenders:
        try:
            with c.within():
                for i in range(warmup):
                    c.call(i)
                c.wait()
        except Exception as exc:
            dead[c.name] = _why(exc)
    start = warmup
    for _ in range(max(1, rounds)):
        for c in contenders:
            if c.name in dead:
                continue
            for name in samples[c.name]:
                if (c.name, name) in unavailable:
                    continue
                try:
                    with c.within():
                        ms = clocks[name](c, start, block)
                except Exception as exc:
                    if name != "cupti":          # CUPTI failing is CUPTI missing; the launch's own error is real
                        dead[c.name] = _why(exc)
                        break
                    ms = None
                if ms is None:
                    unavailable.add((c.name, name))
                else:
                    samples[c.name][name].append(ms)
        start += block
    return {c.name: _result(samples[c.name], dead.get(c.name), block) for c in contenders}


def _result(samples: dict[str, list[float]], error: str | None, block: int) -> dict:
    if error is not None:
        return {"time_ms": None, "error": error}
    got = {k: v for k, v in samples.items() if v}
    if not got:
        return {"time_ms": None, "error": "no clock could time it"}
    # kernel time first where CUPTI answered: the rate a row reports then stands on the clock its ratios use
    # (ratio_of), and CUDA events, which also count the idle gaps between launches, stay beside it (events_ms)
    primary = "cupti" if "cupti" in got else next(iter(got))
    ts = got[primary]
    out = {"time_ms": median(ts), "timing": primary}
    out.update({CLOCK_KEYS.get(k, f"{k}_ms"): median(v) for k, v in got.items()})
    out.update(rounds=len(ts), block=block, spread=(max(ts) - min(ts)) / median(ts) if median(ts) else 0.0)
    return out


def block_for(iters: int, rounds: int = ROUNDS) -> int:
    """Launches per block so that `rounds` blocks make about `iters` launches of each contender."""
    return max(1, math.ceil(iters / max(1, rounds)))


# ---------------------------------------------------------------------------------------------- one contender

def time_stream_fn(fn: Callable[[int], None], sets: int, *, warmup: int, iters: int, stream: int = 0) -> dict:
    """A launch on a CUDA stream alone (our CUDA kernel, cuBLAS), input set i % sets on call i: `interleaved`
    with one contender (CUDA events, plus CUPTI kernel time where available)."""
    c = Contender("x", lambda i: fn(i % sets), stream=stream)
    return interleaved([c], block=block_for(iters), warmup=warmup)["x"]


def jax_contender(name: str, fn: Callable, arg_sets: list) -> Contender:
    """A jax callable over rotated argument sets, as a contender (CUPTI kernel time, else wall-clock)."""
    import jax
    holder: dict = {}

    def call(i: int) -> None:
        holder["last"] = fn(*arg_sets[i % len(arg_sets)])

    def sync() -> None:
        if "last" in holder:
            jax.block_until_ready(holder["last"])
    return Contender(name, call, stream=None, sync=sync)


def time_jax_fn(fn: Callable, arg_sets: list, *, warmup: int, iters: int, out_bytes: int = 0) -> dict:
    """A jax callable alone over rotated argument sets: `interleaved` with one contender. `out_bytes` (the
    output of one call) caps a block at 8 GiB of queued outputs."""
    block = min(block_for(iters), max(1, (8 << 30) // max(1, out_bytes)))
    return interleaved([jax_contender("x", fn, arg_sets)], block=block, warmup=warmup)["x"]


def ratio_of(ours: dict, peer: dict) -> tuple[float | None, str]:
    """peer time / our time, both measured the same way where possible: (ratio, basis). Kernel time (CUPTI) when
    both have it: CUDA events around a block of launches also count the GPU's idle gaps between them, which a peer
    with a slow host path (SDPA: 0.237 ms by events, 0.204 ms of kernels, H200 2026-12-04) pays and we would be
    credited for; else the one clock both were timed with; else the two primary clocks, named."""
    if ours.get("cupti_ms") and peer.get("cupti_ms"):
        return peer["cupti_ms"] / ours["cupti_ms"], "cupti"
    if ours.get("time_ms") and peer.get("time_ms") and ours.get("timing") == peer.get("timing"):
        return peer["time_ms"] / ours["time_ms"], ours["timing"]
    if ours.get("time_ms") and peer.get("time_ms"):
        return peer["time_ms"] / ours["time_ms"], f"{peer.get('timing')} / {ours.get('timing')}"
    return None, ""
