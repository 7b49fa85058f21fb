"""A second matmul output (issue 19): a value the epilogue computes on the way (the pre-activation `acc`, or a
temporary such as `h = acc + bias`), kept for the backward pass. Both backends write it from the tile the output is
written from: the Pallas kernel through the output's SMEM chunks (one staging slot per output and chunk), the CUDA
kernel by column-pair stores from registers. On the CPU: the Pallas kernel in the Mosaic GPU interpreter against the
family's float64 reference (both outputs, NaN-poisoned), the CUDA kernel compiled by NVRTC to sm_90a SASS (the global
stores, no spills), the float64 reference's second output, and the located errors of a second output that cannot be
one."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SPECS_DIR, opcodes
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.reference import rel_error
from schedgen.toolchain.nvrtc import resource_usage, sass

BASE = SPECS_DIR.parent / "tests" / "data" / "matmul_base.yaml"
SMALL = {"M": 256, "N": 256, "K": 128}
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}
# h = acc + bias kept, out = gelu(h)
SAVE_H = {"op.inputs.bias": {"shape": ["N"], "dtype": "bf16"}, "op.outputs.h": {"shape": ["M", "N"], "dtype": "bf16"},
          "op.epilogue": "h = acc + bias\nout = gelu(h)"}
# the pre-activation itself kept (what backward.save: [acc] makes)
SAVE_ACC = {"op.inputs.bias": {"shape": ["N"], "dtype": "f32"},
            "op.outputs.pre": {"shape": ["M", "N"], "dtype": "bf16"},
            "op.epilogue": "out = gelu(acc + bias)\npre = acc"}
F32 = {"op.outputs.out.dtype": "f32", "op.outputs.pre": {"shape": ["M", "N"], "dtype": "f32"},
       "schedule.epilogue.tile": [64, 32], "op.epilogue": "out = silu(acc)\npre = acc"}
TRANSPOSE_RHS = {"op.transpose_rhs": True, "op.inputs.b.shape": ["N", "K"], "schedule.in_specs.b.block_shape": [256, 64]}
BATCHED = {"op.sizes": {"B": 2, "M": 256, "N": 256, "K": 128}, "op.inputs.a.shape": ["B", "M", "K"],
           "op.inputs.b.shape": ["B", "K", "N"], "op.outputs.out.shape": ["B", "M", "N"],
           "op.outputs.pre": {"shape": ["B", "M", "N"], "dtype": "bf16"}, "op.epilogue": "out = tanh(acc)\npre = acc"}
PERSISTENT = {"M": 512, "N": 512, "K": 512, "schedule.persistent.num_blocks": 2,
              "schedule.persistent.tile_order": "row_major", "schedule.persistent.tile_width": 1,
              "schedule.pipeline.max_concurrent_steps": 3, "schedule.epilogue.buffers": 3,
              "schedule.in_specs.a.delay_release": 0, "schedule.in_specs.b.delay_release": 0}

INTERPRET_CASES = {
    "save_h_bias_gelu": SAVE_H,
    "save_acc": SAVE_ACC,
    "f32_outputs": F32,
    "transpose_rhs_wg_n": {**SAVE_ACC, **TRANSPOSE_RHS, "schedule.pipeline.wg_axis": "n"},
    "batched": BATCHED,
    # 3 staging buffers, 8 stores a tile: the slot ring does not divide the tile's stores, and wraps across tiles
    "persistent_3_buffers": {**SAVE_H, **PERSISTENT},
}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _inputs(plan, seed=0):
    import ml_dtypes
    np_dtypes = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}
    rng = np.random.default_rng(seed)
    return {o.name: rng.standard_normal(o.shape, dtype=np.float32).astype(np_dtypes[o.dtype]) for o in plan.inputs}


def _reference(built, inputs):
    from schedgen import families
    sizes = {k: v for k, v in built.plan.sizes.items()}
    return families.of(built.spec).reference(built.spec, sizes, {k: np.asarray(v, np.float64) for k, v in inputs.items()})


def _module(built, folder: Path):
    path = folder / "pallas_kernel.py"
    path.write_bytes(built.files["pallas_kernel.py"])
    name = f"_test_saved_output_{built.plan.launch.kernel_name}_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case", list(INTERPRET_CASES), ids=list(INTERPRET_CASES))
def test_pallas_interpret_writes_both_outputs(case, tmp_path):
    jnp = pytest.importorskip("jax.numpy")
    from schedgen.verify import interpret_params, races_found
    built = build_spec(str(BASE), {"schedule.backends": ["pallas"], **SMALL, **INTERPRET_CASES[case]})
    plan = built.plan
    assert [o.role for o in plan.outputs] == ["out", "saved"]
    mod = _module(built, tmp_path)
    inputs = _inputs(plan)
    poisoned = [jnp.full(o.shape, jnp.nan, mod._DTYPES[o.dtype]) for o in plan.outputs]
    outs = mod.run_into([jnp.asarray(inputs[o.name]) for o in plan.inputs], poisoned, interpret=interpret_params())
    ref = _reference(built, inputs)
    assert set(ref) == {o.name for o in plan.outputs}
    for o, got in zip(plan.outputs, outs):
        got = np.asarray(got)
        assert got.shape == tuple(o.shape) and str(got.dtype) == {"bf16": "bfloat16", "f32": "float32"}[o.dtype]
        err = rel_error(got, ref[o.name])
        assert err <= TOL[o.dtype], (case, o.name, err)
    assert races_found() is False


def test_pallas_public_function_returns_both(tmp_path):
    jnp = pytest.importorskip("jax.numpy")
    from schedgen.verify import interpret_params
    built = build_spec(str(BASE), {"schedule.backends": ["pallas"], **SMALL, **SAVE_ACC})
    mod = _module(built, tmp_path)
    inputs = _inputs(built.plan, seed=3)
    out, pre = getattr(mod, built.plan.launch.name)(*(jnp.asarray(inputs[o.name]) for o in built.plan.inputs),
                                             interpret=interpret_params())
    ref = _reference(built, inputs)
    assert rel_error(np.asarray(out), ref["out"]) <= 1e-2 and rel_error(np.asarray(pre), ref["pre"]) <= 1e-2
    # not vacuous: the saved value is acc, not the output
    assert rel_error(np.asarray(pre), ref["out"]) > 1e-1


def test_reference_second_output_is_the_value_kept():
    from schedgen import families
    from schedgen.frontend.validate import load_spec
    spec, _ = load_spec(str(BASE), {**SAVE_H, "M": 8, "N": 6, "K": 5})
    rng = np.random.default_rng(0)
    a, b, bias = rng.standard_normal((8, 5)), rng.standard_normal((5, 6)), rng.standard_normal(6)
    got = families.of(spec).reference(spec, {"M": 8, "N": 6, "K": 5}, {"a": a, "b": b, "bias": bias})
    h = a @ b + bias
    np.testing.assert_allclose(got["h"], h, rtol=1e-12)
    np.testing.assert_allclose(got["out"], 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3))),
                               rtol=1e-12)
    sampled = families.of(spec).reference(spec, {"M": 8, "N": 6, "K": 5}, {"a": a, "b": b, "bias": bias},
                                          rows=[1, 6])
    np.testing.assert_allclose(sampled["h"].values, h[[1, 6]], rtol=1e-12)


# ------------------------------------------------------------------------------------ CUDA: NVRTC, SASS

CUDA_CASES = {
    "save_h_bias_gelu": SAVE_H,
    "save_acc_f32_bias": SAVE_ACC,
    "f32_outputs": F32,
    "transpose_rhs": {**SAVE_ACC, **TRANSPOSE_RHS},
    "batched": BATCHED,
    # (the direct store of gelu(acc + bias) at this 64 x 256 consumer tile spills already without a second output)
    "direct_store": {"op.outputs.pre": {"shape": ["M", "N"], "dtype": "bf16"}, "op.epilogue": "out = relu(acc)\npre = acc",
                     "schedule.epilogue": {"store": "direct"}},
    "dynamic_ragged_m": {**SAVE_ACC, "op.sizes": {"M": {"dynamic": True, "max": 65536, "multiple_of": 1},
                                                  "N": 4096, "K": 4096},
                         "schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero",
                         "schedule.cluster": [1, 1], "schedule.in_specs.b.collective_axes": []},
    "split_k": {**SAVE_ACC, "schedule.cluster": [1, 1, 4], "schedule.in_specs.b.collective_axes": [],
                "schedule.in_specs.b.block_shape": [64, 128], "schedule.out_specs.out.block_shape": [128, 128]},
    "pingpong_ragged": {**SAVE_ACC, "schedule.pipeline.consumer_schedule": "pingpong",
                        "schedule.pipeline.wg_axis": None, "schedule.in_specs.b.block_shape": [64, 128],
                        "schedule.out_specs.out.block_shape": [128, 128], "schedule.pipeline.max_concurrent_steps": 6,
                        "op.sizes": {"M": 3000, "N": 5000, "K": 1000}, "schedule.cluster": [1, 1],
                        "schedule.in_specs.b.collective_axes": [], "schedule.in_specs.a.out_of_bounds": "zero",
                        "schedule.in_specs.b.out_of_bounds": "zero"},
}


@pytest.fixture(scope="module")
def cuda_built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    out = {}
    for name, ov in CUDA_CASES.items():
        b = build_spec(str(BASE), {"schedule.backends": ["cuda"], **ov}, cache=cache)
        out[name] = (b, sass(b.files["kernel.cubin"]))
    return out


@pytest.mark.parametrize("name", list(CUDA_CASES))
def test_cuda_saved_output_compiles_with_global_stores(cuda_built, name):
    b, text = cuda_built[name]
    p = b.plan
    ops = opcodes(text)
    saved = p.outputs[1]
    # the kernel takes the saved output's pointer after the epilogue operands, and stores into it
    src = b.files["kernel.cu"].decode()
    assert f"{saved.ctype}* __restrict__ {saved.cname}" in src
    assert [a.operand for a in p.launch.kernel_args if a.kind == "ptr"][-1] == len(p.inputs) + 1
    stg = [op for op in ops if op.startswith("STG")]
    assert stg, "no global stores of the saved value"
    want = ".64" if saved.dtype == "f32" else ""
    assert any(op.startswith("STG.E" + want) for op in stg), stg
    assert any(op.startswith("HGMMA") for op in ops)
    if p.staging.epi_store != "direct":
        assert any(op.startswith("UTMASTG") for op in ops)     # the output itself still leaves by TMA
    assert not [op for op in ops if op.split(".")[0] in ("LDL", "STL")], "local-memory spills"
    usage = resource_usage(b.files["kernel.cubin"])[p.launch.kernel_name]
    assert usage["STACK"] == 0 and usage["LOCAL"] == 0


def test_cuda_without_a_second_output_has_no_saved_stores():
    """Not vacuous: the same epilogue without the second output stores nothing from registers (TMA only)."""
    b = build_spec(str(BASE), {"schedule.backends": ["cuda"], "op.inputs.bias": {"shape": ["N"], "dtype": "f32"},
                               "op.epilogue": "out = gelu(acc + bias)"})
    ops = opcodes(sass(b.files["kernel.cubin"]))
    assert not [op for op in ops if op.startswith("STG")]
    assert "sv_" not in b.files["kernel.cu"].decode()


# ------------------------------------------------------------------------------------ located errors

@pytest.mark.parametrize("overrides, path, words", [
    ({"op.outputs.h": {"shape": ["M", "N"], "dtype": "f32"}, "op.epilogue": "h = acc\nout = h"},
     "op.outputs.h.dtype", "output's dtype bf16"),
    ({"op.outputs.h": {"shape": ["N", "M"], "dtype": "bf16"}, "M": 512, "op.epilogue": "h = acc\nout = h"},
     "op.outputs.h.shape", "output's shape"),
    ({"op.outputs.h": {"shape": ["M", "N"], "dtype": "bf16"}, "op.epilogue": "out = acc"},
     "op.epilogue", "never assigned: h"),
    ({"op.outputs.h": {"shape": ["M", "N"], "dtype": "bf16"}, "op.epilogue": None}, "op.outputs.h", "needs an epilogue"),
    ({"op.outputs.h": {"shape": ["M", "N"], "dtype": "bf16"}, "N": 4095, "op.epilogue": "h = acc\nout = h",
      "schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero"},
     "op.outputs.h", "even N"),
], ids=["dtype", "shape", "not_assigned", "no_epilogue", "odd_n"])
def test_second_output_errors_are_located(overrides, path, words):
    with pytest.raises(SpecErrors) as info:
        build_spec(str(BASE), overrides)
    text = str(info.value)
    assert path in text and words in text, text
