"""Dynamic (runtime) sizes in the map family, on the CPU: planning over a range (the plan's extents and ranges,
located errors for what no size in range may break), the CUDA kernel's `int sz_<name>` parameters (compiled by
NVRTC, no local memory), the launch record's extents against static builds of the same sizes (through a fake
driver), and ONE built package running interpreted at several sizes, a ragged one included, with no rebuild."""
from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec, package
from schedgen.errors import SpecErrors
from schedgen.explain import explain
from schedgen.frontend.validate import load_spec
from schedgen.plan import dims, plan
from schedgen.plan import launch as L
from schedgen.plan.dims import SizeRange
from schedgen.render import render
from schedgen.runtime.kernel import load_package
from schedgen.toolchain.nvrtc import sass

GELU = SPECS_DIR / "gelu_bias_bf16_dynamic.yaml"      # M dynamic 1..65536 (any), N = 4096
BIAS = SPECS_DIR / "bias_add_bf16_dynamic.yaml"       # M dynamic 1..65536, N dynamic 256..16384 step 256


def _plan(path, ov=None):
    spec, src = load_spec(str(path), ov)
    return plan(spec, src)


def _lines(path, ov):
    spec, src = load_spec(str(path), ov)
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    return [line[line.index(".yaml:") + 6:] for line in info.value.lines()]


# ------------------------------------------------------------------------------------------------ planning

def test_plan_of_a_dynamic_spec_holds_extents_and_ranges():
    p = _plan(GELU)
    M = dims.size("M")
    assert p.launch.dynamic_sizes == (SizeRange("M", 1, 65536, 1),)
    assert p.sizes == {"M": M, "N": 4096}
    assert p.grid == (dims.cdiv(M, 32), 16) and p.num_tiles == dims.cdiv(M, 32) * 16
    assert p.launch.num_blocks == dims.dmin(dims.cdiv(M, 32) * 16, 132)
    x = {o.name: o for o in p.operands}["x"]
    assert x.shape == (M, 4096) and x.tma_shape == (M, 4096) and x.tma_strides == (8192, 2)
    assert [(a.kind, a.value) for a in p.launch.kernel_args] == [("tmap", 0)] * 4 + [("i32", M)]
    for m in (1, 31, 32, 1000, 65536):
        assert dims.evaluate(p.launch.num_blocks, {"M": m}) == min(-(-m // 32) * 16, 132)


def test_two_dynamic_sizes_in_the_tensor_maps():
    p = _plan(BIAS)
    M, N = dims.size("M"), dims.size("N")
    assert [r.name for r in p.launch.dynamic_sizes] == ["M", "N"]
    x, b, o = p.operands
    assert x.tma_shape == (M, N) and x.tma_strides == (N * 2, 2)
    assert b.tma_shape == (1, N) and b.tma_dims == (-1, 0)         # a vector: one row of a 2-D tensor map
    assert dims.evaluate(b.tma_strides[0], {"N": 768}) == 1536
    assert [a.value for a in p.launch.kernel_args if a.kind == "i32"] == [M, N]


def test_explain_prints_each_dynamic_range():
    text = explain(_plan(BIAS))
    assert "sizes      M: dynamic, 1..65536, N: dynamic, 256..16384, a multiple of 256" in text
    assert "(every dynamic size at its max)" in text
    assert "sizes      M: dynamic, 1..65536, N=4096" in explain(_plan(GELU))


def test_a_fixed_size_override_gives_the_static_plan():
    p = _plan(GELU, {"op.sizes.M": 1000})
    assert p.launch.dynamic_sizes == () and p.grid == (32, 16) and p.launch.num_blocks == 132
    assert not any(a.kind == "i32" for a in p.launch.kernel_args)


# ------------------------------------------------------------------------------------------------ located errors

def test_ragged_dynamic_dimension_needs_out_of_bounds_zero():
    ov = {"schedule.in_specs.x.out_of_bounds": "reject", "schedule.out_specs.y.out_of_bounds": "reject"}
    lines = _lines(GELU, ov)
    assert len(lines) == 2, lines
    assert re.match(r"\d+:\d+: schedule\.in_specs\.x\.block_shape\[0\]: dimension 0 of 'x' \(the dynamic M: M in "
                    r"1\.\.65536, multiple_of 1\) is not always a multiple of the block \(32\), so the last block may "
                    r"be partial; set out_of_bounds: zero", lines[0]), lines[0]
    assert "schedule.out_specs.y.block_shape[0]" in lines[1] and "declare multiple_of: 32" in lines[1]


def test_a_multiple_of_the_block_needs_no_padding():
    ov = {"op.sizes.M": {"dynamic": True, "min": 64, "max": 65536, "multiple_of": 64},
          "schedule.in_specs.x.out_of_bounds": "reject", "schedule.in_specs.w.out_of_bounds": "reject",
          "schedule.out_specs.y.out_of_bounds": "reject"}
    p = _plan(GELU, ov)
    assert p.launch.dynamic_sizes == (SizeRange("M", 64, 65536, 64),)
    assert all(o.oob_fill == "zero" for o in p.operands)   # reject: nothing is ever read out of bounds


def test_dynamic_row_stride_must_be_16_byte_aligned_at_every_size():
    lines = _lines(BIAS, {"op.sizes.N": {"dynamic": True, "max": 16384}})
    stride = [line for line in lines if "are N elements of 2 B apart (N in 1..16384, multiple_of 1): TMA needs a "
              "multiple of 16 B at every size in range; declare a multiple_of that makes the row one (a multiple "
              "of 8 elements)" in line]
    assert len(stride) == 2, lines
    assert stride and all(": op.inputs.x.shape:" in line or ": op.outputs.o.shape:" in line for line in stride)
    # N is also not a multiple of the 256 block and b says reject: named with its multiple_of
    assert any("schedule.in_specs.b.block_shape[0]: dimension 0 of 'b' (the dynamic N: N in 1..16384, multiple_of 1)" in line for line in lines)


def test_dynamic_size_in_no_input_is_refused():
    lines = _lines(GELU, {"op.sizes.K": {"dynamic": True, "max": 64}})
    assert len(lines) == 1 and re.match(r"\d+:\d+: op\.sizes\.K: the dynamic size K is no input's dimension",
                                        lines[0]), lines
    # only the outputs name M (x broadcasts over it): a call's inputs cannot give it; planning goes on
    lines = _lines(GELU, {"op.inputs.x.shape": [1, "N"], "op.inputs.w.shape": ["N"],
                          "schedule.in_specs.x.block_shape": [1, 256], "schedule.in_specs.x.index_map": "(0, j)",
                          "schedule.in_specs.w.block_shape": [256], "schedule.in_specs.w.index_map": "(j,)",
                          "schedule.out_specs.y.out_of_bounds": "reject"})
    assert [line.split(": ")[1] for line in lines] == ["op.sizes.M", "schedule.out_specs.y.block_shape[0]"], lines


def test_cdiv_rounding_fits_32_bits_at_the_max():
    lines = _lines(GELU, {"op.sizes.M": {"dynamic": True, "max": 2**31 - 1}})
    assert any("op.sizes.M: dimension 0 (M) is up to 2147483647; the kernel rounds it up to whole blocks of 32"
               in line for line in lines), lines


def test_grid_over_a_dynamic_size_is_checked_at_every_value():
    assert _plan(GELU, {"schedule.grid": ["(M + 31) // 32", "N // 256"]}).grid[0] == dims.cdiv(dims.size("M"), 32)
    lines = _lines(GELU, {"schedule.grid": ["M // 32", 16]})
    assert len(lines) == 1 and re.search(r"schedule\.grid\[0\]: grid size 0 does not match the cdiv\(M, 32\) output "
                                         r"blocks along dimension 0 at M=1 ", lines[0]), lines


def test_index_map_over_a_dynamic_size():
    # affine in the grid names and M: proved for every M
    assert _plan(GELU, {"schedule.in_specs.x.index_map": "(i + M - M, j)"}).inputs[0].index_map == "(i + M - M, j)"
    lines = _lines(GELU, {"schedule.in_specs.x.index_map": "(i + M - 1, j)"})   # affine, wrong: a counterexample
    assert len(lines) == 1 and lines[0].endswith(
        "schedule.in_specs.x.index_map: index_map (i + M - 1, j) sends grid point (0, 0) to block (65535, 0) of 'x', "
        "but the elementwise body reads block (0, 0) there (numpy broadcasting of the output block) (with M=65536)"), lines
    lines = _lines(GELU, {"schedule.in_specs.x.index_map": "(i + M - 65536, j)"})   # right at M's max only
    assert len(lines) == 1 and "sends grid point (0, 0) to block (-65535, 0)" in lines[0] and "(with M=1)" in lines[0]
    # not affine, over a grid that follows M: checked at every legal M when small enough, else refused
    small = {"op.sizes.M": {"dynamic": True, "max": 256}, "schedule.in_specs.x.index_map": "(i % (M + 32), j)"}
    assert _plan(GELU, small).inputs[0].index_map == "(i % (M + 32), j)"
    lines = _lines(GELU, {"schedule.in_specs.x.index_map": "(i % (M + 32), j)"})
    assert len(lines) == 1 and "over every legal value of the dynamic size(s) M" in lines[0], lines
    wrong = {"op.sizes.M": {"dynamic": True, "max": 256}, "schedule.in_specs.x.index_map": "(i % (M // 64 + 1), j)"}
    lines = _lines(GELU, wrong)
    assert len(lines) == 1 and "(with M=" in lines[0] and "the elementwise body reads block" in lines[0], lines


# ------------------------------------------------------------------------------------------------ CUDA

def test_cuda_kernel_takes_sz_parameters_and_compiles(tmp_path):
    from schedgen.cache import Cache
    cu = render(_plan(BIAS), "cuda")
    assert re.search(r"const __grid_constant__ SgTensorMap tm_out_o,\s+int sz_M,\s+int sz_N\)", cu)
    assert "const int kNumTiles = (((sz_M + 32 - 1) / 32) * ((sz_N + 256 - 1) / 256));" in cu
    assert "constexpr int kNumTiles" not in cu and "constexpr int S_M" not in cu
    b = build_spec(str(BIAS), cache=Cache(tmp_path / "cache"))
    text = sass(b.files["kernel.cubin"])
    assert re.search(r"\bUTMALDG\.2D\b", text) and re.search(r"\bUTMASTG\.2D\b", text)
    assert not re.search(r"\b(LDL|STL)\b", text)


def test_static_spec_keeps_its_constants():
    cu = render(_plan(SPECS_DIR / "gelu_bias_bf16.yaml"), "cuda")
    assert "constexpr int kNumTiles = 4096;" in cu and "sz_" not in cu


# ------------------------------------------------------------------------------------------------ launch record

def _fake(monkeypatch):
    """The fake driver of tests/runtime/test_launch_record.py (records encoded tensor maps and launches)."""
    import importlib.util
    path = SPECS_DIR.parent / "tests" / "runtime" / "test_launch_record.py"
    spec = importlib.util.spec_from_file_location("_map_dynamic_launch_record", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FakeDriver(monkeypatch)


def _launch(tmp_path, p, ptrs, sizes, fake):
    folder = tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "launch.json").write_text(L.launch_record(p).to_json())
    (folder / "kernel.cubin").write_bytes(b"CUBIN")
    kernel = load_package(folder)
    n_in = len(p.inputs)
    before = (len(fake.encoded), len(fake.launches))
    kernel._launcher(ptrs[:n_in], ptrs[n_in:], stream=0, sizes=sizes)()
    return fake.encoded[before[0]:], fake.launches[before[1]]


# (not M = 1: a static build drops an extent-1 dimension from its tensor maps, a dynamic one keeps it)
@pytest.mark.parametrize("path, cases", [(GELU, [{"M": 2}, {"M": 77}, {"M": 4096}, {"M": 65536}]),
                                         (BIAS, [{"M": 45, "N": 768}, {"M": 8192, "N": 16384}])],
                         ids=["gelu_bias", "bias_add"])
def test_record_extents_match_static_builds(tmp_path, monkeypatch, path, cases):
    """The dynamic record evaluated at a size gives the tensor maps and grid a static build of that size has."""
    fake = _fake(monkeypatch)
    dyn = _plan(path)
    ptrs = [0x7F0000000000 + (i << 32) for i in range(len(dyn.operands))]
    for k, sizes in enumerate(cases):
        static = _plan(path, {f"op.sizes.{n}": v for n, v in sizes.items()})
        enc_d, go_d = _launch(tmp_path / f"d{k}", dyn, ptrs, sizes, fake)
        enc_s, go_s = _launch(tmp_path / f"s{k}", static, ptrs, {}, fake)
        assert enc_d == enc_s and len(enc_d) == len(dyn.operands)
        assert go_d["grid"] == go_s["grid"] == (static.launch.num_blocks, 1, 1)
        assert dims.evaluate(dyn.launch.num_blocks, sizes) == static.launch.num_blocks
        # the static kernel's parameters, then one i32 per dynamic size, in spec order
        from schedgen.runtime import driver
        n = len(dyn.operands)   # tensor maps first (the fake encodes them as a counter: compared above)
        assert len(go_s["args"]) == n
        assert go_d["args"][n:] == [driver.Arg.i32(sizes[r.name]) for r in dyn.launch.dynamic_sizes]


def test_record_at_a_size_of_one_keeps_the_dimension(tmp_path, monkeypatch):
    """M = 1 through the dynamic record: the tensor map keeps the extent-1 row dimension (a 32-row box over one
    row, the rest zero-filled), which the driver's rules accept."""
    fake = _fake(monkeypatch)
    dyn = _plan(GELU)
    ptrs = [0x7F0000000000 + (i << 32) for i in range(len(dyn.operands))]
    enc, go = _launch(tmp_path, dyn, ptrs, {"M": 1}, fake)
    assert [(e[2], e[4]) for e in enc] == [((1, 4096), (32, 256))] * 2 + [((1, 4096), (1, 256)), ((1, 4096), (32, 256))]
    assert go["grid"] == (16, 1, 1)


# ------------------------------------------------------------------------------------------------ Pallas, interpreted

def test_one_package_runs_interpreted_at_several_sizes(tmp_path):
    """ONE build and ONE loaded module, called at three M (one not a multiple of the 32-row block) and two N:
    each result matches numpy; nothing is rebuilt."""
    pytest.importorskip("jax")
    import jax.numpy as jnp
    from schedgen.verify import interpret_params
    b = build_spec(str(BIAS))
    root = package(b, tmp_path / "pkg")
    kernel = load_package(root)
    mod = kernel.pallas_module()
    cubin = (root / "kernel.cubin").read_bytes()
    rng = np.random.default_rng(5)
    for m, n in [(32, 256), (45, 512), (70, 256)]:
        x = rng.standard_normal((m, n)).astype(jnp.bfloat16)
        bias = rng.standard_normal((n,)).astype(jnp.bfloat16)
        assert mod.sizes_of((x, bias)) == {"M": m, "N": n}
        want = (np.asarray(x, np.float32) + np.asarray(bias, np.float32)).astype(jnp.bfloat16)
        got = np.asarray(mod.bias_add_bf16_dynamic(jnp.asarray(x), jnp.asarray(bias), interpret=interpret_params()))
        assert got.shape == (m, n)
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
        poisoned = [jnp.full((m, n), jnp.nan, jnp.bfloat16)]
        (out,) = mod.run_into([jnp.asarray(x), jnp.asarray(bias)], poisoned, interpret=interpret_params())
        np.testing.assert_array_equal(np.asarray(out).astype(np.float32), want.astype(np.float32))
    assert kernel.pallas_module() is mod
    assert (root / "kernel.cubin").read_bytes() == cubin


def test_gelu_package_interpreted_at_a_ragged_token_count(tmp_path):
    pytest.importorskip("jax")
    import jax.numpy as jnp
    from schedgen.reference import reference, rel_error, tolerance
    from schedgen.verify import interpret_params
    b = build_spec(str(GELU))
    mod = load_package(package(b, tmp_path / "pkg")).pallas_module()
    rng = np.random.default_rng(9)
    for m in (7, 40):
        ins = {"x": rng.standard_normal((m, 4096)), "w": rng.standard_normal((m, 4096)),
               "b": rng.standard_normal((4096,))}
        ins = {k: v.astype(jnp.bfloat16) for k, v in ins.items()}
        got = np.asarray(mod.gelu_bias_bf16_dynamic(*(jnp.asarray(ins[k]) for k in "xwb"),
                                                    interpret=interpret_params()))
        want = reference(b.spec, {"M": m, "N": 4096}, ins)["y"]
        assert got.shape == (m, 4096) and rel_error(got, want) <= tolerance("bf16", True)


# ------------------------------------------------------------------------------------------------ other schedules

BATCHED = """\
name: batched_scale_dyn
op:
  kind: map
  sizes:
    B: {dynamic: true, max: 64}
    M: {dynamic: true, min: 32, max: 8192, multiple_of: 32}
    N: 256
  inputs:
    x: {shape: [B, M, N], dtype: f32}
    s: {shape: [M, N], dtype: f32}
  outputs:
    o: {shape: [B, M, N], dtype: f32}
  body: o = x * s
schedule:
  grid_names: [b, i, j]
  in_specs:
    x: {block_shape: [1, 32, 128]}
    s: {block_shape: [32, 128], index_map: "(i, j)"}
  out_specs:
    o: {block_shape: [1, 32, 128]}
  pipeline: {kind: emit_pipeline, max_concurrent_steps: 2}
  persistent: {loop: none}
"""

SNAKE = """\
name: snake_add_dyn
op:
  kind: map
  sizes:
    M: {dynamic: true, max: 4096}
    N: {dynamic: true, min: 64, max: 4096, multiple_of: 64}
  inputs:
    x: {shape: [M, N], dtype: f32}
  outputs:
    o: {shape: [M, N], dtype: f32}
  body: o = x + 1
schedule:
  in_specs:
    x: {block_shape: [32, 64], out_of_bounds: zero}
  out_specs:
    o: {block_shape: [32, 64], out_of_bounds: zero}
  persistent: {loop: nd_loop, num_blocks: 3, tile_order: planar_snake, minor_dim: 1, tile_width: 2}
"""


@pytest.mark.parametrize("text, cases", [
    (BATCHED, [{"B": 2, "M": 64}, {"B": 3, "M": 96}]),         # a broadcast input over a dynamic batch, a block a tile
    (SNAKE, [{"M": 45, "N": 192}, {"M": 70, "N": 64}]),        # planar-snake order over a dynamic 2-D grid
], ids=["batched", "snake"])
def test_other_schedules_compile_and_run_at_several_sizes(tmp_path, monkeypatch, text, cases):
    pytest.importorskip("jax")
    import jax.numpy as jnp
    from schedgen.cache import Cache
    from schedgen.reference import reference, rel_error
    from schedgen.verify import interpret_params
    path = tmp_path / "dyn.yaml"
    path.write_text(text)
    b = build_spec(str(path), cache=Cache(tmp_path / "cache"))
    assert b.plan.launch.dynamic_sizes and not re.search(r"\b(LDL|STL)\b", sass(b.files["kernel.cubin"]))
    root = package(b, tmp_path / "pkg")
    mod = load_package(root).pallas_module()
    fake = _fake(monkeypatch)
    ptrs = [0x7F0000000000 + (i << 32) for i in range(len(b.plan.operands))]
    rng = np.random.default_rng(1)
    for k, sizes in enumerate(cases):
        shapes = {o.name: tuple(dims.evaluate(x, sizes) for x in o.shape) for o in b.plan.operands}
        ins = {o.name: rng.standard_normal(shapes[o.name]).astype(np.float32) for o in b.plan.inputs}
        got = getattr(mod, b.plan.launch.name)(*(jnp.asarray(ins[o.name]) for o in b.plan.inputs),
                                        interpret=interpret_params())
        want = reference(b.spec, sizes | {"N": shapes["o"][-1]}, ins)["o"]
        assert np.asarray(got).shape == shapes["o"] and rel_error(np.asarray(got), want) <= 1e-6
        static = _plan(path, {f"op.sizes.{n}": v for n, v in sizes.items()})
        enc_d, go_d = _launch(tmp_path / f"d{k}", b.plan, ptrs, sizes, fake)
        enc_s, go_s = _launch(tmp_path / f"s{k}", static, ptrs, {}, fake)
        assert enc_d == enc_s and go_d["grid"] == go_s["grid"] == (static.launch.num_blocks, 1, 1)


def test_make_refuses_missing_or_illegal_sizes(tmp_path):
    pytest.importorskip("jax")
    mod = load_package(package(build_spec(str(BIAS)), tmp_path / "pkg")).pallas_module()
    with pytest.raises(ValueError, match=r"make\(\) needs the dynamic size M: pass sizes_of\(inputs\)"):
        mod.make()
    with pytest.raises(ValueError, match=r"dynamic size N = 300: must be 256\.\.16384, a multiple of 256"):
        mod.make({"M": 5, "N": 300})
    with pytest.raises(ValueError, match=r"dynamic size M = 65537: must be 1\.\.65536$"):
        mod.make({"M": 65537, "N": 256})
    assert mod.make({"M": 65536, "N": 16384}) is not None
