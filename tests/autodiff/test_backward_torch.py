"""A package's backward under torch autograd (schedgen/runtime/autograd.py), on the CPU: the kernels' CUDA path
(`Kernel._call_cuda`, the custom ops' real implementation) is stubbed with each kernel's float64 reference, so what
runs is the wiring itself: the call returns the user's outputs only, the forward's custom op saves what the graph
reads, the backward runs every step through the step kernel's own op, sums the broadcast bias gradient back to [N]
and returns None for inputs without a gradient; torch.compile(fullgraph=True) traces forward and backward (the step
ops appear in the backward graph); a grad-needing call on a package without a backward is a clear error."""
from __future__ import annotations

import numpy as np
import pytest

import handgraph as hg
from conftest import graph_keeping_backend, stub_cuda_with_references
from handgraph import closed_form, host_inputs, import_package, upstream, hand_packages
from schedgen.reference import reference
from schedgen.runtime.arrays import ArgumentError
from schedgen.runtime.kernel import Kernel

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    return hand_packages(tmp_path_factory)


@pytest.fixture(scope="module")
def pkgs(hand):
    """The imported packages and every kernel's spec by kernel name (what the stub's reference reads)."""
    specs, mods = {}, {}
    for which in ("plain", "saving", "wrt_x"):
        built, root = hand[which]
        specs[built.name] = built.backward.forward
        specs.update({s.name: s.spec for s in built.backward.steps.values()})
        mods[which] = import_package(root.parent, built.name)
    return mods, specs


@pytest.fixture
def ran(pkgs, monkeypatch):
    """Kernel._call_cuda stubbed with the kernel's float64 reference (outputs in the kernel's dtype); the names of
    the kernels run, in order."""
    _, specs = pkgs
    return stub_cuda_with_references(monkeypatch, specs)


def fn(mods, which):
    mod = mods[which]
    return getattr(mod, next(n for n in ("fma_plain", "fma_saving", "fma_wrt_x") if hasattr(mod, n)))


def leaves(seed=0):
    return {k: torch.tensor(v, requires_grad=True) for k, v in host_inputs(seed).items()}


@pytest.mark.parametrize("which", ["plain", "saving"])
def test_autograd_gradients_match_float64_and_finite_differences(pkgs, ran, which):
    mods, _ = pkgs
    ins = leaves()
    gy = upstream()
    y = fn(mods, which)(*ins.values())
    assert isinstance(y, torch.Tensor) and y.shape == (hg.M, hg.N)   # the user's output only, h dropped
    assert y.grad_fn is not None and ran == [f"fma_{which}"]
    got = torch.autograd.grad((y * torch.from_numpy(gy)).sum(), list(ins.values()))
    steps = ["bwd"] if which == "plain" else ["dh", "dxwb"]
    assert ran == [f"fma_{which}"] + [f"fma_{which}_{s}" for s in steps]   # each step through its kernel
    host = {k: v.detach().numpy() for k, v in ins.items()}
    want = closed_form(which, host, gy)
    for g, n in zip(got, "xwb"):
        assert g.shape == ins[n].shape and g.dtype == torch.float32
        np.testing.assert_allclose(g.numpy(), want[n], rtol=1e-5, atol=1e-5 * np.abs(want[n]).max())
    for n, idx in (("x", (5, 9)), ("b", (100,))):
        fd = hg.finite_difference(which, host, gy, n, idx)
        assert abs(fd - float(got["xwb".index(n)][idx])) <= 1e-3 * max(1.0, abs(fd))


def test_an_expanded_upstream_gradient_is_made_contiguous(pkgs, ran):
    """y.sum().backward() hands the backward a stride-0 gradient; the step ops take dense tensors only."""
    mods, _ = pkgs
    ins = leaves()
    fn(mods, "plain")(*ins.values()).sum().backward()
    np.testing.assert_allclose(ins["b"].grad.numpy(), np.full(hg.N, hg.M, np.float32))
    np.testing.assert_allclose(ins["x"].grad.numpy(), ins["w"].detach().numpy())


def test_a_strided_saved_input_reaches_the_step_kernel_as_is(pkgs, ran, monkeypatch):
    """x a column block of a wider leaf (a fused projection's slice): the map kernels read x and w through tensor
    maps only, so the backward step gets the saved views themselves (no contiguous copy, issue 43); the gradients
    are those of the dense call."""
    mods, _ = pkgs
    layouts = []
    stub = Kernel._call_cuda
    monkeypatch.setattr(Kernel, "_call_cuda", lambda self, args, out, stream: (
        layouts.append((self.name, [tuple(a.stride()) for a in args])), stub(self, args, out, stream))[1])
    ins = leaves()
    wide = torch.zeros(hg.M, 2 * hg.N, dtype=torch.float32)
    wide[:, :hg.N] = ins["x"].detach()
    wide.requires_grad_(True)
    x = wide[:, :hg.N]
    fn(mods, "plain")(x, ins["w"], ins["b"]).sum().backward()
    (name, strides), = [entry for entry in layouts if entry[0] != "fma_plain"]
    step = next(k for k in mods["plain"].kernel.backward.steps.values() if k.name == name)
    got = dict(zip((o.name for o in step.inputs), strides))
    assert got["x"] == (2 * hg.N, 1) and got["w"] == (hg.N, 1), got        # x as saved: the view, not a copy
    np.testing.assert_allclose(wide.grad[:, :hg.N].numpy(), ins["w"].detach().numpy())
    assert not wide.grad[:, hg.N:].any()


def test_wrt_gives_gradients_to_those_inputs_only(pkgs, ran):
    mods, _ = pkgs
    ins = leaves()
    y = fn(mods, "wrt_x")(*ins.values())
    gx, gw, gb = torch.autograd.grad(y.sum(), list(ins.values()), allow_unused=True)
    assert gw is None and gb is None
    np.testing.assert_allclose(gx.numpy(), ins["w"].detach().numpy())


def test_no_grad_calls_return_the_users_outputs_and_out_gets_them(pkgs, ran):
    mods, _ = pkgs
    ins = {k: torch.from_numpy(v) for k, v in host_inputs().items()}
    f = fn(mods, "saving")
    y = f(*ins.values())
    want = reference(hg.step_spec(hg.Step("f", pkgs[1]["fma_saving"].model_dump(), {}, {})),
                     {"M": hg.M, "N": hg.N}, {k: v.numpy() for k, v in ins.items()})["y"]
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    out = torch.empty(hg.M, hg.N)
    assert f(*ins.values(), out=out) is out                 # out= names the user's outputs; h is allocated inside
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    with pytest.raises(ArgumentError, match="out: fma_saving has 1 outputs, got 2 arrays"):
        f(*ins.values(), out=(out, out))


def test_a_grad_needing_call_off_the_op_path_is_a_clear_error(pkgs, ran):
    mods, _ = pkgs
    ins = leaves()
    f = fn(mods, "plain")
    with pytest.raises(ArgumentError, match=r"^fma_plain: a call that needs gradients: out=: autograd records"):
        f(*ins.values(), out=torch.empty(hg.M, hg.N))
    with pytest.raises(ArgumentError, match=r"^fma_plain: a call that needs gradients: stream=: "):
        f(*ins.values(), stream=0)


def test_a_package_without_backward_says_to_add_one(tmp_path, ran, pkgs):
    from schedgen.build import build_spec, package
    from schedgen.cache import Cache
    spec = tmp_path / "nb.yaml"
    spec.write_text(hg.spec_text("fma_nobw", backward=""))
    built = build_spec(spec, cache=Cache(tmp_path / "c"))
    pkgs[1]["fma_nobw"] = built.spec
    mod = import_package(package(built, tmp_path / "out").parent, "fma_nobw")
    ins = leaves()
    with pytest.raises(ArgumentError) as e:
        mod.fma_nobw(*ins.values())
    msg = str(e.value)
    assert msg.startswith("x: requires grad, but fma_nobw was built without a backward pass: add a `backward:` "
                          "section to its spec")
    assert "detach" not in msg
    with torch.no_grad():                                    # no gradient wanted: it runs
        y = mod.fma_nobw(*ins.values())
    assert y.shape == (hg.M, hg.N) and ran[-1] == "fma_nobw"


def test_compile_fullgraph_traces_forward_and_backward_through_the_step_ops(pkgs, ran):
    mods, _ = pkgs
    backend, graphs = graph_keeping_backend()

    torch._dynamo.reset()
    f = fn(mods, "saving")
    gy = torch.from_numpy(upstream())
    compiled = torch.compile(lambda x, w, b: (f(x, w, b) * gy).sum(), fullgraph=True,
                             backend=backend)
    ins = leaves()
    loss = compiled(*ins.values())
    got = torch.autograd.grad(loss, list(ins.values()))
    fw, bw = (str(graphs[k].code) for k in ("fw", "bw"))
    fwd_op = mods["saving"].kernel.torch_op.name
    steps = mods["saving"].kernel.backward.steps
    assert fwd_op in fw and not any(s.torch_op.name in fw for s in steps.values())
    assert all(s.torch_op.name in bw for s in steps.values()) and fwd_op not in bw
    want = closed_form("saving", {k: v.detach().numpy() for k, v in ins.items()}, gy.numpy())
    for g, n in zip(got, "xwb"):
        np.testing.assert_allclose(g.numpy(), want[n], rtol=1e-5, atol=1e-5 * np.abs(want[n]).max())
    torch._dynamo.reset()


def test_meta_tensors_trace_forward_and_backward_without_running_anything(pkgs, ran):
    mods, _ = pkgs
    ins = {k: torch.empty(v.shape, device="meta", requires_grad=True) for k, v in host_inputs().items()}
    y = fn(mods, "saving")(*ins.values())
    assert y.device.type == "meta" and y.shape == (hg.M, hg.N)
    got = torch.autograd.grad(y.sum(), list(ins.values()))
    assert [tuple(g.shape) for g in got] == [(hg.M, hg.N), (hg.M, hg.N), (hg.N,)]
    assert all(g.device.type == "meta" for g in got) and ran == []


# ---------------------------------------------------------------------------------------------- on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("which", ["plain", "saving"])
def test_gpu_autograd_eager_compiled_and_graphed(pkgs, which):
    """The real kernels: torch autograd on CUDA tensors against float64, torch.compile (inductor) forward and
    backward, opcheck of the step ops, and the forward captured in a CUDA graph returning the user's output."""
    mods, _ = pkgs
    f = fn(mods, which)
    host = host_inputs()
    gy_host = upstream()
    want = closed_form(which, host, gy_host)
    gy = torch.from_numpy(gy_host).cuda()

    def leaves_cuda():
        return {k: torch.tensor(v, device="cuda", requires_grad=True) for k, v in host.items()}

    for run in (lambda x, w, b: (f(x, w, b) * gy).sum(),
                torch.compile(lambda x, w, b: (f(x, w, b) * gy).sum(), fullgraph=True)):
        ins = leaves_cuda()
        got = torch.autograd.grad(run(*ins.values()), list(ins.values()))
        for g, n in zip(got, "xwb"):
            np.testing.assert_allclose(g.cpu().numpy(), want[n], rtol=1e-4, atol=1e-4 * np.abs(want[n]).max())
    for step in mods[which].kernel.backward.steps.values():
        args = [torch.randn(tuple(o.shape), device="cuda") for o in step.inputs]
        torch.library.opcheck(step.torch_op.op, args)
    ins = {k: torch.tensor(v, device="cuda") for k, v in host.items()}
    y = f(*ins.values())                                     # warm-up before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        yg = f(*ins.values())
    graph.replay()
    torch.cuda.synchronize()
    assert isinstance(yg, torch.Tensor) and torch.equal(yg, y)
    np.testing.assert_allclose(y.cpu().numpy(), hg.forward64(which, host), rtol=1e-5, atol=1e-5)


def test_a_package_imported_before_torch_gets_its_autograd_when_torch_comes(hand):
    """The op (and its autograd formula) is registered by the post-import hook on `import torch`: in a fresh
    process, import the package first, then torch, then differentiate through meta tensors."""
    import subprocess
    import sys
    _, root = hand["saving"]
    code = f"""
import sys
sys.path.insert(0, {str(root.parent)!r})
import fma_saving
assert "torch" not in sys.modules
import torch
k = fma_saving.kernel
assert k.torch_op is not None and k.torch_op.backward_registered
assert all(s.torch_op is not None for s in k.backward.steps.values())
ins = [torch.empty(s, device="meta", requires_grad=True) for s in ((64, 512), (64, 512), (512,))]
gx, gw, gb = torch.autograd.grad(fma_saving.fma_saving(*ins).sum(), ins)
assert gb.shape == (512,) and gx.device.type == "meta"
print("ok")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


def test_a_step_without_a_cuda_kernel_runs_its_pallas_function_in_eager_torch(pkgs, ran, monkeypatch):
    """A backward step with no torch op (a family whose backward is Pallas only, as attention's is today) runs its
    Pallas function on the torch tensors in eager mode (here stubbed with its reference, like the CUDA path)."""
    mods, specs = pkgs
    f = fn(mods, "plain")
    kernel = f.kernel if hasattr(f, "kernel") else mods["plain"].kernel
    step = kernel.backward.steps["fma_bwd"]
    monkeypatch.setattr(step, "torch_op", None)
    called = []

    def call_pallas(self, args, out, interpret=None):
        called.append(self.name)
        return Kernel._call_cuda(self, args, out, None)      # the reference stub of `ran`
    monkeypatch.setattr(Kernel, "_call_pallas", call_pallas)
    ins = leaves()
    gy = upstream()
    y = f(*ins.values())
    got = torch.autograd.grad((y * torch.from_numpy(gy)).sum(), list(ins.values()))
    assert called == ["fma_plain_bwd"]
    want = closed_form("plain", {k: v.detach().double().numpy() for k, v in ins.items()}, gy.astype(np.float64))
    for g, name in zip(got, ins):
        np.testing.assert_allclose(g.double().numpy(), want[name], rtol=1e-5, atol=1e-5)
