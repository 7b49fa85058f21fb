"""CPU-only tests for schedgen.runtime.driver / schedgen.runtime.arrays (no GPU, no libcuda needed)."""
from __future__ import annotations

import ctypes
import struct

import ml_dtypes
import numpy as np
import pytest

from schedgen.runtime import arrays as A
from schedgen.runtime import driver as D

# ---------------------------------------------------------------------------------------------- driver: no GPU


def test_available_false_without_gpu_and_never_raises():
    ok, why = D.available()
    assert ok is False and isinstance(why, str) and why
    assert D.available() == (ok, why)  # cached


def test_cuda_error_message_names_call_and_result():
    from cuda.bindings import driver as cu
    e = D.CudaError("cuMemAlloc", cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY)
    assert "cuMemAlloc" in str(e) and "CUDA_ERROR_OUT_OF_MEMORY" in str(e)
    with pytest.raises(D.CudaError, match="cuFoo failed: CUDA_ERROR_INVALID_VALUE"):
        D._check("cuFoo", (cu.CUresult.CUDA_ERROR_INVALID_VALUE, None))
    assert D._check("cuBar", (cu.CUresult.CUDA_SUCCESS, 7)) == 7
    assert D._check("cuBaz", (cu.CUresult.CUDA_SUCCESS,)) is None


# ---------------------------------------------------------------------------------------------- encode_tiled

P = 0x7F0000000000  # a 16-byte aligned fake address
GOOD = dict(ptr=P, dtype="bf16", shape=(4096, 4096), strides=(8192, 2), box=(64, 64))


def test_validate_tiled_converts_to_innermost_first():
    lay = D.validate_tiled(**GOOD, swizzle=128)
    assert lay.dims == (4096, 4096) and lay.strides == (8192,) and lay.box == (64, 64)
    lay = D.validate_tiled(P, "f32", (2, 3, 8), (96, 32, 4), (1, 2, 4))
    assert lay.dims == (8, 3, 2) and lay.strides == (32, 96) and lay.box == (4, 2, 1)
    assert D.validate_tiled(P, "f8e4m3", (256,), (1,), (16,)).dims == (256,)


@pytest.mark.parametrize("change, fragment", [
    (dict(dtype="f64"), "unknown dtype 'f64'"),
    (dict(shape=(), strides=(), box=()), "rank must be 1..5, got 0"),
    (dict(shape=(2,) * 6, strides=(2,) * 6, box=(1,) * 6), "rank must be 1..5, got 6"),
    (dict(strides=(8192,)), "same rank"),
    (dict(ptr=P + 8), "is not 16-byte aligned"),
    (dict(strides=(8192, 4)), "innermost stride must equal the bf16 itemsize (2 B), got 4 B"),
    (dict(strides=(8200, 2)), "strides[0] = 8200 B must be a positive multiple of 16 bytes"),
    (dict(strides=(2**40, 2)), "strides[0] = 1099511627776 B must be < 2**40"),
    (dict(shape=(0, 4096)), "shape[0] = 0 must be in 1..2**32"),
    (dict(shape=(2**32 + 1, 4096)), "shape[0] = 4294967297 must be in 1..2**32"),
    (dict(box=(0, 64)), "box[0] = 0 must be in 1..256"),
    (dict(box=(512, 64)), "box[0] = 512 must be in 1..256"),
    (dict(box=(64, 4)), "box innermost extent 4 x 2 B = 8 B must be a multiple of 16 bytes"),
    (dict(swizzle=16), "swizzle must be one of 0, 32, 64, 128 (bytes), got 16"),
    (dict(swizzle=64), "box innermost extent 128 B exceeds the 64B swizzle span; use box[-1] <= 32"),
    (dict(l2_promotion=512), "l2_promotion must be one of 0, 64, 128, 256 (bytes), got 512"),
])
def test_encode_tiled_rejects_before_driver(monkeypatch, change, fragment):
    def boom(*a, **k):
        raise AssertionError("driver must not be called")
    monkeypatch.setattr(D.cu, "cuTensorMapEncodeTiled", boom)
    kw = {**GOOD, **change}
    with pytest.raises(ValueError) as ei:
        D.encode_tiled(**kw)
    assert fragment in str(ei.value)
    assert str(ei.value).startswith("tensor map: ")


def test_encode_tiled_passes_driver_order(monkeypatch):
    seen = {}

    class FakeMap:
        buf = ctypes.create_string_buffer(bytes(range(128)), 128)

        def getPtr(self):
            return ctypes.addressof(self.buf)

    def fake(dt, rank, ptr, dims, strides, box, estr, interleave, swizzle, l2, oob):
        seen.update(dt=dt, rank=rank, ptr=ptr, dims=[int(d) for d in dims], strides=[int(s) for s in strides],
                    box=[int(b) for b in box], estr=[int(e) for e in estr], swizzle=swizzle, l2=l2, oob=oob)
        return (D.cu.CUresult.CUDA_SUCCESS, FakeMap())

    monkeypatch.setattr(D.cu, "cuTensorMapEncodeTiled", fake)
    out = D.encode_tiled(P, "bf16", (128, 256), (512, 2), (64, 64), swizzle=128, oob_nan=True)
    assert out == bytes(range(128))
    cu = D.cu
    assert seen == dict(dt=cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank=2, ptr=P,
                        dims=[256, 128], strides=[512], box=[64, 64], estr=[1, 1],
                        swizzle=cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
                        l2=cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        oob=cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)


def test_tma_dtypes():
    dt = D.cu.CUtensorMapDataType
    assert D.TMA_DTYPES["bf16"] == dt.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    assert D.TMA_DTYPES["f16"] == dt.CU_TENSOR_MAP_DATA_TYPE_FLOAT16
    assert D.TMA_DTYPES["f32"] == dt.CU_TENSOR_MAP_DATA_TYPE_FLOAT32
    assert D.TMA_DTYPES["f8e4m3"] == D.TMA_DTYPES["f8e5m2"] == dt.CU_TENSOR_MAP_DATA_TYPE_UINT8
    assert D.TMA_DTYPES["i32"] == dt.CU_TENSOR_MAP_DATA_TYPE_INT32
    assert D.TMA_DTYPES["i64"] == dt.CU_TENSOR_MAP_DATA_TYPE_INT64 and D.TMA_ITEMSIZE["i64"] == 8
    assert set(D.TMA_DTYPES) == set(A.DTYPES)
    assert all(D.TMA_ITEMSIZE[k] == A.DTYPES[k].itemsize for k in A.DTYPES)


# ---------------------------------------------------------------------------------------------- Arg packing

def test_arg_packing():
    assert D.Arg.i32(-1) == D.Arg(b"\xff\xff\xff\xff", 4)
    assert D.Arg.u32(0xDEADBEEF).data == struct.pack("<I", 0xDEADBEEF)
    assert D.Arg.ptr(0x1122334455667788) == D.Arg(bytes.fromhex("8877665544332211"), 8)
    assert D.Arg.f32(1.5) == D.Arg(struct.pack("<f", 1.5), 4)
    tm = D.Arg.tensor_map(bytes(128))
    assert len(tm.data) == 128 and tm.align == 64
    with pytest.raises(ValueError, match="exactly 128 bytes, got 64"):
        D.Arg.tensor_map(bytes(64))
    with pytest.raises(ValueError, match="i32 argument out of range"):
        D.Arg.i32(2**31)
    with pytest.raises(ValueError, match="u32 argument out of range"):
        D.Arg.u32(-1)
    with pytest.raises(ValueError, match="pointer argument out of range"):
        D.Arg.ptr(-1)


def test_params_alignment_and_contents():
    args = [D.Arg.i32(7), D.Arg.tensor_map(bytes(range(128))), D.Arg.ptr(0xABC), D.Arg.f32(2.0)]
    params = D.Params(args)
    assert len(params) == 4
    addrs = (ctypes.c_void_p * 4).from_address(params.address)   # the void*[n] the driver reads
    for i, a in enumerate(args):
        assert addrs[i] % a.align == 0
        assert ctypes.string_at(addrs[i], len(a.data)) == a.data
        assert params.get(i) == a
    with pytest.raises(TypeError, match="Arg instances"):
        D.Params([3])


# ---------------------------------------------------------------------------------------------- launch validation

@pytest.mark.parametrize("kw, fragment", [
    (dict(grid=(3, 1, 1), block=(128, 1, 1), cluster=(2, 1, 1)), "grid (3, 1, 1) is not divisible by cluster (2, 1, 1)"),
    (dict(grid=(4, 3, 1), block=(128, 1, 1), cluster=(2, 2, 1)), "not divisible by cluster"),
    (dict(grid=(1, 1, 1), block=(512, 4, 1)), "block (512, 4, 1) has 2048 threads; at most 1024 per block"),
    (dict(grid=(1, 1, 1), block=(2048, 1, 1)), "exceeds the per-dimension limits"),
    (dict(grid=(0, 1, 1), block=(128, 1, 1)), "grid must be three positive ints"),
    (dict(grid=(1, 1), block=(128, 1, 1)), "grid must be three positive ints"),
    (dict(grid=(1, 70000, 1), block=(128, 1, 1)), "exceeds the limits"),
    (dict(grid=(32, 1, 1), block=(128, 1, 1), cluster=(32, 1, 1)), "at most 16"),
    (dict(grid=(1, 1, 1), block=(128, 1, 1), smem=-1), "smem must be >= 0"),
])
def test_launch_validation_before_driver(monkeypatch, kw, fragment):
    def boom(*a, **k):
        raise AssertionError("driver must not be called")
    monkeypatch.setattr(D.cu, "cuLaunchKernelEx", boom)
    monkeypatch.setattr(D, "_launch_ex", boom)
    monkeypatch.setattr(D, "_direct_launch", [boom])
    monkeypatch.setattr(D.cu, "cuFuncSetAttribute", boom)
    kw = {"smem": 0, **kw}
    with pytest.raises(ValueError) as ei:
        D.launch(object(), args=[D.Arg.i32(1)], **kw)
    assert fragment in str(ei.value)


def test_validate_launch_ok():
    assert D.validate_launch((8, 2, 1), (128, 1, 1), 0, (2, 1, 1)) == ((8, 2, 1), (128, 1, 1), (2, 1, 1))
    assert D.validate_launch((3, 1, 1), (384, 1, 1), 1 << 17, (1, 1, 1))[2] is None
    assert D.validate_launch((3, 1, 1), (1024, 1, 1), 0, None)[2] is None


def test_launch_builds_config(monkeypatch):
    seen = {}

    def fake(cfg, f, params, extra):
        seen.update(grid=(cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ), block=(cfg.blockDimX, cfg.blockDimY,
                    cfg.blockDimZ), smem=cfg.sharedMemBytes, n=cfg.numAttrs, f=f, extra=extra)
        seen["cluster"] = tuple(getattr(cfg.attrs[0].value.clusterDim, c) for c in "xyz") if cfg.numAttrs else None
        arr = (ctypes.c_void_p * 2).from_address(params)
        seen["args"] = [ctypes.string_at(arr[0], 4), ctypes.string_at(arr[1], 8)]
        return (D.cu.CUresult.CUDA_SUCCESS,)

    monkeypatch.setattr(D, "_launch_ex", fake)
    monkeypatch.setattr(D, "_direct_launch", [None])     # no libcuda: every launch through cuda.bindings
    D.launch("F", grid=(4, 2, 1), block=(256, 1, 1), smem=1024, args=[D.Arg.i32(-2), D.Arg.ptr(5)],
             cluster=(2, 1, 1))
    assert seen == dict(grid=(4, 2, 1), block=(256, 1, 1), smem=1024, n=1, f="F", extra=0, cluster=(2, 1, 1),
                        args=[struct.pack("<i", -2), struct.pack("<Q", 5)])
    D.launch("F", grid=(4, 2, 1), block=(256, 1, 1), smem=0, args=[D.Arg.i32(0), D.Arg.ptr(0)])
    assert seen["n"] == 0 and seen["cluster"] is None


# ---------------------------------------------------------------------------------------------- dtypes / classify

def test_dtypes_and_dtype_name():
    assert A.DTYPES["bf16"] == np.dtype(ml_dtypes.bfloat16)
    assert A.DTYPES["f8e4m3"] == np.dtype(ml_dtypes.float8_e4m3fn)
    for name, dt in A.DTYPES.items():
        assert A.dtype_name(dt) == name and A.dtype_name(name) == name
    assert A.dtype_name(np.float32) == "f32"
    assert A.dtype_name("<f4") == "f32" and A.dtype_name("<f2") == "f16"
    assert A.dtype_name(">f4") is None and A.dtype_name("<V2") is None and A.dtype_name(np.float64) is None
    assert A.dtype_name((4, 16)) == "bf16" and A.dtype_name((2, 32, 1)) == "f32"
    assert A.dtype_name((10, 8)) == "f8e4m3" and A.dtype_name((12, 8)) == "f8e5m2"
    assert A.dtype_name((2, 32, 4)) is None and A.dtype_name("garbage") is None


def test_dtype_name_torch_like_objects():
    fake_torch_dtype = type("dtype", (), {"__module__": "torch", "__str__": lambda self: "torch.bfloat16"})()
    assert A.dtype_name(fake_torch_dtype) == "bf16"


@pytest.mark.parametrize("obj", [[1, 2, 3], 3.0, 7, "x", None, (1, 2)])
def test_classify_rejects_non_arrays(obj):
    with pytest.raises(A.ArgumentError) as ei:
        A.classify(obj, "x")
    msg = str(ei.value)
    assert msg.startswith(f"x: unsupported argument of type {type(obj).__name__}")
    for word in ("numpy", "torch", "cupy", "jax", "__cuda_array_interface__", "__dlpack__"):
        assert word in msg
    with pytest.raises(A.ArgumentError, match="^x: unsupported"):
        A.check(obj, "x", shape=(3,), dtype="f32")


# ---------------------------------------------------------------------------------------------- numpy check

def test_numpy_describe_and_check_ok():
    x = np.zeros((4, 8), ml_dtypes.bfloat16)
    assert A.classify(x) == "numpy"
    assert A.describe(x, "x") == ("numpy", (4, 8), "bf16")
    A.check(x, "x", shape=(4, 8), dtype="bf16")
    A.check(np.zeros((1, 8), np.float32)[:, ::1], "x", shape=(1, 8), dtype="f32")
    A.check(np.asfortranarray(np.zeros((4, 8), np.float32)), "x", shape=(4, 8), dtype="f32", contiguous=False)


@pytest.mark.parametrize("arr, shape, dtype, expected", [
    (np.zeros((4096, 4095), ml_dtypes.bfloat16), (4096, 4096), "bf16",
     "x: expected shape (4096, 4096), got (4096, 4095)"),
    (np.zeros((4, 8), np.float32), (4, 8), "bf16",
     "x: expected bf16, got float32; convert with x.astype(ml_dtypes.bfloat16)"),
    (np.zeros((4, 8), ml_dtypes.bfloat16), (4, 8), "f32",
     "x: expected f32, got bfloat16; convert with x.astype(np.float32)"),
    (np.zeros((4, 8), np.float64), (4, 8), "f16",
     "x: expected f16, got float64; convert with x.astype(np.float16)"),
    (np.zeros((4, 16), np.float32)[:, ::2], (4, 8), "f32",
     "x: is not C-contiguous (byte strides (64, 8), expected (32, 4)); "
     "make it contiguous first: np.ascontiguousarray(x)"),
    (np.zeros((8, 4), np.float32)[::-1], (8, 4), "f32",
     "x: has negative strides (-16, 4) (a reversed view); make it contiguous first: np.ascontiguousarray(x)"),
    (np.asfortranarray(np.zeros((4, 8), np.float32)), (4, 8), "f32",
     "x: is not C-contiguous (byte strides (4, 16), expected (32, 4)); "
     "make it contiguous first: np.ascontiguousarray(x)"),
])
def test_numpy_check_errors(arr, shape, dtype, expected):
    with pytest.raises(A.ArgumentError) as ei:
        A.check(arr, "x", shape=shape, dtype=dtype)
    assert str(ei.value) == expected
    assert isinstance(ei.value, TypeError)


def test_device_view_rejects_numpy():
    with pytest.raises(A.ArgumentError, match=r"^x: lives on the CPU \(numpy\); "):
        A.device_view(np.zeros(4, np.float32), "x")


# ---------------------------------------------------------------------------------------------- CAI objects

class FakeCAI:
    def __init__(self, shape, typestr, ptr=0x7F0000000000, strides=None, device=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}
        if device is not None:
            self.__dlpack_device__ = lambda: (2, device)


def test_cai_describe_view_check():
    x = FakeCAI((4, 8), "<f4", device=1)
    assert A.classify(x) == "cuda_array_interface"
    assert A.describe(x, "x") == ("cuda_array_interface", (4, 8), "f32")
    v = A.device_view(x, "x")
    assert v == A.DeviceView(0x7F0000000000, (4, 8), (32, 4), "f32", 1, "cuda_array_interface", x)
    A.check(x, "x", shape=(4, 8), dtype="f32")
    A.check(v, "x", shape=(4, 8), dtype="f32", device=1)
    with pytest.raises(A.ArgumentError, match=r"^x: is on cuda:1, but the other arguments are on cuda:0$"):
        A.check(v, "x", shape=(4, 8), dtype="f32", device=0)
    assert A.device_view(FakeCAI((2,), "<f2"), "y").device == -1  # unknown without a driver


def test_cai_errors():
    with pytest.raises(A.ArgumentError, match=r"^x: expected shape \(4, 8\), got \(4, 7\)$"):
        A.check(FakeCAI((4, 7), "<f4"), "x", shape=(4, 8), dtype="f32")
    with pytest.raises(A.ArgumentError, match=r"^x: expected bf16, got float32; convert it to bf16$"):
        A.check(FakeCAI((4, 8), "<f4"), "x", shape=(4, 8), dtype="bf16")
    with pytest.raises(A.ArgumentError, match=r"^x: is not C-contiguous \(byte strides \(4, 16\)"):
        A.check(FakeCAI((4, 8), "<f4", strides=(4, 16)), "x", shape=(4, 8), dtype="f32")
    with pytest.raises(A.ArgumentError, match=r"^x: has negative strides"):
        A.check(FakeCAI((4, 8), "<f4", strides=(-32, 4)), "x", shape=(4, 8), dtype="f32")
    with pytest.raises(A.ArgumentError, match=r"^x: data pointer 0x7f0000000004 is not 16-byte aligned"):
        A.check(FakeCAI((4, 8), "<f4", ptr=0x7F0000000004), "x", shape=(4, 8), dtype="f32")
    with pytest.raises(A.ArgumentError, match=r"^x: lives on the CPU \(cuda_array_interface\)"):
        obj = FakeCAI((4,), "<f4")
        obj.__dlpack_device__ = lambda: (1, 0)
        A.device_view(obj, "x")


def test_cai_cannot_express_bf16():
    # bf16 has no CAI typestr (ml_dtypes reports '<V2'): without DLPack we refuse with a clear message.
    x = FakeCAI((4, 8), np.dtype(ml_dtypes.bfloat16).str)
    assert A.describe(x, "x") == ("cuda_array_interface", (4, 8), "typestr '<V2'")
    with pytest.raises(A.ArgumentError, match=r"^x: unsupported dtype \(__cuda_array_interface__ typestr '<V2'\)"):
        A.device_view(x, "x")
    with pytest.raises(A.ArgumentError, match=r"^x: expected bf16, got typestr '<V2'"):
        A.check(x, "x", shape=(4, 8), dtype="bf16")


# ---------------------------------------------------------------------------------------------- DLPack

_capi = ctypes.pythonapi
_capi.PyCapsule_New.restype = ctypes.py_object
_capi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_NAME = b"dltensor"


class FakeDLPackCUDA:
    """A CUDA DLPack producer built by hand: the capsule points at a ctypes DLManagedTensor."""

    def __init__(self, shape, code, bits, ptr=0x7F0000000000, strides=None, device_id=0, byte_offset=0):
        n = len(shape)
        self.shape_arr = (ctypes.c_int64 * n)(*shape)
        self.strides_arr = (ctypes.c_int64 * n)(*strides) if strides else None
        t = A._DLManagedTensor()
        t.dl_tensor.data = ptr
        t.dl_tensor.device.device_type, t.dl_tensor.device.device_id = 2, device_id
        t.dl_tensor.ndim = n
        t.dl_tensor.dtype.code, t.dl_tensor.dtype.bits, t.dl_tensor.dtype.lanes = code, bits, 1
        t.dl_tensor.shape = ctypes.cast(self.shape_arr, ctypes.POINTER(ctypes.c_int64))
        if self.strides_arr is not None:
            t.dl_tensor.strides = ctypes.cast(self.strides_arr, ctypes.POINTER(ctypes.c_int64))
        t.dl_tensor.byte_offset = byte_offset
        self.managed = t
        self.device_id = device_id

    def __dlpack_device__(self):
        return (2, self.device_id)

    def __dlpack__(self, stream=None):
        return _capi.PyCapsule_New(ctypes.addressof(self.managed), _NAME, None)


def test_dlpack_cuda_producer_bf16():
    x = FakeDLPackCUDA((4, 8), code=4, bits=16, device_id=3, byte_offset=32)
    assert A.classify(x) == "dlpack"
    assert A.describe(x, "x") == ("dlpack", (4, 8), "bf16")
    v = A.device_view(x, "x")
    assert (v.ptr, v.shape, v.strides, v.dtype, v.device, v.kind) == \
        (0x7F0000000020, (4, 8), (16, 2), "bf16", 3, "dlpack")
    assert v.obj[0] is x  # capsule kept alive alongside the producer
    A.check(v, "x", shape=(4, 8), dtype="bf16", device=3)
    with pytest.raises(A.ArgumentError, match=r"^x: expected f8e4m3, got bfloat16"):
        A.check(x, "x", shape=(4, 8), dtype="f8e4m3")
    fp8 = A.device_view(FakeDLPackCUDA((16, 32), code=10, bits=8, strides=(64, 1)), "w")
    assert fp8.dtype == "f8e4m3" and fp8.strides == (64, 1)
    with pytest.raises(A.ArgumentError, match=r"^w: is not C-contiguous"):
        A.check(fp8, "w", shape=(16, 32), dtype="f8e4m3")
    with pytest.raises(A.ArgumentError, match=r"^z: unsupported DLPack dtype \(code=0, bits=16, lanes=1\)"):
        A.device_view(FakeDLPackCUDA((4,), code=0, bits=16), "z")
    assert A.device_view(FakeDLPackCUDA((4,), code=0, bits=32), "offs").dtype == "i32"   # kDLInt 32: index operands
    assert A.device_view(FakeDLPackCUDA((4,), code=0, bits=64), "t").dtype == "i64"      # kDLInt 64: torch's long


def test_cai_bf16_falls_back_to_dlpack():
    # torch-like: CAI cannot express bf16, so the DLPack capsule supplies the dtype.
    x = FakeDLPackCUDA((4, 8), code=4, bits=16)
    x.__cuda_array_interface__ = {"shape": (4, 8), "typestr": "<V2", "data": (0x7F0000000000, False),
                                  "strides": None, "version": 3}
    assert A.describe(x, "x") == ("cuda_array_interface", (4, 8), "bf16")
    v = A.device_view(x, "x")
    assert v.dtype == "bf16" and v.strides == (16, 2) and v.device == 0


def test_dlpack_reads_numpy_capsule_and_rejects_cpu():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:]
    info = A._read_dlpack(a.__dlpack__(), "a")
    assert info.ptr == a.ctypes.data and info.shape == (3, 3) and info.strides == (16, 4)
    assert info.dtype == (2, 32, 1) and info.device == (1, 0)

    class Wrapped:  # a generic DLPack producer living on the CPU
        def __dlpack__(self, stream=None):
            return a.__dlpack__()

        def __dlpack_device__(self):
            return a.__dlpack_device__()

    with pytest.raises(A.ArgumentError, match=r"^x: lives on the CPU \(dlpack\); move it to a CUDA device"):
        A.device_view(Wrapped(), "x")
    assert A.describe(Wrapped(), "x") == ("dlpack", (3, 3), "f32")


def test_jax_cpu_array_if_installed():
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.ones((4, 8), jnp.bfloat16)
    assert A.classify(x) == "jax"
    assert A.describe(x, "x") == ("jax", (4, 8), "bf16")
    with pytest.raises(A.ArgumentError, match=r"^x: lives on the CPU \(jax\)"):
        A.device_view(x, "x")


def test_same_device_and_empty_like_numpy():
    v0 = A.device_view(FakeCAI((4,), "<f4", device=0), "a")
    v1 = A.device_view(FakeCAI((4,), "<f4", device=1), "b")
    assert A.same_device({"a": v0, "h": A.host_view(np.zeros(4, np.float32), "h")}) == 0
    with pytest.raises(A.ArgumentError, match=r"^b: is on cuda:1, but a is on cuda:0$"):
        A.same_device({"a": v0, "b": v1})
    out, view = A.empty_like_kind("numpy", np.zeros(1), (3, 5), "bf16")
    assert view is None and out.shape == (3, 5) and out.dtype == A.DTYPES["bf16"]
    with pytest.raises(A.ArgumentError, match="pass the output explicitly"):
        A.empty_like_kind("dlpack", object(), (3,), "f32")


def test_no_framework_imported_at_module_import():
    import subprocess
    import sys
    code = ("import sys, schedgen.runtime.arrays, schedgen.runtime.driver; "
            "print(any(m in sys.modules for m in ('torch', 'cupy', 'jax')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_buffer_needs_driver_and_free_is_guarded(monkeypatch):
    with pytest.raises(D.CudaError, match="^cuInit failed: "):
        D.Buffer(16)
    freed = []
    monkeypatch.setattr(D.Buffer, "_mem_free", staticmethod(freed.append))
    b = D.Buffer.__new__(D.Buffer)
    b.ptr, b.nbytes = 0x1000, 16
    b.free()
    b.free()
    assert freed == [0x1000] and b.ptr == 0
    b.ptr = 0x2000
    monkeypatch.setattr(D.Buffer, "_finalizing", staticmethod(lambda: True))
    del b  # at interpreter shutdown nothing is freed and nothing raises
    assert freed == [0x1000]
