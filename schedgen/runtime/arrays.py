"""Accept numpy arrays and device arrays from any framework (torch, cupy, jax, CUDA Array Interface, DLPack).

Frameworks are imported lazily, only when one of their objects is passed. Errors are `ArgumentError`s whose
message starts with the kernel argument's name.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Sequence

import ml_dtypes
import numpy as np

__all__ = ["DTYPES", "dtype_name", "ArgumentError", "DeviceView", "classify", "describe", "device_view", "check",
           "same_device", "empty_like_kind", "host_view", "check_meta", "torch_view", "torch_dtype_name",
           "kind_of"]

DTYPES: dict[str, np.dtype] = {
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f8e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "i32": np.dtype(np.int32),     # index operands (grouped_matmul's group offsets, rowwise class indices)
    "i64": np.dtype(np.int64),     # rowwise class indices (cross-entropy's targets, torch's long)
}
_TORCH = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
          "i32": "int32", "i64": "int64"}
_TORCH_REV = {f"torch.{v}": k for k, v in _TORCH.items()}
# DLPack (code, bits): kDLInt=0, kDLFloat=2, kDLBfloat=4, kDLFloat8_e4m3fn=10, kDLFloat8_e5m2=12 (lanes must be 1).
_DLPACK = {(2, 16): "f16", (2, 32): "f32", (4, 16): "bf16", (10, 8): "f8e4m3", (12, 8): "f8e5m2", (0, 32): "i32",
           (0, 64): "i64"}
_KDLCPU, _KDLCUDA = 1, 2
_DEVICE_NAMES = {1: "the CPU", 2: "CUDA", 3: "CUDA host (pinned) memory", 13: "CUDA managed memory", 10: "ROCm"}
ACCEPTED = ("numpy arrays, torch tensors, cupy arrays, jax arrays, or objects exposing "
            "__cuda_array_interface__ or __dlpack__")


class ArgumentError(TypeError):
    """A user-facing problem with one kernel argument; the message starts with the argument's name."""


def dtype_name(dt: Any) -> str | None:
    """Our dtype name for a numpy dtype/type, torch dtype, CAI typestr, DLPack (code, bits) or our own name."""
    if isinstance(dt, str) and dt in DTYPES:
        return dt
    if type(dt).__module__ == "torch":
        return _TORCH_REV.get(str(dt))
    if isinstance(dt, tuple):
        return _DLPACK.get(tuple(int(x) for x in dt[:2])) if len(dt) in (2, 3) and (len(dt) == 2 or dt[2] == 1) \
            else None
    try:
        npdt = np.dtype(dt)
    except Exception:
        return None
    for name, ours in DTYPES.items():
        if npdt == ours:
            return name
    return None


@dataclass(frozen=True)
class DeviceView:
    """Where an array lives and how it is laid out. strides are in bytes; obj keeps the producer alive."""
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    device: int   # CUDA ordinal; -1 for host memory or when unknown
    kind: str     # "numpy" | "torch" | "cupy" | "jax" | "cuda_array_interface" | "dlpack"
    obj: object


def _module_root(obj: Any) -> str:
    return type(obj).__module__.split(".", 1)[0]


_KIND_OF_TYPE: dict[type, str] = {}   # types whose kind follows from the type alone (not from instance attributes)
_TORCH_DTYPES: dict[Any, str | None] = {}


def kind_of(obj: Any) -> str | None:
    """classify(obj), cached per type, or None for what classify refuses (the caller's checks then say why)."""
    kind = _KIND_OF_TYPE.get(type(obj))
    if kind is None:
        try:
            kind = classify(obj)
        except ArgumentError:
            return None
    return kind


def torch_dtype_name(dt: Any) -> str | None:
    """Our dtype name for a torch dtype, read from `tensor.dtype` (never the array-interface typestr: older torch
    reports bf16 there as '<f2'); cached per dtype object."""
    try:
        return _TORCH_DTYPES[dt]
    except KeyError:
        name = _TORCH_DTYPES[dt] = _TORCH_REV.get(str(dt))
        return name


def classify(obj: Any, name: str = "argument") -> str:
    """Which kind of array `obj` is; ArgumentError for anything unsupported. Cached per type for the framework
    kinds, whose test reads only the type."""
    kind = _KIND_OF_TYPE.get(type(obj))
    if kind is not None:
        return kind
    kind = _classify(obj, name)
    if kind in ("numpy", "torch", "cupy", "jax"):
        _KIND_OF_TYPE[type(obj)] = kind
    return kind


def _classify(obj: Any, name: str) -> str:
    if isinstance(obj, np.ndarray):
        return "numpy"
    root = _module_root(obj)
    if root == "torch" and hasattr(type(obj), "data_ptr"):
        return "torch"
    if root == "cupy" and hasattr(type(obj), "data"):
        return "cupy"
    if root in ("jax", "jaxlib") and hasattr(type(obj), "__dlpack__"):
        return "jax"
    if _has_cai(obj):
        return "cuda_array_interface"
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return "dlpack"
    raise ArgumentError(f"{name}: unsupported argument of type {type(obj).__name__}; expected {ACCEPTED}")


def _has_cai(obj: Any) -> bool:
    try:
        return hasattr(obj, "__cuda_array_interface__")
    except Exception:  # e.g. torch CPU tensors raise on access
        return False


def _cai(obj: Any, name: str) -> tuple[int, tuple[int, ...], tuple[int, ...] | None, str | None, str]:
    """Parse __cuda_array_interface__ -> (ptr, shape, byte strides or None, dtype name or None, typestr)."""
    cai = obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise ArgumentError(f"{name}: __cuda_array_interface__ is not a dict")
    try:
        shape = tuple(int(d) for d in cai["shape"])
        typestr = str(cai["typestr"])
        ptr = int(cai["data"][0] or 0)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ArgumentError(f"{name}: malformed __cuda_array_interface__ ({e})") from None
    if cai.get("mask") is not None:
        raise ArgumentError(f"{name}: masked arrays (__cuda_array_interface__ 'mask') are not supported")
    strides = cai.get("strides")
    return ptr, shape, (tuple(int(s) for s in strides) if strides is not None else None), dtype_name(typestr), typestr


# ---------------------------------------------------------------------------------------------- DLPack via ctypes

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_capi = ctypes.pythonapi
_capi.PyCapsule_IsValid.restype = ctypes.c_int
_capi.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass(frozen=True)
class _DLInfo:
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None   # bytes; None = C-contiguous
    dtype: tuple[int, int, int]       # (code, bits, lanes)
    device: tuple[int, int]           # (device_type, device_id)


def _read_dlpack(capsule: Any, name: str) -> _DLInfo:
    """Read a DLPack capsule without consuming it: the capsule must stay referenced while the data is used."""
    if _capi.PyCapsule_IsValid(capsule, b"dltensor"):
        t = _DLManagedTensor.from_address(_capi.PyCapsule_GetPointer(capsule, b"dltensor")).dl_tensor
    elif _capi.PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        t = _DLManagedTensorVersioned.from_address(
            _capi.PyCapsule_GetPointer(capsule, b"dltensor_versioned")).dl_tensor
    else:
        raise ArgumentError(f"{name}: __dlpack__() did not return an unused DLPack capsule")
    nd = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(nd))
    bits, lanes = int(t.dtype.bits), int(t.dtype.lanes)
    itemsize = (bits * lanes + 7) // 8
    strides = tuple(int(t.strides[i]) * itemsize for i in range(nd)) if t.strides else None
    return _DLInfo(int(t.data or 0) + int(t.byte_offset), shape, strides, (int(t.dtype.code), bits, lanes),
                   (int(t.device.device_type), int(t.device.device_id)))


def _dlpack_device(obj: Any, name: str) -> tuple[int, int]:
    try:
        dev = obj.__dlpack_device__()
        return int(dev[0]), int(dev[1])
    except Exception as e:
        raise ArgumentError(f"{name}: __dlpack_device__() failed: {e}") from None


def _dlpack_capsule(obj: Any, name: str) -> Any:
    try:
        return obj.__dlpack__(stream=None)
    except TypeError:
        pass
    except Exception as e:
        raise ArgumentError(f"{name}: __dlpack__() failed: {e}") from None
    try:
        return obj.__dlpack__()
    except Exception as e:
        raise ArgumentError(f"{name}: __dlpack__() failed: {e}") from None


def _where(devtype: int) -> str:
    return _DEVICE_NAMES.get(devtype, f"DLPack device type {devtype}")


# ---------------------------------------------------------------------------------------------- describe / view

def _dl_dtype_str(dt: tuple[int, int, int]) -> str:
    return f"DLPack dtype (code={dt[0]}, bits={dt[1]}, lanes={dt[2]})"


def describe(obj: Any, name: str) -> tuple[str, tuple[int, ...], str]:
    """(kind, shape, dtype name) without touching the GPU; unknown dtypes are reported by their own name."""
    kind = classify(obj, name)
    if kind == "numpy":
        return kind, tuple(obj.shape), dtype_name(obj.dtype) or str(obj.dtype)
    if kind == "torch":
        return kind, tuple(int(d) for d in obj.shape), torch_dtype_name(obj.dtype) or str(obj.dtype)
    if kind in ("cupy", "jax"):
        return kind, tuple(int(d) for d in obj.shape), dtype_name(obj.dtype) or str(obj.dtype)
    if kind == "cuda_array_interface":
        _, shape, _, dt, typestr = _cai(obj, name)
        if dt is None and hasattr(obj, "__dlpack__"):
            info = _read_dlpack(_dlpack_capsule(obj, name), name)
            return kind, info.shape, dtype_name(info.dtype) or _dl_dtype_str(info.dtype)
        return kind, shape, dt or f"typestr {typestr!r}"
    info = _read_dlpack(_dlpack_capsule(obj, name), name)
    return kind, info.shape, dtype_name(info.dtype) or _dl_dtype_str(info.dtype)


def host_view(arr: np.ndarray, name: str) -> DeviceView:
    """A DeviceView describing a numpy array in host memory (device -1); used by check()."""
    return DeviceView(int(arr.ctypes.data), tuple(arr.shape), tuple(arr.strides),
                      dtype_name(arr.dtype) or str(arr.dtype), -1, "numpy", arr)


def _c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    out, acc = [], itemsize
    for d in reversed(shape):
        out.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(out))


def device_view(obj: Any, name: str) -> DeviceView:
    """Pointer, shape, byte strides, dtype and device of a device array; the view keeps its producer alive."""
    if isinstance(obj, DeviceView):
        return obj
    kind = classify(obj, name)
    if kind == "numpy":
        raise ArgumentError(f"{name}: lives on the CPU (numpy); copy it to the GPU first "
                            f"(schedgen.runtime.driver.Buffer.upload) or pass a device array")
    if kind == "torch":
        return torch_view(obj, name)
    dev_type, dev_id = _dlpack_device(obj, name) if hasattr(obj, "__dlpack_device__") else (_KDLCUDA, -1)
    if dev_type != _KDLCUDA:
        raise ArgumentError(f"{name}: lives on {_where(dev_type)} ({kind}); move it to a CUDA device first")
    if _has_cai(obj):
        ptr, shape, strides, dt, typestr = _cai(obj, name)
        if dt is not None:
            if strides is None:
                strides = _c_strides(shape, DTYPES[dt].itemsize)
            if dev_id < 0:
                dev_id = _pointer_device(ptr)
            return DeviceView(ptr, shape, strides, dt, dev_id, kind, obj)
        if not hasattr(obj, "__dlpack__"):
            raise ArgumentError(f"{name}: unsupported dtype (__cuda_array_interface__ typestr {typestr!r}); "
                                f"expected one of {', '.join(DTYPES)}")
    if not hasattr(obj, "__dlpack__"):
        raise ArgumentError(f"{name}: unsupported argument of type {type(obj).__name__}; expected {ACCEPTED}")
    capsule = _dlpack_capsule(obj, name)
    info = _read_dlpack(capsule, name)
    if info.device[0] != _KDLCUDA:
        raise ArgumentError(f"{name}: lives on {_where(info.device[0])} ({kind}); move it to a CUDA device first")
    dt = dtype_name(info.dtype)
    if dt is None:
        raise ArgumentError(f"{name}: unsupported {_dl_dtype_str(info.dtype)}; expected one of {', '.join(DTYPES)}")
    strides = info.strides if info.strides is not None else _c_strides(info.shape, DTYPES[dt].itemsize)
    return DeviceView(info.ptr, info.shape, strides, dt, info.device[1], kind, (obj, capsule))


def torch_view(t: Any, name: str) -> DeviceView:
    """A torch tensor read through its own attributes (data_ptr(), shape, stride(), dtype, device): no
    __cuda_array_interface__ or __dlpack__ round trip, and bf16 read as bf16."""
    dev = t.device
    if dev.type != "cuda":
        where = "the CPU" if dev.type == "cpu" else f"the {dev.type} device"
        raise ArgumentError(f"{name}: lives on {where} (torch); move it to a CUDA device first")
    dt = torch_dtype_name(t.dtype)
    if dt is None:
        raise ArgumentError(f"{name}: unsupported dtype {_pretty_dtype(str(t.dtype))}; expected one of "
                            f"{', '.join(DTYPES)}")
    item = DTYPES[dt].itemsize
    index = dev.index
    return DeviceView(int(t.data_ptr()), tuple(int(d) for d in t.shape), tuple(int(s) * item for s in t.stride()),
                      dt, -1 if index is None else int(index), "torch", t)


def _pointer_device(ptr: int) -> int:
    """CUDA ordinal owning `ptr` (driver query); -1 when it cannot be determined."""
    try:
        from cuda.bindings import driver as cu
        err, ordinal = cu.cuPointerGetAttribute(
            cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        return int(ordinal) if err == cu.CUresult.CUDA_SUCCESS else -1
    except Exception:
        return -1


# ---------------------------------------------------------------------------------------------- checks

_NP_CONVERT = {"bf16": "ml_dtypes.bfloat16", "f16": "np.float16", "f32": "np.float32",
               "f8e4m3": "ml_dtypes.float8_e4m3fn", "f8e5m2": "ml_dtypes.float8_e5m2", "i32": "np.int32",
               "i64": "np.int64"}


def _convert_hint(kind: str, name: str, dtype: str) -> str:
    if kind == "torch":
        return f"convert with {name}.to(torch.{_TORCH[dtype]})"
    if kind == "jax":
        return f"convert with {name}.astype(jnp.{_TORCH[dtype]})"
    if kind == "cupy":
        return f"convert with {name}.astype({_NP_CONVERT[dtype]})"
    if kind == "numpy":
        return f"convert with {name}.astype({_NP_CONVERT[dtype]})"
    return f"convert it to {dtype}"


def _contig_hint(kind: str, name: str) -> str:
    return {"numpy": f"np.ascontiguousarray({name})", "torch": f"{name}.contiguous()",
            "cupy": f"cupy.ascontiguousarray({name})", "jax": f"jnp.asarray({name}).copy()"}.get(kind, "a contiguous copy")


def is_c_contiguous(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> bool:
    """Byte strides describe a dense row-major layout (size-1 dimensions may carry any stride)."""
    if any(d == 0 for d in shape):
        return True
    return all(d == 1 or s == e for d, s, e in zip(shape, strides, _c_strides(shape, itemsize)))


def read_only(obj: Any) -> str | None:
    """Why the kernel may not write into `obj` (an `out=` array), or None: a numpy array whose `writeable` flag is
    off (a view of bytes, np.memmap mode='r', setflags(write=False)), or an array whose __cuda_array_interface__
    says its data is read-only. (A torch tensor has no such flag.)"""
    if isinstance(obj, np.ndarray):
        return None if obj.flags.writeable else "a numpy array whose flags.writeable is False"
    if isinstance(obj, DeviceView) or kind_of(obj) == "torch" or not _has_cai(obj):
        return None
    try:
        data = obj.__cuda_array_interface__["data"]
        flag = data[1] if isinstance(data, (tuple, list)) and len(data) > 1 else False
    except (KeyError, TypeError, IndexError):
        return None                                     # malformed: check() says so
    return "its __cuda_array_interface__ marks the data read-only" if flag else None


def check(obj_or_view: Any, name: str, *, shape: tuple[int, ...], dtype: str, contiguous: bool = True,
          device: int | None = None, writable: bool = False) -> None:
    """Raise ArgumentError unless the argument has this shape and dtype (and is dense, 16-byte aligned and on
    `device` for device arrays; and, `writable`, one the kernel may write: an out= array)."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    why = read_only(obj_or_view) if writable else None
    if why is not None:
        raise ArgumentError(f"{name}: is read-only ({why}); out= takes arrays the kernel may write: pass a "
                            f"writable one (a copy), or leave out= unset to get new outputs")
    if isinstance(obj_or_view, DeviceView):
        v = obj_or_view
    elif isinstance(obj_or_view, np.ndarray):
        v = host_view(obj_or_view, name)
    else:
        kind, got_shape, got_dt = describe(obj_or_view, name)
        _check_meta(kind, name, got_shape, got_dt, shape, dtype)
        v = device_view(obj_or_view, name)
    _check_meta(v.kind, name, v.shape, v.dtype, shape, dtype)
    if contiguous:
        if any(s < 0 for s in v.strides):
            raise ArgumentError(f"{name}: has negative strides {v.strides} (a reversed view); "
                                f"make it contiguous first: {_contig_hint(v.kind, name)}")
        if not is_c_contiguous(v.shape, v.strides, DTYPES[dtype].itemsize):
            raise ArgumentError(
                f"{name}: is not C-contiguous (byte strides {v.strides}, expected "
                f"{_c_strides(v.shape, DTYPES[dtype].itemsize)}); make it contiguous first: "
                f"{_contig_hint(v.kind, name)}")
    if v.kind != "numpy":
        if v.ptr % 16:
            raise ArgumentError(f"{name}: data pointer {v.ptr:#x} is not 16-byte aligned (an offset view?); "
                                f"pass a fresh contiguous copy")
        if device is not None and v.device >= 0 and v.device != device:
            raise ArgumentError(f"{name}: is on cuda:{v.device}, but the other arguments are on cuda:{device}")


def _check_meta(kind: str, name: str, got_shape: tuple[int, ...], got_dt: str, shape: tuple[int, ...],
                dtype: str) -> None:
    if tuple(got_shape) != tuple(shape):
        raise ArgumentError(f"{name}: expected shape {tuple(shape)}, got {tuple(got_shape)}")
    if got_dt != dtype:
        raise ArgumentError(f"{name}: expected {dtype}, got {_pretty_dtype(got_dt)}; "
                            f"{_convert_hint(kind, name, dtype)}")


def check_meta(kind: str, name: str, got_shape: tuple[int, ...], got_dt: str, shape: tuple[int, ...],
               dtype: str) -> None:
    """Shape and dtype only (for arguments whose layout is not ours to check: jax arrays and tracers)."""
    _check_meta(kind, name, got_shape, got_dt, shape, dtype)


_PRETTY = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f8e4m3": "float8_e4m3fn",
           "f8e5m2": "float8_e5m2", "i32": "int32", "i64": "int64"}


def _pretty_dtype(dt: str) -> str:
    """Framework-style dtype names for messages: "float32", "bfloat16", "float64", ..."""
    return _PRETTY[dt] if dt in DTYPES else dt.replace("torch.", "")


def same_device(views: dict[str, DeviceView]) -> int:
    """The common CUDA device of these views; ArgumentError naming the first argument that differs."""
    dev = -1
    first = ""
    for name, v in views.items():
        if v.kind == "numpy" or v.device < 0:
            continue
        if dev < 0:
            dev, first = v.device, name
        elif v.device != dev:
            raise ArgumentError(f"{name}: is on cuda:{v.device}, but {first} is on cuda:{dev}")
    return dev


# ---------------------------------------------------------------------------------------------- outputs

def empty_like_kind(kind: str, like: object, shape: Sequence[int], dtype: str) -> tuple[object, DeviceView | None]:
    """Allocate an uninitialized output of the same kind (and device) as `like`; numpy gets no device view."""
    shape = tuple(int(d) for d in shape)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    if kind == "numpy":
        return np.empty(shape, DTYPES[dtype]), None
    if kind == "torch":
        import torch
        out = torch.empty(shape, dtype=getattr(torch, _TORCH[dtype]), device=like.device)  # type: ignore[attr-defined]
        return out, device_view(out, "output")
    if kind == "cupy":
        import cupy
        with cupy.cuda.Device(like.device.id):  # type: ignore[attr-defined]
            out = cupy.empty(shape, dtype=DTYPES[dtype])
        return out, device_view(out, "output")
    if kind == "jax":
        import jax
        import jax.numpy as jnp
        dev = next(iter(like.devices()))  # type: ignore[attr-defined]
        out = jax.device_put(jnp.empty(shape, DTYPES[dtype]), dev)
        out.block_until_ready()
        return out, device_view(out, "output")
    if kind in ("cuda_array_interface", "dlpack"):
        raise ArgumentError(f"cannot allocate an output like a generic {kind} object; pass the output explicitly")
    raise ValueError(f"unknown array kind {kind!r}")
