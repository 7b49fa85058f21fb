"""Cross-entropy with F.cross_entropy's contract (issue 43): integer class indices (i32 / i64) as the targets,
op.ignore_index (rows that contribute 0 loss and 0 gradient) and op.reduction none / mean / sum, forward and the
derived backward. Planning, located errors, NVRTC compiles of every variant on the CPU; the Pallas kernels in
Mosaic GPU's interpreter, forward and jax.grad through the package, against a float64 numpy F.cross_entropy written
here (not schedgen's reference); the torch op's fake under torch.compile(fullgraph=True). GPU tests (marked gpu)
compare both backends with torch's F.cross_entropy in float64."""
from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from conftest import SPECS_DIR, import_package
from schedgen import families
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.errors import SourceMap, SpecErrors
from schedgen.frontend.validate import load_spec, validate_data
from schedgen.plan import plan
from schedgen.render import render
from schedgen.toolchain.nvrtc import compile_cuda, sass

SPEC = SPECS_DIR / "cross_entropy_bf16_int64.yaml"
IGNORE = -100
# small enough for the Pallas interpreter: 1024 columns, 8 rows a step (a per-row TMA of 8 x 8 B / 8 x 4 B)
SMALL = {"op.sizes.N": 1024, "op.sizes.M": {"dynamic": True, "max": 4096},
         "schedule.backends": ["cuda", "pallas"],
         "schedule.out_specs.loss": {"block_shape": [8], "out_of_bounds": "zero"}}


def _plan(ov=None, path=SPEC):
    return plan(*load_spec(str(path), ov))


def _errors(ov) -> list[str]:
    spec, src = load_spec(str(SPEC), ov)
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    return [line[line.index(".yaml:") + 6:] for line in info.value.lines()]


def _step(ov=None):
    """The derived backward's step spec (data) of the bundled spec with `ov`."""
    spec, src = load_spec(str(SPEC), ov)
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems, problems
    return graph


# ------------------------------------------------------------------------------------------------ a float64 F.cross_entropy

def cross_entropy64(x, t, reduction, ignore_index=IGNORE):
    """torch's F.cross_entropy(x, t, reduction=..., ignore_index=...) in float64 numpy, and its gradient of x for
    an upstream gradient g (a scalar for mean / sum, [M] for none): (loss, grad(g))."""
    x = np.asarray(x, np.float64)
    t = np.asarray(t).astype(np.int64)
    m, n = x.shape
    keep = t != ignore_index
    top = x.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(x - top).sum(axis=1))
    picked = x[np.arange(m), np.where(keep, t, 0)]
    rows = np.where(keep, lse - picked, 0.0)
    count = keep.sum()
    loss = rows if reduction == "none" else np.array([rows.sum() / (count if reduction == "mean" else 1)])

    def grad(g):
        g = np.asarray(g, np.float64).reshape(-1)
        per_row = g if reduction == "none" else np.full(m, g[0] / (count if reduction == "mean" else 1))
        soft = np.exp(x - lse[:, None])
        soft[np.arange(m)[keep], t[keep]] -= 1.0
        return np.where(keep[:, None], soft * per_row[:, None], 0.0)
    return loss, grad


def _case(m: int, n: int, seed: int, magnitude: float):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, n)) * magnitude).astype(np.float32)
    t = rng.integers(0, n, m).astype(np.int64)
    t[rng.random(m) < 0.3] = IGNORE
    t[seed % m] = IGNORE                            # at least one ignored row
    t[(seed + 1) % m] = n - 1                       # and one at the last column
    return x, t


def _bf16(a):
    import ml_dtypes
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)


# ------------------------------------------------------------------------------------------------ planning

def test_the_bundled_spec_plans_int64_targets_and_a_deterministic_mean():
    p = _plan()
    (t,) = p.index_inputs
    assert (t.name, t.dtype, t.kind, t.ctype) == ("t", "i64", "per_row", "long long")
    assert (p.reduction, p.ignore_index) == ("mean", IGNORE)
    (loss,) = p.scalar_outputs
    assert loss.shape == (1,) and loss.dtype == "f32"
    ws = [a for a in p.launch.kernel_args if a.kind == "workspace"]
    assert len(ws) == 1 and ws[0].zero == 16, ws         # the blocks-done counter is zeroed, the slots are not
    assert p.launch.backends == ("cuda",)                 # 1 row a block at N = 32000: no Pallas (8-byte TMA)
    cu = render(p, "cuda")
    assert "const long long ix = live[s] ? (long long)__ldg(in_t + row[s]) : 0LL;" in cu
    assert "constexpr long long kIgnore = -100LL;" in cu
    assert "atomicAdd(reinterpret_cast<unsigned*>(sg_ws), 1u) == gridDim.x - 1" in cu


def test_f32_targets_keep_their_meaning():
    """The f32-target spec is unchanged: no ignored rows, no reduction, no workspace."""
    p = _plan(path=SPECS_DIR / "crossentropy_bf16.yaml")
    assert not p.index_inputs and p.reduction == "none"
    assert not any(a.kind == "workspace" for a in p.launch.kernel_args)
    assert "kIgnore" not in render(p, "cuda")


VARIANTS = {
    "int64_mean": {},
    "int64_sum": {"op.reduction": "sum"},
    "int32_none": {"op.inputs.t.dtype": "int32", "op.reduction": "none", "op.outputs.loss.shape": ["M"]},
    "int64_mean_4rows_2steps": {"op.sizes.N": 4096, "schedule.out_specs.loss": {"block_shape": [4],
                                                                                "out_of_bounds": "zero"}},
    "int64_mean_f32_logits_streaming": {"op.inputs.x.dtype": "f32", "op.sizes.N": 128256},
}


@pytest.mark.parametrize("ov", VARIANTS.values(), ids=VARIANTS)
@pytest.mark.parametrize("which", ["forward", "backward"])
def test_cuda_compiles_without_local_memory(ov, which):
    if which == "forward":
        p = _plan(ov)
    else:
        step = _step(ov).steps[0].spec
        p = plan(*_validated(step))
        assert "t" in step["op"]["inputs"] and step["op"]["reduction"] == plan(*load_spec(str(SPEC), ov)).reduction
    text = sass(compile_cuda(render(p, "cuda")).cubin)
    assert not re.search(r"\b(LDL|STL)\b", text), "local memory (spills) in the kernel"
    if p.scalar_outputs:         # the last block's adds read the other blocks' slots from L2
        assert re.search(r"\bATOMG?\.E\.ADD|\bRED\.E\.ADD|\bATOM\.E\.ADD", text) and re.search(r"\bLDG\.E\.STRONG\.GPU|LDG\.E\.EL|LDG\.E\b", text)


def _validated(data):
    src = SourceMap("<derived>")
    return validate_data(data, src), src


LOCATED = [
    ({"backward.wrt": ["x", "t"]}, "backward.wrt.1", "only bf16/f16/f32 inputs get gradients"),
    ({"op.inputs.t.shape": ["M", "N"]}, "op.inputs.t.dtype", "integer inputs are class indices of one value a row"),
    ({"op.outputs.loss.shape": ["M"]}, "op.outputs.loss.shape", "reduced to one: shape [1]"),
    ({"op.reduction": "none"}, "op.outputs.loss.shape", "[1] (one value in all) with op.reduction mean or sum"),
    ({"op.outputs.loss.dtype": "bf16"}, "op.outputs.loss.dtype", "f32, got bf16"),
    ({"schedule.cluster": [2, 1, 1]}, "schedule.cluster[0]", "use cluster: [1]"),
    ({"op.sizes.N": (1 << 24) + 8}, "op.inputs.t.dtype", "exact below 16777216"),
]


@pytest.mark.parametrize("ov, where, what", LOCATED, ids=[w for _, w, _ in LOCATED])
def test_located_errors(ov, where, what):
    if where.startswith("backward"):
        spec, src = load_spec(str(SPEC), ov)
        _, problems = families.of(spec).backward(spec, src)
        text = str(SpecErrors(problems, src))
        assert "backward.wrt[1]" in text and what in text and "'t' has dtype i64" in text, text
        return
    lines = _errors(ov)
    assert any(where in line and what in line for line in lines), lines


def test_an_integer_output_is_a_schema_error():
    with pytest.raises(SpecErrors) as info:
        load_spec(str(SPEC), {"op.outputs.loss.dtype": "int64"})
    assert any("op.outputs.loss.dtype" in line for line in info.value.lines())


def test_the_backward_step_masks_and_scales():
    """The step copies ignore_index and the reduction, reads the class indices and the [1] cotangent; its CUDA
    kernel counts the rows not ignored before its rows (mean), and writes 0 on an ignored row."""
    step = _step().steps[0]
    assert step.inputs["t"] == "in:t" and step.inputs["g_loss"] == "grad:loss"
    assert step.spec["op"]["inputs"]["g_loss"]["shape"] == [1]
    p = plan(*_validated(step.spec))
    assert [o.name for o in p.scalar_inputs] == ["g_loss"] and not p.scalar_outputs
    cu = render(p, "cuda")
    assert "sg_scale = 1.0f / (float)rows;" in cu and "y_grad_x[j] = ign[s] ? 0.0f : o_grad_x;" in cu
    step_data = dict(step.spec, schedule={"persistent": {"loop": "none"}})
    with pytest.raises(SpecErrors) as info:
        plan(*_validated(step_data))
    assert "schedule.persistent.loop" in str(info.value) and "M x M class indices" in str(info.value)
    assert "sg_scale" not in render(plan(*_validated(_step({"op.reduction": "sum"}).steps[0].spec)), "cuda").split(
        "const float sc_g_loss")[0].split("float sg_scale = 1.0f;")[1]


# ------------------------------------------------------------------------------------------------ float64 reference

@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_schedgens_reference_is_f_cross_entropy(reduction, tmp_path):
    from schedgen.reference import reference
    ov = {"op.reduction": reduction} | ({"op.outputs.loss.shape": ["M"]} if reduction == "none" else {})
    spec, _ = load_spec(str(SPEC), ov)
    x, t = _case(13, 512, seed=4, magnitude=3.0)
    got = reference(spec, {"M": 13, "N": 512}, {"x": x, "t": t})["loss"]
    want, _ = cross_entropy64(x, t, reduction)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_the_derived_graph_is_f_cross_entropys_gradient(reduction):
    """The backward graph evaluated with schedgen's float64 references (the step's [1] cotangent as the
    reduction's adjoint, ignored rows 0) is F.cross_entropy's gradient of the logits."""
    from schedgen.autodiff.graph import evaluate
    ov = {"op.reduction": reduction, "op.sizes.N": 256} | ({"op.outputs.loss.shape": ["M"]} if reduction == "none"
                                                           else {})
    spec, src = load_spec(str(SPEC), ov)
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems and graph.grads == ("x",)
    sizes = {"M": 11, "N": 256}
    x, t = _case(11, 256, seed=8, magnitude=4.0)
    inputs = {"x": x.astype(np.float64), "t": t}
    outputs = families.of(spec).reference(spec, sizes, inputs)
    want, grad = cross_entropy64(x, t, reduction)
    np.testing.assert_allclose(outputs["loss"], want, rtol=1e-12)
    g = np.random.default_rng(2).standard_normal(want.shape)

    def run(step, values):
        step_spec, _ = _validated(step.spec)
        return families.of(step_spec).reference(step_spec, sizes, values)
    got = evaluate(graph, inputs, outputs, {"loss": g}, run)
    np.testing.assert_allclose(got["x"], grad(g), rtol=1e-10, atol=1e-14)


# ------------------------------------------------------------------------------------------------ Pallas, interpreted

@pytest.fixture(scope="module")
def pallas_packages(tmp_path_factory):
    """{reduction: the package's function}, built at SMALL with the backward (wrt x)."""
    pytest.importorskip("jax")
    tmp = tmp_path_factory.mktemp("xent")
    out = {}
    for reduction in ("none", "mean", "sum"):
        spec, _ = load_spec(str(SPEC))
        data = yaml.safe_load(SPEC.read_text())
        data["name"] = f"xent_{reduction}"
        data["op"]["sizes"] = {"M": {"dynamic": True, "max": 4096}, "N": 1024}
        data["op"]["reduction"] = reduction
        if reduction == "none":
            data["op"]["outputs"]["loss"]["shape"] = ["M"]
        data["schedule"] = {"backends": ["cuda", "pallas"],
                            "out_specs": {"loss": {"block_shape": [8], "out_of_bounds": "zero"}}}
        path = tmp / f"xent_{reduction}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        built = build_spec(str(path), cache=Cache(tmp / "cache"))
        mod = import_package(package(built, tmp / "out").parent, built.spec.name)
        out[reduction] = getattr(mod, built.spec.name)
    return out


@pytest.mark.parametrize("magnitude", [1.0, 1e3, 1e4], ids=["|x|~1", "|x|~1e3", "|x|~1e4"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_pallas_interpreted_loss_and_grad_match_float64(pallas_packages, reduction, magnitude):
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas import mosaic_gpu as plgpu
    f = pallas_packages[reduction]
    m, n = 19, 1024                                   # 19: the last step of 8 rows partial
    x, t = _case(m, n, seed=int(magnitude) % 7 + 2, magnitude=magnitude)
    xb = jnp.asarray(_bf16(x))
    tj = jnp.asarray(t)                               # int64 on the host; jax's int32 without x64
    interp = plgpu.InterpretGPUParams()
    want, grad = cross_entropy64(np.asarray(_bf16(x), np.float64), t, reduction)
    got = np.asarray(f(xb, tj, interpret=interp), np.float64)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5 * max(1.0, np.abs(want).max()))
    g = np.random.default_rng(3).standard_normal(want.shape).astype(np.float32)
    _, vjp = jax.vjp(lambda a: f(a, tj, interpret=interp), xb)
    (gx,) = vjp(jnp.asarray(g))
    gx = np.asarray(gx.astype(jnp.float32), np.float64)
    gw = grad(g)
    assert (gx[t == IGNORE] == 0).all(), "an ignored row got a gradient"
    # bf16 gradient: one rounding of each element (2^-8 relative) plus the f32 math
    np.testing.assert_allclose(gx, gw, rtol=1e-2, atol=1e-2 * np.abs(gw).max())


def test_pallas_out_of_range_targets_are_masked(pallas_packages):
    """An index outside [0, N) that is not ignore_index reads nothing: take() gives 0, so the row's loss is its
    logsumexp and its gradient softmax (no -1 anywhere), never a load past the row."""
    import jax.numpy as jnp
    from jax.experimental.pallas import mosaic_gpu as plgpu
    x, t = _case(8, 1024, seed=5, magnitude=2.0)
    t[:4] = [1024, -1, 5000, -7]
    xd = np.asarray(_bf16(x), np.float64)
    got = np.asarray(pallas_packages["none"](jnp.asarray(_bf16(x)), jnp.asarray(t),
                                             interpret=plgpu.InterpretGPUParams()), np.float64)
    top = xd.max(1)
    lse = top + np.log(np.exp(xd - top[:, None]).sum(1))
    np.testing.assert_allclose(got[:4], lse[:4], rtol=1e-5)


# ------------------------------------------------------------------------------------------------ torch, traced

def test_torch_compile_fullgraph_on_fake_tensors(tmp_path):
    """The CUDA package's custom op under torch.compile(fullgraph=True), on fake tensors: int64 targets, a [1]
    mean loss, one graph for several row counts (M dynamic)."""
    torch = pytest.importorskip("torch")
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._subclasses.fake_tensor import FakeTensorMode
    built = build_spec(str(SPEC), cache=Cache(tmp_path / "cache"))
    mod = import_package(package(built, tmp_path / "out").parent, built.spec.name)
    f = getattr(mod, built.spec.name)
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("aot_eager")
    g = torch.compile(lambda x, t: f(x, t) * 2.0, fullgraph=True, backend=cnt, dynamic=True)
    with FakeTensorMode() as mode:
        for m in (64, 96, 160):
            x = mode.from_tensor(torch.empty(m, 32000, dtype=torch.bfloat16, device="meta"))
            t = mode.from_tensor(torch.empty(m, dtype=torch.int64, device="meta"))
            out = g(x, t)
            assert out.shape == (1,) and out.dtype == torch.float32 and type(out).__name__ == "FakeTensor"
    assert cnt.frame_count == 1
    torch._dynamo.reset()


# ------------------------------------------------------------------------------------------------ GPU

def _gpu_package(tmp_path, reduction: str, overrides: dict | None = None):
    """The bundled spec with `reduction` (and `overrides` of its data), built and imported: its function."""
    data = yaml.safe_load(SPEC.read_text())
    data["name"] = f"xent_gpu_{reduction}"
    data["op"]["reduction"] = reduction
    if reduction == "none":
        data["op"]["outputs"]["loss"]["shape"] = ["M"]
    for key, value in (overrides or {}).items():
        node = data
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    built = build_spec(str(path), cache=Cache(tmp_path / "cache"))
    mod = import_package(package(built, tmp_path / "out").parent, built.spec.name)
    return getattr(mod, built.spec.name)


@pytest.mark.gpu
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compile"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_gpu_cuda_matches_torch_cross_entropy(tmp_path, reduction, compiled):
    """The CUDA package under torch autograd (and torch.compile(fullgraph=True)) at N = 32000 against torch's own
    F.cross_entropy in float64 of the same bf16 logits: the loss and the gradient of the logits, int64 targets with
    ignored rows, row counts from 1 to past the SMs' resident blocks, logits of |x| ~ 1 and ~ 1e4; the mean and sum
    are bitwise the same on a second call (the last block adds the blocks' sums in block order)."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    f = _gpu_package(tmp_path, reduction)
    run = torch.compile(lambda a, b: f(a, b), fullgraph=True) if compiled else f
    for m, magnitude, seed in ((1, 1.0, 0), (777, 1.0, 1), (4096, 1e4, 2), (9000, 1e3, 3)):
        x, t = _case(m, 32000, seed=seed, magnitude=magnitude)
        if m == 1:
            t[0] = 7
        xb = torch.tensor(x, device="cuda").to(torch.bfloat16).requires_grad_()
        tt = torch.tensor(t, device="cuda")
        loss = run(xb, tt)
        x64 = xb.detach().double().requires_grad_()
        want = F.cross_entropy(x64, tt, reduction=reduction, ignore_index=IGNORE)
        assert loss.shape == ((m,) if reduction == "none" else (1,)), loss.shape
        got = loss.double().reshape(want.shape)
        torch.testing.assert_close(got, want, rtol=2e-5, atol=1e-5 * max(1.0, float(want.abs().max())))
        g = torch.randn(loss.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        loss.backward(g)
        want.backward(g.double().reshape(want.shape))
        gw = x64.grad
        assert (xb.grad[tt == IGNORE] == 0).all()
        torch.testing.assert_close(xb.grad.double(), gw, rtol=1e-2, atol=1e-2 * float(gw.abs().max()))
        if reduction != "none":
            again = run(xb.detach(), tt)
            assert torch.equal(again, loss.detach()), "the reduction is not deterministic"


@pytest.mark.gpu
def test_gpu_cuda_out_of_range_targets_read_nothing(tmp_path):
    """Indices outside [0, N) that are not ignore_index: no load past the row (the loss is the row's logsumexp)."""
    torch = pytest.importorskip("torch")
    f = _gpu_package(tmp_path, "none")
    x, t = _case(64, 32000, seed=6, magnitude=2.0)
    t[:4] = [32000, -1, 1 << 40, -(1 << 40)]
    xb = torch.tensor(x, device="cuda").to(torch.bfloat16)
    loss = f(xb, torch.tensor(t, device="cuda"))
    lse = torch.logsumexp(xb.double(), dim=1)
    torch.testing.assert_close(loss[:4].double(), lse[:4], rtol=1e-5, atol=1e-5)
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_gpu_pallas_matches_torch_cross_entropy(tmp_path, reduction):
    """The Pallas package on the GPU (jax arrays; 8 rows a step at N = 4096) and jax.grad through it, against
    torch's F.cross_entropy in float64 on the CPU."""
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    import jax.numpy as jnp
    import torch.nn.functional as F
    f = _gpu_package(tmp_path, reduction, {
        "op.sizes": {"M": {"dynamic": True, "max": 65536}, "N": 4096},
        "schedule": {"backends": ["cuda", "pallas"], "out_specs": {"loss": {"block_shape": [8],
                                                                               "out_of_bounds": "zero"}}}})
    for m, magnitude, seed in ((13, 1.0, 0), (3001, 1e4, 1)):
        x, t = _case(m, 4096, seed=seed, magnitude=magnitude)
        xb = jnp.asarray(_bf16(x))
        tj = jnp.asarray(t)
        loss, vjp = jax.vjp(lambda a, tj=tj: f(a, tj, backend="pallas"), xb)
        x64 = torch.tensor(np.asarray(xb.astype(jnp.float32)), dtype=torch.float64, requires_grad=True)
        want = F.cross_entropy(x64, torch.tensor(t), reduction=reduction, ignore_index=IGNORE)
        np.testing.assert_allclose(np.asarray(loss, np.float64).reshape(want.shape), want.detach().numpy(),
                                   rtol=2e-5, atol=1e-5 * max(1.0, float(want.abs().max())))
        g = np.random.default_rng(seed).standard_normal(np.shape(loss)).astype(np.float32)
        (gx,) = vjp(jnp.asarray(g))
        want.backward(torch.tensor(g, dtype=torch.float64).reshape(want.shape))
        gw = x64.grad.numpy()
        np.testing.assert_allclose(np.asarray(gx.astype(jnp.float32), np.float64), gw, rtol=1e-2,
                                   atol=1e-2 * np.abs(gw).max())


@pytest.mark.parametrize("which, reduction, dtype", [
    ("forward", "mean", "i64"), ("backward", "mean", "i64"),
    pytest.param("forward", "sum", "i32", marks=pytest.mark.slow),       # a minute or more each on a shared CPU
    pytest.param("forward", "none", "i32", marks=pytest.mark.slow),
    pytest.param("backward", "sum", "i32", marks=pytest.mark.slow),
    pytest.param("backward", "none", "i32", marks=pytest.mark.slow)])
def test_pallas_lowers_for_cuda(tmp_path, reduction, dtype, which):
    """Mosaic GPU (jax 0.11.2) lowers the Pallas kernels on the CPU: the class indices' per-row block, the ignored
    rows' where, and the jax function around a reduced kernel (jax without x64 reads i64 as int32)."""
    jax = pytest.importorskip("jax")
    from schedgen.runtime.arrays import DTYPES
    from schedgen.runtime.kernel import load_package
    ov = {**SMALL, "op.reduction": reduction, "op.inputs.t.dtype": dtype} | (
        {"op.outputs.loss.shape": ["M"]} if reduction == "none" else {})
    if which == "forward":
        built = build_spec(str(SPEC), ov)
    else:
        step = _step(ov).steps[0].spec
        step["schedule"] = {"backends": ["pallas"],
                            "out_specs": {"grad_x": {"block_shape": [8, 1024], "out_of_bounds": "zero"}}}
        path = tmp_path / "step.yaml"
        path.write_text(yaml.safe_dump(step, sort_keys=False))
        built = build_spec(str(path))
    assert "pallas" in built.plan.launch.backends
    kernel = load_package(package(built, tmp_path / "out"))
    sizes = {r.name: r.max for r in kernel.launch.sizes}
    args = [jax.ShapeDtypeStruct(kernel.shape_of(o, sizes), DTYPES[o.dtype]) for o in kernel.inputs]
    text = jax.jit(kernel._pallas.module().make(sizes)).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "mosaic_gpu" in text
