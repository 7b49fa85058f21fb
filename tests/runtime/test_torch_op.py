"""The torch custom op of a built package (schedgen/runtime/torch_op.py), on the CPU: registration, the fake
implementation (meta tensors, FakeTensorMode), torch.compile(fullgraph=True) at several values of a dynamic size
with one compilation, and argument errors at trace time. GPU tests (opcheck, results against numpy) at the end.

The dynamic-size package here is a static build of add_bf16 whose launch record is rewritten so that M (dimension
0 of every operand) is a dynamic size: the op layer reads nothing but the record, so this is what it would get
from a planner that takes dynamic sizes; it is never launched (no GPU test uses it)."""
from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import sys

import pytest

from conftest import import_package as _import, SPECS_DIR, spec_files
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.plan.launch import Ring
from schedgen.runtime.arrays import ArgumentError
from schedgen.verify import call_sizes

from schedgen.runtime import torch_op

torch = None   # imported by the fixture below, not at collection: other tests check that nothing imported torch


@pytest.fixture(scope="module", autouse=True)
def _torch():
    global torch
    torch = pytest.importorskip("torch")


def CompileCounter():
    from torch._dynamo.testing import CompileCounter
    return CompileCounter()


def CompileCounterWithBackend(name):
    from torch._dynamo.testing import CompileCounterWithBackend
    return CompileCounterWithBackend(name)


def FakeTensorMode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode()

M_MAX, M_STEP = 4096, 32




@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("torchop")
    b = build_spec(SPECS_DIR / "add_bf16.yaml", {"M": 256, "N": 512}, cache=Cache(tmp / "c"))
    return tmp, package(b, tmp / "static")


@pytest.fixture(scope="module")
def static(built):
    tmp, folder = built
    return _import(folder.parent, "add_bf16")


def _dynamic_copy(src, dest, outputs=1):
    """A copy of the add_bf16 package whose record makes M dynamic (and, with outputs=2, adds a second output)."""
    shutil.copytree(src, dest)
    rec = json.loads((dest / "launch.json").read_text())
    rec["sizes"] = [{"name": "M", "min": M_STEP, "max": M_MAX, "multiple_of": M_STEP}]
    for o in rec["inputs"] + rec["outputs"]:
        o["shape"][0] = "M"
    if outputs == 2:
        rec["outputs"].append(dict(rec["outputs"][0], name="o2", dtype="f32", itemsize=4))
    (dest / "launch.json").write_text(json.dumps(rec))
    return dest


@pytest.fixture(scope="module")
def dynamic(built):
    tmp, folder = built
    return _import(_dynamic_copy(folder, tmp / "dyn" / "add_bf16").parent, "add_bf16")


@pytest.fixture(scope="module")
def two_outputs(built):
    tmp, folder = built
    return _import(_dynamic_copy(folder, tmp / "two" / "add_bf16", outputs=2).parent, "add_bf16")


def meta(*shape, dtype="bfloat16"):
    return torch.empty(shape, dtype=getattr(torch, dtype) if isinstance(dtype, str) else dtype, device="meta")


# ---------------------------------------------------------------------------------------------- registration

def test_the_op_is_registered_under_torch_ops_schedgen(static):
    op = static.kernel.torch_op
    assert op is not None and op.name == torch_op.op_name(static.kernel)
    assert op.name.startswith("add_bf16_") and len(op.name) == len("add_bf16_") + torch_op.DIGEST_CHARS
    assert getattr(torch.ops.schedgen, op.name).default is op.op
    assert getattr(torch.ops.schedgen, op.name + "_out").default is op.out_op
    assert str(op.op._schema) == f"schedgen::{op.name}(Tensor x, Tensor y) -> Tensor"
    assert str(op.out_op._schema) == f"schedgen::{op.name}_out(Tensor x, Tensor y, Tensor(a!) out_o) -> ()"


def test_two_builds_of_one_name_are_two_ops_and_a_reload_reuses_its_op(built, static, dynamic):
    tmp, folder = built
    assert static.kernel.torch_op.name != dynamic.kernel.torch_op.name   # other launch.json: no clash
    again = _import(folder.parent, "add_bf16")                           # same content: the same op
    assert again.kernel.torch_op is static.kernel.torch_op
    assert again.kernel.torch_op.kernel is again.kernel


IMPORT_ORDER = """
import sys
sys.path.insert(0, sys.argv[1])
import add_bf16
assert "torch" not in sys.modules, "importing a package imported torch"
assert add_bf16.kernel.torch_op is None
import torch
op = add_bf16.kernel.torch_op
assert op is not None and getattr(torch.ops.schedgen, op.name).default is op.op, op
from torch._dynamo.testing import CompileCounter
cnt = CompileCounter()
f = torch.compile(lambda x: add_bf16.add_bf16(x, x), fullgraph=True, backend=cnt)
assert f(torch.empty(256, 512, dtype=torch.bfloat16, device="meta")).shape == (256, 512)
assert cnt.frame_count == 1
print("registered after import torch")
"""


def test_a_package_imported_before_torch_registers_when_torch_is_imported(built):
    """Importing a package does not import torch; importing torch afterwards registers the op before any trace."""
    import os
    import subprocess
    from conftest import ROOT
    tmp, folder = built
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", IMPORT_ORDER, str(folder.parent)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 0 and "registered after import torch" in res.stdout, res.stderr[-3000:]


def test_no_op_without_cuda_backend_or_for_a_ring(static, monkeypatch):
    import dataclasses
    k = static.kernel
    orig = k.launch
    monkeypatch.setattr(k, "launch", dataclasses.replace(orig, backends=("pallas",)))
    assert torch_op.register(k) is None
    ring = Ring(num_devices=2, send_to=(1, 0), recv_from=(1, 0), m=8, n=8, k=8, m_total=16, in_dtype="bf16",
                out_dtype="bf16", gather_bytes=0, flags_bytes=8, axis_name="x")
    monkeypatch.setattr(k, "launch", dataclasses.replace(orig, ring=ring))
    assert torch_op.register(k) is None


# ---------------------------------------------------------------------------------------------- fake impl

def test_meta_tensors_give_meta_outputs_of_the_record_shape(static, dynamic):
    out = static.add_bf16(meta(256, 512), meta(256, 512))
    assert out.device.type == "meta" and out.shape == (256, 512) and out.dtype == torch.bfloat16
    for m in (32, 96, 4096):
        out = dynamic.add_bf16(meta(m, 512), meta(m, 512))
        assert out.shape == (m, 512) and out.dtype == torch.bfloat16 and out.device.type == "meta"


def test_multi_output_kernels_return_tuples(two_outputs):
    o, o2 = two_outputs.add_bf16(meta(64, 512), meta(64, 512))
    assert (o.shape, o.dtype, o2.shape, o2.dtype) == ((64, 512), torch.bfloat16, (64, 512), torch.float32)
    outs = (meta(64, 512), meta(64, 512, dtype="float32"))
    assert two_outputs.add_bf16(meta(64, 512), meta(64, 512), out=outs) == outs


def test_fake_tensor_mode(dynamic):
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.empty(160, 512, dtype=torch.bfloat16))
        out = dynamic.add_bf16(x, x)
    assert type(out).__name__ == "FakeTensor" and out.shape == (160, 512) and out.dtype == torch.bfloat16


def test_out_goes_through_the_mutating_op(dynamic):
    out = meta(64, 512)
    assert dynamic.add_bf16(meta(64, 512), meta(64, 512), out=out) is out
    with pytest.raises(ArgumentError, match=r"out\[o\]: expected shape \(64, 512\), got \(64, 256\)"):
        dynamic.add_bf16(meta(64, 512), meta(64, 512), out=meta(64, 256))


BAD = [
    ("fixed-dim", (64, 256), (64, 256), "bfloat16",
     "x: expected shape (M, 512), got (64, 256): dimension 1 is fixed at 512"),
    ("rank", (64,), (64, 512), "bfloat16", "x: expected shape (M, 512), got (64,)"),
    ("range", (8192, 512), (8192, 512), "bfloat16",
     "x: dimension 0 (M) is 8192; M must be in 32..4096 (expected shape (M, 512))"),
    ("multiple", (48, 512), (48, 512), "bfloat16",
     "x: dimension 0 (M) is 48; M must be a multiple of 32 (in 32..4096) (expected shape (M, 512))"),
    ("disagree", (64, 512), (96, 512), "bfloat16",
     "y: dimension 0 (M) is 96, but x dimension 0 gave M = 64"),
    ("dtype", (64, 512), (64, 512), "float32", "x: expected bf16, got float32; convert with x.to(torch.bfloat16)"),
]


@pytest.mark.parametrize("xs,ys,dtype,message", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_meta_arguments_raise_the_eager_argument_error(dynamic, xs, ys, dtype, message):
    with pytest.raises(ArgumentError) as info:
        dynamic.add_bf16(meta(*xs, dtype=dtype), meta(*ys))
    assert str(info.value) == message
    if dtype == "bfloat16":   # the same words as Kernel.bind's for the same shapes
        with pytest.raises(ArgumentError) as eager:
            dynamic.kernel.bind([xs, ys])
        assert str(eager.value) == message


def test_a_transposed_view_is_refused_with_what_tma_needs(dynamic):
    """x is read through its tensor map only: a strided view would do, a transposed one TMA cannot read (the eager
    call's words)."""
    with pytest.raises(ArgumentError, match=r"^x: its innermost dimension has stride 64, not 1 \(a transposed view\? "
                                            r"strides \(1, 64\)\); TMA needs .*; make it contiguous first: "
                                            r"x.contiguous\(\)$"):
        dynamic.add_bf16(meta(512, 64).t(), meta(64, 512))
    # a row stride of 1024 elements: legal (M = 256: the rewritten record's maps keep the static build's extents)
    wide = meta(256, 1024)[:, :512]
    assert dynamic.add_bf16(wide, meta(256, 512)).shape == (256, 512)
    with pytest.raises(ArgumentError, match=r"^out\[o\]: its innermost dimension has stride 64"):
        dynamic.add_bf16(meta(64, 512), meta(64, 512), out=meta(512, 64).t())


def test_real_tensors_reach_the_cuda_path_through_the_op(static, monkeypatch):
    """CPU tensors of the right shape reach the real implementation, the package's CUDA path, which refuses host
    tensors; the op (not a direct call) was the way there."""
    seen = []
    runs = static.kernel.torch_op.kernel   # the kernel loaded last with this content
    real = runs._call_cuda
    monkeypatch.setattr(runs, "_call_cuda", lambda *a: (seen.append(a), real(*a))[1])
    x = torch.zeros(256, 512, dtype=torch.bfloat16)
    with pytest.raises(ArgumentError, match="x: lives on the CPU"):
        static.add_bf16(x, x)
    assert len(seen) == 1 and seen[0][1:] == (None, None)
    with pytest.raises(ArgumentError, match="x: lives on the CPU"):
        static.add_bf16(x, x, out=torch.empty_like(x))
    assert len(seen) == 2 and isinstance(seen[1][1], tuple)


def test_plain_eager_cuda_tensors_skip_the_op_and_nothing_else_does(static, monkeypatch):
    """With the tensors taken for CUDA ones, a plain eager call goes straight to the CUDA path (the op is never
    called); with EAGER_DIRECT off, or requiring grad, or under a dispatch mode, it goes through the op."""
    op = static.kernel.torch_op
    via_op = []
    monkeypatch.setattr(torch_op, "_on_cuda", lambda t: True)
    real_op = op.op
    monkeypatch.setattr(op, "op", lambda *a: (via_op.append(1), real_op(*a))[1])
    x = torch.zeros(256, 512, dtype=torch.bfloat16)
    with pytest.raises(ArgumentError, match="x: lives on the CPU"):   # the direct path's own check
        static.add_bf16(x, x)
    assert via_op == []
    monkeypatch.setattr(torch_op, "EAGER_DIRECT", False)
    with pytest.raises(ArgumentError, match="x: lives on the CPU"):
        static.add_bf16(x, x)
    assert via_op == [1]
    monkeypatch.setattr(torch_op, "EAGER_DIRECT", True)
    with torch.no_grad(), pytest.raises(ArgumentError, match="x: lives on the CPU"):   # no backward: no grad mode
        static.add_bf16(x, torch.zeros(256, 512, dtype=torch.bfloat16, requires_grad=True))
    assert via_op == [1, 1]
    with pytest.raises(ArgumentError, match=r"^y: requires grad, but add_bf16 was built without a backward pass: "
                                            r"add a `backward:` section"):
        static.add_bf16(x, torch.zeros(256, 512, dtype=torch.bfloat16, requires_grad=True))
    assert via_op == [1, 1]
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Seen(), pytest.raises(ArgumentError, match="x: lives on the CPU"):
        static.add_bf16(x, x)
    assert via_op == [1, 1, 1]


# ---------------------------------------------------------------------------------------------- torch.compile

def _compiled(pkg, dynamic_arg):
    cnt = CompileCounter()

    def f(x, y):
        return pkg.add_bf16(x, y) * 2

    return torch.compile(f, fullgraph=True, backend=cnt, dynamic=dynamic_arg), cnt


@pytest.mark.parametrize("how", ["mark_dynamic", "dynamic=True"])
def test_compile_traces_once_for_three_sizes(dynamic, how):
    torch._dynamo.reset()
    f, cnt = _compiled(dynamic, True if how == "dynamic=True" else None)
    for m in (64, 128, 320):
        x, y = meta(m, 512), meta(m, 512)
        if how == "mark_dynamic":
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(y, 0)
        out = f(x, y)
        assert out.shape == (m, 512) and out.device.type == "meta"
    assert cnt.frame_count == 1, "recompiled for a new size"
    assert cnt.op_count == 2   # the kernel's op and the multiply: one graph, no break
    torch._dynamo.reset()


def test_compile_aot_eager_with_fake_inputs(dynamic):
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("aot_eager")
    g = torch.compile(lambda x, y: dynamic.add_bf16(x, y), fullgraph=True, backend=cnt, dynamic=True)
    with FakeTensorMode() as mode:
        for m in (64, 96, 160):
            x = mode.from_tensor(torch.empty(m, 512, dtype=torch.bfloat16))
            out = g(x, x)
            assert out.shape == (m, 512) and type(out).__name__ == "FakeTensor"
    assert cnt.frame_count == 1
    torch._dynamo.reset()


def test_compile_static_package(static):
    torch._dynamo.reset()
    f, cnt = _compiled(static, False)
    assert f(meta(256, 512), meta(256, 512)).shape == (256, 512)
    assert cnt.frame_count == 1 and cnt.op_count == 2
    torch._dynamo.reset()


def test_compile_surfaces_argument_errors_at_trace_time(dynamic):
    torch._dynamo.reset()
    f, cnt = _compiled(dynamic, True)
    with pytest.raises(Exception, match=r"x: expected shape \(M, 512\), got \(64, 256\): dimension 1 is fixed") as info:
        f(meta(64, 256), meta(64, 256))
    chain, exc = [], info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    errors = [e for e in chain if isinstance(e, ArgumentError)]
    assert errors and str(errors[0]) == "x: expected shape (M, 512), got (64, 256): dimension 1 is fixed at 512"
    torch._dynamo.reset()


@pytest.mark.parametrize("m,message", [(48, "M must be a multiple of 32"), (8192, "M must be in 32..4096")])
def test_compiled_graph_refuses_an_illegal_size_after_legal_ones(dynamic, m, message):
    """The range and divisibility rules hold for the symbolic size too (torch._check: guards of the compiled
    graph), so a later illegal size retraces and the retrace's check names the value. The backend here never runs
    the graph (which would run the op's fake implementation on the meta tensors and catch the size itself): only
    the trace's own checks can refuse it."""
    torch._dynamo.reset()
    compiles = []

    def backend(gm, example_inputs):
        compiles.append(gm)
        return lambda *args: [torch.empty(0)]

    f = torch.compile(lambda x, y: dynamic.add_bf16(x, y) * 2, fullgraph=True, backend=backend, dynamic=True)
    for legal in (64, 96, 160):
        f(meta(legal, 512), meta(legal, 512))
    assert len(compiles) == 1
    with pytest.raises(Exception, match=message):
        f(meta(m, 512), meta(m, 512))
    torch._dynamo.reset()


def _dynamic_specs():
    from schedgen.frontend.validate import load_spec
    found = [p for p in spec_files() if any(not isinstance(v, int) for v in load_spec(str(p))[0].op.sizes.values())]
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="no bundled spec has a dynamic size yet"))]


def _picks(ranges):
    """Three legal values of every dynamic size (distinct per size, none below 2: dynamo specializes 0 and 1)."""
    def legal(r, v):
        v = max(r.min, min(r.max, v))
        v = -(-v // r.multiple_of) * r.multiple_of
        return v if v <= r.max else v - r.multiple_of
    return [{r.name: legal(r, at(r, j)) for j, r in enumerate(ranges)}
            for at in (lambda r, j: max(r.min, 2) + j * r.multiple_of,
                       lambda r, j: (r.min + r.max) // 2 + j * r.multiple_of,
                       lambda r, j: r.max - j * r.multiple_of)]


@pytest.mark.parametrize("path", _dynamic_specs(), ids=lambda p: getattr(p, "stem", "none"))
def test_bundled_dynamic_spec_compiles_once_for_three_sizes(path, tmp_path):
    """Every bundled dynamic-size spec, built as is: its package function under torch.compile(fullgraph=True) with
    meta tensors (dynamic dimensions marked dynamic) traces once for three values of each dynamic size."""
    b = build_spec(path, cache=Cache(tmp_path / "c"))
    pkg = _import(package(b, tmp_path / "out").parent, b.name)
    k = pkg.kernel
    if k.torch_op is None:
        pytest.skip("no torch op for this kernel (multi-device, or no CUDA backend)")
    assert k.launch.sizes, "a dynamic-size spec whose launch record has no dynamic size"
    # the function returns the user's outputs (a spec with a backward has its forward keep more)
    user = set(b.backward.user_outputs) if b.backward is not None else {o.name for o in k.outputs}
    torch._dynamo.reset()
    cnt = CompileCounter()
    fn = getattr(pkg, b.name)
    f = torch.compile(lambda *a: fn(*a), fullgraph=True, backend=cnt)
    for sizes in _picks(k.launch.sizes):
        args = [torch.empty(k.shape_of(o, sizes), dtype=torch_op.torch_dtype(o.dtype), device="meta")
                for o in k.inputs]
        for a, o in zip(args, k.inputs):
            for i, d in enumerate(o.shape):
                if isinstance(d, str):
                    torch._dynamo.mark_dynamic(a, i)
        res = f(*args)
        res = res if isinstance(res, tuple) else (res,)
        assert [tuple(r.shape) for r in res] == [k.shape_of(o, sizes) for o in k.outputs if o.name in user]
    assert cnt.frame_count == 1, "recompiled for a new size"
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------- GPU
# In a fresh interpreter per spec, as tests/runtime/test_gpu.py's torch round trip: torch is never imported into the
# pytest process (other tests check that nothing did). The script prints one line per checked size.

GPU_CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
import importlib, json
import numpy as np
import torch
from schedgen.frontend.validate import load_spec
from schedgen.reference import random_inputs, reference, rel_error, tolerance
from schedgen.runtime import torch_op
pkg = importlib.import_module(sys.argv[2])
spec, _ = load_spec(sys.argv[3])
picks, accum, approx = json.loads(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
k = pkg.kernel
op = k.torch_op
assert op is not None, "no torch op registered"
fn = getattr(pkg, k.name)
compiled = torch.compile(lambda *a: fn(*a), fullgraph=True, backend="aot_eager", dynamic=bool(k.launch.sizes))
for sizes in picks:
    dyn = {r.name: sizes[r.name] for r in k.launch.sizes}
    host = random_inputs(spec, sizes, seed=0)
    args = [torch.from_numpy(host[o.name].astype(np.float32)).to("cuda").to(torch_op.torch_dtype(o.dtype))
            for o in k.inputs]
    torch.library.opcheck(op.op, tuple(args))
    outs = tuple(torch.full(k.shape_of(o, dyn), float("nan"), dtype=torch_op.torch_dtype(o.dtype), device="cuda")
                 for o in k.outputs)   # poisoned: out= must write every element
    torch.library.opcheck(op.out_op, tuple(args) + outs)
    refs = reference(spec, sizes, {o.name: host[o.name] for o in k.inputs}, seed=0)
    eager = fn(*args)
    eager = eager if isinstance(eager, tuple) else (eager,)
    comp = compiled(*args)
    comp = comp if isinstance(comp, tuple) else (comp,)
    into = fn(*args, out=outs if len(outs) > 1 else outs[0])
    torch.cuda.synchronize()
    for o, e, c, i in zip(k.outputs, eager, comp, outs):
        as_np = lambda t: t.float().cpu().numpy()
        err = rel_error(as_np(e), refs[o.name])
        tol = tolerance(o.dtype, approx, accum)   # what schedgen verify allows
        assert err <= tol, (o.name, dyn, err, tol)
        assert torch.equal(e, c) or rel_error(as_np(c), refs[o.name]) <= tol, (o.name, dyn, "compiled")
        assert rel_error(as_np(i), refs[o.name]) <= tol, (o.name, dyn, "out=")
    print("ok", dyn)
"""


def _gpu_specs():
    return spec_files(target="sm_90a")     # the H200 runs these; an sm_100a package refuses it


@pytest.mark.gpu
@pytest.mark.parametrize("path", _gpu_specs(), ids=lambda p: p.stem)
def test_opcheck_and_results_on_gpu(path, tmp_path):
    """torch.library.opcheck on the op and its out= twin, and eager / compiled / out= results against the numpy
    reference, for every bundled spec with a CUDA backend (a dynamic-size one at three sizes)."""
    import os
    import subprocess
    from conftest import ROOT
    from schedgen import families
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    b = build_spec(path, cache=Cache(tmp_path / "c"))
    family = families.of(b.plan)
    if family.multi_device:
        pytest.skip("no custom op for a multi-device kernel (schedgen/runtime/torch_op.py says why)")
    if "cuda" not in b.plan.launch.backends:
        pytest.skip(f"built for {', '.join(b.plan.launch.backends)} only: the op's implementation is the CUDA path")
    folder = package(b, tmp_path / "out")
    # verify's sizes (a dynamic package: large, about 3/4 of it plus one, small; inputs of a few hundred MiB at
    # most) and, for a dynamic one, every size at its minimum
    picks = call_sizes(b.plan)
    ranges = b.plan.launch.dynamic_sizes
    if ranges:
        picks.append(dict(picks[0], **{r.name: r.min for r in ranges}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", GPU_CHECK, str(folder.parent), b.name, str(path), json.dumps(picks),
                          str(family.accumulation(b.plan)), "1" if b.plan.approx_math else "0"],
                         capture_output=True, text=True, env=env, timeout=1200)
    assert res.returncode == 0 and "ok" in res.stdout, (res.stdout[-2000:], res.stderr[-4000:])


def test_an_imported_package_imports_again_by_name(built):
    """torch.compile's tracing imports a package's module again by its name: the tests' import helper must leave it
    importable (the bucketed bundled spec's GPU test failed in dynamo with "No module named ..." when it did not)."""
    tmp, folder = built
    mod = _import(folder.parent, "add_bf16")
    sys.modules.pop("add_bf16")
    assert importlib.import_module("add_bf16").__file__ == mod.__file__


def test_a_kernel_loaded_without_its_op_says_how_to_get_one(built):
    """A call needing gradients on a kernel loaded by load_package(folder) (no torch op asked for) names the way to
    get the op, instead of pointing at a registration warning that never came."""
    from schedgen.runtime import autograd
    from schedgen.runtime.kernel import load_package
    tmp, folder = built
    bare = load_package(folder)
    assert not bare.torch_op_asked
    msg = str(autograd.grad_path_error(bare, None, None, None, None))
    assert "load_package(folder, torch_op=True)" in msg and "see the warning" not in msg
    wired = load_package(folder, torch_op=True)
    assert wired.torch_op_asked
    assert "see the warning" in str(autograd.grad_path_error(wired, None, None, None, None))
