"""The matmul family's host side, on the CPU: the float64 reference (hand-computed cases, sampled rows),
verify's small sizes and sampled comparison, bench's pure pieces (the JAX TuningConfig mapping, rotation,
tables), and explain. Plans come from schedgen.plan.plan (no CUDA compile, no GPU)."""
from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from conftest import ROOT
from schedgen import bench
from schedgen.families.matmul import peers as mm_peers
from schedgen import reference as R
from schedgen.build import Built
from schedgen.explain import explain
from schedgen.plan import plan as make_plan
from schedgen.frontend.validate import load_spec
from schedgen.verify import small_overrides, verify_built

BF16 = ml_dtypes.bfloat16

# A frozen copy of the first bundled matmul spec (the bundled files get retuned): 4096^3, 128x256x64 tiles, two
# consumers along M, 4 stages, 2-CTA clusters along M multicasting b, planar-snake order, 64x64 epilogue chunks.
SPEC_TEXT = """\
name: matmul_bf16_4096
op:
  kind: matmul
  sizes: {M: 4096, N: 4096, K: 4096}
  inputs:
    a: {shape: [M, K], dtype: bf16}
    b: {shape: [K, N], dtype: bf16}
  outputs:
    out: {shape: [M, N], dtype: bf16}
  epilogue: out = acc
schedule:
  cluster: [2, 1]
  in_specs:
    a: {block_shape: [128, 64], transforms: {swizzle: 128}, delay_release: 1}
    b: {block_shape: [64, 256], transforms: {swizzle: 128}, collective_axes: [cluster], delay_release: 1}
  out_specs:
    out: {block_shape: [128, 256]}
  pipeline:
    kind: warp_specialized
    max_concurrent_steps: 4
    num_compute_wgs: 2
    wg_axis: m
    memory_registers: 40
    compute_registers: 232
  persistent: {loop: nd_loop, tile_order: planar_snake, minor_dim: 0, tile_width: 8}
  epilogue: {tile: [64, 64], buffers: 2}
"""


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory) -> Path:
    """SPEC_TEXT as a file."""
    path = tmp_path_factory.mktemp("mm") / "matmul_bf16_4096.yaml"
    path.write_text(SPEC_TEXT)
    return path


def spec_and_plan(path, overrides=None):
    spec, src = load_spec(str(path), overrides)
    return spec, make_plan(spec, src)


def built_of(path, overrides=None) -> Built:
    spec, src = load_spec(str(path), overrides)
    return Built(spec, src, make_plan(spec, src), {}, False)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(textwrap.dedent(text))
    return p


# A batched product with both operands transposed, a bias row, a column, a batched C and two constants.
BATCHED = """\
    name: mm_batched
    op:
      kind: matmul
      sizes: {B: 2, M: 3, N: 4, K: 5}
      constants: {alpha: 0.5, beta: 2.0}
      inputs:
        a: {shape: [B, K, M], dtype: bf16}
        b: {shape: [B, N, K], dtype: bf16}
        bias: {shape: [N], dtype: f32}
        col: {shape: [M, 1], dtype: bf16}
        c: {shape: [B, M, N], dtype: f32}
      outputs:
        out: {shape: [B, M, N], dtype: f32}
      transpose_lhs: true
      transpose_rhs: true
      epilogue: |
        t = acc + bias
        out = alpha * t + beta * c + col
    schedule:
      backends: [cuda]
      pipeline: {kind: warp_specialized, num_compute_wgs: 2}
    """

# Unbatched, stored as torch.matmul takes it, with a full [M, N] C.
PLAIN_C = """\
    name: mm_c
    op:
      kind: matmul
      sizes: {M: 3, N: 2, K: 4}
      constants: {s: 3.0}
      inputs:
        a: {shape: [M, K], dtype: bf16}
        b: {shape: [K, N], dtype: bf16}
        c: {shape: [M, N], dtype: bf16}
      outputs:
        out: {shape: [M, N], dtype: bf16}
      epilogue: out = relu(acc) - s * c
    schedule:
      backends: [cuda]
      pipeline: {kind: warp_specialized, num_compute_wgs: 2}
    """


def ints(rng, shape, dtype=BF16):
    return rng.integers(-3, 4, shape).astype(np.float32).astype(dtype)


# ------------------------------------------------------------------------------------------------ reference


def test_reference_batched_transposed_with_row_col_full_and_constants(tmp_path):
    spec, _ = load_spec(str(write(tmp_path, "mm_batched", BATCHED)))
    sizes = dict(spec.op.sizes)
    rng = np.random.default_rng(0)
    x = {"a": ints(rng, (2, 5, 3)), "b": ints(rng, (2, 4, 5)), "bias": ints(rng, (4,), np.float32),
         "col": ints(rng, (3, 1)), "c": ints(rng, (2, 3, 4), np.float32)}
    got = R.reference(spec, sizes, x)["out"]
    assert isinstance(got, np.ndarray) and got.shape == (2, 3, 4) and got.dtype == np.float64
    f = {k: v.astype(np.float64).tolist() for k, v in x.items()}
    for bi in range(2):
        for i in range(3):
            for j in range(4):
                acc = sum(f["a"][bi][k][i] * f["b"][bi][j][k] for k in range(5))   # a stored [K, M], b [N, K]
                want = 0.5 * (acc + f["bias"][j]) + 2.0 * f["c"][bi][i][j] + f["col"][i][0]
                assert got[bi, i, j] == want, (bi, i, j)


def test_reference_unbatched_full_c(tmp_path):
    spec, _ = load_spec(str(write(tmp_path, "mm_c", PLAIN_C)))
    rng = np.random.default_rng(1)
    x = {"a": ints(rng, (3, 4)), "b": ints(rng, (4, 2)), "c": ints(rng, (3, 2))}
    got = R.reference(spec, dict(spec.op.sizes), x)["out"]
    f = {k: v.astype(np.float64).tolist() for k, v in x.items()}
    for i in range(3):
        for j in range(2):
            acc = sum(f["a"][i][k] * f["b"][k][j] for k in range(4))
            assert got[i, j] == max(acc, 0.0) - 3.0 * f["c"][i][j]


def test_reference_of_the_bundled_spec_is_the_product(spec_path):
    spec, p = spec_and_plan(spec_path, {"M": 256, "N": 256, "K": 64})
    x = R.random_inputs(spec, p.sizes, seed=0)
    assert set(x) == {"a", "b"} and x["a"].dtype == BF16 and x["a"].shape == (256, 64)
    assert np.all(x["a"].astype(np.float32) != 0) and np.all(x["b"].astype(np.float32) != 0)   # never zeros
    ref = R.reference(spec, p.sizes, x)["out"]
    np.testing.assert_array_equal(ref, x["a"].astype(np.float64) @ x["b"].astype(np.float64))


# ------------------------------------------------------------------------------------------------ sampled rows


def test_sample_rows_are_sorted_distinct_and_include_the_edges():
    rows = R.sample_rows(10_000, 256, seed=5)
    assert len(rows) == 256 and np.all(np.diff(rows) > 0)
    assert rows[0] == 0 and rows[-1] == 9_999
    assert np.array_equal(R.sample_rows(100, 256), np.arange(100))
    assert not np.array_equal(R.sample_rows(10_000, 256, seed=1), R.sample_rows(10_000, 256, seed=2))


def test_sampled_reference_matches_the_full_one_on_its_rows(tmp_path):
    text = BATCHED.replace("{B: 2, M: 3, N: 4, K: 5}", "{B: 3, M: 200, N: 48, K: 40}")
    spec, _ = load_spec(str(write(tmp_path, "mm_batched", text)))
    sizes = dict(spec.op.sizes)
    x = R.random_inputs(spec, sizes, seed=4)
    full = R.reference(spec, sizes, x)["out"]
    assert isinstance(full, np.ndarray)
    s = R.reference(spec, sizes, x, sample=True, seed=7)["out"]
    assert isinstance(s, R.Sampled)
    assert s.shape == (3, 200, 48) and s.values.shape == (256, 48) and len(set(s.rows.tolist())) == 256
    assert {0, 599} <= set(s.rows.tolist())
    assert {int(r) // 200 for r in s.rows} == {0, 1, 2}          # rows from every batch
    np.testing.assert_allclose(s.values, full.reshape(-1, 48)[s.rows], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(s.pick(full), full.reshape(-1, 48)[s.rows])
    # given rows (unsorted, repeated) come back sorted and distinct
    t = R.reference(spec, sizes, x, rows=np.array([599, 3, 3, 250]))["out"]
    assert t.rows.tolist() == [3, 250, 599]
    np.testing.assert_allclose(t.values, full.reshape(-1, 48)[[3, 250, 599]], rtol=1e-12)


def test_big_problems_are_sampled_automatically(monkeypatch, spec_path):
    spec, p = spec_and_plan(spec_path, {"M": 1024, "N": 256, "K": 64})
    x = R.random_inputs(spec, p.sizes, seed=0)
    assert isinstance(R.reference(spec, p.sizes, x)["out"], np.ndarray)     # 2**24 multiply-adds: full
    monkeypatch.setattr(R, "SAMPLE_ABOVE", 1024 * 256 * 64 - 1)
    s = R.reference(spec, p.sizes, x, seed=3)["out"]
    assert isinstance(s, R.Sampled) and len(s.rows) == R.SAMPLE_ROWS
    # the bundled 4096^3 spec is over the threshold (M*N*K = 2**36)
    assert 4096 ** 3 > R.SAMPLE_ABOVE


def test_rel_error_with_a_sampled_reference(spec_path):
    spec, p = spec_and_plan(spec_path, {"M": 512, "N": 256, "K": 64})
    x = R.random_inputs(spec, p.sizes, seed=0)
    full = R.reference(spec, p.sizes, x)["out"]
    s = R.reference(spec, p.sizes, x, sample=True, seed=1)["out"]
    out = full.astype(BF16)
    err = R.rel_error(out, s)
    assert 0 < err < R.tolerance("bf16", False, 64)
    assert err == pytest.approx(R.rel_error(out.reshape(-1, 256)[s.rows], s.values))
    # a wrong row that was sampled is seen
    bad = out.copy()
    bad[s.rows[5]] = 0
    assert R.rel_error(bad, s) > R.tolerance("bf16", False, 64)
    # an unwritten (NaN-poisoned) element anywhere fails, sampled row or not
    unsampled = next(r for r in range(512) if r not in set(s.rows.tolist()))
    nan = out.copy()
    nan[unsampled, 7] = np.nan
    assert R.rel_error(nan, s) == math.inf
    with pytest.raises(ValueError):
        s.pick(out[:256])


def test_tolerance_grows_with_the_accumulation_depth_for_f32_only():
    assert R.tolerance("bf16", False, 4096) == R.TOLERANCE["bf16"]
    assert R.tolerance("f32", False) == R.TOLERANCE["f32"]
    assert R.TOLERANCE["f32"] < R.tolerance("f32", False, 4096) < 1e-4
    assert R.tolerance("f32", False, 16384) > R.tolerance("f32", False, 4096)


# ------------------------------------------------------------------------------------------------ verify


def test_small_overrides_for_the_bundled_matmul_give_a_plan(spec_path):
    b = built_of(spec_path)
    small = small_overrides(b)
    assert small == {"M": 128 * 2 * 2, "N": 256 * 2, "K": 64 * 2}
    assert small_overrides(b, tiles_per_dim=1) == {"M": 256, "N": 256, "K": 64}
    _, p = spec_and_plan(spec_path, small)
    assert (p.m, p.n, p.k) == (512, 512, 128)
    assert (p.tiles.tiles_m, p.tiles.tiles_n, p.tiles.k_iters) == (4, 2, 2) and p.tiles.num_tiles == 4 and not p.tiles.ragged
    assert p.launch.kernel_name == b.plan.launch.kernel_name           # same schedule, smaller problem


def test_small_overrides_keep_a_ragged_spec_ragged_and_cluster_divisible(spec_path):
    ov = {"M": 4000, "K": 4104, "schedule.in_specs.a.out_of_bounds": "zero",
          "schedule.in_specs.b.out_of_bounds": "zero", "schedule.backends": ["cuda"]}
    b = built_of(spec_path, ov)
    small = small_overrides(b)
    assert small["M"] == 256 + 4000 % 256 and small["K"] == 64 + 4104 % 64 and small["N"] == 512
    _, p = spec_and_plan(spec_path, {**ov, **small})
    assert p.tiles.ragged and p.tiles.tiles_m % p.cluster.cluster_m == 0


def test_small_overrides_follow_transposes_batch_and_shared_names(tmp_path):
    text = BATCHED.replace("{B: 2, M: 3, N: 4, K: 5}", "{B: 6, M: 4096, N: 2048, K: 1024}")
    b = built_of(write(tmp_path, "mm_batched", text))
    p = b.plan
    assert p.transpose_lhs and p.transpose_rhs and p.batch == 6
    small = small_overrides(b)
    assert small == {"M": p.tiles.tile_m * p.cluster.cluster_m * 2, "N": p.tiles.tile_n * p.cluster.cluster_n * 2, "K": p.tiles.tile_k * 2, "B": 2}
    _, q = spec_and_plan(write(tmp_path, "mm_batched", text), small)
    assert (q.batch, q.m, q.n, q.k) == (2, small["M"], small["N"], small["K"])
    # one name for two roles (a square [N, N] rhs): a multiple of both units
    sq = textwrap.dedent(PLAIN_C).replace("{M: 3, N: 2, K: 4}", "{M: 2048, N: 2048}").replace(
        "[M, K]", "[M, N]").replace("[K, N]", "[N, N]")
    p2 = tmp_path / "mm_sq.yaml"
    p2.write_text(sq)
    b2 = built_of(p2)
    s2 = small_overrides(b2)
    assert set(s2) == {"M", "N"}
    assert s2["N"] % b2.plan.tiles.tile_n == 0 and s2["N"] % b2.plan.tiles.tile_k == 0
    spec_and_plan(p2, s2)


def test_map_small_overrides_unchanged():
    b = built_of(ROOT / "tests" / "data" / "add_bf16.yaml")     # the frozen copy of the bundled spec
    assert small_overrides(b) == {"M": 64, "N": 512}


def test_verify_compares_sampled_rows(monkeypatch, spec_path):
    """verify_built with a stand-in Pallas run: a big shape is checked on sampled rows, and a wrong row fails."""
    from schedgen import verify as V
    b = built_of(spec_path, {"M": 1024, "N": 256, "K": 64, "schedule.backends": ["pallas"]})
    monkeypatch.setattr(R, "SAMPLE_ABOVE", 1 << 20)
    state = {}

    def fake_run(kernel, plan, inputs, interpret):
        out = (inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)).astype(BF16)
        if state.get("break"):
            out[:, 3] = 0                                         # wrong in every row
        return [out], "stand-in"
    monkeypatch.setattr(V, "run_pallas", fake_run)
    (c,) = verify_built(b, ["pallas"], kernel=object(), seed=0)
    assert c.ok and "256 sampled rows" in c.note and c.rel_error < c.tolerance
    state["break"] = True
    (c,) = verify_built(b, ["pallas"], kernel=object(), seed=0)
    assert not c.ok


# ------------------------------------------------------------------------------------------------ bench


def test_jax_tuning_of_the_bundled_spec(spec_path):
    _, p = spec_and_plan(spec_path)
    cfg, notes = mm_peers.jax_tuning(p)
    assert cfg == {"tile_m": 64, "tile_n": 256, "tile_k": 64, "max_concurrent_steps": 4, "epi_tile_n": 64,
                   "epi_tile_m": 64, "grid_minor_dim": "M", "grid_tile_width": 8, "wg_dimension": "M",
                   "cluster_dimension": "M"}
    # JAX's CTA tile (twice its per-warpgroup tile along wg_dimension) is the plan's tile
    assert cfg["tile_m"] * 2 == p.tiles.tile_m and cfg["tile_n"] == p.tiles.tile_n
    assert any("delay_release 1" in n for n in notes)


def test_jax_tuning_variants(spec_path):
    _, p = spec_and_plan(spec_path, {"schedule.pipeline.wg_axis": "n", "schedule.persistent.tile_order": "row_major", "schedule.persistent.tile_width": 1,
                                "schedule.cluster": [1, 2], "schedule.in_specs.b.collective_axes": [],
                                "schedule.pipeline.memory_registers": 56, "schedule.pipeline.compute_registers": 224})
    cfg, notes = mm_peers.jax_tuning(p)
    assert (cfg["tile_m"], cfg["tile_n"], cfg["wg_dimension"]) == (128, 128, "N")
    assert cfg["cluster_dimension"] == "N"
    assert (cfg["grid_minor_dim"], cfg["grid_tile_width"]) == ("N", p.tiles.tiles_n // 2)   # row-major as a snake
    assert any("producer registers 40" in n for n in notes)
    _, p1 = spec_and_plan(spec_path, {"schedule.cluster": [1], "schedule.in_specs.b.collective_axes": []})
    assert mm_peers.jax_tuning(p1)[0]["cluster_dimension"] is None


@pytest.mark.parametrize("overrides, why", [
    ({"schedule.pipeline.num_compute_wgs": 1, "schedule.out_specs.out.block_shape": [128, 128],
      "schedule.in_specs.b.block_shape": [64, 128], "schedule.pipeline.compute_registers": 240,
      "schedule.pipeline.memory_registers": 56, "schedule.backends": ["cuda"]}, "2 consumer warpgroups"),
    ({"op.transpose_rhs": True, "op.inputs.b.shape": ["N", "K"], "schedule.in_specs.b.block_shape": [256, 64],
      "schedule.backends": ["cuda"]}, "no transposed operands"),
    ({"M": 4000, "schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero",
      "schedule.backends": ["cuda"]}, "not multiples of the cluster tile"),
])
def test_jax_tuning_skips_what_it_cannot_express(overrides, why, spec_path):
    _, p = spec_and_plan(spec_path, overrides)
    cfg, notes = mm_peers.jax_tuning(p)
    assert cfg is None and any(why in n for n in notes), notes


def test_jax_tuning_config_is_jax_own_dataclass(spec_path):
    pytest.importorskip("jax")
    _, p = spec_and_plan(spec_path)
    cfg, _ = mm_peers.jax_tuning_config(p)
    hm = mm_peers.import_hopper_matmul()
    assert isinstance(cfg, hm.TuningConfig)
    assert cfg.wg_dimension == hm.MatmulDimension.M and cfg.cluster_dimension == hm.MatmulDimension.M
    assert cfg.grid_minor_dim == hm.MatmulDimension.M and cfg.max_concurrent_steps == 4
    assert "jax._src.test_util" not in sys.modules or hasattr(sys.modules["jax._src.test_util"], "__file__")


def test_jax_fuses_only_acc_plus_c(tmp_path, spec_path):
    _, p = spec_and_plan(spec_path)
    assert mm_peers.jax_fuses_epilogue(p) == ""
    text = PLAIN_C.replace("relu(acc) - s * c", "acc + c").replace("{M: 3, N: 2, K: 4}", "{M: 256, N: 256, K: 64}")
    _, q = spec_and_plan(write(tmp_path, "mm_c", text))
    assert mm_peers.jax_fuses_epilogue(q) == "c"
    _, r = spec_and_plan(write(tmp_path, "mm_c2", PLAIN_C.replace("{M: 3, N: 2, K: 4}", "{M: 256, N: 256, K: 64}")))
    assert mm_peers.jax_fuses_epilogue(r) is None


def test_rotation_sets():
    four_k = 2 * 4096 * 4096 * 2                     # 64 MiB of inputs: 3 x that is under 200 MB
    assert bench.matmul_sets(four_k) == 4
    assert bench.matmul_sets(2 * 8192 * 8192 * 2) == 1
    assert bench.matmul_sets(1 << 20) == bench.MAX_SETS


def test_ratio_uses_one_timing_method():
    ours = {"time_ms": 0.2, "timing": "cuda-events", "cupti_ms": 0.19}
    assert bench.ratio_of(ours, {"time_ms": 0.3, "timing": "cuda-events"}) == (pytest.approx(1.5), "cuda-events")
    # kernel time first where both have it (events also count the idle gaps of a peer's slow host path): the
    # H200's figures for SDPA cuDNN against ours, 2026-12-04
    ours = {"time_ms": 0.2095, "timing": "cuda-events", "cupti_ms": 0.1990}
    sdpa = {"time_ms": 0.2372, "timing": "cuda-events", "cupti_ms": 0.2043}
    assert bench.ratio_of(ours, sdpa) == (pytest.approx(0.2043 / 0.1990), "cupti")
    ours = {"time_ms": 0.2, "timing": "cuda-events", "cupti_ms": 0.19}
    assert bench.ratio_of(ours, {"time_ms": 0.38, "timing": "cupti", "cupti_ms": 0.38}) == (pytest.approx(2.0), "cupti")
    r, basis = bench.ratio_of(ours, {"time_ms": 0.4, "timing": "wall"})
    assert r == pytest.approx(2.0) and "wall" in basis


def test_matmul_markdown_and_the_map_table():
    row = {"family": "matmul", "spec": "matmul_bf16_4096", "backend": "cuda", "kernel": "matmul_k", "shape": {"M": 4096},
           "dtype": "bf16", "time_ms": 0.2, "tflops": 687.2, "pct_peak": 69.5, "verified": True, "rel_error": 2e-3,
           "peers": {"cublas": {"time_ms": 0.21, "tflops": 654.0, "ratio": 1.05, "verified": True,
                                "note": "torch 2.11"},
                     "jax_pallas": {"skipped": "JAX's kernel is not batched"}}}
    text = bench.markdown([row])
    assert "TFLOP/s" in text and "% peak" in text and "687" in text and "69.5" in text and "1.05x" in text
    assert "`matmul_k`" in text and "skipped" in text and "not batched" in text
    maprow = {"family": "map", "spec": "add_bf16", "backend": "cuda", "shape": {"M": 1}, "dtype": "bf16",
              "time_ms": 1.0, "gbps": 4000.0, "peer": "copy", "peer_time_ms": 1.0, "ratio": 1.0, "verified": True,
              "rel_error": 0.0}
    from schedgen.families.map.peers import markdown as map_markdown
    # map rows have their own table (vs the copy and torch's eager op); a row made before the peers were nested
    # still shows its flat copy ratio
    assert bench.markdown([maprow]) == map_markdown([maprow])
    assert "| add_bf16 | default | cuda | M=1 | bf16 | 1.0000 | 4000 | 1.000 | - | yes | 0.00e+00 |" in map_markdown(
        [maprow])
    both = bench.markdown([maprow, row])
    assert both.startswith(map_markdown([maprow])) and "687" in both
    assert "torch" not in text.split("\n")[0]       # no torch eager / compile columns without such peers
    fused = {**row, "peers": {**row["peers"], "torch_eager": {"ratio": 1.3, "tflops": 500.0, "verified": True},
                              "torch_compile": {"skipped": "torch.compile(mode='max-autotune-no-cudagraphs') failed: X"}}}
    text = bench.markdown([row, fused])
    assert "| vs cuBLAS | vs JAX Pallas | vs torch eager | vs torch.compile |" in text
    assert "| 1.30x (500 TFLOP/s) | skipped |" in text and "torch_compile: torch.compile(mode=" in text


def test_suite_globs_the_matmul_specs():
    from bench import gpu
    mm = {r["spec"] for r in gpu.record_runs(which="all") if gpu.spec_kind(ROOT / r["spec"]) == "matmul"}
    assert mm >= {str(p.relative_to(ROOT)) for p in (ROOT / "specs").glob("matmul_*.yaml")}
    assert mm


# ------------------------------------------------------------------------------------------------ explain


def test_explain_matmul_mentions_the_key_numbers(spec_path):
    _, p = spec_and_plan(spec_path)
    text = explain(p)
    for needle in ("M=4096, N=4096, K=4096", "128 x 256 x 64", "m64n256k16", "4-stage", "49152 B per stage",
                   f"{p.launch.smem_bytes} B", "2 x 1 CTAs", "multicast", "planar_snake", "40/thread", "232/thread",
                   "128 f32 accumulators", "64 x 64 chunks", "out = acc", "137.4 GFLOP", "3.88 waves"):
        assert needle in text, needle


def test_explain_matmul_epilogue_in_spec_names(tmp_path):
    text = BATCHED.replace("{B: 2, M: 3, N: 4, K: 5}", "{B: 2, M: 1024, N: 512, K: 256}")
    _, p = spec_and_plan(write(tmp_path, "mm_batched", text))
    out = explain(p)
    assert "t = acc + bias" in out and "out = alpha * t + beta * c + col" in out
    assert "batch 2" in out and "a[B, K, M]^T" in out and "col bf16 [1024, 1]: col" in out


def test_explain_cli_prints_the_matmul_plan(spec_path):
    res = subprocess.run([sys.executable, "-m", "schedgen", "explain", str(spec_path)], capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "family matmul" in res.stdout and "wgmma m64n256k16" in res.stdout
