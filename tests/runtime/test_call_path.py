"""The CUDA call path's caches and capture rules on the CPU, through the fake driver (fake_driver.py) and a fake torch
tensor class: a second call with the same shapes encodes no tensor map and re-packs nothing, a changed pointer
re-encodes only that operand's maps, stream objects resolve to their handle, torch's dtype is read from .dtype,
the tile counter is allocated once per device and never on the call path, and what cannot be captured into a CUDA
graph says so before touching the driver."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from conftest import SPECS_DIR
from fake_driver import FakeDriver
from schedgen.frontend.validate import load_spec
from schedgen.plan import launch as L
from schedgen.plan import plan
from schedgen.runtime import arrays, driver
from schedgen.runtime import kernel as K
from schedgen.runtime.arrays import ArgumentError


class _Dtype:
    __module__ = "torch"

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


DT = {n: _Dtype(t) for n, t in arrays._TORCH.items()}
DT["f64"] = _Dtype("float64")
DT["u8"] = _Dtype("uint8")        # a workspace's bytes (Kernel._torch_workspaces)


class _Device:
    def __init__(self, type_, index):
        self.type, self.index = type_, index


class Tensor:
    """Enough of torch.Tensor for the call path. Its __cuda_array_interface__ says '<f2' for bf16 (as older torch
    does) and its __dlpack__ fails: the call path must read neither."""
    __module__ = "torch"

    def __init__(self, shape, dtype="bf16", ptr=0x7F0000000000, device=("cuda", 0), strides=None,
                 requires_grad=False):
        self.shape, self.dtype, self.ptr, self.requires_grad = tuple(shape), DT[dtype], ptr, requires_grad
        self.device = _Device(*device)
        c, acc = [], 1
        for d in reversed(self.shape):
            c.append(acc)
            acc *= d
        self._strides = tuple(strides) if strides is not None else tuple(reversed(c))
        self._contig = self._strides == tuple(reversed(c))

    def data_ptr(self):
        return self.ptr

    def stride(self):
        return self._strides

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def get_device(self):
        return self.device.index if self.is_cuda else -1

    def is_contiguous(self):
        return self._contig

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": "<f2", "data": (self.ptr, False), "strides": None, "version": 3}

    def __dlpack__(self, stream=None):
        raise AssertionError("the call path used DLPack on a torch tensor")

    def __dlpack_device__(self):
        return (2, self.device.index)


class Torch:
    """What the call path asks of torch: empty() (a caching allocator: one pointer per shape; `made` keeps every
    tensor it gave), its stream, and caching_allocator_alloc / _delete on a given stream (`raw` records them)."""

    def __init__(self, monkeypatch):
        self.allocs, self.stream, self.blocks, self.made, self.raw = [], 0x77, {}, [], []
        monkeypatch.setattr(K, "_EMPTY", [self.empty])
        monkeypatch.setattr(K, "_TORCH_DT", {n: DT[n] for n in (*arrays._TORCH, "u8")})
        monkeypatch.setattr(K, "_TORCH_DEVICES", {i: _Device("cuda", i) for i in range(8)})
        monkeypatch.setattr(K, "_current_raw_stream", lambda device: self.stream)
        monkeypatch.setattr(K, "_torch_raw_alloc", self.raw_alloc)
        monkeypatch.setattr(K, "_torch_raw_free", lambda spaces: self.raw.extend(("free", p) for p in spaces.values()))

    def raw_alloc(self, nbytes, device, stream):
        ptr = 0x7D0000000000 + 0x1000000 * sum(1 for e in self.raw if e[0] == "alloc")
        self.raw.append(("alloc", nbytes, device, stream, ptr))
        return ptr

    def empty(self, *, size, dtype, device):
        # size= by keyword: torch parses it ~0.5 us faster than a positional tuple (schedgen/runtime/kernel.py)
        shape = size
        name = next(n for n, d in DT.items() if d is dtype)
        self.allocs.append(tuple(shape))
        ptr = self.blocks.setdefault(tuple(shape), 0x7E0000000000 + 0x1000000 * len(self.blocks))
        # a device object (made once per ordinal: an int device costs torch microseconds per call)
        assert isinstance(device, _Device) and device.type == "cuda", device
        self.made.append(Tensor(shape, name, ptr=ptr, device=(device.type, device.index)))
        return self.made[-1]


@pytest.fixture
def fakes(monkeypatch):
    return FakeDriver(monkeypatch), Torch(monkeypatch)


def _kernel(tmp_path, name):
    spec, src = load_spec(str(SPECS_DIR / name))
    rec = L.launch_record(plan(spec, src))
    (tmp_path / "launch.json").write_text(rec.to_json())
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    return K.load_package(tmp_path), rec


def _inputs(rec, base=0x7F0000000000):
    return [Tensor(o.shape, o.dtype, ptr=base + (i << 32)) for i, o in enumerate(rec.inputs)]


def _tmap_args(rec, operand):
    return [i for i, a in enumerate(rec.kernel_args) if a.kind in ("tmap", "ptr") and a.operand == operand]


def test_second_call_with_same_shapes_encodes_and_packs_nothing(tmp_path, fakes):
    fake, torch = fakes
    kernel, rec = _kernel(tmp_path, "matmul_bf16_4096.yaml")
    ins = _inputs(rec)
    out1 = kernel(*ins)
    n_maps = sum(a.kind == "tmap" for a in rec.kernel_args)
    assert len(fake.encoded) == n_maps and len(fake.params) == 1 and len(fake.configs) == 1
    assert isinstance(out1, Tensor) and out1.shape == rec.outputs[0].shape and out1.dtype is DT[rec.outputs[0].dtype]
    out2 = kernel(*ins)
    assert out2.ptr == out1.ptr                                   # torch's allocator gave the same block back
    assert len(fake.encoded) == n_maps and len(fake.params) == 1 and len(fake.configs) == 1 and fake.sets == []
    assert len(fake.functions) == 1 and fake.cubin == b"CUBIN"
    assert [g["stream"] for g in fake.launches] == [torch.stream] * 2 and fake.launches[0] == fake.launches[1]


def test_changed_pointer_reencodes_only_that_operands_maps(tmp_path, fakes):
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "matmul_bf16_4096.yaml")
    ins = _inputs(rec)
    kernel(*ins)
    before = len(fake.encoded)
    moved = Tensor(rec.inputs[0].shape, rec.inputs[0].dtype, ptr=0x7D0000000000)
    kernel(moved, *ins[1:])
    mine = _tmap_args(rec, 0)
    assert mine and sorted(fake.sets) == mine
    new = fake.encoded[before:]
    assert len(new) == sum(rec.kernel_args[i].kind == "tmap" for i in mine)
    assert all(e[0] == moved.ptr for e in new)
    first, second = fake.launches[0]["args"], fake.launches[1]["args"]
    assert [i for i, (x, y) in enumerate(zip(first, second)) if x != y] == mine
    # back to the first pointer: the map comes from the cache (no encode), re-packed once more
    kernel(*ins)
    assert len(fake.encoded) == before + len(new) and fake.launches[2]["args"] == first


def test_alternating_pointers_reuse_their_packed_arguments(tmp_path, fakes, monkeypatch):
    """torch's caching allocator gives a new output one of a few blocks in turn: a pointer seen before by this
    launch state re-packs its stored argument, with no tensor-map lookup or encode."""
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "matmul_bf16_4096.yaml")
    ins = _inputs(rec)
    outs = [Tensor(rec.outputs[0].shape, rec.outputs[0].dtype, ptr=0x7C0000000000 + k * 0x100000000) for k in range(2)]
    kernel(*ins, out=outs[0])
    kernel(*ins, out=outs[1])
    built = []
    real = kernel._operand_arg
    monkeypatch.setattr(kernel, "_operand_arg", lambda st, i, p: built.append((i, p)) or real(st, i, p))
    for k in (0, 1, 0, 1):
        kernel(*ins, out=outs[k])
    assert built == []                                        # every argument came from the launch state's store
    assert fake.launches[-1]["args"] == fake.launches[1]["args"] and fake.launches[-2]["args"] == fake.launches[0]["args"]


def test_prepared_launcher_packs_once(tmp_path, fakes):
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "add_bf16.yaml")
    ptrs = [0x7F0000000000 + (i << 32) for i in range(len(rec.operands))]
    go = kernel._launcher(ptrs[:len(rec.inputs)], ptrs[len(rec.inputs):], stream=3)
    for _ in range(3):
        go()
    assert len(fake.params) == 1 and fake.sets == [] and len(fake.launches) == 3
    assert len(fake.encoded) == sum(a.kind == "tmap" for a in rec.kernel_args)


class TorchStream:
    def __init__(self, handle):
        self.cuda_stream = handle


class CupyStream:
    def __init__(self, handle):
        self.ptr = handle


class ProtocolStream:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def test_stream_objects_resolve_to_their_handle(tmp_path, fakes):
    fake, torch = fakes
    kernel, rec = _kernel(tmp_path, "add_bf16.yaml")
    ins = _inputs(rec)
    for stream, handle in [(5, 5), (TorchStream(9), 9), (CupyStream(11), 11), (ProtocolStream(13), 13),
                           (None, torch.stream), (0, 0)]:
        kernel(*ins, stream=stream)
        assert fake.launches[-1]["stream"] == handle
    assert len(fake.configs) == 1 and len(fake.params) == 1           # a new stream rebuilds nothing
    assert driver.stream_handle(ProtocolStream(2**63)) == 2**63
    for bad, what in [("s", "str"), (1.5, "float"), (True, "bool")]:
        with pytest.raises(ArgumentError, match=f"^stream: expected an int handle, a torch.cuda.Stream, a cupy "
                                                f"Stream or an object with __cuda_stream__, got {what}$"):
            kernel(*ins, stream=bad)
    with pytest.raises(ArgumentError, match=r"^stream: a stream handle is >= 0, got -1$"):
        kernel(*ins, stream=-1)


def test_torch_dtype_is_read_from_dtype(tmp_path, fakes):
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "add_bf16.yaml")
    x = rec.inputs[0]
    ins = _inputs(rec)
    assert ins[0].__cuda_array_interface__["typestr"] == "<f2"         # what older torch says for bf16
    kernel(*ins)                                                       # accepted as bf16, no DLPack
    v = arrays.device_view(ins[0], x.name)                             # the general path reads .dtype too
    assert (v.dtype, v.kind, v.device, v.strides) == ("bf16", "torch", 0, (x.shape[-1] * 2, 2))
    assert arrays.describe(ins[0], x.name) == ("torch", x.shape, "bf16")
    f16 = Tensor(x.shape, "f16")
    with pytest.raises(ArgumentError) as info:
        kernel(f16, *ins[1:])
    assert str(info.value) == f"{x.name}: expected bf16, got float16; convert with {x.name}.to(torch.bfloat16)"
    with pytest.raises(ArgumentError, match=f"^{x.name}: expected bf16, got float64"):
        kernel(Tensor(x.shape, "f64"), *ins[1:])
    assert len(fake.launches) == 1


def test_fast_path_hands_every_problem_to_the_checks(tmp_path, fakes):
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "add_bf16.yaml")
    x = rec.inputs[0]
    ins = _inputs(rec)
    rows, cols = x.shape
    cases = [
        (Tensor((rows, cols // 2)), f"{x.name}: expected shape {x.shape}, got {(rows, cols // 2)}"),
        (Tensor(x.shape, strides=(1, rows)), f"{x.name}: its innermost dimension has stride {rows}, not 1"),
        (Tensor(x.shape, device=("cpu", None)), f"{x.name}: lives on the CPU (torch); move it to a CUDA device"),
        (Tensor(x.shape, device=("meta", None)), f"{x.name}: lives on the meta device (torch)"),
        (Tensor(x.shape, ptr=0x7F0000000008), f"{x.name}: data pointer 0x7f0000000008 is not 16-byte aligned"),
        (Tensor(x.shape, device=("cuda", 1)), f"{rec.inputs[1].name}: is on cuda:0, but {x.name} is on cuda:1"),
    ]
    for bad, message in cases:
        with pytest.raises(ArgumentError) as info:
            kernel(bad, *ins[1:])
        assert str(info.value).startswith(message), (str(info.value), message)
    o = rec.outputs[0]
    with pytest.raises(ArgumentError, match=rf"^out\[{o.name}\]: expected shape"):
        kernel(*ins, out=Tensor((1, 16)))
    given = Tensor(o.shape, o.dtype, ptr=0x7C0000000000)
    assert kernel(*ins, out=given) is given
    assert len(fake.launches) == 1 and all(e[0] != given.ptr for e in fake.encoded[:-1])
    assert fake.encoded[-1][0] == given.ptr                            # the given output's map, launched over



def test_counter_allocated_once_per_device_never_on_the_call_path(tmp_path, fakes):
    fake, torch = fakes
    kernel, rec = _kernel(tmp_path, "attention_causal_bf16_4096_dynamic.yaml")
    slot = [i for i, a in enumerate(rec.kernel_args) if a.kind == "counter"]
    assert len(slot) == 1
    ins = _inputs(rec)
    kernel(*ins)
    assert [b.nbytes for b in fake.buffers] == [driver.COUNTER_SLOT * driver.COUNTER_SLOTS]
    base = fake.buffers[0].ptr
    kernel(*ins)
    kernel(*ins, stream=0x78)
    kernel(*ins)
    counters = [g["args"][slot[0]] for g in fake.launches]
    step = driver.COUNTER_SLOT
    assert counters == [driver.Arg.ptr(base), driver.Arg.ptr(base), driver.Arg.ptr(base + step),
                        driver.Arg.ptr(base)]
    assert fake.sets == slot * 2 and len(fake.params) == 1              # only the counter re-packed
    # captured launches: a counter each, never one an eager stream holds; no allocation
    fake.capturing = True
    kernel(*ins)
    kernel(*ins)
    graph = [g["args"][slot[0]] for g in fake.launches[-2:]]
    assert len(set(c.data for c in graph + counters[:3])) == 4 and len(fake.buffers) == 1
    fake.capturing = False
    kernel(*ins)
    assert fake.launches[-1]["args"][slot[0]] == driver.Arg.ptr(base)


def test_pool_exhausted_inside_capture_and_first_use_inside_capture(tmp_path, fakes, monkeypatch):
    fake, _ = fakes
    monkeypatch.setattr(driver, "COUNTER_SLOTS", 2)
    kernel, rec = _kernel(tmp_path, "attention_causal_bf16_4096_dynamic.yaml")
    ins = _inputs(rec)
    fake.capturing = True
    with pytest.raises(driver.CaptureError, match=r"allocates its tile counters, which is illegal while stream "
                                                  r"0x77 captures a CUDA graph; call the kernel once before"):
        kernel(*ins)
    assert fake.buffers == [] and fake.launches == []
    fake.capturing = False
    kernel(*ins)                          # slot 0: the stream's
    fake.capturing = True
    kernel(*ins)                          # slot 1: the graph's
    with pytest.raises(driver.CaptureError, match="tile counters of cuda:0 are held by captured graphs"):
        kernel(*ins)
    fake.capturing = False
    kernel(*ins, stream=0x99)             # outside capture the pool grows
    assert len(fake.buffers) == 2 and len(fake.launches) == 3


def test_numpy_inside_capture_is_refused_before_any_copy(tmp_path, fakes):
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "add_bf16.yaml")
    host = [np.zeros(o.shape, arrays.DTYPES[o.dtype]) for o in rec.inputs]
    fake.capturing = True
    with pytest.raises(driver.CaptureError) as info:
        kernel(*host)
    assert str(info.value) == (f"{rec.name}: {rec.inputs[0].name} is a numpy array: copying it is illegal while "
                               f"stream 0x0 captures a CUDA graph (numpy and jax arrays are not capturable); pass "
                               f"torch or cupy device arrays to a captured call")
    assert fake.buffers == [] and fake.launches == []
    fake.capturing = False
    kernel(*host)                         # outside capture numpy works as before: copied in, launched, copied back
    assert len(fake.launches) == 1


def test_first_load_failing_inside_capture_is_a_capture_error(tmp_path, fakes, monkeypatch):
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "add_bf16.yaml")

    class Failing:
        def __init__(self, cubin):
            raise driver.CudaError("cuModuleLoadData", None, "operation not permitted when stream is capturing")
    monkeypatch.setattr(driver, "Module", Failing)
    fake.capturing = True
    with pytest.raises(driver.CaptureError, match="the first launch at these sizes loads the kernel"):
        kernel(*_inputs(rec))


class PropertyStream:
    @property
    def __cuda_stream__(self):
        return (0, 21)


def test_stream_protocol_as_a_property_and_malformed():
    assert driver.stream_handle(PropertyStream()) == 21

    class Bad:
        def __cuda_stream__(self):
            return 5
    with pytest.raises(TypeError, match=r"^stream: Bad.__cuda_stream__\(\) must return \(version, handle\), got 5$"):
        driver.stream_handle(Bad())


def test_real_torch_cpu_tensors_if_installed(tmp_path):
    torch = pytest.importorskip("torch")
    kernel, rec = _kernel(tmp_path, "add_bf16.yaml")
    x = rec.inputs[0]
    cpu = [torch.zeros(o.shape, dtype=torch.bfloat16) for o in rec.inputs]
    assert arrays.describe(cpu[0], x.name) == ("torch", x.shape, "bf16")
    with pytest.raises(ArgumentError) as info:
        kernel(*cpu)
    assert str(info.value) == f"{x.name}: lives on the CPU (torch); move it to a CUDA device first"
    with pytest.raises(ArgumentError) as info:
        kernel(torch.zeros(x.shape), *cpu[1:])
    assert str(info.value) == f"{x.name}: expected bf16, got float32; convert with {x.name}.to(torch.bfloat16)"
    meta = [torch.zeros(o.shape, dtype=torch.bfloat16, device="meta") for o in rec.inputs]
    with pytest.raises(ArgumentError, match=f"^{x.name}: lives on the meta device \\(torch\\)"):
        kernel(*meta)


def _fake_encoder(calls):
    import ctypes as c
    proto = c.CFUNCTYPE(c.c_int, c.c_void_p, c.c_int, c.c_uint32, c.c_void_p, c.POINTER(c.c_uint64),
                        c.POINTER(c.c_uint64), c.POINTER(c.c_uint32), c.POINTER(c.c_uint32), c.c_int, c.c_int,
                        c.c_int, c.c_int)

    def encode(out, dt, rank, ptr, dims, strides, box, ones, interleave, swz, l2, oob):
        calls.append((out % 64, dt, rank, ptr, [dims[i] for i in range(rank)], [strides[i] for i in range(rank - 1)],
                      [box[i] for i in range(rank)], [ones[i] for i in range(rank)], interleave, swz, l2, oob))
        c.memmove(out, bytes([len(calls)]) * 128, 128)
        return 0
    fn = proto(encode)
    return fn


def test_direct_tensor_map_encoder_is_checked_against_cuda_bindings_once(monkeypatch):
    """encode_tiled calls cuTensorMapEncodeTiled through ctypes once its first map equals cuda.bindings' bytes;
    a mismatch turns the direct call off for the process."""
    calls, slow = [], []
    fn = _fake_encoder(calls)
    monkeypatch.setattr(driver, "_direct", [fn])
    monkeypatch.setattr(driver, "_direct_checked", False)
    monkeypatch.setattr(driver, "_encode_bindings", lambda ptr, lay, enums: slow.append(lay) or bytes([1]) * 128)
    got = driver.encode_tiled(0x7F0000000000, "bf16", [256, 512], [1024, 2], [64, 64], swizzle=128, oob_nan=True)
    assert got == bytes([1]) * 128 and len(slow) == 1
    (c,) = calls
    cu = driver.cu
    assert c[:8] == (0, int(cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16), 2, 0x7F0000000000,
                     [512, 256], [1024], [64, 64], [1, 1])            # driver order: innermost first
    assert c[8:] == (int(cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE),
                     int(cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B),
                     int(cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B),
                     int(cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA))
    driver.encode_tiled(0x7F0000000000, "f32", [8, 4, 64], [1024, 256, 4], [1, 4, 64])
    assert len(calls) == 2 and len(slow) == 1                       # checked: cuda.bindings not asked again
    assert calls[1][4:6] == ([64, 4, 8], [256, 1024])
    # a direct call that disagrees is never used again
    monkeypatch.setattr(driver, "_direct_checked", False)
    monkeypatch.setattr(driver, "_encode_bindings", lambda ptr, lay, enums: slow.append(lay) or bytes([9]) * 128)
    assert driver.encode_tiled(0x7F0000000000, "bf16", [256, 512], [1024, 2], [64, 64]) == bytes([9]) * 128
    assert driver._direct == [None]
    assert driver.encode_tiled(0x7F0000000000, "bf16", [256, 512], [1024, 2], [64, 64]) == bytes([9]) * 128
    assert len(calls) == 3 and len(slow) == 3


def test_tensor_map_and_launch_state_caches_are_bounded(tmp_path, fakes, monkeypatch):
    fake, _ = fakes
    monkeypatch.setattr(K, "TMAP_CACHE", 3)
    monkeypatch.setattr(K, "STATE_CACHE", 2)
    monkeypatch.setattr(K, "ARGS_BY_PTR", 2)       # the launch state's own store of packed arguments, bounded too
    kernel, rec = _kernel(tmp_path, "add_bf16.yaml")
    ins = _inputs(rec)
    x = rec.inputs[0]
    kernel(*ins)                                             # x, y, o: three maps, the cache full
    assert len(kernel._tmaps) == 3
    moved = [Tensor(x.shape, x.dtype, ptr=0x7A0000000000 + (i << 32)) for i in range(2)]
    for m in moved:
        kernel(m, *ins[1:])
    assert len(kernel._tmaps) == 3
    before = len(fake.encoded)
    kernel(*ins)                                             # x's first map was evicted: encoded again
    assert len(fake.encoded) == before + 1 and fake.encoded[-1][0] == ins[0].ptr
    for i in range(4):
        kernel._resolved(0, {"n": i})
    assert len(kernel._states) == 2 and list(kernel._states)[-1] == (0, (("n", 3),))


def test_launch_config_and_params_as_the_driver_reads_them(monkeypatch):
    """The real driver.Params / driver.LaunchConfig: cuLaunchKernelEx gets the config (geometry, cluster attribute,
    the stream set only when it changes) and a void*[n] whose entries point at aligned copies of each argument;
    Params.set rewrites one argument in place."""
    import ctypes
    seen = []

    def launch_ex(cfg, func, addr, extra):
        ptrs = (ctypes.c_void_p * 3).from_address(addr)
        seen.append((cfg, func, [ptrs[i] for i in range(3)], int(cfg.hStream), extra))
        return (driver.cu.CUresult.CUDA_SUCCESS,)
    monkeypatch.setattr(driver, "_launch_ex", launch_ex)
    args = [driver.Arg.i32(-7), driver.Arg.tensor_map(bytes(range(128))), driver.Arg.ptr(0x7F0000001230)]
    params = driver.Params(args)
    cfg = driver.LaunchConfig("F", grid=(4, 1, 1), block=(384, 1, 1), smem=1000, cluster=(2, 1, 1))
    cfg.launch(params, 5)
    c, func, addrs, stream, extra = seen[0]
    assert func == "F" and stream == 5 and extra == 0
    assert (c.gridDimX, c.blockDimX, c.sharedMemBytes, c.numAttrs) == (4, 384, 1000, 1)
    assert c.attrs[0].value.clusterDim.x == 2
    assert [a % arg.align for a, arg in zip(addrs, args)] == [0, 0, 0]
    assert [ctypes.string_at(a, len(arg.data)) for a, arg in zip(addrs, args)] == [arg.data for arg in args]
    params.set(2, driver.Arg.ptr(0x7F0000004560))
    cfg.launch(params, 5)
    cfg.launch(params, 9)
    assert seen[1][2] == addrs and ctypes.string_at(addrs[2], 8) == driver.Arg.ptr(0x7F0000004560).data
    assert ctypes.string_at(addrs[0], 4) == driver.Arg.i32(-7).data and seen[2][3] == 9
    with pytest.raises(ValueError, match="kernel argument 0: 8 bytes where 4 were packed"):
        params.set(0, driver.Arg.ptr(1))
    monkeypatch.setattr(driver, "_launch_ex", lambda *a: (driver.cu.CUresult.CUDA_ERROR_INVALID_VALUE,))
    with pytest.raises(driver.CudaError, match="cuLaunchKernelEx failed: CUDA_ERROR_INVALID_VALUE"):
        cfg.launch(params, 9)


def test_is_capturing_reads_the_capture_status(monkeypatch):
    cu = driver.cu
    answers = {1: (cu.CUresult.CUDA_SUCCESS, cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE),
               2: (cu.CUresult.CUDA_SUCCESS, cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE),
               0: (cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, None),
               3: (cu.CUresult.CUDA_ERROR_INVALID_HANDLE, None)}
    monkeypatch.setattr(cu, "cuStreamIsCapturing", lambda s: answers[int(s)])
    assert [driver.is_capturing(s) for s in (1, 2, 0)] == [False, True, True]
    with pytest.raises(driver.CudaError, match="cuStreamIsCapturing failed: CUDA_ERROR_INVALID_HANDLE"):
        driver.is_capturing(3)


def test_one_counter_pool_per_device(tmp_path, fakes):
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "attention_causal_bf16_4096_dynamic.yaml")
    on0 = _inputs(rec)
    on1 = [Tensor(o.shape, o.dtype, ptr=0x7B0000000000 + (i << 32), device=("cuda", 1))
           for i, o in enumerate(rec.inputs)]
    for ins in (on0, on1, on0, on1):
        kernel(*ins)
    assert [b.device for b in fake.buffers] == [0, 1]
    slot = next(i for i, a in enumerate(rec.kernel_args) if a.kind == "counter")
    assert [g["args"][slot] for g in fake.launches] == [driver.Arg.ptr(fake.buffers[d].ptr) for d in (0, 1, 0, 1)]


def test_dynamic_size_one_launch_state_per_shape(tmp_path, fakes):
    """A dynamic-size kernel: each new M gets its own launch state (its tensor maps, i32 sizes and grid); going back
    to an M seen before encodes and packs nothing."""
    fake, _ = fakes
    kernel, rec = _kernel(tmp_path, "matmul_bf16_dynamic.yaml")
    assert rec.sizes and any(a.kind == "i32" for a in rec.kernel_args)
    m = rec.sizes[0]
    assert m.name == "M"

    def ins(M):
        return [Tensor(tuple(M if d == "M" else d for d in o.shape), o.dtype, ptr=0x7F0000000000 + (i << 32))
                for i, o in enumerate(rec.inputs)]
    small, large = m.multiple_of * 2, m.multiple_of * 4
    out_small = kernel(*ins(small))
    assert out_small.shape[0] == small
    n_small = len(fake.encoded)
    out_large = kernel(*ins(large))
    assert out_large.shape[0] == large and len(fake.encoded) > n_small and len(fake.params) == 2
    i32 = [i for i, a in enumerate(rec.kernel_args) if a.kind == "i32"]
    assert [fake.launches[0]["args"][i] for i in i32] != [fake.launches[1]["args"][i] for i in i32]
    before = len(fake.encoded)
    kernel(*ins(small))
    assert len(fake.encoded) == before and fake.sets == [] and fake.launches[2] == fake.launches[0]
    with pytest.raises(ArgumentError, match=r"\(M\) is"):
        kernel(*ins(m.multiple_of + 1 if m.multiple_of > 1 else m.max + 1))


def test_a_launch_without_a_cluster_calls_libcuda_directly(monkeypatch):
    """cuLaunchKernel through ctypes (fewer microseconds per call than the cuda.bindings wrapper): the function's
    address, the geometry, the stream handle and the packed parameters' void*[n]; a failure is a CudaError."""
    seen = []

    def direct(func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        # ctypes declares no argument types: every argument arrives in its C form, pointers as c_void_p objects
        # (NULL: value None) and the geometry as ints, so that nothing is converted per call
        for ptr in (func, stream, params):
            assert isinstance(ptr, ctypes.c_void_p), ptr
        assert all(type(v) is int for v in (gx, gy, gz, bx, by, bz, smem)) and extra is None
        seen.append((func.value, (gx, gy, gz), (bx, by, bz), smem, stream.value or 0, params.value, extra))
        return 0
    monkeypatch.setattr(driver, "_direct_launch", [direct])
    monkeypatch.setattr(driver, "_launch_ex", lambda *a: pytest.fail("a launch without a cluster used cuda.bindings"))
    params = driver.Params([driver.Arg.i32(3), driver.Arg.ptr(0x7F0000001230)])
    cfg = driver.LaunchConfig(0x5000, grid=(132, 1, 1), block=(256, 1, 1), smem=4096)
    cfg.launch(params, 7)
    cfg.launch(params, 0)                                               # the legacy stream: NULL
    assert seen == [(0x5000, (132, 1, 1), (256, 1, 1), 4096, 7, params.address, None),
                    (0x5000, (132, 1, 1), (256, 1, 1), 4096, 0, params.address, None)]
    monkeypatch.setattr(driver, "_direct_launch", [lambda *a: 1])       # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(driver.CudaError, match="cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE"):
        cfg.launch(params, 7)
