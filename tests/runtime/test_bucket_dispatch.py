"""A bucketed package at run time (schedgen/runtime/buckets.py, schedgen/plan/dispatch.py): the dispatch record's
bisect at bucket edges, the pick from a call's shapes, the Pallas variants in interpret mode (eager and under
jax.jit: chosen at trace time), and the package's one torch op (eager calls, torch.compile tracing once for every
bucket with the choice made in the op's implementation at run time), on the CPU. A GPU test at the end runs each
variant of a bucketed bundled spec against the float64 reference, eager, compiled and captured in a CUDA graph.

The package here: o = x + y with M dynamic in 32..1024 (multiples of 32), buckets M <= 64, <= 256, <= 1024, whose
winners are 32-row blocks, 64-row blocks and 32-row blocks again: two variants, table [0, 1, 0]."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import import_package as _import, SPECS_DIR
from schedgen.bucketed import build_bucketed, package_bucketed
from schedgen.cache import Cache
from schedgen.plan import dispatch as D
from schedgen.runtime.arrays import ArgumentError
from schedgen.tune import buckets as B

SPEC = """name: add_dyn
op:
  kind: map
  sizes:
    M: {dynamic: true, max: 1024, multiple_of: 32}
    N: 256
  inputs:
    x: {shape: [M, N], dtype: bf16}
    y: {shape: [M, N], dtype: bf16}
  outputs:
    o: {shape: [M, N], dtype: bf16}
  body: o = x + y
schedule:
  in_specs:
    x: {block_shape: [32, 256], out_of_bounds: zero}
    y: {block_shape: [32, 256], out_of_bounds: zero}
  out_specs:
    o: {block_shape: [32, 256], out_of_bounds: zero}
  pipeline: {kind: emit_pipeline, max_concurrent_steps: 2}
tune:
  buckets:
    M: [64, 256, 1024]
"""


def row(block_m: int, at: int) -> dict:
    """A database row as best_known gives it: the tuned shape and the schedule fields."""
    fields = {f"schedule.{side}.{n}.block_shape": [block_m, 256] for side, n in
              (("in_specs", "x"), ("in_specs", "y"), ("out_specs", "o"))}
    return {"overrides": {"M": at, **fields}, "knobs": {"block_M": block_m}, "time_ms": 0.01, "gpu": "Fake H200",
            "gbps": 1.0}




@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bucketed")
    spec = tmp / "add_dyn.yaml"
    spec.write_text(SPEC)
    bk, _ = B.load(spec)
    choices = [({"M": 64}, row(32, 64)), ({"M": 256}, row(64, 256)), ({"M": 1024}, row(32, 1024))]
    bb = build_bucketed(spec, {}, bk, choices, cache=Cache(tmp / "cache"))
    assert bb.record.table == (0, 1, 0) and len(bb.variants) == 2
    return _import(package_bucketed(bb, tmp / "out").parent, "add_dyn")


def bf16(m: int, seed: int = 0):
    import ml_dtypes
    return np.random.default_rng(seed).standard_normal((m, 256)).astype(ml_dtypes.bfloat16)


# ------------------------------------------------------------------------------------------------ the record


def test_the_record_bisects_at_bucket_edges():
    rec = D.DispatchRecord("k", ("M",), ((64, 256, 1024),), ("v0", "v1", "v2"), (0, 1, 2))
    # size == bound stays in its bucket, bound + 1 is the next one; 1 is the first; max (and past it) the last
    got = {m: rec.variant_of([m]) for m in (1, 63, 64, 65, 256, 257, 1023, 1024, 1025)}
    assert got == {1: "v0", 63: "v0", 64: "v0", 65: "v1", 256: "v1", 257: "v2", 1023: "v2", 1024: "v2", 1025: "v2"}


def test_two_sizes_index_the_table_row_major():
    rec = D.DispatchRecord("k", ("M", "N"), ((128, 65536), (1024, 4096, 16384)), tuple(f"v{i}" for i in range(6)),
                           tuple(range(6)))
    assert rec.cell([128, 1024]) == 0 and rec.cell([128, 1025]) == 1 and rec.cell([129, 256]) == 3
    assert rec.cell([65536, 16384]) == 5 and rec.variant_of([1, 4096]) == "v1"


@pytest.mark.parametrize("change, field", [
    ({"version": 2}, "version"), ({"table": [0, 1]}, "table"), ({"table": [0, 1, 2]}, "table"),
    ({"bounds": [[256, 64, 1024]]}, "bounds"), ({"bounds": [[64, 1024]], "table": [0, 0]}, None),
    ({"variants": ["v0", "../x"]}, "variants"), ({"sizes": ["M", "M"], "bounds": [[1], [1]]}, "sizes"),
    ({"extra": 1}, r"\(top\)"), ({"buckets": {}}, "buckets")])
def test_the_record_refuses_what_is_malformed(change, field, tmp_path):
    good = {"version": 1, "name": "k", "sizes": ["M"], "bounds": [[64, 256, 1024]], "variants": ["v0", "v1"],
            "table": [0, 1, 0], "buckets": []}
    (tmp_path / "dispatch.json").write_text(json.dumps({**good, **change}))
    if field is None:
        assert D.load(tmp_path).table == (0, 0)
        return
    with pytest.raises(D.DispatchRecordError, match=rf"dispatch.json: {field}: "):
        D.load(tmp_path)


# ------------------------------------------------------------------------------------------------ the pick


def test_the_pick_reads_the_size_from_the_inputs(pkg):
    k = pkg.kernel
    v0, v1 = k.variants
    assert [v.root.name for v in k.variants] == ["v0", "v1"]
    want = {1: v0, 32: v0, 64: v0, 65: v1, 96: v1, 256: v1, 257: v0, 288: v0, 1024: v0, 2048: v0}
    for m, v in want.items():
        x = np.empty((m, 256), np.float32)
        assert k.pick((x, x)) is v, m
        assert k.variant_for({"M": m}) is v, m
    assert k.pick(()) is v0                       # nothing to read: the first variant, whose checks say what is wrong
    with pytest.raises(ArgumentError, match=r"add_dyn\(\) takes 2 arrays \(x, y\), got 1"):
        pkg.kernel(bf16(64), interpret=True)
    with pytest.raises(ArgumentError, match=r"x: dimension 0 \(M\) is 65; M must be a multiple of 32"):
        pkg.add_dyn(bf16(65), bf16(65), interpret=True)


def test_two_bucketed_sizes_are_read_from_the_inputs_that_bind_them(tmp_path):
    """bias_add_bf16_dynamic (M and N dynamic; N bound by x's dimension 1 and b's 0) with buckets M <= 128 and N <=
    1024: 64-row blocks where exactly one of them is small, the spec's 32-row blocks elsewhere."""
    spec = tmp_path / "bias.yaml"
    spec.write_text((SPECS_DIR / "bias_add_bf16_dynamic.yaml").read_text()
                    + "tune:\n  buckets:\n    M: [128, 65536]\n    N: [1024, 16384]\n")
    bk, _ = B.load(spec)
    tall = {"schedule.in_specs.x.block_shape": [64, 256], "schedule.out_specs.o.block_shape": [64, 256]}
    choices = [(c, {"overrides": {**c, **tall}, "knobs": {}, "time_ms": 1.0, "gpu": "g"}
                if (c["M"] == 128) != (c["N"] == 1024) else None) for c in bk.cells()]
    bb = build_bucketed(spec, {}, bk, choices, cache=Cache(tmp_path / "c"))
    assert bb.record.table == (0, 1, 1, 0)
    k = _import(package_bucketed(bb, tmp_path / "out").parent, "bias_add_bf16_dynamic").kernel
    for m, n, v in ((1, 256, 0), (128, 1024, 0), (128, 1280, 1), (129, 1024, 1), (129, 1280, 0), (65536, 16384, 0)):
        assert k.pick((np.empty((m, n), np.float32), np.empty((n,), np.float32))) is k.variants[v], (m, n)
        assert k.variant_for({"M": m, "N": n}) is k.variants[v]


def test_the_variants_are_whole_packages_with_one_interface(pkg):
    k = pkg.kernel
    assert "2 variants, buckets M <= [64, 256, 1024]" in repr(k)
    assert all(v.launch.inputs == k.launch.inputs and v.launch.sizes == k.launch.sizes for v in k.variants)
    assert [json.loads((v.root / "plan.json").read_text())["block"] for v in k.variants] == [[32, 256], [64, 256]]


# ------------------------------------------------------------------------------------------------ Pallas


def _f64_sum(x, y):
    return x.astype(np.float64) + y.astype(np.float64)


def test_pallas_interpret_runs_the_variant_of_each_bucket(pkg):
    k = pkg.kernel
    for m, v in ((64, 0), (256, 1)):
        x, y = bf16(m, 1), bf16(m, 2)
        out = pkg.add_dyn(x, y, interpret=True)
        ref = _f64_sum(x, y)
        assert out.shape == (m, 256)
        assert np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref) < 1e-2
        ran = [sorted(dict(key[0])["M"] for key in var._pallas._fns) for var in k.variants]
        assert m in ran[v] and m not in ran[1 - v]


def test_jax_jit_picks_at_trace_time(pkg):
    import jax
    import jax.numpy as jnp
    k = pkg.kernel
    f = jax.jit(lambda x, y: pkg.add_dyn(x, y, interpret=True) * 2)
    x, y = bf16(96, 3), bf16(96, 4)
    out = np.asarray(f(jnp.asarray(x), jnp.asarray(y))).astype(np.float64)
    ref = 2 * _f64_sum(x, y)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2
    assert any(dict(key[0])["M"] == 96 for key in k.variants[1]._pallas._fns)
    assert not any(dict(key[0])["M"] == 96 for key in k.variants[0]._pallas._fns)


# ------------------------------------------------------------------------------------------------ torch


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def calls(pkg, monkeypatch):
    """Each variant's CUDA call replaced by torch arithmetic on the CPU that records which variant ran."""
    seen = []
    for v in pkg.kernel.variants:
        def fake(args, out, stream, v=v):
            seen.append((v.root.name, int(args[0].shape[0])))
            return (args[0].float() + args[1].float()).to(args[0].dtype)
        monkeypatch.setattr(v, "_call_cuda", fake)
    return seen


def test_one_op_for_the_package_none_for_its_variants(pkg, torch):
    from schedgen.runtime import torch_op
    k = pkg.kernel
    assert k.torch_op is not None and k.torch_op.name == torch_op.op_name(k)
    assert k.torch_op.name.startswith("add_dyn_") and all(v.torch_op is None for v in k.variants)
    # the op's name digests dispatch.json and every variant: another table is another op
    assert k.op_files[0] == "dispatch.json" and "variants/v1/kernel.cubin" in k.op_files


def test_eager_torch_calls_go_through_the_op_to_the_chosen_variant(pkg, torch, calls):
    x64 = torch.ones(64, 256, dtype=torch.bfloat16)
    x256 = torch.ones(256, 256, dtype=torch.bfloat16)
    assert torch.equal(pkg.add_dyn(x64, x64), torch.full((64, 256), 2.0, dtype=torch.bfloat16))
    assert pkg.add_dyn(x256, x256).shape == (256, 256)
    assert calls == [("v0", 64), ("v1", 256)]


def test_a_tensor_needing_grad_is_refused_in_one_sentence(pkg, torch, calls):
    x = torch.ones(64, 256, dtype=torch.bfloat16)
    with pytest.raises(ArgumentError, match=r"^y: requires grad, but add_dyn was built without a backward pass: add "
                                            r"a `backward:` section to its spec"):
        pkg.add_dyn(x, torch.ones(64, 256, dtype=torch.bfloat16, requires_grad=True))
    with torch.no_grad():
        pkg.add_dyn(x, torch.ones(64, 256, dtype=torch.bfloat16, requires_grad=True))
    assert calls == [("v0", 64)]


def test_compile_traces_once_and_the_op_picks_at_run_time(pkg, torch, calls):
    from torch._dynamo.testing import CompileCounterWithBackend
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend("aot_eager")
    f = torch.compile(lambda x, y: pkg.add_dyn(x, y) * 2, fullgraph=True, backend=cnt, dynamic=True)
    for m in (64, 256, 288, 96):
        x = torch.full((m, 256), 1.5, dtype=torch.bfloat16)
        assert torch.equal(f(x, x), torch.full((m, 256), 6.0, dtype=torch.bfloat16))
    assert cnt.frame_count == 1, "recompiled for another bucket"
    assert calls == [("v0", 64), ("v1", 256), ("v0", 288), ("v1", 96)]
    torch._dynamo.reset()


def test_meta_tensors_trace_through_the_op_without_a_pick(pkg, torch, calls):
    from torch._dynamo.testing import CompileCounter
    torch._dynamo.reset()
    cnt = CompileCounter()
    f = torch.compile(lambda x, y: pkg.add_dyn(x, y), fullgraph=True, backend=cnt, dynamic=True)
    for m in (64, 256, 1024):
        x = torch.empty(m, 256, dtype=torch.bfloat16, device="meta")
        assert f(x, x).shape == (m, 256)
    assert cnt.frame_count == 1 and calls == []
    with pytest.raises(Exception, match=r"M must be a multiple of 32"):
        pkg.add_dyn(torch.empty(65, 256, dtype=torch.bfloat16, device="meta"),
                    torch.empty(65, 256, dtype=torch.bfloat16, device="meta"))
    torch._dynamo.reset()


def test_strided_operands_where_every_variant_reads_them_through_tensor_maps(pkg, torch, calls, monkeypatch):
    """The package op's layout rule (runtime/layout.py) is the variants' together: an operand may be strided only
    where each variant reaches it through tensor maps alone."""
    from schedgen.runtime import buckets, layout
    k = pkg.kernel
    assert k.tmap_only == (True, True, True) == k.torch_op.tmap_only
    x = torch.empty(64, 512, dtype=torch.bfloat16, device="meta")[:, :256]      # a row stride of 512: legal
    assert pkg.add_dyn(x, x).shape == (64, 256) and calls == []
    second = k.variants[1].launch.kernel_name
    real = layout.tmap_only
    monkeypatch.setattr(layout, "tmap_only", lambda rec: (True, False, True) if rec.kernel_name == second else real(rec))
    assert buckets.BucketedKernel(k.root).tmap_only == (True, False, True)


def test_the_pick_is_cheap(pkg):
    """The per-call cost of the choice (numbers in docs/tuning.md): a shape read and a bisect, well under a
    microsecond here; the bound is loose for a loaded CI machine."""
    import timeit
    k = pkg.kernel
    args = (np.empty((300, 256), np.float32),) * 2
    n = 20000
    per_call = min(timeit.repeat(lambda: k.pick(args), number=n, repeat=5)) / n
    assert per_call < 20e-6, f"{per_call * 1e6:.2f} us per pick"


# ------------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_bucketed_bundled_spec_on_gpu(tmp_path):
    """specs/matmul_bf16_dynamic_buckets.yaml with two variants (64-row tiles for M <= 256, the spec's 128-row
    tiles above): each variant against the float64 reference at two sizes of each of its buckets, eager with torch
    and numpy, through torch.compile (one trace), replayed from a CUDA graph captured at each size, and on the Pallas
    backend (jax arrays)."""
    torch = pytest.importorskip("torch")
    from schedgen.reference import random_inputs, reference, rel_error
    from schedgen.verify import _depth, tolerance
    spec = SPECS_DIR / "matmul_bf16_dynamic_buckets.yaml"
    bk, _ = B.load(spec)
    small = {f"schedule.{s}.{n}.block_shape": v for s, n, v in (
        ("in_specs", "a", [64, 64]), ("in_specs", "b", [64, 256]), ("out_specs", "out", [64, 256]))}
    choices = [(c, {"overrides": {**c, **small}, "knobs": {"tile_m": 64}, "time_ms": 0.01, "gpu": "test"}
                if c["M"] <= 256 else None) for c in bk.cells()]
    bb = build_bucketed(spec, {}, bk, choices, cache=Cache(tmp_path / "c"))
    assert len(bb.variants) == 2 and bb.record.table == (0, 0, 1, 1, 1)
    mod = _import(package_bucketed(bb, tmp_path / "out").parent, bb.name)
    k = mod.kernel
    for m in (64, 1024):           # the package's one op: fake against real, schema, autograd registration
        a = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        torch.library.opcheck(k.torch_op.op, (a, torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)))
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: getattr(mod, bb.name)(a, b), fullgraph=True, dynamic=True)
    for m in (8, 64, 72, 256, 264, 1024, 4104, 16384):
        want = k.variants[0 if m <= 256 else 1]
        assert k.variant_for({"M": m}) is want
        sizes = {"M": m, "N": 4096, "K": 4096}
        host = random_inputs(bb.variants[0].spec, sizes, seed=m)
        ref = reference(bb.variants[0].spec, sizes, host, seed=m)["out"]
        tol = tolerance("bf16", bb.variants[0].plan.approx_math, _depth(bb.variants[0].plan, sizes))
        a, b = (torch.from_numpy(host[n].astype(np.float32)).to("cuda", torch.bfloat16) for n in ("a", "b"))
        results = {"numpy": getattr(mod, bb.name)(host["a"], host["b"]),
                   "torch": getattr(mod, bb.name)(a, b).float().cpu().numpy(),
                   "compiled": compiled(a, b).float().cpu().numpy()}
        out = torch.empty(m, 4096, dtype=torch.bfloat16, device="cuda")
        getattr(mod, bb.name)(a, b, out=out)           # warm-up at this size, then capture
        g = torch.cuda.CUDAGraph()
        out.fill_(float("nan"))
        with torch.cuda.graph(g):
            getattr(mod, bb.name)(a, b, out=out)
        g.replay()
        torch.cuda.synchronize()
        results["graph"] = out.float().cpu().numpy()
        import jax.numpy as jnp                         # the Pallas variants (jax arrays), chosen per shape
        results["pallas"] = np.asarray(getattr(mod, bb.name)(jnp.asarray(host["a"]), jnp.asarray(host["b"])))
        for how, got in results.items():
            err = rel_error(np.asarray(got, np.float64), ref)
            assert err <= tol, f"M={m} ({how}, variant {want.root.name}): rel. error {err:.2e} over {tol:.0e}"
    torch._dynamo.reset()
