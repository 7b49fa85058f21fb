"""A kernel's zeroed scratch buffer (a "workspace" kernel argument, schedgen/plan/launch.py) on the CPU, through the
fake driver (fake_driver.py) and the fake torch of test_call_path.py.

A torch call takes it from torch's caching allocator (issue 43: torch's memory accounting and CUDA graphs see it):
torch.empty(nbytes, uint8) on the call's device, its zeroed range memset on the launch's stream, its pointer packed
into the argument, the block recorded on the launch's stream when that is not torch's current one; the driver's pool
is never touched, and nothing needs a warm-up before a capture. Every other caller (raw DLPack / CUDA Array
Interface objects, the pointer launchers) gets it from the driver's pool: allocated and zeroed on the launch's own
stream just before the launch and freed just after it (stream-ordered, so a CUDA-graph capture records allocation,
memset and free nodes), sized from the call's sizes, packed into the right argument and re-packed only when the
pool hands back another address; the pool's first use inside a capture is a located CaptureError. launch.json
refuses a malformed size."""
from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import SPECS_DIR
from fake_driver import FakeDriver
from schedgen.frontend.validate import load_spec
from schedgen.plan import dims
from schedgen.plan import launch as L
from schedgen.plan import plan
from schedgen.runtime import driver
from schedgen.runtime import kernel as K
from test_arrays import FakeDLPackCUDA
from test_call_path import DT, Tensor, Torch


@pytest.fixture
def fakes(monkeypatch):
    return FakeDriver(monkeypatch), Torch(monkeypatch)


def _with_workspace(tmp_path, name, nbytes, at=1):
    """The package of a bundled spec whose record carries a workspace argument of `nbytes` at position `at`."""
    spec, src = load_spec(str(SPECS_DIR / name))
    rec = L.launch_record(plan(spec, src))
    args = list(rec.kernel_args)
    args.insert(at, L.Arg(kind="workspace", value=nbytes))
    rec = dataclasses.replace(rec, kernel_args=tuple(args))
    (tmp_path / "launch.json").write_text(rec.to_json())
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    return K.load_package(tmp_path), rec


def _ins(rec, shape_of=None, base=0x7F0000000000):
    return [Tensor(shape_of(o) if shape_of else o.shape, o.dtype, ptr=base + (i << 32)) for i, o in
            enumerate(rec.inputs)]


_DL = {"bf16": (4, 16), "f16": (2, 16), "f32": (2, 32)}


def _raw(rec, shape_of=None, base=0x7F0000000000):
    """The operands (inputs, then outputs) as raw DLPack device arrays: a caller with no allocator of its own."""
    return [FakeDLPackCUDA(tuple(shape_of(o) if shape_of else o.shape), *_DL[o.dtype], ptr=base + (i << 32))
            for i, o in enumerate(rec.operands)]


def _call_raw(kernel, rec, stream=None, **kw):
    arrs = _raw(rec, **kw)
    n = len(rec.inputs)
    return kernel(*arrs[:n], out=tuple(arrs[n:]), stream=stream)


def _spaces(torch):
    """The workspace tensors torch's allocator gave (uint8, one dimension)."""
    return [t for t in torch.made if t.dtype is DT["u8"]]


# ---------------------------------------------------------------------------------------------- torch: its allocator

def test_a_torch_call_takes_its_workspace_from_torchs_allocator(tmp_path, fakes):
    """torch.empty(4096, uint8) on the call's device each call (torch's current stream, the launch's), zeroed on
    the launch's stream, its pointer packed; no pool, no allocation or free of the driver's."""
    fake, torch = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 4096)
    ins = _ins(rec)
    kernel(*ins)
    kernel(*ins, stream=torch.stream)                  # torch's current stream, given: the same
    kernel(*ins)
    spaces = _spaces(torch)
    assert [t.shape for t in spaces] == [(4096,)] * 3 and all(t.device.index == 0 for t in spaces)
    assert [e[0] for e in fake.events] == ["memset0", "launch"] * 3 and fake.pools == [] and torch.raw == []
    memsets = [e for e in fake.events if e[0] == "memset0"]
    assert [(m[1], m[2], m[3]) for m in memsets] == [(torch.stream, t.ptr, 4096) for t in spaces]
    assert [g["stream"] for g in fake.launches] == [torch.stream] * 3
    assert all(g["args"][1] == driver.Arg.ptr(spaces[0].ptr) for g in fake.launches)
    assert len(fake.params) == 1 and fake.sets == []   # torch's allocator gave the same block back: packed once


def test_a_launch_on_another_stream_allocates_on_that_stream(tmp_path, fakes):
    """stream= another stream than torch's current one: the block is allocated on the launch's stream
    (caching_allocator_alloc), zeroed there and given back after the launch (caching_allocator_delete:
    stream-ordered on that stream), so no work queued on torch's current stream can still be using it."""
    fake, torch = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 4096)
    ins = _ins(rec)
    kernel(*ins, stream=0x55)
    (alloc, free) = torch.raw
    assert alloc[:4] == ("alloc", 4096, 0, 0x55) and free == ("free", alloc[4])
    assert fake.events == [("memset0", 0x55, alloc[4], 4096), ("launch", 0x55)] and _spaces(torch) == []
    assert fake.launches[0]["args"][1] == driver.Arg.ptr(alloc[4]) and fake.pools == []


def test_a_launch_on_a_stream_another_api_captures_takes_the_pool(tmp_path, fakes):
    """A stream captured by something other than torch (torch's current stream is another): torch's allocator
    knows nothing of that capture, so the workspace comes from the driver's pool (graph-owned allocation nodes)."""
    fake, torch = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 1024)
    ins = _ins(rec)
    kernel(*ins, stream=0x66)                         # a warm-up on torch tensors: torch's allocator, no pool
    fake.capturing = True
    with pytest.raises(driver.CaptureError, match=r"^add_bf16: stream 0x66 is captured by something other than "
                                                  r"torch .* call the kernel once on raw CUDA arrays"):
        kernel(*ins, stream=0x66)
    fake.capturing = False
    _call_raw(kernel, rec, stream=0x66)               # a raw call makes the pool
    fake.capturing = True
    kernel(*ins, stream=0x66)
    assert [e[0] for e in fake.events[6:]] == ["alloc", "memset0", "launch", "free"] and fake.pools == [0]
    assert len(torch.raw) == 2                          # the eager torch call's alloc and free only


def test_a_new_block_is_repacked_alone(tmp_path, fakes):
    fake, torch = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 256, at=0)
    ins = _ins(rec)
    kernel(*ins)
    torch.blocks[(256,)] += 0x1000                      # the allocator hands out another block
    kernel(*ins)
    assert fake.sets == [0]
    assert fake.launches[1]["args"][0] == driver.Arg.ptr(_spaces(torch)[1].ptr) != fake.launches[0]["args"][0]
    assert fake.launches[1]["args"][1:] == fake.launches[0]["args"][1:]


def test_sized_from_the_calls_sizes(tmp_path, fakes):
    fake, torch = fakes
    spec, src = load_spec(str(SPECS_DIR / "matmul_bf16_dynamic.yaml"))
    m = L.launch_record(plan(spec, src)).sizes[0]
    kernel, rec = _with_workspace(tmp_path, "matmul_bf16_dynamic.yaml", dims.size(m.name) * 64)
    for rows in (m.multiple_of * 2, m.multiple_of * 4, m.multiple_of * 2):
        kernel(*_ins(rec, lambda o, rows=rows: tuple(rows if d == m.name else d for d in o.shape)))
    assert [t.shape[0] for t in _spaces(torch)] == [m.multiple_of * 2 * 64, m.multiple_of * 4 * 64,
                                                    m.multiple_of * 2 * 64]
    assert fake.pools == []


def test_a_torch_call_captures_with_no_warm_up_and_no_pool(tmp_path, fakes):
    """Inside a capture the workspace is an allocation of the captured code (torch's graph pool, not modelled by
    the fakes) and a memset node on the capturing stream: nothing to create first, so no CaptureError."""
    fake, torch = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 1024)
    fake.capturing = True
    kernel(*_ins(rec))
    assert [e[0] for e in fake.events] == ["memset0", "launch"] and fake.pools == [] and len(_spaces(torch)) == 1


def test_a_failed_torch_launch_leaves_nothing_to_free(tmp_path, fakes, monkeypatch):
    fake, torch = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 1024)
    ins = _ins(rec)
    kernel(*ins)
    st = next(iter(kernel._states.values()))

    def boom(params, stream):
        raise driver.CudaError("cuLaunchKernel", None, "no")
    monkeypatch.setattr(st.config, "launch", boom)
    with pytest.raises(driver.CudaError):
        kernel(*ins)
    assert [e[0] for e in fake.events[2:]] == ["memset0"] and fake.pools == []


def test_the_general_path_under_torch_and_the_prepared_launcher(tmp_path, fakes):
    """A torch call the fast path hands on (here a DLPack output beside torch inputs) and kernel.prepare over
    torch tensors: torch's allocator too (on prepare's fixed stream, not torch's current one)."""
    fake, torch = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 512)
    ins = _ins(rec)
    out = _raw(rec)[len(rec.inputs)]
    kernel(*ins, out=out)
    go = kernel.prepare(ins, [Tensor(rec.outputs[0].shape, rec.outputs[0].dtype, ptr=0x7C0000000000)], stream=9)
    go()
    assert [t.shape for t in _spaces(torch)] == [(512,)] and fake.pools == []
    assert [(e[0], e[1]) for e in fake.events] == [("memset0", torch.stream), ("launch", torch.stream),
                                                   ("memset0", 9), ("launch", 9)]
    assert [e[:4] for e in torch.raw if e[0] == "alloc"] == [("alloc", 512, 0, 9)] and len(torch.raw) == 2


def test_a_zeroed_prefix_is_all_the_launch_memsets(tmp_path, fakes):
    """A workspace whose kernel writes its tail before reading it (stream-K's partial tiles after their flags) gets
    only its first `zero` bytes zeroed, from torch's allocator and from the pool alike; the record without the field
    (every other kernel) zeroes all of it."""
    fake, torch = fakes
    spec, src = load_spec(str(SPECS_DIR / "add_bf16.yaml"))
    rec = L.launch_record(plan(spec, src))
    rec = dataclasses.replace(rec, kernel_args=rec.kernel_args + (L.Arg(kind="workspace", value=4096, zero=64),))
    text = rec.to_json()
    assert json.loads(text)["kernel_args"][-1]["zero"] == 64 and L.loads(text).kernel_args[-1].zero == 64
    assert "zero" not in json.loads(L.launch_record(plan(spec, src)).to_json())["kernel_args"][0]
    (tmp_path / "launch.json").write_text(text)
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    kernel = K.load_package(tmp_path)
    kernel(*_ins(rec))
    assert [t.shape for t in _spaces(torch)] == [(4096,)]
    assert [(e[0], e[3]) for e in fake.events if e[0] == "memset0"] == [("memset0", 64)]
    _call_raw(kernel, rec)
    assert [(e[0], e[3]) for e in fake.events[2:] if e[0] in ("alloc", "memset0")] == [("alloc", 4096),
                                                                                      ("memset0", 64)]


def test_the_wgmma_attention_backward_launches_with_its_dq_workspace(tmp_path, fakes):
    """The planner's record (no edit): the kernel's last argument is the dQ workspace of the plan's size, from
    torch's allocator, zeroed on the stream before the launch of its key blocks."""
    fake, torch = fakes
    overrides = {"schedule.backends": ["cuda"], "schedule.pipeline.kind": "warp_specialized"}
    spec, src = load_spec(str(SPECS_DIR / "attention_backward_causal_bf16_4096.yaml"), overrides)
    p = plan(spec, src)
    rec = L.launch_record(p)
    (tmp_path / "launch.json").write_text(rec.to_json())
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    kernel = K.load_package(tmp_path)
    kernel(*_ins(rec))
    (space,) = _spaces(torch)
    assert space.shape == (p.wgmma.workspace_bytes,) and p.wgmma.workspace_bytes == rec.kernel_args[-1].value
    assert [e[0] for e in fake.events] == ["memset0", "launch"] and fake.events[0][2] == space.ptr
    assert fake.launches[0]["args"][-1] == driver.Arg.ptr(space.ptr)
    assert fake.launches[0]["grid"][0] == p.wgmma.dkv_blocks and fake.pools == []


def test_the_op_of_a_kernel_with_a_workspace_has_no_workspace_input(tmp_path):
    """The workspace is the op's own allocation (made inside its real implementation): the schema and a
    torch.compile graph hold the operands only."""
    torch = pytest.importorskip("torch")
    overrides = {"schedule.backends": ["cuda"], "schedule.pipeline.kind": "warp_specialized"}
    spec, src = load_spec(str(SPECS_DIR / "attention_backward_bf16_4096.yaml"), overrides)
    rec = L.launch_record(plan(spec, src))
    assert any(a.kind == "workspace" for a in rec.kernel_args)
    (tmp_path / "launch.json").write_text(rec.to_json())
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    kernel = K.load_package(tmp_path, torch_op=True)
    op = kernel.torch_op
    assert [a.name for a in op.op._schema.arguments] == [o.name for o in rec.inputs]
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    torch._dynamo.reset()
    f = torch.compile(lambda *a: kernel(*a), fullgraph=True, backend=backend)
    args = [torch.empty(o.shape, dtype=getattr(torch, {"bf16": "bfloat16", "f32": "float32"}[o.dtype]),
                        device="meta") for o in rec.inputs]
    outs = f(*args)
    assert [tuple(t.shape) for t in outs] == [o.shape for o in rec.outputs]
    placeholders = [n for n in graphs[0].graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(rec.inputs)
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------- the driver's pool

def test_raw_arrays_take_the_pool_zeroed_on_the_launch_stream_and_freed_after(tmp_path, fakes):
    fake, torch = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 4096)
    _call_raw(kernel, rec)
    _call_raw(kernel, rec, stream=0x55)
    _call_raw(kernel, rec)
    kinds = [e[0] for e in fake.events]
    assert kinds == ["alloc", "memset0", "launch", "free"] * 3
    streams = [e[1] for e in fake.events]
    assert streams == [0] * 4 + [0x55] * 4 + [0] * 4                 # DLPack arrays: the legacy stream
    allocs = [e for e in fake.events if e[0] == "alloc"]
    assert [e[3] for e in allocs] == [4096] * 3
    memsets = [e for e in fake.events if e[0] == "memset0"]
    frees = [e for e in fake.events if e[0] == "free"]
    assert [(m[2], m[3]) for m in memsets] == [(a[2], a[3]) for a in allocs] and [f[2] for f in frees] == [
        a[2] for a in allocs]
    # the argument at index 1 is the buffer's pointer, packed once (the pool hands back the same address)
    assert all(g["args"][1] == driver.Arg.ptr(allocs[0][2]) for g in fake.launches)
    assert len(fake.params) == 1 and fake.sets == [] and fake.pools == [0] and _spaces(torch) == []


def test_a_new_pool_address_is_repacked_alone(tmp_path, fakes, monkeypatch):
    fake, _ = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 256, at=0)
    _call_raw(kernel, rec)
    real = driver.workspace_alloc
    monkeypatch.setattr(driver, "workspace_alloc", lambda pool, n, s, z=None: real(pool, n, s, z) + 0x1000)
    _call_raw(kernel, rec)
    assert fake.sets == [0]
    assert fake.launches[1]["args"][0] != fake.launches[0]["args"][0]
    assert fake.launches[1]["args"][1:] == fake.launches[0]["args"][1:]


def test_pointer_launchers_take_the_pool_sized_from_the_calls_sizes(tmp_path, fakes):
    fake, torch = fakes
    spec, src = load_spec(str(SPECS_DIR / "matmul_bf16_dynamic.yaml"))
    m = L.launch_record(plan(spec, src)).sizes[0]
    kernel, rec = _with_workspace(tmp_path, "matmul_bf16_dynamic.yaml", dims.size(m.name) * 64)
    ptrs = [0x7F0000000000 + (i << 32) for i in range(len(rec.operands))]
    n = len(rec.inputs)
    for rows in (m.multiple_of * 2, m.multiple_of * 4, m.multiple_of * 2):
        kernel._launcher(ptrs[:n], ptrs[n:], 0, sizes={m.name: rows})()
    assert [e[3] for e in fake.events if e[0] == "alloc"] == [m.multiple_of * 2 * 64, m.multiple_of * 4 * 64,
                                                             m.multiple_of * 2 * 64]
    assert _spaces(torch) == []


def test_captured_pool_launches_record_their_own_zeroing(tmp_path, fakes):
    """Inside a capture the buffer is allocated, zeroed and freed on the capturing stream like any other call (the
    graph's nodes): nothing is shared with eager calls and the pool is not grown."""
    fake, torch = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 1024)
    _call_raw(kernel, rec, stream=0x66)               # warm-up: creates the pool
    fake.capturing = True
    _call_raw(kernel, rec, stream=0x66)
    assert [e[0] for e in fake.events[4:]] == ["alloc", "memset0", "launch", "free"]
    assert fake.events[4][4] is True and fake.pools == [0]


def test_the_pools_first_use_inside_capture_is_refused_before_any_launch(tmp_path, fakes):
    fake, _ = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 1024)
    fake.capturing = True
    with pytest.raises(driver.CaptureError, match="creates the workspace memory pool"):
        _call_raw(kernel, rec, stream=0x66)
    assert fake.launches == [] and fake.events == []


def test_a_failed_pool_launch_still_frees(tmp_path, fakes, monkeypatch):
    fake, _ = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 1024)
    _call_raw(kernel, rec)
    st = next(iter(kernel._states.values()))

    def boom(params, stream):
        raise driver.CudaError("cuLaunchKernel", None, "no")
    monkeypatch.setattr(st.config, "launch", boom)
    with pytest.raises(driver.CudaError):
        _call_raw(kernel, rec)
    assert [e[0] for e in fake.events[4:]] == ["alloc", "memset0", "free"]


def test_kernels_without_a_workspace_touch_no_pool(tmp_path, fakes):
    fake, torch = fakes
    spec, src = load_spec(str(SPECS_DIR / "add_bf16.yaml"))
    rec = L.launch_record(plan(spec, src))
    (tmp_path / "launch.json").write_text(rec.to_json())
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    kernel = K.load_package(tmp_path)
    kernel(*_ins(rec))
    _call_raw(kernel, rec)
    assert fake.pools == [] and [e[0] for e in fake.events] == ["launch"] * 2 and _spaces(torch) == []


@pytest.mark.parametrize("value, text", [(0, "a workspace is a positive multiple of 16 bytes, got 0"),
                                         (100, "a workspace is a positive multiple of 16 bytes, got 100")])
def test_launch_json_refuses_a_bad_size(value, text):
    spec, src = load_spec(str(SPECS_DIR / "add_bf16.yaml"))
    data = L.launch_record(plan(spec, src)).to_dict()
    data["kernel_args"].append({**data["kernel_args"][0], "kind": "workspace", "operand": -1, "value": value})
    with pytest.raises(L.LaunchRecordError, match=rf"kernel_args\[{len(data['kernel_args']) - 1}\]\.value: {text}"):
        L.loads(json.dumps(data))


@pytest.mark.parametrize("zero, text", [(0, "got 0"), (6, "got 6"), (2048, "at most its size"), (-2, "got -2")])
def test_launch_json_refuses_a_bad_zeroed_prefix(zero, text):
    spec, src = load_spec(str(SPECS_DIR / "add_bf16.yaml"))
    data = L.launch_record(plan(spec, src)).to_dict()
    data["kernel_args"].append({**data["kernel_args"][0], "kind": "workspace", "operand": -1, "value": 1024,
                                "zero": zero})
    with pytest.raises(L.LaunchRecordError, match=rf"kernel_args\[{len(data['kernel_args']) - 1}\]\.zero: .*{text}"):
        L.loads(json.dumps(data))




# ---------------------------------------------------------------------------------------------- on the GPU

WORKSPACE_ON_GPU = """
import sys
sys.path.insert(0, sys.argv[1])
import importlib
import torch
from schedgen.runtime import driver
mod = importlib.import_module(sys.argv[2])
f = getattr(mod, sys.argv[2])
kernel = mod.kernel
space = next(a for a in kernel.launch.kernel_args if a.kind == "workspace").value
torch.manual_seed(0)
def inputs():
    ins = []
    for o in kernel.inputs:
        dt = torch.float32 if o.dtype == "f32" else torch.bfloat16
        t = torch.randn(o.shape, device="cuda", dtype=dt)
        # a log-sum-exp near the true one of N(0, 1) scores over 4096 keys (log 4096 + 1/2): gradients of size
        ins.append(t * 0.1 + 8.8 if o.name == "lse" else t)
    return ins
ins = inputs()
ref = f(*ins)                                           # the first launch loads the module (outside any capture)
torch.cuda.synchronize()
# torch's accounting sees the workspace: the call's peak holds it beside the outputs
before = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
got = f(*ins)
torch.cuda.synchronize()
outs = sum(t.numel() * t.element_size() for t in got)
assert torch.cuda.max_memory_allocated() - before >= outs + space, (torch.cuda.max_memory_allocated() - before,
                                                                   outs, space)
assert torch.cuda.memory_allocated() - before == outs    # the workspace went back after the launch
def close(a, b):   # dQ sums through atomics: equal up to the order of its f32 additions
    return all(torch.allclose(x.float(), y.float(), rtol=2e-2, atol=1e-2 * float(y.float().abs().max()))
               for x, y in zip(a, b))
assert all(float(t.float().abs().max()) > 0 for t in ref) and close(got, ref)
# another stream (caching_allocator_alloc on it)
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
other = f(*ins, stream=s)
s.synchronize()
assert close(other, ref)
# a CUDA graph: the workspace is the captured code's allocation (no warm-up for it), zeroed at every replay
static = [t.clone() for t in ins]
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    captured = f(*static)
for _ in range(2):
    fresh = inputs()
    for dst, src in zip(static, fresh):
        dst.copy_(src)
    g.replay()
    torch.cuda.synchronize()
    assert close(captured, f(*fresh)), "a replay differs from an eager call"
assert driver._workspace_pools == {}, "the driver's workspace pool was used on the torch path"
print("workspace on gpu ok")
"""


@pytest.mark.gpu
def test_torch_workspace_is_counted_and_captured_on_gpu(tmp_path):
    """On the H200 (a fresh interpreter): the wgmma attention backward's dQ workspace comes from torch's allocator
    (max_memory_allocated holds it, memory_allocated is back after the call), on another stream too, and a
    torch.cuda.graph capture with no warm-up of its own replays like eager calls; the driver's pool is never made."""
    import importlib.util
    import os
    import subprocess
    import sys
    from conftest import ROOT
    from schedgen.build import build_spec, package
    from schedgen.cache import Cache
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    overrides = {"schedule.backends": ["cuda"], "schedule.pipeline.kind": "warp_specialized"}
    built = build_spec(str(SPECS_DIR / "attention_backward_bf16_4096.yaml"), overrides, cache=Cache(tmp_path / "c"))
    package(built, tmp_path / "pkgs")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", WORKSPACE_ON_GPU, str(tmp_path / "pkgs"), built.plan.launch.name],
                         capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0 and "workspace on gpu ok" in res.stdout, res.stderr[-3000:]
