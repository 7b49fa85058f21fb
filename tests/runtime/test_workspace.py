"""A kernel's zeroed scratch buffer (a "workspace" kernel argument, schedgen/plan/launch.py) on the CPU, through the
fake driver (fake_driver.py): every launch gets its buffer allocated and zeroed on the launch's own stream just
before the launch and freed just after it (stream-ordered, so a CUDA-graph capture records allocation, memset and
free nodes), sized from the call's sizes, packed into the right argument and re-packed only when the pool hands back
another address; the first use inside a capture is a located CaptureError; launch.json refuses a malformed size."""
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
from test_call_path import Tensor, Torch


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


def test_zeroed_on_the_launch_stream_before_each_launch_and_freed_after(tmp_path, fakes):
    fake, torch = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 4096)
    ins = _ins(rec)
    kernel(*ins)
    kernel(*ins, stream=0x55)
    kernel(*ins)
    kinds = [e[0] for e in fake.events]
    assert kinds == ["alloc", "memset0", "launch", "free"] * 3
    streams = [e[1] for e in fake.events]
    assert streams == [torch.stream] * 4 + [0x55] * 4 + [torch.stream] * 4
    allocs = [e for e in fake.events if e[0] == "alloc"]
    assert [e[3] for e in allocs] == [4096] * 3
    memsets = [e for e in fake.events if e[0] == "memset0"]
    frees = [e for e in fake.events if e[0] == "free"]
    assert [(m[2], m[3]) for m in memsets] == [(a[2], a[3]) for a in allocs] and [f[2] for f in frees] == [
        a[2] for a in allocs]
    # the argument at index 1 is the buffer's pointer, packed once (the pool hands back the same address)
    assert all(g["args"][1] == driver.Arg.ptr(allocs[0][2]) for g in fake.launches)
    assert len(fake.params) == 1 and fake.sets == [] and fake.pools == [0]


def test_a_new_address_is_repacked_alone(tmp_path, fakes, monkeypatch):
    fake, _ = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 256, at=0)
    ins = _ins(rec)
    kernel(*ins)
    real = driver.workspace_alloc
    monkeypatch.setattr(driver, "workspace_alloc", lambda pool, n, s, z=None: real(pool, n, s, z) + 0x1000)
    kernel(*ins)
    assert fake.sets == [0]
    assert fake.launches[1]["args"][0] != fake.launches[0]["args"][0]
    assert fake.launches[1]["args"][1:] == fake.launches[0]["args"][1:]


def test_sized_from_the_calls_sizes(tmp_path, fakes):
    fake, _ = fakes
    spec, src = load_spec(str(SPECS_DIR / "matmul_bf16_dynamic.yaml"))
    m = L.launch_record(plan(spec, src)).sizes[0]
    kernel, rec = _with_workspace(tmp_path, "matmul_bf16_dynamic.yaml", dims.size(m.name) * 64)
    for rows in (m.multiple_of * 2, m.multiple_of * 4, m.multiple_of * 2):
        kernel(*_ins(rec, lambda o, rows=rows: tuple(rows if d == m.name else d for d in o.shape)))
    assert [e[3] for e in fake.events if e[0] == "alloc"] == [m.multiple_of * 2 * 64, m.multiple_of * 4 * 64,
                                                             m.multiple_of * 2 * 64]


def test_captured_launches_record_their_own_zeroing(tmp_path, fakes):
    """Inside a capture the buffer is allocated, zeroed and freed on the capturing stream like any other call (the
    graph's nodes): nothing is shared with eager calls and the pool is not grown."""
    fake, torch = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 1024)
    ins = _ins(rec)
    kernel(*ins)                                   # warm-up: creates the pool
    fake.capturing = True
    kernel(*ins)
    assert [e[0] for e in fake.events[4:]] == ["alloc", "memset0", "launch", "free"]
    assert fake.events[4][4] is True and fake.pools == [0]


def test_first_use_inside_capture_is_refused_before_any_launch(tmp_path, fakes):
    fake, _ = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 1024)
    fake.capturing = True
    with pytest.raises(driver.CaptureError, match="creates the workspace memory pool"):
        kernel(*_ins(rec))
    assert fake.launches == [] and fake.events == []


def test_a_failed_launch_still_frees(tmp_path, fakes, monkeypatch):
    fake, _ = fakes
    kernel, rec = _with_workspace(tmp_path, "add_bf16.yaml", 1024)
    ins = _ins(rec)
    kernel(*ins)
    st = next(iter(kernel._states.values()))

    def boom(params, stream):
        raise driver.CudaError("cuLaunchKernel", None, "no")
    monkeypatch.setattr(st.config, "launch", boom)
    with pytest.raises(driver.CudaError):
        kernel(*ins)
    assert [e[0] for e in fake.events[4:]] == ["alloc", "memset0", "free"]


def test_kernels_without_a_workspace_touch_no_pool(tmp_path, fakes):
    fake, _ = fakes
    spec, src = load_spec(str(SPECS_DIR / "add_bf16.yaml"))
    rec = L.launch_record(plan(spec, src))
    (tmp_path / "launch.json").write_text(rec.to_json())
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    K.load_package(tmp_path)(*_ins(rec))
    assert fake.pools == [] and [e[0] for e in fake.events] == ["launch"]


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


def test_a_zeroed_prefix_is_all_the_launch_memsets(tmp_path, fakes):
    """A workspace whose kernel writes its tail before reading it (stream-K's partial tiles after their flags) gets
    only its first `zero` bytes zeroed; the record without the field (every other kernel) zeroes all of it."""
    fake, _ = fakes
    spec, src = load_spec(str(SPECS_DIR / "add_bf16.yaml"))
    rec = L.launch_record(plan(spec, src))
    rec = dataclasses.replace(rec, kernel_args=rec.kernel_args + (L.Arg(kind="workspace", value=4096, zero=64),))
    text = rec.to_json()
    assert json.loads(text)["kernel_args"][-1]["zero"] == 64 and L.loads(text).kernel_args[-1].zero == 64
    assert "zero" not in json.loads(L.launch_record(plan(spec, src)).to_json())["kernel_args"][0]
    (tmp_path / "launch.json").write_text(text)
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    K.load_package(tmp_path)(*_ins(rec))
    assert [(e[0], e[3]) for e in fake.events if e[0] in ("alloc", "memset0")] == [("alloc", 4096), ("memset0", 64)]


def test_the_wgmma_attention_backward_launches_with_its_dq_workspace(tmp_path, fakes):
    """The planner's record (no edit): the kernel's last argument is the dQ workspace of the plan's size, zeroed on
    the stream before the launch of its key blocks."""
    fake, torch = fakes
    overrides = {"schedule.backends": ["cuda"], "schedule.pipeline.kind": "warp_specialized"}
    spec, src = load_spec(str(SPECS_DIR / "attention_backward_causal_bf16_4096.yaml"), overrides)
    p = plan(spec, src)
    rec = L.launch_record(p)
    (tmp_path / "launch.json").write_text(rec.to_json())
    (tmp_path / "kernel.cubin").write_bytes(b"CUBIN")
    kernel = K.load_package(tmp_path)
    kernel(*_ins(rec))
    alloc = next(e for e in fake.events if e[0] == "alloc")
    assert alloc[3] == p.wgmma.workspace_bytes == rec.kernel_args[-1].value
    assert [e[0] for e in fake.events] == ["alloc", "memset0", "launch", "free"]
    assert fake.launches[0]["args"][-1] == driver.Arg.ptr(alloc[2])
    assert fake.launches[0]["grid"][0] == p.wgmma.dkv_blocks
