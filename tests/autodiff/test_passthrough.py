"""Issue 43: an input gradient that is an output's upstream gradient unchanged (the residual r of a fused
`out = acc + r`, both operands of a map's `y = x + r`: the same shape, no broadcast, the same dtype) is a
pass-through of the backward graph, not a kernel's output. The derivation records it (`graph.passthrough`), a step
whose every gradient passes disappears (and so does gacc = dy's copy ahead of the GEMMs), torch autograd returns the
upstream gradient tensor itself (no copy, no kernel), jax the cotangent, explain names it, verify checks it and
backward.json keeps it. A gradient that needs a cast (another dtype) or a sum (a broadcast operand) stays a kernel's.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from backward_util import finite_differences, graph_gradients, random_case, spec_with
from conftest import graph_keeping_backend, import_package, stub_cuda_with_references
from schedgen import families
from schedgen.autodiff import derive
from schedgen.autodiff.graph import BackwardGraph, Step, check, evaluate
from schedgen.frontend.expr import parse_body

SMALL = {"M": 5, "N": 4, "K": 3}
MN = ["M", "N"]


def _mm(epilogue: str, extras: dict, out_dtype: str = "bf16", name: str = "mm_res") -> dict:
    return {"name": name, "op": {
        "kind": "matmul", "sizes": {"M": 128, "N": 128, "K": 64},
        "inputs": {"a": {"shape": ["M", "K"], "dtype": "bf16"}, "b": {"shape": ["K", "N"], "dtype": "bf16"},
                   **extras},
        "outputs": {"out": {"shape": MN, "dtype": out_dtype}}, "epilogue": epilogue}}


def _map(body: str, inputs: dict, out_dtype: str = "f32", name: str = "map_res") -> dict:
    return {"name": name, "op": {
        "kind": "map", "sizes": {"M": 64, "N": 256},
        "inputs": {n: {"shape": s, "dtype": d} for n, (s, d) in inputs.items()},
        "outputs": {"y": {"shape": MN, "dtype": out_dtype}}, "body": body}}


R = {"r": {"shape": MN, "dtype": "bf16"}}


def _graph(tmp_path, data, backward=None, sizes=None):
    """The family's graph, checked, and its float64 gradients held against finite differences of the forward."""
    spec, src = spec_with(tmp_path, data, backward or {})
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems, problems
    assert not check(graph, set(spec.op.inputs), set(spec.op.outputs) | set(graph.saved))
    sizes = sizes or {k: v for k, v in SMALL.items() if k in spec.op.sizes}
    inputs, upstream = random_case(spec, sizes, seed=4)
    got = graph_gradients(spec, graph, sizes, inputs, upstream)
    want = finite_differences(spec, sizes, inputs, upstream, graph.grads)
    for n in graph.grads:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-6, err_msg=n)
    return spec, graph


def _writes(graph) -> dict[str, str]:
    """Every step output's target -> the step writing it."""
    return {tgt: s.name for s in graph.steps for tgt in s.outputs.values()}


# ------------------------------------------------------------------------------------------------ the derivation


def test_split_passthrough_takes_out_the_identity_gradients_only():
    body = parse_body("h = x * w\ny = gelu(h) + r + s", inputs=["x", "w", "r", "s"], outputs=["y"], constants=[])
    d = derive.vjp(body, wrt={"x": "gx", "r": "gr", "s": "gs"}, cotangents={"y": "g_y"})
    rest, passed = derive.split_passthrough(d, ["gx", "gr", "gs"], {"y": "g_y"}, lambda g, o: g != "gs")
    assert passed == {"gr": "y"}                        # gs would pass too, but the family's rule says no
    assert "gr" not in rest.text and "gs = g_y" in rest.text and "gx = " in rest.text
    assert set(rest.inputs) == {"x", "w", "g_y"}
    parse_body(rest.text, inputs=rest.inputs, outputs=["gx", "gs"], constants=[])   # still a legal body
    # every gradient passes: nothing is left of the body (the step disappears)
    body = parse_body("y = x + r", inputs=["x", "r"], outputs=["y"], constants=[])
    d = derive.vjp(body, wrt={"x": "gx", "r": "gr"}, cotangents={"y": "g_y"})
    assert d.text == "gx = g_y\ngr = g_y"               # the old step: two copies of the upstream gradient
    rest, passed = derive.split_passthrough(d, ["gx", "gr"], {"y": "g_y"}, lambda g, o: True)
    assert passed == {"gx": "y", "gr": "y"} and rest.text == "" and rest.inputs == ()


def test_a_name_bound_to_the_upstream_gradient_passes_through_it():
    d = derive.Derived("d_h = g_y\ngx = d_h\ngw = d_h * x", ("g_y", "x"), frozenset())
    rest, passed = derive.split_passthrough(d, ["gx", "gw"], {"y": "g_y"}, lambda g, o: True)
    assert passed == {"gx": "y"} and rest.text == "d_h = g_y\ngw = d_h * x"


# ------------------------------------------------------------------------------------------------ the families


def test_matmul_residual_epilogue_derives_no_kernel_for_dr_nor_gacc(tmp_path):
    """`out = acc + r`: dr = dout and gacc = dout, both the upstream gradient: no dacc step (it copied dout twice,
    into gacc and into dr), the GEMMs read grad:out as it is, r's gradient is a pass-through."""
    spec, graph = _graph(tmp_path, _mm("out = acc + r", R))
    assert [s.name for s in graph.steps] == ["dlhs", "drhs"]
    assert dict(graph.passthrough) == {"r": "grad:out"} and "grad:r" not in _writes(graph)
    assert all(s.inputs["gacc"] == "grad:out" for s in graph.steps)
    assert graph.forward is None and graph.saved == ()
    assert any("gacc = dout" in n for n in graph.notes)


def test_matmul_epilogue_keeps_a_kernel_for_what_needs_arithmetic(tmp_path):
    # nonlinear in acc: dacc writes gacc only, dr still passes
    _, graph = _graph(tmp_path, _mm("out = gelu(acc) + r", R))
    assert [s.name for s in graph.steps] == ["dacc", "dlhs", "drhs"]
    assert list(graph.steps[0].outputs) == ["gacc"] and dict(graph.passthrough) == {"r": "grad:out"}
    # a broadcast bias needs a sum (its f32 full-shape gradient, summed back): a kernel's; r and gacc pass
    bias = {"bias": {"shape": ["N"], "dtype": "f32"}}
    _, graph = _graph(tmp_path, _mm("out = acc + bias + r", {**bias, **R}))
    assert _writes(graph) == {"grad:bias": "dacc", "grad:a": "dlhs", "grad:b": "drhs"}
    assert dict(graph.passthrough) == {"r": "grad:out"} and graph.steps[1].inputs["gacc"] == "grad:out"
    # an f32 output over bf16 operands: gacc and dr need a cast to bf16, so dacc writes both (as before)
    _, graph = _graph(tmp_path, _mm("out = acc + r", R, out_dtype="f32"))
    assert list(graph.steps[0].outputs.values()) == ["value", "grad:r"] and not graph.passthrough
    # ... an f32 residual of an f32 output passes, gacc is still cast
    _, graph = _graph(tmp_path, _mm("out = acc + r", {"r": {"shape": MN, "dtype": "f32"}}, out_dtype="f32"))
    assert dict(graph.passthrough) == {"r": "grad:out"} and list(graph.steps[0].outputs) == ["gacc"]
    # wrt: [r]: the whole backward is the pass-through
    _, graph = _graph(tmp_path, _mm("out = acc + r", R), {"wrt": ["r"]})
    assert graph.steps == () and dict(graph.passthrough) == {"r": "grad:out"}


def test_the_training_examples_projection_and_bias_layers(tmp_path):
    """examples/train: the attention output projection with its residual fused (`y = acc + r`) has dA and dW only;
    the down projection's `y = acc + b` (b [N] f32) keeps a map kernel for db's f32 sum, and only for it: gacc is
    dy itself (that kernel wrote a bf16 copy of dy for the GEMMs too)."""
    import yaml
    from backward_util import ROOT
    graphs = {}
    for name in ("proj", "down"):
        data = yaml.safe_load((ROOT / "examples" / "train" / f"{name}.yaml").read_text())
        spec, src = spec_with(tmp_path, data, data.pop("backward", {}))
        graphs[name], problems = families.of(spec).backward(spec, src)
        assert not problems, problems
    proj, down = graphs["proj"], graphs["down"]
    assert [s.name for s in proj.steps] == ["dlhs", "drhs"] and dict(proj.passthrough) == {"r": "grad:y"}
    assert [s.name for s in down.steps] == ["dacc", "dlhs", "drhs"] and not down.passthrough
    assert dict(down.steps[0].outputs) == {"grad_b": "grad:b"}
    assert all(s.inputs["gacc"] == "grad:y" for s in (*proj.steps, *down.steps[1:]))


def test_grouped_matmul_identity_epilogue_still_reads_the_upstream_gradient(tmp_path):
    from backward_util import bundled
    data = bundled("grouped_moe_mixtral_bf16_train.yaml")
    data["op"]["epilogue"] = "out = acc"
    spec, src = spec_with(tmp_path, data, data.pop("backward", {}))
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems, problems
    assert [s.name for s in graph.steps] == ["dx", "dw"] and not graph.passthrough
    assert all(s.inputs["gacc"] == "grad:out" for s in graph.steps)


def test_map_sum_has_no_step_and_a_product_keeps_its_own(tmp_path):
    f32 = ("f32",)
    _, graph = _graph(tmp_path, _map("y = x + r", {"x": (MN, *f32), "r": (MN, *f32)}), sizes={"M": 3, "N": 4})
    assert graph.steps == () and dict(graph.passthrough) == {"x": "grad:y", "r": "grad:y"}
    _, graph = _graph(tmp_path, _map("y = x * w + r", {"x": (MN, *f32), "w": (MN, *f32), "r": (MN, *f32)}),
                      sizes={"M": 3, "N": 4})
    (step,) = graph.steps
    assert set(step.outputs.values()) == {"grad:x", "grad:w"} and dict(graph.passthrough) == {"r": "grad:y"}
    assert "grad_r" not in step.spec["op"]["body"] and "grad_r" not in step.spec["op"]["outputs"]
    # a broadcast operand (a sum back to [N]) and another dtype (a cast) stay the step's
    _, graph = _graph(tmp_path, _map("y = x + b + r", {"x": (MN, "f32"), "b": (["N"], "f32"), "r": (MN, "bf16")}),
                      sizes={"M": 3, "N": 4})
    assert set(graph.steps[0].outputs.values()) == {"grad:b", "grad:r"} and dict(graph.passthrough) == {"x": "grad:y"}


def test_rowwise_residual_passes_but_not_where_class_indices_mask_rows(tmp_path):
    data = {"name": "rms_res", "op": {
        "kind": "rowwise", "sizes": {"M": 64, "N": 256}, "constants": {"eps": 1e-6},
        "inputs": {"x": {"shape": MN, "dtype": "f32"}, "r": {"shape": MN, "dtype": "f32"}},
        "outputs": {"y": {"shape": MN, "dtype": "f32"}},
        "body": "y = x * rsqrt(mean(x * x) + eps) + r"}}
    _, graph = _graph(tmp_path, data, sizes={"M": 2, "N": 256})
    assert dict(graph.passthrough) == {"r": "grad:y"} and set(graph.steps[0].outputs.values()) == {"grad:x"}
    from backward_util import bundled
    ce = bundled("cross_entropy_bf16_int64.yaml")
    spec, src = spec_with(tmp_path, ce, ce.get("backward", {}))
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems and not graph.passthrough


# ------------------------------------------------------------------------------------------------ the graph


def test_the_graph_keeps_and_checks_its_passthroughs():
    g = BackwardGraph(None, (), (), ("x", "r"), passthrough={"r": "grad:y"})
    back = BackwardGraph.from_json(json.loads(json.dumps(g.to_json())))
    assert dict(back.passthrough) == {"r": "grad:y"} and not check(back, {"x", "r"}, {"y"})
    assert BackwardGraph.from_json({k: v for k, v in g.to_json().items() if k != "passthrough"}).passthrough == {}
    for bad, words in (({"q": "grad:y"}, "not an input in grads"), ({"r": "grad:z"}, "not grad:<a forward output>"),
                       ({"r": "in:x"}, "not grad:<a forward output>")):
        wrong = check(BackwardGraph(None, (), (), ("x", "r"), passthrough=bad), {"x", "r"}, {"y"})
        assert any(words in w for w in wrong), wrong


def test_evaluate_hands_on_the_upstream_gradient_object_itself():
    step = Step("s", {}, {"g": "grad:y"}, {"gx": "grad:x"})
    g = BackwardGraph(None, (), (step,), ("x", "r"), passthrough={"r": "grad:y"})
    dy = np.ones((2, 3))
    got = evaluate(g, {"x": dy, "r": dy}, {}, {"y": dy}, lambda s, v: {"gx": v["g"] * 2})
    assert got["r"] is dy and np.array_equal(got["x"], 2 * dy)


# ------------------------------------------------------------------------------------------------ explain, build


def test_explain_names_the_passthrough(tmp_path):
    from schedgen.explain import explain_backward
    spec, src = spec_with(tmp_path, _mm("out = acc + r", R), {})
    text = explain_backward(spec, src)
    assert "dr = dout: passed through, no kernel" in text
    assert "steps (2, in order)" in text and "dacc" not in text
    assert "zero gradients" not in text
    spec, src = spec_with(tmp_path, _map("y = x + r", {"x": (MN, "bf16"), "r": (MN, "bf16")}, "bf16"), {})
    text = explain_backward(spec, src)
    assert "dx = dy: passed through, no kernel" in text and "dr = dy: passed through, no kernel" in text
    assert "steps: none (every gradient is passed through or zero: the backward launches no kernel)" in text


def _package(tmp_path_factory, data: dict):
    import yaml
    from schedgen.build import build_spec, package
    from schedgen.cache import Cache
    tmp = tmp_path_factory.mktemp(data["name"])
    path = tmp / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump({**data, "backward": {}}, sort_keys=False))
    built = build_spec(path, cache=Cache(tmp / "cache"))
    return built, package(built, tmp / "out")


@pytest.fixture(scope="module")
def residual_package(tmp_path_factory):
    """`out = acc + r` (bf16, backward: {}) built and packaged."""
    return _package(tmp_path_factory, _mm("out = acc + r", R, name="mm_residual"))


@pytest.fixture(scope="module")
def sum_package(tmp_path_factory):
    """The map `y = x + r` (f32, backward: {}): a backward of no kernel at all."""
    return _package(tmp_path_factory, _map("y = x + r", {"x": (MN, "f32"), "r": (MN, "f32")}, name="map_sum"))


def test_backward_json_lists_the_passthrough_and_the_package_loads_it(residual_package):
    built, root = residual_package
    rec = json.loads((root / "backward.json").read_text())
    assert rec["graph"]["passthrough"] == {"r": "grad:out"}
    assert [s["name"] for s in rec["graph"]["steps"]] == ["dlhs", "drhs"]
    assert sorted(p.name for p in (root / "backward").iterdir() if p.is_dir()) == ["dlhs", "drhs"]
    mod = import_package(root.parent, built.name)
    assert dict(mod.kernel.backward.graph.passthrough) == {"r": "grad:out"}
    assert list(mod.kernel.backward.steps) == ["dlhs", "drhs"]


def test_verify_checks_a_passed_through_gradient_as_its_own_row(tmp_path, monkeypatch, capsys):
    """`schedgen verify` of `y = x * w + r` in the interpreter: grad:r is a row like grad:x and grad:w (the
    upstream gradient against itself: exact, at its dtype's tolerance with no accumulation)."""
    import yaml
    from schedgen import cli
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    data = _map("y = x * w + r", {n: (MN, "f32") for n in "xwr"}, name="verify_residual")
    data["backward"] = {}
    path = tmp_path / "verify_residual.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "rows.json"
    status = cli.main(["verify", str(path), "--interpret", "--timeout", "0", "--json", str(out)])
    table = capsys.readouterr().out
    assert status == 0, table
    rows = {r["output"]: r for r in json.loads(out.read_text()) if r["output"].startswith("grad:")}
    assert sorted(rows) == ["grad:r", "grad:w", "grad:x"], table
    assert all(r["result"] == "ok" for r in rows.values()), rows
    assert rows["grad:r"]["rel_error"] == 0.0


def test_schedgen_build_names_the_passthroughs(tmp_path, monkeypatch, capsys):
    import yaml
    from schedgen import cli
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    data = {**_map("y = x + r", {"x": (MN, "f32"), "r": (MN, "f32")}, name="build_sum"), "backward": {}}
    path = tmp_path / "build_sum.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli.main(["build", str(path), "-o", str(tmp_path / "out")]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("backward:"))
    assert "0 kernels" in line and line.endswith("; passed through, no kernel: dx = dy, dr = dy"), line


# ------------------------------------------------------------------------------------------------ torch autograd


@pytest.fixture
def torch_ran(residual_package, sum_package, monkeypatch):
    """Kernel._call_cuda stubbed with each kernel's float64 reference (outputs in the kernel's dtype); the names of
    the kernels run, in order."""
    pytest.importorskip("torch")
    specs = {}
    for built, _ in (residual_package, sum_package):
        specs.update({built.name: built.backward.forward, **{b.name: b.spec for b in built.backward.steps.values()}})
    return stub_cuda_with_references(monkeypatch, specs)


def _torch_case(seed=0):
    import torch
    rng = np.random.default_rng(seed)
    host = {"a": rng.standard_normal((128, 64)), "b": rng.standard_normal((64, 128)),
            "r": rng.standard_normal((128, 128))}
    leaves = {k: torch.tensor(v, dtype=torch.bfloat16, requires_grad=True) for k, v in host.items()}
    gy = torch.tensor(rng.standard_normal((128, 128)), dtype=torch.bfloat16)
    return leaves, gy


def _closed_form(leaves, gy) -> dict:
    a, b = (leaves[k].detach().double().numpy() for k in "ab")
    g = gy.double().numpy()
    return {"a": g @ b.T, "b": a.T @ g, "r": g}


def test_torch_returns_the_upstream_gradient_itself_for_dr(residual_package, torch_ran):
    import torch
    built, root = residual_package
    mod = import_package(root.parent, built.name)
    leaves, gy = _torch_case()
    out = mod.mm_residual(*leaves.values())
    assert torch_ran == ["mm_residual"]
    da, db, dr = torch.autograd.grad(out, list(leaves.values()), grad_outputs=gy)
    assert torch_ran == ["mm_residual", "mm_residual_dlhs", "mm_residual_drhs"]   # no kernel for dr, none for gacc
    assert dr.data_ptr() == gy.data_ptr() and dr.dtype == torch.bfloat16 and dr.shape == gy.shape
    want = _closed_form(leaves, gy)
    for g, n in zip((da, db, dr), "abr"):
        np.testing.assert_allclose(g.double().numpy(), want[n], rtol=2e-2, atol=2e-2 * np.abs(want[n]).max())


def _seen_args(monkeypatch):
    """Each kernel run -> its arguments' (data_ptr, strides), recorded around the reference stub."""
    from schedgen.runtime.kernel import Kernel
    seen = {}
    stub = Kernel._call_cuda
    monkeypatch.setattr(Kernel, "_call_cuda", lambda self, args, out, stream: (
        seen.__setitem__(self.name, {o.name: (a.data_ptr(), tuple(a.stride())) for a, o in zip(args, self.inputs)}),
        stub(self, args, out, stream))[1])
    return seen


def test_torch_makes_an_expanded_upstream_gradient_dense_once_for_both_gemms(residual_package, torch_ran,
                                                                              monkeypatch):
    """out.sum()'s gradient is a stride-0 expand, which no kernel reads: dlhs and drhs get one dense copy, the
    same one (not one copy a step); dr is autograd's gradient itself."""
    import torch
    built, root = residual_package
    mod = import_package(root.parent, built.name)
    seen = _seen_args(monkeypatch)
    leaves, _ = _torch_case(1)
    out = mod.mm_residual(*leaves.values())
    ones = torch.ones((), dtype=torch.bfloat16).expand(128, 128)
    da, db, dr = torch.autograd.grad(out, list(leaves.values()), grad_outputs=ones)
    gl, gr = seen["mm_residual_dlhs"]["gacc"], seen["mm_residual_drhs"]["gacc"]
    assert gl == gr and gl[1] == (128, 1), (gl, gr)
    assert dr.data_ptr() == ones.data_ptr() and torch.all(dr == 1)
    np.testing.assert_allclose(da.double().numpy(), np.tile(leaves["b"].detach().double().numpy().sum(axis=1),
                                                            (128, 1)), rtol=2e-2, atol=0.5)


def test_torch_hands_a_tma_readable_strided_upstream_gradient_to_the_gemms_as_is(residual_package, torch_ran,
                                                                                monkeypatch):
    """The gradient of out as a column block of a wider tensor (out concatenated with something): the GEMM steps
    read gacc through tensor maps, so they get the view itself (before: a contiguous copy made up front)."""
    import torch
    built, root = residual_package
    mod = import_package(root.parent, built.name)
    seen = _seen_args(monkeypatch)
    leaves, gy = _torch_case(3)
    wide = torch.zeros(128, 256, dtype=torch.bfloat16)
    wide[:, :128] = gy
    view = wide[:, :128]
    da, db, dr = torch.autograd.grad(mod.mm_residual(*leaves.values()), list(leaves.values()), grad_outputs=view)
    for step in ("mm_residual_dlhs", "mm_residual_drhs"):
        assert seen[step]["gacc"] == (view.data_ptr(), (256, 1)), seen[step]
    assert dr.data_ptr() == view.data_ptr() and dr.stride() == (256, 1)
    want = _closed_form(leaves, gy)
    for g, n in zip((da, db, dr), "abr"):
        np.testing.assert_allclose(g.double().numpy(), want[n], rtol=2e-2, atol=2e-2 * np.abs(want[n]).max())


def test_torch_gives_both_operands_of_a_sum_the_upstream_gradient_and_accumulates_them_apart(sum_package,
                                                                                             torch_ran):
    """`y = x + r`: no backward kernel at all; dx and dr are the upstream gradient itself, and accumulating two
    backward passes into x.grad and r.grad keeps them apart (autograd copies a gradient it hands to two leaves)."""
    import torch
    built, root = sum_package
    assert not built.backward.steps and dict(built.backward.graph.passthrough) == {"x": "grad:y", "r": "grad:y"}
    mod = import_package(root.parent, built.name)
    rng = np.random.default_rng(6)
    x, r = (torch.tensor(rng.standard_normal((64, 256)), dtype=torch.float32, requires_grad=True) for _ in "xr")
    gy = torch.tensor(rng.standard_normal((64, 256)), dtype=torch.float32)
    kept = gy.clone()
    dx, dr = torch.autograd.grad(mod.map_sum(x, r), [x, r], grad_outputs=gy)
    assert dx.data_ptr() == dr.data_ptr() == gy.data_ptr() and torch_ran == ["map_sum"]
    mod.map_sum(x, r).backward(gy)
    mod.map_sum(x, r * 2).backward(gy)
    assert torch.equal(x.grad, 2 * gy) and torch.equal(r.grad, 3 * gy)
    assert torch.equal(gy, kept)                       # the caller's gradient untouched
    assert torch_ran == ["map_sum"] * 3


def test_torch_compile_fullgraph_traces_the_passthrough(residual_package, torch_ran):
    import torch
    built, root = residual_package
    mod = import_package(root.parent, built.name)
    backend, graphs = graph_keeping_backend()

    torch._dynamo.reset()
    leaves, gy = _torch_case(2)
    f = mod.mm_residual
    compiled = torch.compile(lambda a, b, r: (f(a, b, r).float() * gy.float()).sum(), fullgraph=True,
                             backend=backend)
    got = torch.autograd.grad(compiled(*leaves.values()), list(leaves.values()))
    bw = str(graphs["bw"].code)
    steps = mod.kernel.backward.steps
    assert all(s.torch_op.name in bw for s in steps.values()) and len(steps) == 2
    assert torch.equal(got[2], gy)                     # dr: the upstream gradient as it came
    want = _closed_form(leaves, gy)
    for g, n in zip(got, "abr"):
        np.testing.assert_allclose(g.double().numpy(), want[n], rtol=2e-2, atol=2e-2 * np.abs(want[n]).max())
    torch._dynamo.reset()


# ------------------------------------------------------------------------------------------------ jax


def test_jax_grad_returns_the_cotangent_for_the_residual(tmp_path_factory):
    """`y = x * w + r` (f32) through jax.grad in the Mosaic GPU interpreter: one step for dx and dw, dr is the
    cotangent itself (exactly), eager and jitted."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import yaml
    from jax.experimental.pallas import mosaic_gpu as plgpu
    from schedgen.build import build_spec, package
    from schedgen.cache import Cache
    tmp = tmp_path_factory.mktemp("passthrough_jax")
    data = _map("y = x * w + r", {n: (MN, "f32") for n in "xwr"}, name="map_residual")
    data["backward"] = {}
    path = tmp / "map_residual.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    built = build_spec(path, cache=Cache(tmp / "cache"))
    assert list(built.backward.steps) == ["grad"] and dict(built.backward.graph.passthrough) == {"r": "grad:y"}
    f = import_package(package(built, tmp / "out").parent, "map_residual").map_residual
    rng = np.random.default_rng(5)
    x, w, r, gy = (rng.standard_normal((64, 256)).astype(np.float32) for _ in range(4))
    interpret = plgpu.InterpretGPUParams()

    def loss(x, w, r):
        return jnp.sum(f(x, w, r, interpret=interpret) * gy)

    for grad in (jax.grad(loss, argnums=(0, 1, 2)), jax.jit(jax.grad(loss, argnums=(0, 1, 2)))):
        dx, dw, dr = grad(jnp.asarray(x), jnp.asarray(w), jnp.asarray(r))
        assert np.array_equal(np.asarray(dr), gy)
        np.testing.assert_allclose(np.asarray(dx), gy * w, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(dw), gy * x, rtol=1e-6)


def test_torch_compile_inductor_fullgraph_returns_dr_as_the_upstream_gradient(residual_package, torch_ran):
    """torch.compile(fullgraph=True) with inductor (on the CPU here, the kernels stubbed): the compiled backward runs
    dlhs and drhs only and hands dr back as the upstream gradient itself."""
    import torch
    built, root = residual_package
    mod = import_package(root.parent, built.name)
    torch._dynamo.reset()
    f = mod.mm_residual
    compiled = torch.compile(lambda a, b, r: f(a, b, r), fullgraph=True)
    leaves, gy = _torch_case(4)
    da, db, dr = torch.autograd.grad(compiled(*leaves.values()), list(leaves.values()), grad_outputs=gy)
    assert torch_ran == ["mm_residual", "mm_residual_dlhs", "mm_residual_drhs"]
    assert torch.equal(dr, gy)
    want = _closed_form(leaves, gy)
    for g, n in zip((da, db), "ab"):
        np.testing.assert_allclose(g.double().numpy(), want[n], rtol=2e-2, atol=2e-2 * np.abs(want[n]).max())
    torch._dynamo.reset()
