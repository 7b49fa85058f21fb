"""Dynamic (runtime) sizes in the matmul family, on the CPU: the planner checks the whole range (located errors
naming the size, its multiple_of and the tile), the CUDA kernel takes `int sz_<name>` launch arguments and the
launch record's extents evaluate, at every size, to the tensor maps / grid of a static build of that size (through
the fake driver), and ONE Pallas module serves several sizes in the interpreter (no rebuild)."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from conftest import SPECS_DIR, plan_errors, plan_spec
from schedgen.frontend.validate import load_spec
from schedgen.plan import dims as D
from schedgen.plan import launch as L
from schedgen.plan import plan
from schedgen.plan.dims import SizeRange
from schedgen.render import render

LINEAR = SPECS_DIR / "linear_gelu_bf16_dynamic.yaml"
BASE = SPECS_DIR.parent / "tests" / "data" / "matmul_base.yaml"
CUDA = {"schedule.backends": ["cuda"]}


def dyn(max_, multiple_of=1):
    return {"dynamic": True, "max": max_, "min": multiple_of, "multiple_of": multiple_of}


# ------------------------------------------------------------------------------------------------ planning

def test_linear_gelu_plans_a_dynamic_m():
    p = plan_spec(LINEAR)
    assert p.launch.dynamic_sizes == (SizeRange("M", 1, 65536, 1),)
    assert p.tiles.ragged and p.m == D.size("M") and (p.n, p.k) == (4096, 4096)
    assert p.inputs[0].shape == (D.size("M"), 4096) and p.outputs[0].shape == (D.size("M"), 4096)
    # tile counts and the grid follow M; the rest stays folded
    assert p.tiles.k_iters == 64 and p.tiles.cluster_tiles_n == 16
    for m in (1, 127, 128, 1000, 65536):
        tiles = -(-m // 128)
        assert D.evaluate(p.tiles.cluster_tiles_m, {"M": m}) == tiles
        assert D.evaluate(p.tiles.num_tiles, {"M": m}) == tiles * 16
        assert D.evaluate(p.launch.num_blocks, {"M": m}) == min(tiles * 16, 132)
    # the last kernel argument is M itself
    assert p.launch.kernel_args[-1].kind == "i32" and p.launch.kernel_args[-1].value == D.size("M")
    assert p.launch.kernel_args[0].shape == (D.size("M"), 4096)


def test_ragged_dynamic_size_needs_out_of_bounds_zero():
    lines = plan_errors(LINEAR, {"schedule.in_specs.x.out_of_bounds": "reject", "schedule.in_specs.w.out_of_bounds": "reject"})
    (line,) = [ln for ln in lines if "out_of_bounds" in ln]
    assert "schedule.in_specs.x.out_of_bounds" in line
    assert "M is dynamic, a multiple of 1, and tile_m is 128" in line and "out_of_bounds: zero" in line


def test_dynamic_size_a_multiple_of_the_tile_is_not_ragged():
    p = plan_spec(LINEAR, {"M": dyn(65536, 128), "schedule.in_specs.x.out_of_bounds": "reject",
                       "schedule.in_specs.w.out_of_bounds": "reject"})
    assert not p.tiles.ragged


def test_cluster_along_a_dynamic_m_needs_tile_times_cluster():
    lines = plan_errors(BASE, {**CUDA, "M": dyn(8192, 128)})
    (line,) = [ln for ln in lines if "schedule.cluster" in ln]
    assert "a 2x1 cluster" in line and "multiple of tile_m x 2 = 256" in line and "declare multiple_of: 256" in line
    p = plan_spec(BASE, {**CUDA, "M": dyn(8192, 256)})
    assert D.evaluate(p.tiles.num_tiles, {"M": 512}) == (512 // 256) * 16


def test_32_bit_tile_math_at_the_max():
    lines = plan_errors(LINEAR, {"M": dyn((1 << 31) - 1)})
    assert any("op.sizes.M" in ln and "32-bit tile math" in ln for ln in lines), lines


def test_n_k_and_batch_dynamic():
    """Every size of the problem may be dynamic: N, K and the batch too (extras' indexing follows)."""
    over = {**CUDA, "op.sizes": {"B": dyn(16), "M": dyn(4096, 256), "N": dyn(4096, 256), "K": dyn(4096, 64)},
            "op.inputs.a.shape": ["B", "M", "K"], "op.inputs.b.shape": ["B", "K", "N"],
            "op.inputs.c": {"shape": ["B", "M", "N"], "dtype": "bf16"}, "op.outputs.out.shape": ["B", "M", "N"],
            "op.epilogue": "out = acc + c", "schedule.in_specs.a.block_shape": [1, 128, 64],
            "schedule.in_specs.b.block_shape": [1, 64, 256]}
    p = plan_spec(BASE, over)
    assert [r.name for r in p.launch.dynamic_sizes] == ["B", "M", "N", "K"] and p.batched and not p.tiles.ragged
    sizes = {"B": 3, "M": 512, "N": 768, "K": 320}
    assert D.evaluate(p.tiles.num_tiles, sizes) == 3 * (512 // 256) * (768 // 256)
    assert D.evaluate(p.tiles.k_iters, sizes) == 5
    assert [a.value for a in p.launch.kernel_args if a.kind == "i32"] == [D.size(n) for n in "BMNK"]
    cu = render(p, "cuda")
    assert "const int sz_B, const int sz_M, const int sz_N, const int sz_K)" in cu
    assert "((long long)b * sz_M + row) * sz_N + col" in cu       # the batched C operand's index


def test_explain_prints_the_range():
    from schedgen.families import of
    p = plan_spec(LINEAR)
    text = of(p).explain(p)
    assert "M: dynamic, 1..65536" in text
    assert "at M = 65536" in text


# ------------------------------------------------------------------------------------------------ CUDA source

def test_cuda_kernel_takes_the_sizes_as_launch_arguments():
    cu = render(plan_spec(LINEAR), "cuda")
    assert "const float* __restrict__ in_b, const int sz_M) {" in cu
    assert "const int num_tiles = (((sz_M + 128 - 1) / 128) * 16);" in cu
    assert "t < num_tiles;" in cu and "sg_tile_coords(t, tiles_mc, tiles_nc, b, tmc, tnc);" in cu
    assert "if (row >= sz_M || col >= 4096) return 0.0f;" in cu
    # K is fixed: the k-loops keep their literal bound (constant-folded, unrolled by the compiler as before)
    assert "kb < 64;" in cu and "k_iters" not in cu


def test_dynamic_k_is_a_loop_bound():
    cu = render(plan_spec(LINEAR, {"K": dyn(8192, 64)}), "cuda")
    assert "const int k_iters = ((sz_K + 64 - 1) / 64);" in cu and cu.count("kb < k_iters;") == 2


# ------------------------------------------------------------------------------------------------ launch record

def _static(path, m, overrides=None):
    return plan_spec(path, {"M": m, **(overrides or {})})


@pytest.mark.parametrize("m", [1, 200, 4096, 65536])
def test_record_extents_match_a_static_build(m, tmp_path, monkeypatch):
    """The dynamic package's tensor maps, grid and scalar arguments at M = m are the static build's at M = m."""
    from runtime.fake_driver import FakeDriver
    from schedgen.runtime.kernel import load_package
    dyn_p, stat_p = plan_spec(LINEAR), _static(LINEAR, m)
    for p, sub in ((dyn_p, "dyn"), (stat_p, "static")):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "launch.json").write_text(L.launch_record(p).to_json())
        (tmp_path / sub / "kernel.cubin").write_bytes(b"CUBIN")
    rec = L.load(tmp_path / "dyn")
    assert L.load(tmp_path / "dyn") == L.launch_record(dyn_p)
    got = []
    for sub in ("dyn", "static"):
        fake = FakeDriver(monkeypatch)
        k = load_package(tmp_path / sub)
        sizes = {"M": m} if sub == "dyn" else {}
        ptrs = list(range(0x1000, 0x1000 + 0x100 * 4, 0x100))
        k._launcher(ptrs[:3], ptrs[3:], 0, sizes=sizes)()
        (go,) = fake.launches
        got.append((fake.encoded, go))
    (enc_d, go_d), (enc_s, go_s) = got
    if m < stat_p.tiles.tile_m:
        # a static M below the tile loads M rows of the lhs, rounded up to 8 (test_short_lhs.py); the dynamic
        # package, built for every M, loads whole tiles
        rows = -(-m // 8) * 8
        assert enc_s[0][4] == (rows, enc_d[0][4][1]) and enc_d[0][4][0] == stat_p.tiles.tile_m
        enc_s = [enc_s[0][:4] + (enc_d[0][4],) + enc_s[0][5:]] + enc_s[1:]
    assert enc_d == enc_s
    assert go_d["grid"] == go_s["grid"] == (min(-(-m // 128) * 16, 132), 1, 1)
    # the dynamic kernel takes one more argument: M
    assert go_d["args"][:-1] == go_s["args"] and rec.kernel_args[-1].kind == "i32"
    assert go_d["args"][-1] == __import__("schedgen.runtime.driver", fromlist=["Arg"]).Arg.i32(m)


# ------------------------------------------------------------------------------------------------ Pallas

PALLAS_DYN = {"schedule.backends": ["cuda", "pallas"], "M": dyn(1024, 128), "N": 256, "K": 128,
              "op.inputs.b": {"shape": ["N"], "dtype": "bf16"}}


def _module(src: str, folder):
    path = folder / "pallas_kernel.py"
    path.write_text(src)
    name = f"_test_dyn_matmul_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_pallas_takes_a_ragged_dynamic_m_of_whole_row_groups_only():
    """A dynamic M: TMA zero-fills the lhs rows past M and skips their stores, but Mosaic GPU (jax 0.11.2) views the
    operands through 8-row tiles, so M must be a multiple of 8 (any M is CUDA only); a dynamic N of any 64 would
    read the [N] bias past its end (plgpu.load has no masked form)."""
    both = {"schedule.backends": ["cuda", "pallas"]}
    lines = plan_errors(LINEAR, both)
    assert any("schedule.backends" in ln and "M a multiple of 8" in ln for ln in lines), lines
    eight = {"op.sizes.M": {"dynamic": True, "max": 65536, "multiple_of": 8}}
    assert "pallas" in plan_spec(LINEAR, {**both, **eight}).launch.backends
    lines = plan_errors(LINEAR, {**both, **eight, "op.sizes.N": {"dynamic": True, "max": 4096, "multiple_of": 64}})
    assert any("op.inputs.b.shape" in ln and "no masked form" in ln for ln in lines), lines


def test_one_pallas_module_serves_several_sizes(tmp_path):
    pytest.importorskip("jax")
    import jax.numpy as jnp
    import ml_dtypes
    from schedgen.verify import interpret_params, races_found
    p = plan_spec(LINEAR, PALLAS_DYN)
    mod = _module(render(p, "pallas"), tmp_path)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 128), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256,), dtype=np.float32).astype(ml_dtypes.bfloat16)
    for m in (128, 384):
        x = rng.standard_normal((m, 128), dtype=np.float32).astype(ml_dtypes.bfloat16)
        ins = [jnp.asarray(x), jnp.asarray(w), jnp.asarray(b)]
        assert mod.sizes_of(ins) == {"M": m}
        (y,) = mod.run_into(ins, [jnp.full((m, 256), jnp.nan, jnp.bfloat16)], interpret=interpret_params())
        acc = np.asarray(x, np.float64) @ np.asarray(w, np.float64).T + np.asarray(b, np.float64)
        ref = 0.5 * acc * (1 + np.tanh(np.sqrt(2 / np.pi) * (acc + 0.044715 * acc ** 3)))
        y = np.asarray(y, np.float64)
        assert y.shape == (m, 256)
        assert np.max(np.abs(y - ref)) / np.max(np.abs(ref)) < 2e-2, m
        assert races_found() is False


def test_small_sizes_of_a_dynamic_spec():
    """`verify --small` shrinks a dynamic size from its max, keeping a ragged range ragged (65536 = 512 tiles:
    whole tiles; a max of 1000 keeps its remainder)."""
    from schedgen.families.matmul.reference import small_sizes
    spec, src = load_spec(str(LINEAR))
    assert small_sizes(spec, plan(spec, src), 2)["M"] == 256
    spec, src = load_spec(str(LINEAR), {"M": dyn(1000)})
    assert small_sizes(spec, plan(spec, src), 2)["M"] == 128 + 1000 % 128


BUNDLED_PALLAS = SPECS_DIR / "matmul_bf16_dynamic.yaml"


def test_bundled_dynamic_pallas_module_lowers_at_two_sizes(tmp_path):
    """The bundled both-backend dynamic spec: one rendered module lowers for CUDA at two values of M, its kernel's
    result type following M (jax specializes per shape; nothing is re-rendered)."""
    pytest.importorskip("jax")
    import re

    import jax
    p = plan_spec(BUNDLED_PALLAS)
    assert p.launch.dynamic_sizes == (SizeRange("M", 256, 32768, 256),) and not p.tiles.ragged
    mod = _module(render(p, "pallas"), tmp_path)
    for m in (256, 1280):
        args = [jax.ShapeDtypeStruct((m, 4096), mod._DTYPES["bf16"]), jax.ShapeDtypeStruct((4096, 4096),
                                                                                             mod._DTYPES["bf16"])]
        text = jax.jit(mod.make({"M": m})).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        assert re.search(rf"->\s*\(?tensor<{m}x4096xbf16>", text), m


def test_bundled_dynamic_pallas_interpret_two_sizes(tmp_path):
    """One module of the bundled spec, shrunk to N = K = 256 / 128 for the interpreter, at M = 256 and 512."""
    pytest.importorskip("jax")
    import jax.numpy as jnp
    import ml_dtypes
    from schedgen.verify import interpret_params, races_found
    p = plan_spec(BUNDLED_PALLAS, {"N": 256, "K": 128})
    mod = _module(render(p, "pallas"), tmp_path)
    rng = np.random.default_rng(3)
    b = rng.standard_normal((128, 256), dtype=np.float32).astype(ml_dtypes.bfloat16)
    for m in (512, 256):
        a = rng.standard_normal((m, 128), dtype=np.float32).astype(ml_dtypes.bfloat16)
        (out,) = mod.run_into([jnp.asarray(a), jnp.asarray(b)], [jnp.full((m, 256), jnp.nan, jnp.bfloat16)],
                              interpret=interpret_params())
        ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
        out = np.asarray(out, np.float64)
        assert out.shape == (m, 256) and np.max(np.abs(out - ref)) / np.max(np.abs(ref)) < 1e-2, m
        assert races_found() is False


def test_package_binds_m_from_the_call_and_refuses_what_is_out_of_range(tmp_path, monkeypatch):
    """The built package's record: any M in range binds (and sizes the output), an M out of range or one that
    breaks multiple_of is an ArgumentError naming the argument, the dimension, the value and what is legal."""
    from runtime.fake_driver import FakeDriver
    from schedgen.runtime.kernel import ArgumentError, load_package
    FakeDriver(monkeypatch)
    for spec, sub in ((LINEAR, "linear"), (BUNDLED_PALLAS, "plain")):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "launch.json").write_text(L.launch_record(plan_spec(spec)).to_json())
        (tmp_path / sub / "kernel.cubin").write_bytes(b"CUBIN")
    lin = load_package(tmp_path / "linear")
    for m in (1, 77, 65536):
        assert lin.bind([(m, 4096), (4096, 4096), (4096,)]) == {"M": m}
        assert lin.output_shapes({"M": m}) == ((m, 4096),)
    with pytest.raises(ArgumentError, match=r"x: dimension 0 \(M\) is 65537; M must be in 1\.\.65536"):
        lin.bind([(65537, 4096), (4096, 4096), (4096,)])
    with pytest.raises(ArgumentError, match="w: expected shape .*dimension 1 is fixed at 4096"):
        lin.bind([(8, 4096), (4096, 4095), (4096,)])
    plain = load_package(tmp_path / "plain")
    with pytest.raises(ArgumentError, match=r"a: dimension 0 \(M\) is 300; M must be a multiple of 256"):
        plain.bind([(300, 4096), (4096, 4096)])


def test_dynamic_m_keeps_the_hot_loop_of_the_static_kernel(tmp_path):
    """The runtime-extent cubin's k-loop is the specialized one's: the same HGMMA and TMA-load instructions (only
    the tile count and tile coordinates are runtime ints), no local memory."""
    from conftest import opcodes
    from schedgen.build import build_spec
    from schedgen.cache import Cache
    from schedgen.toolchain.nvrtc import resource_usage, sass
    cache = Cache(tmp_path / "cache")
    got = {}
    for name, ov in (("dynamic", {}), ("static", {"M": 4096})):
        b = build_spec(str(LINEAR), ov, cache=cache)
        ops = opcodes(sass(b.files["kernel.cubin"]))
        usage = resource_usage(b.files["kernel.cubin"])[b.plan.launch.kernel_name]
        assert usage["LOCAL"] == 0 and usage["STACK"] == 0, name
        got[name] = sorted(op for op in ops if op.startswith(("HGMMA", "UTMALDG", "UTMASTG")))
    assert got["dynamic"] == got["static"] and got["static"]


def test_tma_strides_over_a_dynamic_size_must_be_16_byte_multiples():
    """x [M, K] bf16 with K dynamic: its rows are K x 2 B apart, a multiple of 16 B only when K is a multiple of 8."""
    lines = plan_errors(LINEAR, {"K": dyn(8192, 4)})
    x_line, w_line = [ln for ln in lines if "TMA needs" in ln]      # one per tensor map over [., K]
    assert "op.sizes.K: x's dimension 0 steps (K * 2) B (K bf16 elements)" in x_line
    assert "op.sizes.K: w's dimension 0 steps (K * 2) B" in w_line
    assert "declare multiple_of: 8 (or a multiple of it) on K" in x_line
    assert plan_spec(LINEAR, {"K": dyn(8192, 8)}).tiles.ragged        # K = 8 .. : ragged, legal with out_of_bounds: zero


def test_verify_runs_one_dynamic_package_at_several_sizes():
    """schedgen.verify: a dynamic matmul package is checked at several M from ONE build (Pallas interpreted here,
    the bundled spec shrunk to N = 256, K = 128), each row naming the M it ran at; the sizes verify picks for the
    ragged linear_gelu include one that no tile divides."""
    pytest.importorskip("jax")
    from schedgen.build import build_spec
    from schedgen.verify import call_sizes, verify_built
    picked = [s["M"] for s in call_sizes(plan_spec(LINEAR))]
    assert len(picked) == 3 and any(m % 128 for m in picked), picked
    built = build_spec(str(BUNDLED_PALLAS), {"N": 256, "K": 128})
    checks = verify_built(built, ["pallas"], interpret=True, small={"M": 512})
    assert sorted(c.shape["M"] for c in checks) == [256, 512] and all(c.ok for c in checks), checks
    assert all("interpreted, no races" in c.note for c in checks)
