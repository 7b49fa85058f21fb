"""What a family's peers get (`Case`: the plan, host inputs, input sets) and give back (`Peer`), our own kernels
as contenders, and the device-data helpers the peers share (torch tensors of host arrays, one-line reasons)."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .timing import Contender, jax_contender

_TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f8e4m3": "float8_e4m3fn",
                 "f8e5m2": "float8_e5m2"}


@dataclass
class Case:
    """One spec being benchmarked: its plan, the host inputs (seed 1), the input sets rotated, iterations."""
    built: Any
    host: dict
    sets: int
    iters: int = 50
    warmup: int = 10

    @property
    def plan(self):
        return self.built.plan

    @property
    def spec(self):
        return self.built.spec


@dataclass
class Peer:
    """A peer ready to time (`contender`) with what is known of it already (`info`: note, rel_error, verified,
    config, ...), or not timed (`contender` None, info["skipped"]: why). `close()` releases its device memory
    once it has been timed."""
    contender: Contender | None = None
    info: dict = field(default_factory=dict)
    close: Callable[[], None] | None = None

    @classmethod
    def skipped(cls, why: str, **info) -> "Peer":
        return cls(None, {"skipped": why, **info})


def why(exc: BaseException) -> str:
    """One line naming an exception (its first message line, or its repr when it has no message)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else repr(exc)


def guard(label: str, make: Callable[[], Peer]) -> Peer:
    """make() a peer; a missing package or any failure becomes a skipped peer saying why."""
    try:
        return make()
    except ImportError as exc:
        return Peer.skipped(f"{label} not available: {exc}")
    except Exception as exc:
        return Peer.skipped(f"{label} failed: {why(exc)}")


def to_torch(torch, x, dtype: str, device: str = "cuda"):
    x = np.ascontiguousarray(x)
    if dtype == "bf16":
        t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    elif dtype in ("f8e4m3", "f8e5m2"):          # ml_dtypes' float8 arrays: torch reads their bytes
        t = torch.from_numpy(x.view(np.uint8)).view(getattr(torch, _TORCH_DTYPES[dtype]))
    else:
        t = torch.from_numpy(x)
    return t.to(device)


def torch_sync(torch, device: str) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device != "cpu":
        torch.cuda.synchronize()


def torch_stream(torch, device: str) -> int:
    """torch's current CUDA stream as a raw handle (0, the legacy stream's, on the CPU: nothing is timed there)."""
    return int(torch.cuda.current_stream().cuda_stream) if device != "cpu" else 0


def torch_release(torch, device: str) -> None:
    """Give torch's cached device memory back once a peer's tensors are gone."""
    if device != "cpu":
        torch.cuda.empty_cache()


def torch_fn_peer(name: str, fn: Callable, held: dict, torch, device: str, info: dict) -> "Peer":
    """A peer that calls a torch function `fn` on the argument sets held["args"] (rotated), on torch's current
    stream; closing it drops the tensors and gives torch's cached memory back."""
    n = len(held["args"])

    def call(i: int) -> None:
        fn(*held["args"][i % n])

    def close() -> None:
        held.clear()
        torch_release(torch, device)
    from .timing import Contender
    return Peer(Contender(name, call, stream=torch_stream(torch, device)), info, close)


def device_copy_peer(case: "Case", name: str = "copy") -> "Peer":
    """A device-to-device copy of half the bytes the kernel moves (read and written: the same traffic), the
    memory-bound families' flat peer."""
    from ..runtime import driver
    driver.ensure_context()
    half = int(case.plan.bytes_moved) // 2
    held = {"src": driver.Buffer(half), "dst": driver.Buffer(half)}

    def call(i: int) -> None:
        driver.copy_d2d(held["dst"].ptr, held["src"].ptr, half)
    info = {"backend": "cuMemcpyDtoDAsync", "config": {"bytes": half},
            "note": f"device-to-device copy of {half} bytes (half the bytes the kernel moves, read and written)"}
    return Peer(Contender(name, call, stream=0), info, close=held.clear)


def from_torch(torch, t, dtype: str):
    from ..runtime.arrays import DTYPES
    t = t.detach().contiguous().cpu()
    if dtype == "bf16":
        return t.view(torch.int16).numpy().view(DTYPES["bf16"])
    return t.numpy()


def torch_dtypes(torch) -> dict:
    return {k: getattr(torch, v) for k, v in _TORCH_DTYPES.items() if hasattr(torch, v)}   # fp8: torch >= 2.1


# ---------------------------------------------------------------------------------------------- ours

def our_cuda(kernel, plan, host: dict, sets: int, sizes: dict | None = None) -> tuple[Contender, list]:
    """Our CUDA kernel over `sets` device copies of the inputs (torch tensors when torch is there: the same kind
    of memory cuBLAS reads; driver buffers otherwise), launched on stream 0; plus the buffers to keep alive."""
    from ..runtime import driver
    from ..verify import device_buffers
    keep: list = []
    launchers = []
    try:
        import torch
        torch.cuda.init()
        dev_in = [to_torch(torch, host[o.name], o.dtype) for o in plan.inputs]
        driver.ensure_context()
        tdt = torch_dtypes(torch)
        for i in range(sets):
            ins = dev_in if i == 0 else [t.clone() for t in dev_in]
            outs = [torch.empty(o.shape, dtype=tdt[o.dtype], device="cuda") for o in plan.outputs]
            keep += ins + outs
            launchers.append(kernel._launcher([t.data_ptr() for t in ins], [t.data_ptr() for t in outs], 0,
                                              sizes=sizes))
        torch.cuda.synchronize()
    except Exception as exc:  # no torch, or one that does not import or initialise here: the driver's own buffers
        if not isinstance(exc, ImportError):
            print(f"schedgen bench: {plan.launch.name} cuda: torch unusable ({why(exc)}); timing on driver buffers",
                  file=sys.stderr)
        keep.clear()
        launchers.clear()
        for _ in range(sets):
            bins, bouts = device_buffers(plan, host)
            keep += bins + bouts
            launchers.append(kernel._launcher([b.ptr for b in bins], [b.ptr for b in bouts], 0, sizes=sizes))
    return Contender("cuda", lambda i: launchers[i % len(launchers)](), stream=0), keep


def our_pallas(kernel, plan, host: dict, sets: int, sizes: dict | None = None) -> tuple[Contender, list]:
    """Our Pallas kernel (jitted; a dynamic package's at `sizes`) over `sets` device copies of the inputs."""
    import jax
    mod = kernel.pallas_module()
    fn = jax.jit(mod.make(sizes)) if hasattr(mod, "make") else jax.jit(getattr(mod, plan.launch.name))
    base = [jax.device_put(host[o.name]) for o in plan.inputs]
    arg_sets = [base] + [[jax.numpy.array(x, copy=True) for x in base] for _ in range(sets - 1)]
    return jax_contender("pallas", fn, arg_sets), arg_sets


OURS = {"cuda": our_cuda, "pallas": our_pallas}


def in_bytes(plan) -> int:
    return sum(math.prod(o.shape) * o.itemsize for o in plan.inputs)


def out_bytes(plan) -> int:
    return sum(math.prod(o.shape) * o.itemsize for o in plan.outputs)
