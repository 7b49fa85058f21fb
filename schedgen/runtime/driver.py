"""Thin, typed runtime layer over `cuda.bindings.driver`: context, modules, TMA descriptors, launches, buffers.

Everything that can be checked without a GPU (tensor-map arguments, kernel-argument packing, launch geometry)
is validated by pure functions before the driver is touched, so those paths are testable on CPU-only machines.
"""
from __future__ import annotations

import ctypes
import operator
import os
import struct
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from cuda.bindings import driver as cu

from ..errors import shorten, shorten_int

__all__ = [
    "CudaError", "available", "device_info", "ensure_context", "Module", "TMA_DTYPES", "TMA_ITEMSIZE",
    "validate_tiled", "encode_tiled", "Arg", "validate_launch", "launch", "Buffer", "synchronize", "time_ms",
    "copy_d2d", "Params", "LaunchConfig", "stream_handle", "is_capturing", "CaptureError", "CounterPool",
    "counter_pool", "workspace_pool", "workspace_alloc", "workspace_free", "memset0",
]

STATIC_SMEM_LIMIT = 48 * 1024


class CudaError(RuntimeError):
    """A driver call returned something other than CUDA_SUCCESS."""

    def __init__(self, call: str, result: Any, detail: str = ""):
        self.call = call
        self.result = result
        if result is None:  # the driver library itself could not be used
            super().__init__(f"{call} failed: {detail or 'CUDA driver unavailable'}")
            return
        name = getattr(result, "name", None) or f"CUresult({int(result)})"
        text = ""
        try:
            err, s = cu.cuGetErrorString(result)
            if err == cu.CUresult.CUDA_SUCCESS and s:
                text = s.decode() if isinstance(s, bytes) else str(s)
        except Exception:  # no driver library: keep the name only
            pass
        super().__init__(f"{call} failed: {name}" + (f" ({text})" if text else ""))


def _check(call: str, ret: Any) -> Any:
    """Unpack a cuda.bindings `(CUresult, *values)` return; raise CudaError on failure."""
    if not isinstance(ret, tuple):
        ret = (ret,)
    err, vals = ret[0], ret[1:]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise CudaError(call, err)
    if not vals:
        return None
    return vals[0] if len(vals) == 1 else vals


def _call(name: str, *args: Any) -> Any:
    return _check(name, getattr(cu, name)(*args))


# ---------------------------------------------------------------------------------------------- device / context

_available: tuple[bool, Any] | None = None
_contexts: dict[int, Any] = {}


# The oldest driver that runs what the bundled toolkit (NVRTC 13) emits: CUDA 13.0 (driver r580).
MIN_DRIVER = (13, 0)
ARCH = (9, 0)   # the default target's compute capability (sm_90a cubins: Hopper only)
# each target's cubin runs on GPUs of exactly this compute capability (an `a` target has no forward compatibility)
TARGET_CC = {"sm_90a": ((9, 0), "Hopper", "H100, H200, GH200"), "sm_100a": ((10, 0), "Blackwell", "B200, GB200")}


def available(target: str = "sm_90a") -> tuple[bool, str]:
    """(True, "NVIDIA H200, sm_90") when the GPU can run a kernel built for `target` (a package's launch record
    says which), else (False, one sentence saying why and what to do: no driver, a driver older than the toolkit
    needs, no device, a GPU of another architecture). Never raises; the device facts are cached."""
    global _available
    if _available is None:
        _available = _preflight()
    ok, facts = _available
    if not ok:
        return False, facts
    ver, count, name, cc = facts
    why = preflight_sentence(driver=ver, devices=count, name=name, cc=cc, target=target)
    return (True, f"{name}, sm_{cc[0]}{cc[1]}") if why is None else (False, why)


def _preflight() -> tuple[bool, Any]:
    """(False, the sentence) when nothing can launch, else (True, (driver version, devices, name, cc))."""
    try:
        _call("cuInit", 0)
    except CudaError as e:
        return False, preflight_sentence(init_error=str(e))
    except Exception as e:  # libcuda missing: cuda.pathfinder / the loader raise their own error types
        return False, preflight_sentence(no_driver=str(e).strip().splitlines()[0] if str(e).strip() else
                                         type(e).__name__)
    try:
        ver = int(_call("cuDriverGetVersion"))
        count = int(_call("cuDeviceGetCount"))
        if count < 1:
            return False, preflight_sentence(driver=(ver // 1000, (ver % 1000) // 10), devices=0)
        dev = _call("cuDeviceGet", 0)
        name = _device_name(dev)
        cc = _cc(dev)
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return False, preflight_sentence(init_error=msg)
    return True, ((ver // 1000, (ver % 1000) // 10), count, name, cc)


def preflight_sentence(*, no_driver: str | None = None, init_error: str | None = None,
                       driver: tuple[int, int] | None = None, devices: int = 1, name: str = "",
                       cc: tuple[int, int] | None = None, target: str = "sm_90a") -> str | None:
    """What stops a launch of a kernel built for `target`, as one sentence (pure: the facts in, None when nothing
    does)."""
    if no_driver is not None:
        return ("no NVIDIA driver (libcuda.so.1) was found on this machine: install the NVIDIA driver (r580 or "
                "newer), or build and test on the CPU (the Pallas backend runs in interpret mode)")
    if init_error is not None:
        return (f"the NVIDIA driver is installed but could not start ({init_error}); check `nvidia-smi` and "
                f"CUDA_VISIBLE_DEVICES")
    if driver is not None and driver < MIN_DRIVER:
        return (f"the NVIDIA driver supports CUDA {driver[0]}.{driver[1]}, but schedgen's kernels are built with "
                f"CUDA {MIN_DRIVER[0]}.{MIN_DRIVER[1]}; update the driver to r580 or newer")
    if devices < 1:
        return "no CUDA device is visible (check `nvidia-smi` and CUDA_VISIBLE_DEVICES)"
    want, arch, gpus = TARGET_CC[target]
    if cc is not None and cc != want:
        if target == "sm_90a":
            return (f"GPU 0 is an {name or 'NVIDIA GPU'} (sm_{cc[0]}{cc[1]}); schedgen's kernels are built for Hopper "
                    f"(sm_90a: H100, H200, GH200) and cannot run on it")
        other = next((t for t, (c, _, _) in TARGET_CC.items() if c == cc), None)
        fix = f": rebuild the spec with schedule.target: {other}" if other else ""
        return (f"GPU 0 is an {name or 'NVIDIA GPU'} (sm_{cc[0]}{cc[1]}), but this package's kernel is built for "
                f"{arch} ({target}: {gpus}) and cannot run on it{fix}")
    return None


def _device_name(dev: Any) -> str:
    raw = _call("cuDeviceGetName", 256, dev)
    return raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)


def _attr(dev: Any, attr: str) -> int:
    return int(_call("cuDeviceGetAttribute", getattr(cu.CUdevice_attribute, attr), dev))


def _cc(dev: Any) -> tuple[int, int]:
    return (_attr(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
            _attr(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"))


def ensure_context(device: int = 0) -> None:
    """Make the device's primary context current (the one torch/cupy/jax use). Idempotent and cheap."""
    ctx = _contexts.get(device)
    if ctx is None:
        try:
            _call("cuInit", 0)
        except CudaError:
            raise
        except Exception as e:  # libcuda missing: cuda.pathfinder raises its own error type
            raise CudaError("cuInit", None, str(e)) from e
        dev = _call("cuDeviceGet", device)
        ctx = _call("cuDevicePrimaryCtxRetain", dev)  # retained for the process lifetime
        _contexts[device] = ctx
        _context_ints[device] = int(ctx)
    get = _current_context()
    if get is not None:
        if get() == _context_ints[device]:
            return
    else:
        cur = _call("cuCtxGetCurrent")
        if cur is not None and int(cur) == int(ctx):
            return
    _call("cuCtxSetCurrent", ctx)


_context_ints: dict[int, int] = {}
_ctx_get: list = []


def _current_context() -> Any:
    """A function giving the calling thread's current context as an int (0: none) through libcuda's
    cuCtxGetCurrent by ctypes (ensure_context runs on every call: the cuda.bindings wrapper costs microseconds),
    or None where libcuda cannot be loaded that way."""
    if not _ctx_get:
        lib = _libcuda()
        f = getattr(lib, "cuCtxGetCurrent", None) if lib is not None else None
        get = None
        if f is not None:
            f.restype = ctypes.c_int
            f.argtypes = [ctypes.POINTER(ctypes.c_void_p)]

            def get() -> int:
                cur = ctypes.c_void_p()      # per call: threads share this function
                if f(ctypes.byref(cur)) != 0:
                    return -1                # an error: the caller makes the context current, which reports it
                return cur.value or 0
        _ctx_get.append(get)
    return _ctx_get[0]


def _current_device() -> Any:
    """The current context's device, making device 0's primary context current if none is."""
    if int(_call("cuCtxGetCurrent") or 0) == 0:
        ensure_context()
    return _call("cuCtxGetDevice")


def device_info() -> dict:
    """Properties of the current device (device 0 when no context is current). Needs a GPU."""
    dev = _current_device()
    ver = int(_call("cuDriverGetVersion"))
    return {
        "name": _device_name(dev),
        "cc": _cc(dev),
        "sm_count": _attr(dev, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        "max_smem_optin": _attr(dev, "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        "l2_bytes": _attr(dev, "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
        "driver_version": (ver // 1000, (ver % 1000) // 10),
    }


# ---------------------------------------------------------------------------------------------- modules

class Module:
    """A cubin, loaded lazily into the current context on first use; functions are cached per name."""

    def __init__(self, cubin: bytes):
        self.cubin = bytes(cubin)
        self._mods: dict[int, Any] = {}                       # context handle -> CUmodule
        self._funcs: dict[tuple[int, str], tuple[Any, int]] = {}  # (ctx, name) -> (CUfunction, smem set)

    def _module(self) -> tuple[int, Any]:
        _current_device()
        ctx = int(_call("cuCtxGetCurrent"))
        mod = self._mods.get(ctx)
        if mod is None:
            mod = _call("cuModuleLoadData", self.cubin)
            self._mods[ctx] = mod
        return ctx, mod

    def function(self, name: str, *, dynamic_smem: int = 0) -> Any:
        """cuModuleGetFunction; opts in to `dynamic_smem` bytes when above 48 KiB (checked against the device)."""
        if dynamic_smem < 0:
            raise ValueError(f"kernel {name}: dynamic_smem must be >= 0, got {dynamic_smem}")
        ctx, mod = self._module()
        func, smem_set = self._funcs.get((ctx, name), (None, 0))
        if func is None:
            func = _call("cuModuleGetFunction", mod, name.encode())
        if dynamic_smem > max(smem_set, STATIC_SMEM_LIMIT):
            dev = _call("cuCtxGetDevice")
            limit = _attr(dev, "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
            static = int(_call("cuFuncGetAttribute",
                               cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func))
            if dynamic_smem + static > limit:
                raise ValueError(
                    f"kernel {name}: needs {dynamic_smem} B dynamic + {static} B static shared memory, "
                    f"but {_device_name(dev)} allows at most {limit} B per block")
            _call("cuFuncSetAttribute", func,
                  cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_smem)
            smem_set = dynamic_smem
        self._funcs[(ctx, name)] = (func, smem_set)
        return func


# ---------------------------------------------------------------------------------------------- TMA descriptors

_DT = cu.CUtensorMapDataType
TMA_DTYPES: dict[str, Any] = {
    "bf16": _DT.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    "f16": _DT.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    "f32": _DT.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    "f8e4m3": _DT.CU_TENSOR_MAP_DATA_TYPE_UINT8,
    "f8e5m2": _DT.CU_TENSOR_MAP_DATA_TYPE_UINT8,
    "i32": _DT.CU_TENSOR_MAP_DATA_TYPE_INT32,
    "i64": _DT.CU_TENSOR_MAP_DATA_TYPE_INT64,
}
TMA_ITEMSIZE: dict[str, int] = {"bf16": 2, "f16": 2, "f32": 4, "f8e4m3": 1, "f8e5m2": 1, "i32": 4, "i64": 8}
_SWIZZLE = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}
_L2 = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}


@dataclass(frozen=True)
class TiledLayout:
    """Validated tensor-map arguments in the driver's innermost-first order."""
    dims: tuple[int, ...]      # rank entries
    strides: tuple[int, ...]   # rank - 1 entries (bytes), innermost stride omitted
    box: tuple[int, ...]       # rank entries


def validate_tiled(ptr: int, dtype: str, shape: Sequence[int], strides: Sequence[int], box: Sequence[int], *,  # noqa: C901
                   swizzle: int = 0, l2_promotion: int = 256) -> TiledLayout:
    """Check cuTensorMapEncodeTiled's rules (numpy order in) and convert to driver order. Pure; ValueError."""
    if dtype not in TMA_DTYPES:
        raise ValueError(f"tensor map: unknown dtype {dtype!r}; expected one of {sorted(TMA_DTYPES)}")
    item = TMA_ITEMSIZE[dtype]
    rank = len(shape)
    if not 1 <= rank <= 5:
        raise ValueError(f"tensor map: rank must be 1..5, got {rank} (shape {tuple(shape)})")
    if len(strides) != rank or len(box) != rank:
        raise ValueError(f"tensor map: shape, strides and box must have the same rank, got "
                         f"{len(shape)}, {len(strides)}, {len(box)}")
    if ptr % 16:
        raise ValueError(f"tensor map: global address {ptr:#x} is not 16-byte aligned")
    for i, d in enumerate(shape):
        if not 1 <= d <= 2**32:
            raise ValueError(f"tensor map: shape[{i}] = {d} must be in 1..2**32")
    if strides[-1] != item:
        raise ValueError(f"tensor map: innermost stride must equal the {dtype} itemsize ({item} B), "
                         f"got {strides[-1]} B (the innermost dimension must be contiguous)")
    for i, s in enumerate(strides[:-1]):
        if s <= 0 or s % 16:
            raise ValueError(f"tensor map: strides[{i}] = {s} B must be a positive multiple of 16 bytes")
        if s >= 2**40:
            raise ValueError(f"tensor map: strides[{i}] = {s} B must be < 2**40")
    for i, b in enumerate(box):
        if not 1 <= b <= 256:
            raise ValueError(f"tensor map: box[{i}] = {b} must be in 1..256")
    inner = box[-1] * item
    if inner % 16:
        raise ValueError(f"tensor map: box innermost extent {box[-1]} x {item} B = {inner} B "
                         f"must be a multiple of 16 bytes")
    if swizzle not in _SWIZZLE:
        raise ValueError(f"tensor map: swizzle must be one of 0, 32, 64, 128 (bytes), got {swizzle}")
    if swizzle and inner > swizzle:
        raise ValueError(f"tensor map: box innermost extent {inner} B exceeds the {swizzle}B swizzle span; "
                         f"use box[-1] <= {swizzle // item}")
    if l2_promotion not in _L2:
        raise ValueError(f"tensor map: l2_promotion must be one of 0, 64, 128, 256 (bytes), got {l2_promotion}")
    return TiledLayout(tuple(int(d) for d in reversed(shape)),
                       tuple(int(s) for s in reversed(strides[:-1])),
                       tuple(int(b) for b in reversed(box)))


def encode_tiled(ptr: int, dtype: str, shape: Sequence[int], strides: Sequence[int], box: Sequence[int], *,
                 swizzle: int = 0, oob_nan: bool = False, l2_promotion: int = 256) -> bytes:
    """cuTensorMapEncodeTiled for a numpy-order (outermost first) view; returns the 128 opaque bytes."""
    lay = validate_tiled(ptr, dtype, shape, strides, box, swizzle=swizzle, l2_promotion=l2_promotion)
    enums = tiled_enums(dtype, swizzle, oob_nan, l2_promotion)
    global _direct_checked
    direct = _direct_encoder()
    if direct is not None:
        got = _encode_direct(direct, ptr, lay, enums)
        if _direct_checked:
            return got
        # once per process: the direct call must give the bytes cuda.bindings gives, or it is not used again
        ref = _encode_bindings(ptr, lay, enums)
        _direct_checked = got == ref
        if not _direct_checked:
            _disable_direct()
        return ref
    return _encode_bindings(ptr, lay, enums)


def tiled_enums(dtype: str, swizzle: int, oob_nan: bool, l2_promotion: int) -> tuple:
    """(data type, interleave, swizzle, L2 promotion, OOB fill) enums of cuTensorMapEncodeTiled."""
    fill = cu.CUtensorMapFloatOOBfill
    return (TMA_DTYPES[dtype], cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{_SWIZZLE[swizzle]}"),
            getattr(cu.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{_L2[l2_promotion]}"),
            fill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA if oob_nan else fill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)


def _encode_bindings(ptr: int, lay: TiledLayout, enums: tuple) -> bytes:
    dt, interleave, swz, l2, oob = enums
    tmap = _call(
        "cuTensorMapEncodeTiled", dt, len(lay.dims), ptr,
        [cu.cuuint64_t(d) for d in lay.dims],
        [cu.cuuint64_t(s) for s in lay.strides],
        [cu.cuuint32_t(b) for b in lay.box],
        [cu.cuuint32_t(1)] * len(lay.dims),
        interleave, swz, l2, oob)
    return ctypes.string_at(tmap.getPtr(), 128)


# cuTensorMapEncodeTiled called through ctypes (a few microseconds cheaper a map than building cuda.bindings'
# argument objects): used once it has given the same bytes as cuda.bindings for the process's first map.
_direct: list = []
_direct_checked = False


def _direct_encoder() -> Any:
    if not _direct:
        lib = _libcuda()
        f = getattr(lib, "cuTensorMapEncodeTiled", None) if lib is not None else None
        if f is not None:
            c = ctypes
            f.restype = c.c_int
            f.argtypes = [c.c_void_p, c.c_int, c.c_uint32, c.c_void_p, c.POINTER(c.c_uint64),
                          c.POINTER(c.c_uint64), c.POINTER(c.c_uint32), c.POINTER(c.c_uint32), c.c_int, c.c_int,
                          c.c_int, c.c_int]
        _direct.append(f)
    return _direct[0]


def _disable_direct() -> None:
    _direct[:] = [None]


def _encode_direct(f: Any, ptr: int, lay: TiledLayout, enums: tuple) -> bytes:
    rank = len(lay.dims)
    buf = ctypes.create_string_buffer(128 + 64)
    addr = (ctypes.addressof(buf) + 63) // 64 * 64          # CUtensorMap is 64-byte aligned
    dims = (ctypes.c_uint64 * rank)(*lay.dims)
    strides = (ctypes.c_uint64 * max(rank - 1, 1))(*lay.strides)
    box = (ctypes.c_uint32 * rank)(*lay.box)
    ones = (ctypes.c_uint32 * rank)(*([1] * rank))
    dt, interleave, swz, l2, oob = (int(e) for e in enums)
    err = f(addr, dt, rank, ptr, dims, strides, box, ones, interleave, swz, l2, oob)
    if err != 0:
        raise CudaError("cuTensorMapEncodeTiled", cu.CUresult(err))
    return ctypes.string_at(addr, 128)


# ---------------------------------------------------------------------------------------------- launches

@dataclass(frozen=True)
class Arg:
    """One kernel argument laid out as raw little-endian bytes plus the alignment of its storage."""
    data: bytes
    align: int

    @staticmethod
    def ptr(p: int) -> "Arg":
        if not 0 <= int(p) < 2**64:
            raise ValueError(f"pointer argument out of range: {p}")
        return Arg(struct.pack("<Q", int(p)), 8)

    @staticmethod
    def i32(v: int) -> "Arg":
        if not -2**31 <= int(v) < 2**31:
            raise ValueError(f"i32 argument out of range: {v}")
        return Arg(struct.pack("<i", int(v)), 4)

    @staticmethod
    def u32(v: int) -> "Arg":
        if not 0 <= int(v) < 2**32:
            raise ValueError(f"u32 argument out of range: {v}")
        return Arg(struct.pack("<I", int(v)), 4)

    @staticmethod
    def f32(v: float) -> "Arg":
        return Arg(struct.pack("<f", float(v)), 4)

    @staticmethod
    def tensor_map(b: bytes) -> "Arg":
        if len(b) != 128:
            raise ValueError(f"tensor map argument must be exactly 128 bytes, got {len(b)}")
        return Arg(bytes(b), 64)


Dim3 = tuple[int, int, int]


def validate_launch(grid: Sequence[int], block: Sequence[int], smem: int,
                    cluster: Sequence[int] | None = None) -> tuple[Dim3, Dim3, Dim3 | None]:
    """Check launch geometry (pure). Returns (grid, block, cluster or None when trivial); ValueError otherwise."""
    def dim3(v: Sequence[int], what: str) -> Dim3:
        t = tuple(v)
        if len(t) != 3 or not all(isinstance(x, (int, np.integer)) and x >= 1 for x in t):
            raise ValueError(f"{what} must be three positive ints, got {v!r}")
        return int(t[0]), int(t[1]), int(t[2])

    g, b = dim3(grid, "grid"), dim3(block, "block")
    if g[0] >= 2**31 or g[1] > 65535 or g[2] > 65535:
        raise ValueError(f"grid {g} exceeds the limits (2**31-1, 65535, 65535)")
    if b[0] > 1024 or b[1] > 1024 or b[2] > 64:
        raise ValueError(f"block {b} exceeds the per-dimension limits (1024, 1024, 64)")
    if b[0] * b[1] * b[2] > 1024:
        raise ValueError(f"block {b} has {b[0] * b[1] * b[2]} threads; at most 1024 per block")
    if smem < 0:
        raise ValueError(f"smem must be >= 0, got {smem}")
    if cluster is None:
        return g, b, None
    c = dim3(cluster, "cluster")
    if c == (1, 1, 1):
        return g, b, None
    if any(gi % ci for gi, ci in zip(g, c)):
        raise ValueError(f"grid {g} is not divisible by cluster {c}")
    if c[0] * c[1] * c[2] > 16:
        raise ValueError(f"cluster {c} has {c[0] * c[1] * c[2]} blocks; Hopper allows at most 16 (8 portable)")
    return g, b, c


def launch(func: Any, *, grid: tuple[int, int, int], block: tuple[int, int, int], smem: int, args: Sequence[Arg],
           stream: int = 0, cluster: tuple[int, int, int] | None = None) -> None:
    """One launch of `func` over `args`: a LaunchConfig and Params built for it (the multi-device host's path; the
    single-GPU call path keeps both across calls). Geometry is validated before the driver is touched."""
    LaunchConfig(func, grid=grid, block=block, smem=smem, cluster=cluster).launch(Params(args), int(stream))


class Params:
    """Kernel parameters packed once into one aligned buffer, with the `void*[n]` array the driver reads.

    A later call rewrites only the arguments that changed (`set`): the driver copies the parameters at each launch
    (and into the graph node when a stream is capturing), so rewriting them after a launch is safe."""

    def __init__(self, args: Sequence[Arg]):
        offsets, end = [], 0
        for a in args:
            if not isinstance(a, Arg):
                raise TypeError(f"kernel arguments must be Arg instances, got {type(a).__name__}")
            end = (end + a.align - 1) // a.align * a.align
            offsets.append(end)
            end += len(a.data)
        self._buf = ctypes.create_string_buffer(end + 64)
        base = (ctypes.addressof(self._buf) + 63) // 64 * 64
        self._addrs = [base + off for off in offsets]
        self._sizes = [len(a.data) for a in args]
        self._aligns = [a.align for a in args]
        self._array = (ctypes.c_void_p * max(len(args), 1))(*self._addrs)
        self.address = ctypes.addressof(self._array) if args else 0
        self.as_void_p = ctypes.c_void_p(self.address or None)   # the address as the direct launch passes it
        for i, a in enumerate(args):
            ctypes.memmove(self._addrs[i], a.data, len(a.data))

    def __len__(self) -> int:
        return len(self._addrs)

    def set(self, i: int, a: Arg) -> None:
        if len(a.data) != self._sizes[i]:
            raise ValueError(f"kernel argument {i}: {len(a.data)} bytes where {self._sizes[i]} were packed")
        ctypes.memmove(self._addrs[i], a.data, len(a.data))

    def get(self, i: int) -> Arg:
        return Arg(ctypes.string_at(self._addrs[i], self._sizes[i]), self._aligns[i])


class LaunchConfig:
    """A CUlaunchConfig built once (geometry validated, cluster attribute set); `launch` sets only the stream."""

    def __init__(self, func: Any, *, grid: Sequence[int], block: Sequence[int], smem: int,
                 cluster: Sequence[int] | None = None):
        g, b, c = validate_launch(grid, block, smem, cluster)
        self.func, self.grid, self.block, self.smem, self.cluster = func, g, b, int(smem), c
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = g
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = b
        cfg.sharedMemBytes = int(smem)
        if c is not None:
            allow_nonportable_cluster(func, c)
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = c
            cfg.attrs = [attr]
            cfg.numAttrs = 1
        else:
            cfg.numAttrs = 0
        self._cfg = cfg
        self._stream = -1
        self._direct_head: tuple | None = None   # the ctypes launch's leading arguments: function, grid, block, smem

    def launch(self, params: Params, stream: int) -> None:
        """Launch over packed parameters on `stream` (an int handle): a launch without a cluster calls libcuda's
        cuLaunchKernel through ctypes (a few microseconds less per call than the cuda.bindings wrapper), else
        cuLaunchKernelEx through cuda.bindings. The ctypes call declares no argument types: the pointers go as
        c_void_p objects made once (the function, the parameters) or once per stream, the geometry as plain ints,
        so no argument is converted per call."""
        if self.cluster is None:
            direct = _direct_launcher()
            if direct is not None:
                head = self._direct_head
                if head is None:
                    head = self._direct_head = (ctypes.c_void_p(int(self.func)), *self.grid, *self.block, self.smem)
                err = direct(*head, _void_p(stream), params.as_void_p, None)
                if err != 0:
                    raise CudaError("cuLaunchKernel", cu.CUresult(err))
                return
        cfg = self._cfg
        if stream != self._stream:
            cfg.hStream = _cu_stream(stream)
            self._stream = stream
        err = _launch_ex(cfg, self.func, params.address, 0)
        if isinstance(err, tuple):
            err = err[0]
        if err != _SUCCESS:
            raise CudaError("cuLaunchKernelEx", err)


_SUCCESS = cu.CUresult.CUDA_SUCCESS
_launch_ex = cu.cuLaunchKernelEx
_direct_launch: list = []


def _direct_launcher() -> Any:
    """libcuda's cuLaunchKernel through ctypes, or None where it cannot be loaded. No argument types are declared
    (LaunchConfig.launch passes each argument in its C form: c_void_p pointers, ints below 2**31 for the unsigned
    geometry); the result is an int. SCHEDGEN_BINDINGS_LAUNCH=1 keeps every launch on cuda.bindings."""
    if not _direct_launch:
        f = None
        if not os.environ.get("SCHEDGEN_BINDINGS_LAUNCH"):
            lib = _libcuda()
            f = getattr(lib, "cuLaunchKernel", None) if lib is not None else None
            if f is not None:
                f.restype = ctypes.c_int
        _direct_launch.append(f)
    return _direct_launch[0]


_libcuda_handle: list = []


def _libcuda() -> Any:
    """libcuda.so.1 through ctypes (schedgen's own CDLL, shared by its ctypes calls: the function objects' argument
    settings are ours), or None."""
    if not _libcuda_handle:
        try:
            _libcuda_handle.append(ctypes.CDLL("libcuda.so.1"))
        except OSError:
            _libcuda_handle.append(None)
    return _libcuda_handle[0]


_void_ps: dict[int, Any] = {}


def _void_p(handle: int) -> Any:
    """A stream handle as a c_void_p, made once per handle (a bounded cache: handles are few)."""
    v = _void_ps.get(handle)
    if v is None:
        if len(_void_ps) > 1024:
            _void_ps.clear()
        v = _void_ps[handle] = ctypes.c_void_p(int(handle) or None)
    return v
_streams: dict[int, Any] = {}


def _cu_stream(handle: int) -> Any:
    s = _streams.get(handle)
    if s is None:
        if len(_streams) > 1024:
            _streams.clear()
        s = _streams[handle] = cu.CUstream(int(handle))
    return s


# ---------------------------------------------------------------------------------------------- streams / capture

class CaptureError(RuntimeError):
    """An operation that is illegal while a stream captures a CUDA graph was asked for."""


STREAM_LIMIT = 1 << 64   # a CUstream is a pointer: what the driver takes is below this


def stream_handle(stream: Any) -> int:
    """The CUstream handle (an int) of `stream`: an int, an object with the `__cuda_stream__` protocol (returns
    (version, handle)), a torch.cuda.Stream (`.cuda_stream`), a cupy Stream (`.ptr`) or a cuda.bindings CUstream;
    TypeError for anything else."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        if stream < 0:
            raise TypeError(f"stream: a stream handle is >= 0, got {shorten_int(stream)}")
        if stream >= STREAM_LIMIT:
            raise TypeError(f"stream: a stream handle is below 2**64 (a CUstream pointer), got {shorten_int(stream)}")
        return int(stream)
    proto = getattr(type(stream), "__cuda_stream__", None)
    if proto is not None:
        got = stream.__cuda_stream__
        got = got() if callable(got) else got
        try:
            handle = operator.index(got[1]) if isinstance(got, tuple) and len(got) == 2 else None
        except TypeError:
            handle = None
        if handle is None or isinstance(got[1], bool):
            raise TypeError(f"stream: {type(stream).__name__}.__cuda_stream__() must return (version, handle), "
                            f"got {shorten(got)}")
        return stream_handle(handle)
    for attr in ("cuda_stream", "ptr"):      # torch.cuda.Stream, cupy.cuda.Stream
        value = getattr(stream, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return stream_handle(value)
    if isinstance(stream, cu.CUstream):
        return int(stream)
    raise TypeError(f"stream: expected an int handle, a torch.cuda.Stream, a cupy Stream or an object with "
                    f"__cuda_stream__, got {type(stream).__name__}")


_CAPTURING = None


def is_capturing(stream: int) -> bool:
    """Whether `stream` is capturing a CUDA graph (cuStreamIsCapturing). The legacy stream counts as capturing while
    another stream captures in global mode (the driver says CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: work on it would
    invalidate that capture)."""
    global _CAPTURING
    if _CAPTURING is None:
        _CAPTURING = cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
    err, status = cu.cuStreamIsCapturing(_cu_stream(stream))
    if err == cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
        return True
    if err != _SUCCESS:
        raise CudaError("cuStreamIsCapturing", err)
    return status != _CAPTURING


# ---------------------------------------------------------------------------------------------- tile counters

COUNTER_SLOT = 16       # bytes between two counters (each COUNTER_BYTES = 8, 16-byte aligned)
COUNTER_SLOTS = 4096    # counters per pool chunk (64 KiB)


class CounterPool:
    """The tile counters of dynamic persistent grids on one device: allocated and zeroed once (outside any graph
    capture), then handed out with no allocation, copy or synchronization.

    Why this is correct: every launch's last CTA re-zeroes its counter, so a counter is zero again when the next
    launch that uses it starts, provided that no two launches use one counter at the same time. Eager launches take
    the counter of their stream (launches on one stream run in order, whatever kernel they are; two streams get two
    counters). A launch captured into a CUDA graph takes a counter of its own, never given to anything else: the
    graph node keeps that pointer for every replay, and replays of one executable graph run one after the other."""

    def __init__(self, device: int):
        self.device = device
        self._chunks: list[Any] = []
        self._free: list[int] = []
        self._by_stream: dict[int, int] = {}
        self._grow()

    def _grow(self) -> None:
        buf = Buffer(COUNTER_SLOT * COUNTER_SLOTS, self.device)
        buf.upload(np.zeros(COUNTER_SLOT * COUNTER_SLOTS // 4, np.uint32))
        self._chunks.append(buf)
        self._free.extend(reversed([buf.ptr + COUNTER_SLOT * i for i in range(COUNTER_SLOTS)]))

    @property
    def allocations(self) -> int:
        return len(self._chunks)

    def for_stream(self, stream: int) -> int:
        """The counter of eager launches on `stream` (never called while it captures)."""
        ptr = self._by_stream.get(stream)
        if ptr is None:
            if not self._free:
                self._grow()
            ptr = self._by_stream[stream] = self._free.pop()
        return ptr

    def for_graph(self, stream: int, who: str) -> int:
        """A counter owned by one captured launch for the life of the process."""
        if not self._free:
            raise CaptureError(f"{who}: all {len(self._chunks) * COUNTER_SLOTS} tile counters of cuda:{self.device} "
                               f"are held by captured graphs, and more cannot be allocated while stream {stream:#x} "
                               f"captures; call the kernel once outside capture first (that grows the pool)")
        return self._free.pop()


_counter_pools: dict[int, CounterPool] = {}


def counter_pool(device: int, *, stream: int = 0, who: str = "schedgen") -> CounterPool:
    """The device's counter pool, allocated on first use; CaptureError when that first use is inside a capture."""
    pool = _counter_pools.get(device)
    if pool is None:
        if is_capturing(stream):
            raise CaptureError(f"{who}: the first launch of a dynamic-grid kernel on cuda:{device} allocates its "
                               f"tile counters, which is illegal while stream {stream:#x} captures a CUDA graph; "
                               f"call the kernel once before capturing (a warm-up call, as torch.cuda.graph asks)")
        pool = _counter_pools[device] = CounterPool(device)
    return pool


# ---------------------------------------------------------------------------------------------- workspaces

# A kernel's "workspace" argument (plan/launch.py): scratch memory zeroed before each launch. A torch call takes it
# from torch's caching allocator (runtime/kernel.py, Kernel._torch_workspaces; zeroed by memset0 on the launch's
# stream), so that torch's memory accounting and CUDA graphs see it. Every other caller (raw cupy, numba, DLPack or
# numpy arrays, the pointer launchers) gets it from the pool below: allocated, zeroed and freed in stream order on
# the launch's stream (cuMemAllocFromPoolAsync, cuMemsetD32Async, the launch, cuMemFreeAsync), so eager launches
# reuse the pool's memory with no device synchronization (two streams never share a buffer), and under CUDA-graph
# capture the three calls become the graph's allocation, memset and free nodes (the allocation is the graph's own,
# zeroed again at every replay). The pool keeps what it holds (release threshold: all), so steady-state eager calls
# map no memory.
_workspace_pools: dict[int, Any] = {}


def workspace_pool(device: int, *, stream: int = 0, who: str = "schedgen") -> Any:
    """The device's workspace memory pool, created on first use; CaptureError when that first use is inside a
    capture (a pool is made outside any graph, by a warm-up call)."""
    pool = _workspace_pools.get(device)
    if pool is None:
        if is_capturing(stream):
            raise CaptureError(f"{who}: the first launch of a kernel with a workspace on cuda:{device} creates the "
                               f"workspace memory pool, which is illegal while stream {stream:#x} captures a CUDA "
                               f"graph; call the kernel once before capturing (a warm-up call, as torch.cuda.graph "
                               f"asks)")
        props = cu.CUmemPoolProps()
        props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = int(device)
        pool = _call("cuMemPoolCreate", props)
        _call("cuMemPoolSetAttribute", pool, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
              cu.cuuint64_t(2 ** 64 - 1))
        _workspace_pools[device] = pool
    return pool


def workspace_alloc(pool: Any, nbytes: int, stream: int, zero: int | None = None) -> int:
    """`nbytes` (a multiple of 4) from `pool`, its first `zero` bytes (default all) zeroed, both ordered on `stream`
    (capturable: allocation and memset nodes)."""
    s = _cu_stream(stream)
    ptr = int(_call("cuMemAllocFromPoolAsync", int(nbytes), pool, s))
    try:
        _call("cuMemsetD32Async", ptr, 0, int(nbytes if zero is None else zero) // 4, s)
    except CudaError:
        cu.cuMemFreeAsync(ptr, s)
        raise
    return ptr


def workspace_free(ptr: int, stream: int) -> None:
    """Give a workspace back to its pool after the work queued on `stream` (capturable: a free node)."""
    _call("cuMemFreeAsync", ptr, _cu_stream(stream))


def memset0(ptr: int, nbytes: int, stream: int) -> None:
    """Zero `nbytes` (a multiple of 4) at `ptr`, ordered on `stream` (capturable: a memset node): a workspace the
    caller's allocator gave (torch's: runtime/kernel.py, Kernel._torch_workspaces)."""
    if nbytes:
        _call("cuMemsetD32Async", ptr, 0, int(nbytes) // 4, _cu_stream(stream))


def allow_nonportable_cluster(func: Any, cluster: Sequence[int]) -> None:
    """A cluster of more than 8 CTAs (Hopper allows 16) needs the function's non-portable attribute, both to launch
    and to ask the occupancy of (without it cuOccupancyMaxActiveClusters refuses the cluster size)."""
    if int(np.prod(list(cluster))) > 8:
        _call("cuFuncSetAttribute", func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
              1)


def max_active_clusters(func: Any, *, block: tuple[int, int, int], smem: int, cluster: tuple[int, int, int]) -> int:
    """How many clusters of this shape the current GPU holds at once (cuOccupancyMaxActiveClusters).

    A persistent grid larger than this runs its last clusters in a second wave, so the runtime sizes it here."""
    allow_nonportable_cluster(func, cluster)
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = int(cluster[0]) * 1024, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
    cfg.sharedMemBytes = int(smem)
    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
    cfg.attrs = [attr]
    cfg.numAttrs = 1
    return int(_call("cuOccupancyMaxActiveClusters", func, cfg))


# ---------------------------------------------------------------------------------------------- memory / timing

class Buffer:
    """An owned device allocation in `device`'s primary context (made current)."""

    # Bound at class creation so __del__ still works while module globals are torn down at exit.
    _finalizing = staticmethod(sys.is_finalizing)
    _mem_free = staticmethod(cu.cuMemFree)

    def __init__(self, nbytes: int, device: int = 0):
        if nbytes < 0:
            raise ValueError(f"Buffer size must be >= 0, got {nbytes}")
        self.ptr = 0
        self.nbytes = int(nbytes)
        ensure_context(device)
        self.ptr = int(_call("cuMemAlloc", max(self.nbytes, 1)))

    def _host(self, host: np.ndarray, what: str) -> int:
        if not isinstance(host, np.ndarray) or not host.flags.c_contiguous:
            raise ValueError(f"{what}: host array must be a C-contiguous numpy array")
        if host.nbytes > self.nbytes:
            raise ValueError(f"{what}: host array has {host.nbytes} B, buffer only {self.nbytes} B")
        return host.ctypes.data

    def upload(self, host: np.ndarray) -> None:
        """Copy a C-contiguous host array to the start of the buffer (synchronous)."""
        src = self._host(host, "upload")
        if host.nbytes:
            _call("cuMemcpyHtoD", self.ptr, src, host.nbytes)

    def download(self, host: np.ndarray) -> None:
        """Copy the start of the buffer into a writable C-contiguous host array (synchronous)."""
        if isinstance(host, np.ndarray) and not host.flags.writeable:
            raise ValueError("download: host array is read-only")
        dst = self._host(host, "download")
        if host.nbytes:
            _call("cuMemcpyDtoH", dst, self.ptr, host.nbytes)

    def fill_bytes(self, byte: int) -> None:
        """cuMemsetD8 over the whole buffer (0xFF poisons floats with NaN)."""
        if not 0 <= byte <= 255:
            raise ValueError(f"fill byte must be 0..255, got {byte}")
        _call("cuMemsetD8", self.ptr, byte, self.nbytes)

    def free(self) -> None:
        """Release the allocation now (also done by __del__)."""
        ptr, self.ptr = self.ptr, 0
        try:
            if ptr and not self._finalizing():
                self._mem_free(ptr)
        except Exception:  # never raise from cleanup
            pass

    def __del__(self) -> None:
        if getattr(self, "ptr", 0):
            self.free()

    def __repr__(self) -> str:
        return f"Buffer(ptr={self.ptr:#x}, nbytes={self.nbytes})"


def synchronize(stream: int = 0) -> None:
    """Wait for `stream`; stream 0 synchronizes the whole context."""
    if stream:
        _call("cuStreamSynchronize", cu.CUstream(int(stream)))
    else:
        _call("cuCtxSynchronize")


def time_ms(fn: Callable[[], None], *, warmup: int, iters: int, stream: int = 0) -> list[float]:
    """Run fn `warmup` times, then time `iters` calls with CUDA events on `stream`; per-call milliseconds."""
    if iters < 1 or warmup < 0:
        raise ValueError(f"time_ms: need iters >= 1 and warmup >= 0, got iters={iters}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    synchronize(stream)
    events = [(_call("cuEventCreate", 0), _call("cuEventCreate", 0)) for _ in range(iters)]
    try:
        s = cu.CUstream(int(stream))
        for start, end in events:
            _call("cuEventRecord", start, s)
            fn()
            _call("cuEventRecord", end, s)
        _call("cuEventSynchronize", events[-1][1])
        return [float(_call("cuEventElapsedTime", a, b)) for a, b in events]
    finally:
        for pair in events:
            for e in pair:
                cu.cuEventDestroy(e)


def copy_d2d(dst: int, src: int, nbytes: int, stream: int = 0) -> None:
    """cuMemcpyDtoDAsync on `stream`."""
    if nbytes:
        _call("cuMemcpyDtoDAsync", dst, src, nbytes, cu.CUstream(int(stream)))
