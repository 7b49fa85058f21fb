"""The rowwise backward sums a vector's gradient (a norm's w, b: [N] over [M, N]) in the kernel: the step writes
[P, N] f32 partial column sums (one row a block, P fixed by the step's spec), the graph's sum_to adds the P rows.
Checked in the Mosaic GPU interpreter through jax.grad against float64 (M below P, M not a whole number of row
blocks, M above P), the step kernel alone with poisoned outputs, the planner's errors, and on the GPU through torch
autograd and torch.compile(fullgraph=True)."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from backward_util import graph_gradients, spec_with, step_spec
from conftest import import_package
from schedgen import families
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.errors import SourceMap, SpecErrors
from schedgen.families.rowwise.backward import PARTIALS
from schedgen.plan import plan

N = 256
BODIES = {
    "layernorm": ({"x": ["M", "N"], "w": ["N"], "b": ["N"]}, {"eps": 1e-5},
                  "mu = mean(x)\nxc = x - mu\nvar = mean(xc * xc)\ny = xc * rsqrt(var + eps) * w + b"),
    "rmsnorm": ({"x": ["M", "N"], "w": ["N"]}, {"eps": 1e-6}, "y = x * rsqrt(mean(x * x) + eps) * w"),
}


def norm_spec(case: str, m, dtype: str = "f32") -> dict:
    ins, consts, body = BODIES[case]
    return {"name": f"{case}_{dtype}_cg", "op": {
        "kind": "rowwise", "sizes": {"M": m, "N": N}, "constants": consts,
        "inputs": {k: {"shape": s, "dtype": dtype} for k, s in ins.items()},
        "outputs": {"y": {"shape": ["M", "N"], "dtype": dtype}}, "body": body}}


DYNAMIC = {"dynamic": True, "max": 1024, "multiple_of": 1}


@pytest.mark.parametrize("case", BODIES)
def test_the_step_writes_p_rows_of_partial_sums(tmp_path, case):
    spec, src = spec_with(tmp_path, norm_spec(case, DYNAMIC), {})
    graph, problems = families.of(spec).backward(spec, src)
    assert not problems
    outs = graph.steps[0].spec["op"]["outputs"]
    assert outs["grad_w"] == {"shape": [PARTIALS, "N"], "dtype": "f32"} and outs["grad_x"]["shape"] == ["M", "N"]
    p = plan(step_spec(graph.steps[0]), SourceMap("<step>"))
    assert p.partials == PARTIALS and p.launch.num_blocks == PARTIALS and p.pallas_blocks == PARTIALS
    assert not p.launch.auto_blocks and p.persistent
    assert {o.name: o.kind for o in p.outputs}["grad_w"] == "partial"
    from schedgen.explain import explain
    assert f"partials   grad_w{', grad_b' if case == 'layernorm' else ''}: each of the {PARTIALS} blocks" in explain(p)
    # a small fixed M: P = M // 2 (< M, so the shape never reads as rows); M < 4: the [M, N] path
    spec, src = spec_with(tmp_path, norm_spec(case, 10), {})
    assert families.of(spec).backward(spec, src)[0].steps[0].spec["op"]["outputs"]["grad_w"]["shape"] == [5, "N"]
    spec, src = spec_with(tmp_path, norm_spec(case, 3), {})
    assert families.of(spec).backward(spec, src)[0].steps[0].spec["op"]["outputs"]["grad_w"]["shape"] == ["M", "N"]


def _partial_spec(**out) -> dict:
    data = {"name": "colsum", "op": {
        "kind": "rowwise", "sizes": {"M": 64, "N": N},
        "inputs": {"x": {"shape": ["M", "N"], "dtype": "f32"}},
        "outputs": {"y": {"shape": ["M", "N"], "dtype": "f32"}, "s": {"shape": [8, "N"], "dtype": "f32"}},
        "body": "y = x - mean(x)\ns = y * x"}}
    data["op"]["outputs"]["s"].update(out)
    return data


@pytest.mark.parametrize("change, where, what", [
    ({"dtype": "bf16"}, "op.outputs.s.dtype", "f32"),
    ({"shape": [8, 128]}, "op.outputs.s.shape", "none of the row shapes"),
])
def test_partial_output_errors_are_located(tmp_path, change, where, what):
    from schedgen.frontend.validate import load_spec
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_partial_spec(**change), sort_keys=False))
    spec, src = load_spec(str(path))
    with pytest.raises(SpecErrors) as err:
        plan(spec, src)
    assert where in str(err.value) and what in str(err.value), str(err.value)


@pytest.mark.parametrize("schedule, where", [
    ({"persistent": {"num_blocks": 64}}, "schedule.persistent.num_blocks"),
    ({"persistent": {"loop": "none"}}, "schedule.persistent.loop"),
])
def test_a_schedule_that_would_change_p_is_an_error(tmp_path, schedule, where):
    from schedgen.frontend.validate import load_spec
    data = dict(_partial_spec(), schedule=schedule)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    spec, src = load_spec(str(path))
    with pytest.raises(SpecErrors) as err:
        plan(spec, src)
    assert where in str(err.value) and "partial" in str(err.value), str(err.value)


def test_a_per_row_value_cannot_be_a_partial_output(tmp_path):
    from schedgen.frontend.validate import load_spec
    data = _partial_spec()
    data["op"]["body"] = "y = x - mean(x)\ns = mean(x)"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    spec, src = load_spec(str(path))
    with pytest.raises(SpecErrors) as err:
        plan(spec, src)
    assert "op.outputs.s.shape" in str(err.value) and "one value a row" in str(err.value)


@pytest.mark.parametrize("wrt", [None, ["w", "b"]], ids=["all", "w_b_only"])
def test_the_step_kernel_verifies_with_poisoned_outputs(tmp_path, monkeypatch, wrt):
    """The step alone in the interpreter at the verifier's small sizes (NaN-poisoned outputs: every one of the P
    rows must be written, zeros by the blocks with no rows), its partials' column sums against float64; with
    wrt [w, b] every output is partial (the rows a step: the first one's BlockSpec [R, N])."""
    pytest.importorskip("jax")
    from schedgen.verify import verify_file
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    spec, src = spec_with(tmp_path, norm_spec("layernorm", 70), {"wrt": wrt} if wrt else {})
    graph, _ = families.of(spec).backward(spec, src)
    path = tmp_path / "step.yaml"
    path.write_text(yaml.safe_dump(graph.steps[0].spec, sort_keys=False))
    checks = verify_file(str(path), ["pallas"], interpret=True, seed=1)
    assert {c.output for c in checks} == ({"grad_w", "grad_b"} if wrt else {"grad_x", "grad_w", "grad_b"})
    assert checks and all(c.ok and c.rel_error <= c.tolerance for c in checks), checks


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("colgrad")
    out = {}
    for case in BODIES:
        path = tmp / f"{case}.yaml"
        data = norm_spec(case, DYNAMIC)
        data["backward"] = {}
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        built = build_spec(str(path), cache=Cache(tmp / "cache"))
        folder = package(built, tmp / "out")
        out[case] = (built, import_package(folder.parent, built.spec.name))
    return out


def _case(case: str, m: int, seed: int):
    rng = np.random.default_rng(seed)
    ins = {k: rng.standard_normal((m, N) if len(s) == 2 else (N,)).astype(np.float32)
           for k, s in BODIES[case][0].items()}
    return ins, rng.standard_normal((m, N)).astype(np.float32)


def _float64_grads(tmp_path, case, ins, gy):
    spec, src = spec_with(tmp_path, norm_spec(case, DYNAMIC), {})
    graph, _ = families.of(spec).backward(spec, src)
    return graph_gradients(spec, graph, {"M": len(gy), "N": N}, {k: v.astype(np.float64) for k, v in ins.items()},
                           {"y": gy.astype(np.float64)})


@pytest.mark.parametrize("m", [3, 37, 300], ids=["M<P", "ragged", "M>P"])
@pytest.mark.parametrize("case", BODIES)
def test_jax_grad_through_the_package(tmp_path, packages, case, m):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax.experimental.pallas import mosaic_gpu as plgpu
    f = getattr(packages[case][1], packages[case][0].spec.name)
    ins, gy = _case(case, m, seed=m)
    names = list(ins)

    def loss(*args):
        return jnp.sum(f(*args, interpret=plgpu.InterpretGPUParams()) * gy)

    got = jax.grad(loss, argnums=tuple(range(len(names))))(*(jnp.asarray(v) for v in ins.values()))
    want = _float64_grads(tmp_path, case, ins, gy)
    for n, g in zip(names, got):
        assert g.shape == ins[n].shape
        scale = np.abs(want[n]).max()
        np.testing.assert_allclose(np.asarray(g, np.float64), want[n], rtol=1e-4, atol=2e-5 * scale, err_msg=n)


@pytest.mark.gpu
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compile"])
@pytest.mark.parametrize("m", [3, 37, 4000], ids=["M<P", "ragged", "M>P"])
@pytest.mark.parametrize("case", BODIES)
def test_gpu_torch_autograd(tmp_path, packages, case, m, compiled):
    """The CUDA step kernel under torch autograd (and torch.compile(fullgraph=True): the step op's fake gives
    [P, N]) against float64."""
    torch = pytest.importorskip("torch")
    f = getattr(packages[case][1], packages[case][0].spec.name)
    ins, gy = _case(case, m, seed=m + 1)
    args = [torch.tensor(v, device="cuda", requires_grad=True) for v in ins.values()]
    g = torch.tensor(gy, device="cuda")

    def step(*a):
        return (f(*a) * g).sum()

    run = torch.compile(step, fullgraph=True) if compiled else step
    run(*args).backward()
    want = _float64_grads(tmp_path, case, ins, gy)
    for n, a in zip(ins, args):
        scale = np.abs(want[n]).max()
        np.testing.assert_allclose(a.grad.double().cpu().numpy(), want[n], rtol=1e-4, atol=2e-5 * scale, err_msg=n)


@pytest.mark.parametrize("m", [37, 5], ids=["ragged", "M<P"])
def test_a_forward_partial_output_masks_rows_past_m(tmp_path, monkeypatch, m):
    """A partial-sum output whose value is not 0 on a zero row (exp): rows past M (the last step's) must add
    nothing; with P = 8 blocks, M = 5 leaves blocks with no rows (zeros, over poisoned outputs)."""
    pytest.importorskip("jax")
    from schedgen.verify import verify_file
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    data = _partial_spec()
    data["op"]["sizes"]["M"] = m
    data["op"]["body"] = "y = x - mean(x)\ns = exp(y - max(y))"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    checks = verify_file(str(path), ["pallas"], interpret=True, seed=2)
    assert {c.output for c in checks} == {"y", "s"}
    assert all(c.ok and c.rel_error <= c.tolerance for c in checks), checks


@pytest.mark.parametrize("case, n, wrt", [("layernorm", 4096, None), ("rmsnorm", 8192, None),
                                          ("layernorm", 1001, None), ("layernorm", 4096, ["w", "b"]),
                                          ("layernorm", 65536, None)])
def test_cuda_step_compiles_without_local_memory(tmp_path, case, n, wrt):
    """The CUDA step (bf16 rows: 16-byte vectors; N = 1001: one element an access) compiles for sm_90a: the
    column sums stay in registers (no local memory), the block's row is written with f32 stores, and its P blocks
    are the launch's grid exactly (not lowered to the SMs: a block's partial row must exist). wrt [w, b]: the
    step has no [M, N] output, yet every warp of a row needs the last level's sums (no thread-0-only combine)."""
    import re
    from schedgen.render import render
    from schedgen.toolchain.nvrtc import compile_cuda, sass
    data = norm_spec(case, DYNAMIC, "bf16")
    data["op"]["sizes"]["N"] = n
    spec, src = spec_with(tmp_path, data, {"wrt": wrt} if wrt else {})
    graph, _ = families.of(spec).backward(spec, src)
    p = plan(step_spec(graph.steps[0]), SourceMap("<step>"))
    code = render(p, "cuda")
    if wrt:
        assert {o.kind for o in p.outputs} == {"partial"} and p.warps_per_row > 1 and "if (wr == 0) {" not in code
    if n == 65536:     # a row too long for one CTA: the defaults' cluster; each CTA writes its columns of the row
        c = p.launch.cluster_dims[0]
        assert c > 1 and p.launch.num_blocks == PARTIALS * c and "(long long)((int)blockIdx.x / kCluster) * kN + col0 + e0" in code
    assert "pa_grad_w[c][j] +=" in code and p.launch.num_blocks == PARTIALS * p.launch.cluster_dims[0] and not p.launch.auto_blocks
    assert p.vec == (1 if n % 8 else 8)
    text = sass(compile_cuda(code).cubin)
    assert not re.search(r"\b(LDL|STL)\b", text), "local memory (spills) in the kernel"
    assert re.search(r"\bSTG\.E\b", text) and re.search(r"\bBAR\.SYNC", text)


def test_pallas_step_lowers_for_cuda(tmp_path):
    """The Pallas step (the SMEM accumulator, the masked adds, one TMA row a block after the pipeline) lowers
    through Mosaic GPU for the GPU (layernorm, bf16, N = 512: two TMA boxes a row; lowering is slow on the CPU)."""
    jax = pytest.importorskip("jax")
    from schedgen.runtime.arrays import DTYPES
    from schedgen.runtime.kernel import load_package
    data = norm_spec("layernorm", DYNAMIC, "bf16")
    data["op"]["sizes"]["N"] = 512
    spec, src = spec_with(tmp_path, data, {})
    graph, _ = families.of(spec).backward(spec, src)
    step = dict(graph.steps[0].spec, schedule={"backends": ["pallas"]})     # (no NVRTC build here)
    path = tmp_path / "step.yaml"
    path.write_text(yaml.safe_dump(step, sort_keys=False))
    built = build_spec(str(path), cache=Cache(tmp_path / "cache"))
    kernel = load_package(package(built, tmp_path / "out"))
    sizes = {r.name: r.max for r in kernel.launch.sizes}
    args = [jax.ShapeDtypeStruct(kernel.shape_of(o, sizes), DTYPES[o.dtype]) for o in kernel.inputs]
    text = jax.jit(kernel._pallas.module().make(sizes)).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "mosaic_gpu" in text
    assert [kernel.shape_of(o, sizes) for o in kernel.outputs if o.name == "grad_w"] == [(PARTIALS, 512)]


@pytest.mark.gpu
@pytest.mark.parametrize("name, wrt, n, m", [
    ("layernorm_bf16.yaml", None, None, 4099), ("layernorm_bf16.yaml", ["w", "b"], None, 4099),
    ("rmsnorm_bf16.yaml", None, None, 4099), ("layernorm_bf16.yaml", None, 65536, 67),
], ids=["layernorm", "layernorm_wb", "rmsnorm", "layernorm_65536_cluster"])
def test_gpu_bundled_norms_backward(tmp_path, name, wrt, n, m):
    """The bundled bf16 norms (N = 4096, 8192; 65536: the step's rows split over a cluster; the planner's own
    schedule) under torch autograd and torch.compile(fullgraph=True) at a ragged M against float64 of the bf16
    inputs."""
    torch = pytest.importorskip("torch")
    from backward_util import bundled
    data = bundled(name)
    data["backward"] = {"wrt": wrt} if wrt else {}
    if n:                  # another row length: the planner's schedule, not the file's
        data["op"]["sizes"]["N"] = n
        data.pop("schedule", None)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    built = build_spec(str(path), cache=Cache(tmp_path / "cache"))
    f = getattr(import_package(package(built, tmp_path / "out").parent, built.spec.name), built.spec.name)
    n = data["op"]["sizes"]["N"]
    rng = np.random.default_rng(7)
    ins = {k: rng.standard_normal((m, n) if len(o["shape"]) == 2 else (n,)) for k, o in data["op"]["inputs"].items()}
    ups = {k: rng.standard_normal((m, n)) for k in data["op"]["outputs"]}
    args = {k: torch.tensor(v, dtype=torch.bfloat16, device="cuda") for k, v in ins.items()}
    ins64 = {k: a.double().cpu().numpy() for k, a in args.items()}
    gs = {k: torch.tensor(v, dtype=torch.bfloat16, device="cuda") for k, v in ups.items()}
    spec, src = spec_with(tmp_path, data)
    graph, _ = families.of(spec).backward(spec, src)
    want = graph_gradients(spec, graph, {"M": m, "N": n}, ins64, {k: g.double().cpu().numpy() for k, g in gs.items()})

    def loss(*a):
        outs = f(*a)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return sum((o.float() * g.float()).sum() for o, g in zip(outs, gs.values()))

    for run in (loss, torch.compile(loss, fullgraph=True)):
        leaves = [a.clone().requires_grad_(k in (wrt or ins)) for k, a in args.items()]
        run(*leaves).backward()
        for k, a in zip(args, leaves):
            if k not in (wrt or ins):
                continue
            scale = np.abs(want[k]).max()
            np.testing.assert_allclose(a.grad.double().cpu().numpy(), want[k], rtol=2e-2, atol=2e-2 * scale, err_msg=k)
