"""The Pallas (Mosaic GPU) backend of the matmul family, on the CPU: the rendered module lowers for CUDA (bundled
spec at full size and variants), runs in the Mosaic GPU interpreter (race detection on) at tiny sizes against a
float64 numpy reference, and the planner rejects what the Pallas rendering cannot express."""
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
from schedgen.reference import rel_error
from schedgen.frontend import expr as ex

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402

SPEC = SPECS_DIR.parent / "tests" / "data" / "matmul_base.yaml"
NP_DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}

# Tiny problems for the interpreter: 256 x 256 x 128 keeps the bundled 128 x 256 x 64 tiles (2 consumers along m,
# 2x1 cluster multicasting rhs, planar snake): one cluster, two K steps.
SMALL = {"M": 256, "N": 256, "K": 128}
BIAS_GELU = {"op.inputs.bias": {"shape": ["N"], "dtype": "bf16"}, "op.epilogue": "out = gelu(acc + bias)"}
ALPHA_BETA_C = {"op.inputs.c": {"shape": ["M", "N"], "dtype": "bf16"}, "op.constants": {"alpha": 0.5, "beta": -1.25},
                "op.epilogue": "out = alpha * acc + beta * c"}
TRANSPOSE_RHS = {"op.transpose_rhs": True, "op.inputs.b.shape": ["N", "K"], "schedule.in_specs.b.block_shape": [256, 64]}
TRANSPOSE_LHS = {"op.transpose_lhs": True, "op.inputs.a.shape": ["K", "M"], "schedule.in_specs.a.block_shape": [64, 128]}
F32_OUT = {"op.outputs.out.dtype": "f32", "schedule.epilogue.tile": [64, 32]}
WG_N = {"schedule.pipeline.wg_axis": "n"}
ONE_WG = {"schedule.cluster": [1], "schedule.in_specs.b.collective_axes": [], "schedule.pipeline.num_compute_wgs": 1,
          "schedule.in_specs.a.block_shape": [64, 64], "schedule.out_specs.out.block_shape": [64, 256],
          "schedule.pipeline.memory_registers": 56, "schedule.pipeline.compute_registers": 256}
CLUSTER_1X2 = {"N": 512, "schedule.cluster": [1, 2], "schedule.in_specs.b.collective_axes": [],
               "schedule.in_specs.a.collective_axes": ["cluster"]}
COL_ROW_F32 = {"op.inputs.s": {"shape": ["M", 1], "dtype": "f32"}, "op.inputs.bias": {"shape": [1, "N"], "dtype": "f32"},
               "op.epilogue": "out = relu(acc * s + bias)"}
# several tiles per block and a K loop longer than the ring: the stage ring and epilogue buffers wrap around
PERSISTENT = {"M": 512, "N": 512, "K": 512, "schedule.persistent.num_blocks": 2, "schedule.persistent.tile_order": "row_major", "schedule.persistent.tile_width": 1,
              "schedule.pipeline.max_concurrent_steps": 3, "schedule.epilogue.buffers": 3,
              "schedule.in_specs.a.delay_release": 0, "schedule.in_specs.b.delay_release": 0}
SWIZZLE_64 = {"schedule.in_specs.a.block_shape": [128, 32], "schedule.in_specs.a.transforms.swizzle": 64,
              "schedule.in_specs.b.block_shape": [32, 256], "schedule.in_specs.b.transforms.swizzle": 64}

INTERPRET_CASES = {
    "plain": {},
    "bias_row_gelu": BIAS_GELU,
    "alpha_beta_full_c": ALPHA_BETA_C,
    "transpose_rhs": TRANSPOSE_RHS,
    "f32_out": F32_OUT,
    "wg2_split_m": {"schedule.pipeline.wg_axis": "m"},
    "wg2_split_n": WG_N,
    "wg1_no_cluster": ONE_WG,
    "cluster_1x2_lhs_multicast": CLUSTER_1X2,
    "transpose_lhs_and_rhs": {**TRANSPOSE_LHS, **TRANSPOSE_RHS, **WG_N},
    "col_and_row_f32": COL_ROW_F32,
    "persistent_wraparound": PERSISTENT,
}
LOWER_CASES = {
    "bundled": {},
    "bundled_8192": {"N": 8192},
    "small": SMALL,
    "bias_row_gelu": BIAS_GELU,
    "alpha_beta_full_c": ALPHA_BETA_C,
    "transpose_rhs": TRANSPOSE_RHS,
    "transpose_lhs": TRANSPOSE_LHS,
    "f32_out": F32_OUT,
    "f16": {"op.inputs.a.dtype": "f16", "op.inputs.b.dtype": "f16", "op.outputs.out.dtype": "f16"},
    "wg2_split_n": WG_N,
    "wg1_no_cluster": ONE_WG,
    "cluster_1x2_lhs_multicast": CLUSTER_1X2,
    "col_and_row_f32": COL_ROW_F32,
    "row_major_no_delay": {"schedule.persistent.tile_order": "row_major", "schedule.persistent.tile_width": 1, "schedule.in_specs.a.delay_release": 0,
                           "schedule.in_specs.b.delay_release": 0},
    "swizzle_64": SWIZZLE_64,
    "loop_none": {"schedule.persistent.loop": "none"},
    "epi_3_buffers": {"schedule.epilogue.buffers": 3, "schedule.pipeline.max_concurrent_steps": 3},
}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _build(overrides):
    return build_spec(str(SPEC), {"schedule.backends": ["pallas"], **overrides})


def _module(built, folder: Path):
    """Import the rendered Pallas module (pallas_kernel.py) on its own."""
    path = folder / "pallas_kernel.py"
    path.write_bytes(built.files["pallas_kernel.py"])
    name = f"_test_pallas_matmul_{built.plan.launch.kernel_name}_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _inputs(plan, seed=0):
    rng = np.random.default_rng(seed)
    return {o.name: rng.standard_normal(o.shape, dtype=np.float32).astype(NP_DTYPES[o.dtype]) for o in plan.inputs}


def _reference(built, inputs):
    """float64: acc = lhs @ rhs (as stored, transposed where the spec says), then the epilogue body."""
    spec, plan = built.spec, built.plan
    a = np.asarray(inputs[spec.op.lhs], np.float64)
    b = np.asarray(inputs[spec.op.rhs], np.float64)
    acc = (a.T if plan.transpose_lhs else a) @ (b.T if plan.transpose_rhs else b)
    out = plan.outputs[0].name
    body = ex.parse_body(spec.op.epilogue or f"{out} = acc", inputs=["acc", *(e.name for e in plan.extras)],
                         outputs=[out], constants=list(spec.op.constants))
    env = {"acc": acc, **{e.name: np.asarray(inputs[e.name], np.float64) for e in plan.extras},
           **{c: float(v) for c, v in spec.op.constants.items()}}
    return np.broadcast_to(ex.eval_numpy(body, env)[out], plan.outputs[0].shape)


def _poisoned(plan):
    o = plan.outputs[0]
    return np.full(o.shape, np.nan, NP_DTYPES[o.dtype])


# ------------------------------------------------------------------------------------ lowering for CUDA on CPU

@pytest.mark.parametrize("case", list(LOWER_CASES), ids=list(LOWER_CASES))
def test_pallas_matmul_lowers_for_cuda(case, tmp_path):
    built = _build(LOWER_CASES[case])
    plan = built.plan
    mod = _module(built, tmp_path)
    args = [jax.ShapeDtypeStruct(o.shape, mod._DTYPES[o.dtype]) for o in plan.inputs]
    text = jax.jit(mod.make()).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    calls = re.findall(r"stablehlo\.custom_call @(\w+)\(([^)]*)\)", text)
    assert [c[0] for c in calls] == ["mosaic_gpu_v2"], calls
    assert len(calls[0][1].split(",")) == len(plan.inputs)
    assert plan.launch.kernel_name in text
    out = plan.outputs[0]
    assert re.search(r"->\s*\(?tensor<{}x{}>".format("x".join(map(str, out.shape)), out.dtype), text), "result type"


def test_rendered_module_reflects_the_plan():
    """The knobs reach the Pallas source: tiles, ring depth, register budget, cluster, multicast, tile order, epilogue."""
    built = _build({})
    p, src = built.plan, built.files["pallas_kernel.py"].decode()
    compile(src, "pallas_kernel.py", "exec")
    assert f"TILE_M, TILE_N, TILE_K = {p.tiles.tile_m}, {p.tiles.tile_n}, {p.tiles.tile_k}" in src
    assert f"STAGES = {p.pipeline.stages}" in src and f"DELAY_RELEASE = {p.pipeline.delay_release}" in src
    assert f"PRODUCER_REGS = {p.warps.producer_regs}" in src and "memory_registers=PRODUCER_REGS" in src
    assert "emit_pipeline_warp_specialized" in src and "plgpu.wgmma(" in src and "plgpu.nd_loop(" in src
    assert "cluster=(CLUSTER_SIZE,)" in src and src.count('collective_axes=("cluster",)') == 1
    assert f"plgpu.planar_snake(lin, (GRID_M, GRID_N), {p.tiles.minor_dim}, {p.tiles.tile_width})" in src
    assert f"EPI_ROWS, EPI_COLS, EPI_BUFFERS = {p.staging.epi_rows}, {p.staging.epi_cols}, {p.staging.epi_buffers}" in src
    assert "plgpu.copy_smem_to_gmem(" in src and "plgpu.commit_smem()" in src
    assert "LoweringSemantics.Warpgroup" in src
    # 4 chunks per consumer through 3 buffers: the slot ring restarts each tile, after draining the stores
    assert "plgpu.wait_smem_to_gmem(0, wait_read_only=True)" not in src
    assert "plgpu.wait_smem_to_gmem(0, wait_read_only=True)" in _build(LOWER_CASES["epi_3_buffers"]).files[
        "pallas_kernel.py"].decode()
    # no cluster, row-major: neither multicast nor snake
    plain = _build({**ONE_WG, "schedule.persistent.tile_order": "row_major", "schedule.persistent.tile_width": 1}).files["pallas_kernel.py"].decode()
    assert "cluster=(" not in plain and 'collective_axes=("cluster",)' not in plain and "planar_snake" not in plain


# ------------------------------------------------------------------------------------ the interpreter

@pytest.mark.parametrize("case", list(INTERPRET_CASES), ids=list(INTERPRET_CASES))
def test_pallas_matmul_interpret_matches_reference(case, tmp_path):
    from schedgen.verify import interpret_params, races_found
    built = _build({**SMALL, **INTERPRET_CASES[case]})
    plan = built.plan
    mod = _module(built, tmp_path)
    inputs = _inputs(plan)
    (out,) = mod.run_into([jnp.asarray(inputs[o.name]) for o in plan.inputs], [jnp.asarray(_poisoned(plan))],
                          interpret=interpret_params())
    out = np.asarray(out)
    assert out.dtype == NP_DTYPES[plan.out_dtype] and out.shape == plan.outputs[0].shape
    err = rel_error(out, _reference(built, inputs))
    assert err <= TOL[plan.out_dtype], (case, err)
    assert races_found() is False


def test_pallas_matmul_public_function(tmp_path):
    """`<name>(a, b, ..., interpret=...)` returns the output (no caller-provided buffer)."""
    from schedgen.verify import interpret_params
    built = _build({**SMALL, **BIAS_GELU})
    mod = _module(built, tmp_path)
    inputs = _inputs(built.plan, seed=1)
    out = getattr(mod, built.plan.launch.name)(*(jnp.asarray(inputs[o.name]) for o in built.plan.inputs),
                                        interpret=interpret_params())
    assert rel_error(np.asarray(out), _reference(built, inputs)) <= 1e-2


def test_interpreter_catches_a_wrong_epilogue(tmp_path):
    """Not vacuous: a kernel computing acc - bias fails against the reference of acc + bias."""
    from schedgen.verify import interpret_params
    good = _build({**SMALL, "op.inputs.bias": {"shape": ["N"], "dtype": "bf16"}, "op.epilogue": "out = acc + bias"})
    wrong = _build({**SMALL, "op.inputs.bias": {"shape": ["N"], "dtype": "bf16"}, "op.epilogue": "out = acc - bias"})
    mod = _module(wrong, tmp_path)
    inputs = _inputs(good.plan, seed=2)
    (out,) = mod.run_into([jnp.asarray(inputs[o.name]) for o in good.plan.inputs], [jnp.asarray(_poisoned(good.plan))],
                          interpret=interpret_params())
    assert rel_error(np.asarray(out), _reference(good, inputs)) > 1e-2


# ------------------------------------------------------------------------------------ what Pallas cannot express

@pytest.mark.parametrize("overrides, path, words", [
    ({"schedule.pipeline.compute_registers": 224}, "schedule.pipeline.compute_registers", "= 232"),
    ({"schedule.pipeline.memory_registers": 56}, "schedule.pipeline.compute_registers", "= 224"),
    ({"schedule.barriers.empty": {"num_arrivals": 2, "num_barriers": 4}}, "schedule.barriers.empty.num_arrivals",
     "leave num_arrivals at 4"),
    ({"schedule.compiler_params.unsafe_no_auto_barriers": True}, "schedule.compiler_params.unsafe_no_auto_barriers",
     "automatic"),
], ids=["compute_registers", "memory_registers_implies_compute", "barrier_arrivals", "no_auto_barriers"])
def test_pallas_limits_are_located_errors(overrides, path, words):
    with pytest.raises(SpecErrors) as info:
        _build(overrides)
    text = str(info.value)
    assert path in text and words in text and "schedule.backends: [cuda]" in text, text


def test_pallas_limits_do_not_apply_to_cuda_only_specs():
    from schedgen import plan as planner
    from schedgen.frontend.validate import load_spec
    spec, src = load_spec(str(SPEC), {"schedule.backends": ["cuda"], "schedule.pipeline.compute_registers": 224})
    assert planner.plan(spec, src).warps.consumer_regs == 224


# ------------------------------------------------------------------------------------ on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("case", ["bundled", "bias_row_gelu", "alpha_beta_full_c", "transpose_rhs", "transpose_lhs",
                                  "f32_out", "wg1_no_cluster", "cluster_1x2_lhs_multicast", "col_and_row_f32"])
def test_pallas_matmul_on_gpu(case, tmp_path):
    """Compiled by Mosaic GPU and run on the H200 (bundled spec at 4096^3, variants at 2048^3), poisoned output."""
    sizes = {} if case == "bundled" else {"M": 2048, "N": 2048, "K": 2048}
    built = _build({**sizes, **LOWER_CASES[case]})
    plan = built.plan
    mod = _module(built, tmp_path)
    inputs = _inputs(plan)
    (out,) = mod.run_into([jnp.asarray(inputs[o.name]) for o in plan.inputs], [jnp.asarray(_poisoned(plan))])
    err = rel_error(np.asarray(out), _reference(built, inputs))
    assert err <= TOL[plan.out_dtype], (case, err)
