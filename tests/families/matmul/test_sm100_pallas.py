"""The Pallas (Mosaic GPU) matmul on sm_100a (issue 20), on the CPU: the rendered module lowers for sm_100a (jax's
architecture query patched to 10.0) with the tcgen05 MMA, its commit, the TMEM allocation and loads, the CTA pair's
cta_group::2 and cluster launch control in the MLIR; it runs in Mosaic GPU's interpreter (race detection on) against
a float64 reference at small sizes (one CTA walking several tiles with nd_loop, a CTA a tile with the dynamic loop);
`verify --interpret` passes it, or gives a SKIP row saying why (the CTA pair is not interpretable); what the Pallas
kernel cannot do is a located error. These kernels have NOT run on Blackwell hardware."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec
from schedgen.errors import SpecErrors
from schedgen.frontend import expr as ex
from schedgen.plan import dims as D
from schedgen.reference import rel_error

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402

SPEC = SPECS_DIR / "matmul_bf16_4096_sm100_pallas.yaml"
NP_DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}
PAIR = {"schedule.persistent.loop": "nd_loop", "schedule.cluster": [2, 1],
        "schedule.in_specs.a.block_shape": [256, 64], "schedule.out_specs.out.block_shape": [256, 256]}
BIAS_SILU_F32 = {"op.outputs.out.dtype": "f32", "op.inputs.bias": {"shape": ["N"], "dtype": "f32"},
                 "op.epilogue": "out = silu(acc + bias)"}
ROW_SCALE_RESIDUAL = {"op.inputs.s": {"shape": ["M", 1], "dtype": "f32"},
                      "op.inputs.r": {"shape": ["M", "N"], "dtype": "bf16"}, "op.epilogue": "out = acc * s + r"}
RHS_NK = {"op.transpose_rhs": True, "op.inputs.b.shape": ["N", "K"], "schedule.in_specs.b.block_shape": [128, 64],
          "schedule.out_specs.out.block_shape": [128, 128]}
F16 = {"op.inputs.a.dtype": "f16", "op.inputs.b.dtype": "f16", "op.outputs.out.dtype": "f16"}
# one CTA walks 2 x 2 tiles of 128 x 128 with 6 k-steps through 3 stages: the ring and the two TMEM buffers wrap
ONE_CTA = {"M": 256, "N": 256, "K": 384, "schedule.persistent.loop": "nd_loop", "schedule.persistent.num_blocks": 1,
           "schedule.in_specs.b.block_shape": [64, 128], "schedule.out_specs.out.block_shape": [128, 128],
           "schedule.pipeline.max_concurrent_steps": 3}
SMALL = {"M": 256, "N": 512, "K": 128}     # 2 x 2 tiles of the bundled 128 x 256, 2 k-steps
MC_RHS = {"schedule.persistent.loop": "nd_loop", "schedule.cluster": [2, 1], "schedule.in_specs.b.collective_axes": ["cluster"]}
MC_LHS = {"schedule.persistent.loop": "nd_loop", "schedule.cluster": [1, 2], "schedule.in_specs.a.collective_axes": ["cluster"]}
# one [2, 1] cluster sharing the rhs walks 2 x 2 cluster tiles of 128 x 128, 6 k-steps through 3 stages: the relayed
# stage releases wrap
MC_WRAP = {**MC_RHS, "M": 512, "N": 256, "K": 384, "schedule.persistent.num_blocks": 2,
           "schedule.in_specs.b.block_shape": [64, 128], "schedule.out_specs.out.block_shape": [128, 128],
           "schedule.pipeline.max_concurrent_steps": 3}
# partial tiles (M, N not multiples of the tile; multiples of Mosaic GPU's GMEM tiling: 8 rows, 64 bf16 columns):
# TMA zero-fills the copies past the edge and clips the stores
ZERO = {"schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero"}
RAGGED = {**ZERO, "M": 200, "N": 320, "K": 192}

LOWER_CASES = {
    "bundled_dynamic": ({}, 1),
    "static_loop": ({"schedule.persistent.loop": "nd_loop"}, 1),
    "cta_pair_256": (PAIR, 2),
    "cta_pair_rhs_nk": ({**PAIR, "op.transpose_rhs": True, "op.inputs.b.shape": ["N", "K"],
                         "schedule.in_specs.b.block_shape": [256, 64]}, 2),
    "f32_out_bias_silu": (BIAS_SILU_F32, 1),
    "row_scale_residual": (ROW_SCALE_RESIDUAL, 1),
    "rhs_nk_128": (RHS_NK, 1),
    "f16": (F16, 1),
    "cluster2x1_multicast_rhs": (MC_RHS, 1),
    "cluster1x2_multicast_lhs": (MC_LHS, 1),
    "cluster2x1_no_multicast": ({"schedule.persistent.loop": "nd_loop", "schedule.cluster": [2, 1]}, 1),
    "ragged_m_n": (RAGGED, 1),
    "ragged_cta_pair": ({**PAIR, **ZERO, "M": 264, "N": 320, "K": 128}, 2),
}
INTERPRET_CASES = {
    "bundled_dynamic": SMALL,
    "one_cta_nd_loop": ONE_CTA,
    "f32_out_bias_silu": {**SMALL, **BIAS_SILU_F32},
    "row_scale_residual": {**SMALL, **ROW_SCALE_RESIDUAL},
    "rhs_nk_128": {**RHS_NK, "M": 256, "N": 256, "K": 128},
    "f16_one_cta": {**ONE_CTA, **F16},
    "cluster2x1_multicast_rhs_wrap": MC_WRAP,
    "cluster1x2_multicast_lhs": {**MC_LHS, "M": 256, "N": 512, "K": 128},
    "one_staging_buffer": {**SMALL, "schedule.epilogue.buffers": 1},
    "ragged_m_n_nd_loop": {**RAGGED, "schedule.persistent.loop": "nd_loop"},
    # M below one tile; a per-column bias along a whole-tile N (plgpu.load has no masked form)
    "ragged_short_m_bias": {**ZERO, "M": 72, "N": 512, "K": 128, **BIAS_SILU_F32},
    "ragged_cluster2x1_multicast_rhs": {**MC_RHS, **ZERO, "M": 256, "N": 320, "K": 192},
}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


@pytest.fixture
def sm100a(monkeypatch):
    """Mosaic GPU asks the default device for its architecture (a CPU has none: 9.0); answer 10.0 (sm_100a), and
    count the questions (the lowering stamps the answer into the module and infers its layouts for it)."""
    from jax.experimental.mosaic.gpu import utils as mgpu_utils
    asked = []

    def arch():
        asked.append(1)
        return (10, 0)

    monkeypatch.setattr(mgpu_utils, "_infer_arch", arch)
    return asked


def _build(overrides):
    return build_spec(str(SPEC), {"schedule.backends": ["pallas"], **overrides})


def _module(built, folder: Path):
    path = folder / "pallas_kernel.py"
    path.write_bytes(built.files["pallas_kernel.py"])
    name = f"_test_sm100_pallas_{built.plan.launch.kernel_name}_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _shape(shape, sizes=None):
    """An operand's shape at one call (its dynamic sizes from `sizes`)."""
    return tuple(D.evaluate(x, sizes or {}) for x in shape)


def _inputs(plan, seed=0, sizes=None):
    rng = np.random.default_rng(seed)
    return {o.name: rng.standard_normal(_shape(o.shape, sizes), dtype=np.float32).astype(NP_DTYPES[o.dtype])
            for o in plan.inputs}


def _reference(built, inputs, epilogue=None, sizes=None):
    spec, plan = built.spec, built.plan
    a = np.asarray(inputs[spec.op.lhs], np.float64)
    b = np.asarray(inputs[spec.op.rhs], np.float64)
    acc = a @ (b.T if plan.transpose_rhs else b)
    out = plan.outputs[0].name
    body = ex.parse_body(epilogue or spec.op.epilogue or f"{out} = acc", inputs=["acc", *(e.name for e in plan.extras)],
                         outputs=[out], constants=list(spec.op.constants))
    env = {"acc": acc, **{e.name: np.asarray(inputs[e.name], np.float64) for e in plan.extras},
           **{c: float(v) for c, v in spec.op.constants.items()}}
    return np.broadcast_to(ex.eval_numpy(body, env)[out], _shape(plan.outputs[0].shape, sizes))


def _run(mod, plan, inputs, sizes=None):
    from schedgen.verify import interpret_params
    poison = np.full(_shape(plan.outputs[0].shape, sizes), np.nan, NP_DTYPES[plan.out_dtype])
    (out,) = mod.run_into([jnp.asarray(inputs[o.name]) for o in plan.inputs], [jnp.asarray(poison)],
                          interpret=interpret_params())
    return np.asarray(out)


# ------------------------------------------------------------------------------------ lowering for sm_100a on CPU

@pytest.mark.parametrize("case", list(LOWER_CASES), ids=list(LOWER_CASES))
def test_pallas_sm100a_lowers_with_tcgen05_and_tmem(case, tmp_path, sm100a):
    overrides, group = LOWER_CASES[case]
    built = _build(overrides)
    plan = built.plan
    assert plan.launch.target == "sm_100a" and plan.mma.tcgen05 is not None and plan.mma.tcgen05.cta_group == group
    mod = _module(built, tmp_path)
    args = [jax.ShapeDtypeStruct(o.shape, mod._DTYPES[o.dtype]) for o in plan.inputs]
    text = jax.jit(mod.make()).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert sm100a, "the lowering never asked for the architecture"
    calls = re.findall(r"stablehlo\.custom_call @(\w+)\(([^)]*)\)", text)
    assert [c[0] for c in calls] == ["mosaic_gpu_v2"] and len(calls[0][1].split(",")) == len(plan.inputs)
    assert plan.launch.kernel_name in text
    # the MMA of the group, its commit, the TMEM allocation (of the group), loads and their wait
    assert f"tcgen05.mma.cta_group::{group}.kind::f16" in text
    assert f"tcgen05.mma.cta_group::{3 - group}" not in text
    assert f"tcgen05.alloc.cta_group::{group}" in text and "tcgen05.dealloc" in text
    assert "tcgen05.commit" in text and "tcgen05.ld.sync.aligned" in text and "tcgen05.wait" in text
    # cluster launch control only with loop: dynamic; the pair's TMA loads complete on the leader's barrier
    assert ("clusterlaunchcontrol.try_cancel" in text) == plan.mma.tcgen05.dynamic
    assert ("cta_group::2" in re.sub(r"tcgen05\.[a-z_.]*cta_group::2", "", text)) == (group == 2)
    # a cluster barrier (arrived on in the peer CTA): the relayed stage release, the pair's acc_empty
    assert ("mapa.shared::cluster" in text) == (plan.mma.tcgen05.relay or group == 2)
    assert plan.mma.tcgen05.relay == (group == 1 and bool(plan.cluster.multicast))


def test_rendered_module_reflects_the_plan():
    """The knobs reach the Pallas source: tile, ring, TMEM buffers, epilogue chunks, the loop, the pair."""
    built = _build({})
    p, t, src = built.plan, built.plan.mma.tcgen05, built.files["pallas_kernel.py"].decode()
    compile(src, "pallas_kernel.py", "exec")
    assert f"TILE_M, TILE_N, TILE_K = {p.tiles.tile_m}, {p.tiles.tile_n}, {p.tiles.tile_k}" in src and f"STAGES = {p.pipeline.stages}" in src
    assert f"ACC_STAGES = {t.acc_stages}" in src and "plgpu.TMEM((ROWS, ACC_STAGES * TILE_N), jnp.float32)" in src
    assert f"EPI_COLS, EPI_CHUNKS, EPI_BUFFERS = {t.epi_cols}, {t.epi_chunks}, {t.epi_buffers}" in src
    assert "plgpu.tcgen05_mma(acc, a_smem.at[s], b_smem.at[s], empty.at[s], accumulate=k > 0)" in src
    assert "plgpu.tcgen05_commit_arrive(acc_full.at[slot])" in src and "plgpu.async_load_tmem(" in src
    assert "plgpu.wait_load_tmem()" in src and "plgpu.dynamic_scheduling_loop(" in src and "nd_loop" not in src
    assert f"NUM_BLOCKS = {p.tiles.num_tiles}" in src and "cluster=(" not in src
    assert f"plgpu.planar_snake(lin, (GRID_M, GRID_N), {p.tiles.minor_dim}, {p.tiles.tile_width})" in src
    assert "num_threads=2," in src and "plgpu.warp_map" in src and "freed" not in src
    relay = _build(MC_RHS).files["pallas_kernel.py"].decode()
    assert "num_threads=3," in relay and "plgpu.barrier_arrive(freed.at[s])" in relay
    assert "b_smem.at[s],\n" in relay and 'full.at[s], collective_axes="cluster")' in relay
    pair = _build(PAIR).files["pallas_kernel.py"].decode()
    assert 'collective_axis="cluster"' in pair and "collective=True" in pair and "plgpu.ClusterBarrier(" in pair
    assert "leader_tracked=plgpu.CopyPartition.PARTITIONED(0)" in pair and "cluster=(CLUSTER_SIZE,)" in pair
    assert "plgpu.nd_loop((NUM_TILES,)" in pair and "dynamic_scheduling_loop" not in pair


# ------------------------------------------------------------------------------------ the interpreter

@pytest.mark.parametrize("case", list(INTERPRET_CASES), ids=list(INTERPRET_CASES))
def test_pallas_sm100a_interpret_matches_float64(case, tmp_path):
    from schedgen.verify import races_found
    built = _build(INTERPRET_CASES[case])
    plan = built.plan
    if case == "one_cta_nd_loop":
        assert (plan.launch.num_blocks, plan.tiles.num_tiles, plan.tiles.k_iters, plan.pipeline.stages) == (1, 4, 6, 3)
    if case == "one_staging_buffer":
        assert plan.mma.tcgen05.epi_buffers == 1 and plan.mma.blackwell.epi_buffers == 1
    if case == "cluster2x1_multicast_rhs_wrap":
        assert (plan.launch.num_blocks, plan.tiles.num_tiles, plan.tiles.k_iters, plan.mma.tcgen05.relay) == (2, 4, 6, True)
    mod = _module(built, tmp_path)
    inputs = _inputs(plan)
    out = _run(mod, plan, inputs)
    assert out.dtype == NP_DTYPES[plan.out_dtype] and out.shape == plan.outputs[0].shape
    err = rel_error(out, _reference(built, inputs))
    assert err <= TOL[plan.out_dtype], (case, err)
    assert races_found() is False


def dyn(max_, multiple_of):
    return {"dynamic": True, "max": max_, "min": multiple_of, "multiple_of": multiple_of}


# dynamic M, N, K: multiples of Mosaic GPU's GMEM tiling (8 rows; 64 bf16 of K; N a multiple of the tile: the
# per-column bias is read by plgpu.load, which has no masked form)
DYNAMIC = {**ZERO, "M": dyn(4096, 8), "N": dyn(4096, 256), "K": dyn(4096, 64), **BIAS_SILU_F32}
DYNAMIC_CALLS = ({"M": 200, "N": 512, "K": 192}, {"M": 72, "N": 256, "K": 64}, {"M": 384, "N": 256, "K": 320})


@pytest.mark.parametrize("loop", ["dynamic", "nd_loop"])
def test_one_pallas_sm100a_module_serves_several_sizes(loop, tmp_path):
    """One rendered module (the planner's numbers at the max), several calls of other sizes, each against float64
    with a NaN-poisoned output: the tile grid, tile count, k-steps and grid come from the call."""
    from schedgen.verify import races_found
    built = _build({**DYNAMIC, "schedule.persistent.loop": loop})
    plan = built.plan
    assert [r.name for r in plan.launch.dynamic_sizes] == ["M", "N", "K"] and plan.mma.tcgen05 is not None
    src = built.files["pallas_kernel.py"].decode()
    assert "def _kernel_body(sz_M, sz_N, sz_K):" in src and "K_ITERS = (-(-sz_K // 64))" in src
    mod = _module(built, tmp_path)
    for i, sizes in enumerate(DYNAMIC_CALLS):
        inputs = _inputs(plan, seed=i, sizes=sizes)
        assert mod.sizes_of([inputs[o.name] for o in plan.inputs]) == sizes
        out = _run(mod, plan, inputs, sizes)
        assert out.shape == (sizes["M"], sizes["N"])
        assert rel_error(out, _reference(built, inputs, sizes=sizes)) <= TOL[plan.out_dtype], sizes
    assert races_found() is False


@pytest.mark.parametrize("overrides, group", [(DYNAMIC, 1), ({**PAIR, **ZERO, "M": dyn(4096, 8)}, 2)],
                         ids=["dynamic_mnk", "dynamic_m_cta_pair"])
def test_a_dynamic_pallas_sm100a_module_lowers_at_a_call_size(overrides, group, tmp_path, sm100a):
    built = _build(overrides)
    plan = built.plan
    sizes = {r.name: v for r, v in zip(plan.launch.dynamic_sizes, (200, 512, 192))}
    mod = _module(built, tmp_path)
    args = [jax.ShapeDtypeStruct(_shape(o.shape, sizes), mod._DTYPES[o.dtype]) for o in plan.inputs]
    text = jax.jit(mod.make(sizes)).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert sm100a and f"tcgen05.mma.cta_group::{group}.kind::f16" in text and "tcgen05.ld.sync.aligned" in text


def test_interpreter_catches_a_wrong_epilogue(tmp_path):
    """Not vacuous: the kernel of acc - bias fails against the reference of acc + bias."""
    bias = {**SMALL, "op.inputs.bias": {"shape": ["N"], "dtype": "bf16"}}
    wrong = _build({**bias, "op.epilogue": "out = acc - bias"})
    inputs = _inputs(wrong.plan, seed=2)
    out = _run(_module(wrong, tmp_path), wrong.plan, inputs)
    assert rel_error(out, _reference(wrong, inputs, epilogue="out = acc + bias")) > 1e-2
    assert rel_error(out, _reference(wrong, inputs)) <= 1e-2


def test_the_cta_pair_is_not_interpretable_yet(tmp_path):
    """Why verify skips the pair: jax 0.11.2's interpreter refuses tcgen05_mma with a collective axis (when this
    starts to pass, interpret the pair and drop Tcgen05Plan.interpretable)."""
    from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call
    built = _build({**PAIR, "M": 512, "N": 256, "K": 128})
    assert built.plan.not_interpretable.startswith("not_interpretable: ")
    with pytest.raises(Exception, match="collective_axis not supported"):
        _run(_module(built, tmp_path), built.plan, _inputs(built.plan))
    interpret_pallas_call.reset_gpu_interpret_mode_state()


def test_verify_interpret_passes_the_bundled_spec_and_skips_the_pair():
    from schedgen.verify import verify_file
    (ok,) = verify_file(str(SPEC), ["pallas"], interpret=True, small=True)
    assert ok.ok and ok.backend == "pallas" and ok.note == "interpreted, no races", ok
    (skip,) = verify_file(str(SPEC), ["pallas"], PAIR, interpret=True, small=True)
    assert skip.skipped and not skip.ok and skip.note.startswith("not run: not_interpretable: the CTA pair's")


# ------------------------------------------------------------------------------------ what Pallas cannot do here

@pytest.mark.parametrize("overrides, path, words", [
    ({"schedule.epilogue.tile": [32, 64]}, "schedule.epilogue.tile", "epilogue.tile is the CUDA kernel's"),
    ({"schedule.compiler_params.unsafe_no_auto_barriers": True}, "schedule.compiler_params.unsafe_no_auto_barriers",
     "automatic warpgroup barriers"),
], ids=["epilogue_tile", "no_auto_barriers"])
def test_pallas_sm100a_limits_are_located_errors(overrides, path, words):
    with pytest.raises(SpecErrors) as info:
        _build(overrides)
    text = str(info.value)
    assert f"{path}:" in text and words in text and "Pallas sm_100a kernel" in text, text
    if path != "schedule.compiler_params.unsafe_no_auto_barriers":   # (a Mosaic GPU option: unread by CUDA)
        cuda = build_spec(str(SPEC), {**overrides, "schedule.backends": ["cuda"]})   # the CUDA kernel takes it
        assert cuda.plan.mma.tcgen05 is None and cuda.plan.mma.blackwell is not None


def test_one_sm100a_default_schedule_renders_both_backends(tmp_path):
    """A spec writing only the target gets the sm_100a picks, which both backends render (f32 out: the deepest ring
    still leaves room for the Pallas kernel's staging buffers)."""
    spec = tmp_path / "mm.yaml"
    spec.write_text("name: mm\nop:\n  kind: matmul\n  sizes: {M: 2048, N: 4096, K: 1024}\n  inputs:\n"
                    "    a: {shape: [M, K], dtype: bf16}\n    b: {shape: [K, N], dtype: bf16}\n  outputs:\n"
                    "    out: {shape: [M, N], dtype: f32}\nschedule:\n  target: sm_100a\n")
    built = build_spec(str(spec))
    assert built.plan.launch.backends == ("cuda", "pallas") and built.plan.mma.tcgen05 is not None
    assert "kernel.cubin" in built.files and "plgpu.tcgen05_mma(" in built.files["pallas_kernel.py"].decode()


def test_a_cuda_only_sm100a_package_has_a_pallas_module_that_says_so(tmp_path):
    built = build_spec(str(SPECS_DIR / "matmul_bf16_4096_sm100.yaml"))
    assert built.plan.mma.tcgen05 is None
    from schedgen.render import render
    mod_path = tmp_path / "stub.py"
    mod_path.write_text(render(built.plan, "pallas"))
    spec = importlib.util.spec_from_file_location("_sm100_stub", mod_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(NotImplementedError, match=r"add pallas to schedule.backends"):
        mod.make()


def test_the_module_refuses_a_hopper_gpu_with_one_sentence(tmp_path, monkeypatch):
    mod = _module(_build({}), tmp_path)

    class H200:
        compute_capability = "9.0"
        device_kind = "NVIDIA H200"

    monkeypatch.setattr(jax, "devices", lambda *a: [H200()])
    with pytest.raises(RuntimeError) as info:
        mod.make()
    assert str(info.value) == ("matmul_bf16_4096_sm100_pallas: the Pallas kernel is built for Blackwell (sm_100a: "
                               "B200, GB200) and cannot run on GPU 0, an NVIDIA H200 (sm_90): pass interpret=True to "
                               "run it in Mosaic GPU's interpreter, or rebuild the spec with schedule.target: sm_90a")
    H200.compute_capability = "10.0"
    assert mod.make() is not None          # a Blackwell GPU: built (compiled at the first call)


def test_explain_shows_the_pallas_tmem_columns():
    from schedgen.explain import explain
    text = explain(_build({}).plan)
    assert "Pallas TMEM map (512 columns x 128 lanes of f32, plgpu.TMEM)" in text
    assert "    columns   0-255  acc[0]" in text.split("Pallas TMEM map")[1]
    assert "NOT RUN on Blackwell hardware" in text.split("  Pallas ")[1]
    assert "2 warpgroups: warpgroup 0 split by warp_map" in text and "cluster barrier" not in text
    relay = explain(_build(MC_RHS).plan)
    assert "3 warpgroups: 0 the TMA" in relay and "sharing the rhs tile by multicast TMA copies" in relay


# ------------------------------------------------------------------------------------ on a Blackwell GPU

@pytest.mark.gpu(target="sm_100a")
@pytest.mark.parametrize("case", ["bundled_dynamic", "static_loop", "cta_pair_256", "f32_out_bias_silu",
                                  "row_scale_residual", "rhs_nk_128", "ragged_m_n", "ragged_cta_pair"])
def test_pallas_sm100a_on_blackwell(case, tmp_path):
    """Compiled by Mosaic GPU and run on a B200 (2048^3), poisoned output. Skips on any other GPU."""
    from schedgen.runtime import driver
    ok, why = driver.available("sm_100a")
    if not ok:
        pytest.skip(why)
    built = _build({"M": 2048, "N": 2048, "K": 2048, **LOWER_CASES[case][0]})
    inputs = _inputs(built.plan)
    mod = _module(built, tmp_path)
    (out,) = mod.run_into([jnp.asarray(inputs[o.name]) for o in built.plan.inputs],
                          [jnp.asarray(np.full(built.plan.outputs[0].shape, np.nan,
                                               NP_DTYPES[built.plan.out_dtype]))])
    assert rel_error(np.asarray(out), _reference(built, inputs)) <= TOL[built.plan.out_dtype]


@pytest.mark.gpu
def test_pallas_sm100a_refuses_a_hopper_gpu(tmp_path):
    """On the H200: the generated module refuses with its sentence before Mosaic GPU compiles tcgen05 for sm_90."""
    from schedgen.runtime import driver
    if driver.available("sm_100a")[0]:
        pytest.skip("a Blackwell GPU: test_pallas_sm100a_on_blackwell runs the kernel")
    mod = _module(_build({}), tmp_path)
    with pytest.raises(RuntimeError, match=r"the Pallas kernel is built for Blackwell \(sm_100a: B200, GB200\) and "
                                           r"cannot run on GPU 0, an NVIDIA H\d+"):
        mod.make()


@pytest.mark.gpu(target="sm_100a")
def test_dynamic_pallas_sm100a_on_blackwell(tmp_path):
    """One dynamic module on a B200 at several call sizes (partial tiles in M), NaN-poisoned outputs, against float64.
    Skips on any other GPU."""
    from schedgen.runtime import driver
    ok, why = driver.available("sm_100a")
    if not ok:
        pytest.skip(why)
    built = _build(DYNAMIC)
    plan, mod = built.plan, _module(built, tmp_path)
    for i, sizes in enumerate(({"M": 2000, "N": 2048, "K": 2048}, *DYNAMIC_CALLS)):
        inputs = _inputs(plan, seed=i, sizes=sizes)
        poison = np.full(_shape(plan.outputs[0].shape, sizes), np.nan, NP_DTYPES[plan.out_dtype])
        (out,) = mod.run_into([jnp.asarray(inputs[o.name]) for o in plan.inputs], [jnp.asarray(poison)])
        assert rel_error(np.asarray(out), _reference(built, inputs, sizes=sizes)) <= TOL[plan.out_dtype], sizes
