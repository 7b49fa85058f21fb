"""fp8 (e4m3 / e5m2) GEMMs in the matmul family, on the CPU: the planner's rules for 8-bit inputs are located errors
(a [K, N] rhs, a [K, M] lhs, tile_k off wgmma's k32, mixed input types, a 1-D column scale), its picks for the
bundled specs, CUDA sources that compile with NVRTC to SASS with QGMMA (the fp8 wgmma) and no local memory, Pallas
modules that lower for Mosaic GPU and run in its interpreter against float64 with fresh random inputs and poisoned
outputs; on a GPU (`-m gpu`), both backends built, run and verified at 4096^3, at ragged sizes and at variants."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SPECS_DIR, opcodes
from schedgen.build import build_spec
from schedgen.errors import SpecErrors
from schedgen.reference import random_inputs, reference, rel_error

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402

PER_TENSOR = SPECS_DIR / "matmul_fp8_e4m3_4096.yaml"
ROWWISE = SPECS_DIR / "matmul_fp8_e4m3_rowwise_4096.yaml"
NP_DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}
# the interpreter accumulates in f32 exactly as the reference's float64 rounded to the output dtype would
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}

E5M2 = {"op.inputs.a.dtype": "f8e5m2", "op.inputs.b.dtype": "f8e5m2"}
TILE_128x256x128 = {"schedule.in_specs.a": {"block_shape": [128, 128]},
                    "schedule.in_specs.b": {"block_shape": [256, 128], "collective_axes": ["cluster"]},
                    "schedule.out_specs.out": {"block_shape": [128, 256]}, "schedule.cluster": [2, 1]}
F32_OUT = {"op.outputs.out.dtype": "f32", "schedule.epilogue.tile": [64, 32]}
# 64-byte swizzle rows (64 fp8 elements), two k32 wgmmas a stage
TK64 = {"schedule.in_specs.a": {"block_shape": [128, 64]}, "schedule.in_specs.b": {"block_shape": [128, 64]},
        "schedule.out_specs.out": {"block_shape": [128, 128]}, "schedule.cluster": [1, 1]}
# two 128-byte TMA boxes per operand a stage (tile_k 256): the descriptors step into the second box
TK256 = {"schedule.in_specs.a": {"block_shape": [128, 256]}, "schedule.in_specs.b": {"block_shape": [128, 256]},
         "schedule.out_specs.out": {"block_shape": [128, 128]}, "schedule.cluster": [1, 1],
         "schedule.pipeline.max_concurrent_steps": 3}
CLUSTER_1X2_WG_N = {"schedule.in_specs.a": {"block_shape": [128, 128], "collective_axes": ["cluster"]},
                    "schedule.in_specs.b": {"block_shape": [256, 128]},
                    "schedule.out_specs.out": {"block_shape": [128, 256]}, "schedule.cluster": [1, 2],
                    "schedule.pipeline.wg_axis": "n", "op.outputs.out.dtype": "f16"}
ZERO_EDGES = {"schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero"}
RAGGED_CUDA = {"M": 1000, "N": 1496, "K": 2000, **ZERO_EDGES, "schedule.backends": ["cuda"]}
ONE_WG = {"schedule.in_specs.a": {"block_shape": [64, 128]}, "schedule.in_specs.b": {"block_shape": [128, 128]},
          "schedule.out_specs.out": {"block_shape": [64, 128]}, "schedule.cluster": [1, 1],
          "schedule.pipeline.num_compute_wgs": 1}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _errors(path: Path, overrides: dict) -> str:
    with pytest.raises(SpecErrors) as info:
        build_spec(str(path), overrides)
    return str(info.value)


# ------------------------------------------------------------------------------------ located errors

@pytest.mark.parametrize("overrides, where, words", [
    ({"op.transpose_rhs": False, "op.inputs.b.shape": ["K", "N"]}, "op.transpose_rhs",
     ["K-major", "[N, K]", "transpose_rhs: true"]),
    ({"op.transpose_lhs": True, "op.inputs.a.shape": ["K", "M"]}, "op.transpose_lhs", ["K-major", "[M, K]"]),
    ({"schedule.in_specs.a": {"block_shape": [128, 48]}, "schedule.in_specs.b": {"block_shape": [256, 48]}},
     "schedule.in_specs.a.block_shape", ["multiple of wgmma's K (32 for f8e4m3)"]),
    ({"op.inputs.b.dtype": "bf16"}, "op.inputs.b.dtype", ["one input type", "fp8"]),
    ({"op.inputs.b.dtype": "f8e5m2"}, "op.inputs.b.dtype", ["lhs is f8e4m3 but rhs is f8e5m2"]),
    ({"op.outputs.out.dtype": "f8e4m3"}, "op.outputs.out.dtype", ["legal: bf16, f16, f32"]),
    ({"op.inputs.scale_a.shape": ["M"], "N": 2048}, "op.inputs.scale_a.shape", ["a scalar [1]", "write a per-row "
                                                                                 "column as [M, 1]"]),
], ids=["rhs_kn", "lhs_km", "tile_k_48", "mixed_bf16", "mixed_e4m3_e5m2", "fp8_out", "column_1d"])
def test_fp8_rules_are_located_errors(overrides, where, words):
    text = _errors(PER_TENSOR, {"schedule.backends": ["cuda"], **overrides})
    line = next((ln for ln in text.splitlines() if where + ":" in ln), None)
    assert line is not None, text
    for w in words:
        assert w in line, (w, line)
    assert re.search(r"matmul_fp8_e4m3_4096\.yaml:\d+:\d+: " + re.escape(where), text), text


def test_fp8_collective_matmul_is_refused():
    """The collective family ([K, N] rhs) never reaches an fp8 kernel: it is refused before rendering."""
    path = SPECS_DIR / "collective_matmul_bf16_1024x4096.yaml"
    text = _errors(path, {"op.inputs.a.dtype": "f8e4m3", "op.inputs.b.dtype": "f8e4m3"})
    assert "f8e4m3" in text, text


def test_block_scaled_tile_too_small_for_a_consumer_is_located_not_a_crash():
    """1 x 1 blocks leave each consumer 0 columns: the warpgroup phase says so; the block-scale check divided by those
    0 columns (ZeroDivisionError from `schedgen validate`, found by the fuzzer, 2026-12-05)."""
    path = SPECS_DIR / "matmul_fp8_blockscaled_4096x7168x16384.yaml"
    one = {"block_shape": [1, 1]}
    text = _errors(path, {"schedule.in_specs.a": one, "schedule.in_specs.b": {**one, "collective_axes": ["cluster"]},
                          "schedule.out_specs.out": one})
    assert "schedule.in_specs.b.block_shape: each consumer's wgmma N is 0" in text, text


# ------------------------------------------------------------------------------------ the planner's picks

def test_planner_picks_for_the_bundled_specs():
    for path in (PER_TENSOR, ROWWISE):
        p = build_spec(str(path), {"schedule.backends": ["cuda"]}).plan
        assert p.in_dtype == "f8e4m3" and p.layout.k_major_a and p.layout.k_major_b
        # 128 fp8 elements a 128-byte swizzle row: tile_k 128 (one TMA box per operand a stage), four k32 wgmmas
        assert (p.tiles.tile_m, p.tiles.tile_n, p.tiles.tile_k) == (128, 256, 128)
        assert (p.layout.swizzle_a, p.layout.swizzle_b, p.layout.atom_a, p.layout.atom_b) == (128, 128, 128, 128)
        assert p.mma.k_wgmmas == 4 and len(p.layout.a_boxes) == 1 and len(p.layout.b_boxes) == 1
        assert (p.layout.a_sbo, p.layout.b_sbo) == (1024, 1024) and p.layout.a_stage_bytes == 128 * 128 and p.layout.b_stage_bytes == 256 * 128
        tmaps = [a for a in p.launch.kernel_args if a.kind == "tmap"]
        assert tmaps[0].box == (128, 128) and tmaps[0].dtype == "f8e4m3" and tmaps[0].strides == (4096, 1)
        assert p.launch.smem_bytes <= 232448 and p.pipeline.stages >= 3
    rw = build_spec(str(ROWWISE), {"schedule.backends": ["cuda"]}).plan
    assert {e.name: e.bcast for e in rw.extras} == {"scale_a": "col", "scale_b": "row", "bias": "row"}
    pt = build_spec(str(PER_TENSOR), {"schedule.backends": ["cuda"]}).plan
    assert {e.name: e.bcast for e in pt.extras} == {"scale_a": "scalar", "scale_b": "scalar"}


def test_explain_names_fp8_wgmma_and_peak(capsys):
    from schedgen.cli import main
    assert main(["explain", str(PER_TENSOR)]) == 0
    text = capsys.readouterr().out
    assert "wgmma m64n256k32 (f8e4m3, f32 acc)" in text and "1979 TFLOP/s peak" in text
    assert "scale_a f32 [1]: scalar" in text


# ------------------------------------------------------------------------------------ CUDA: NVRTC and SASS

CUDA_CASES = {
    "per_tensor": (PER_TENSOR, {}),
    "rowwise_bias": (ROWWISE, {}),
    "e5m2_f32_out": (PER_TENSOR, {**E5M2, **F32_OUT}),
    "tk64_swizzle64": (PER_TENSOR, TK64),
    "tk256_two_boxes": (PER_TENSOR, TK256),
    "cluster_1x2_wg_n_f16": (PER_TENSOR, CLUSTER_1X2_WG_N),
    "one_consumer": (PER_TENSOR, ONE_WG),
    "ragged": (ROWWISE, RAGGED_CUDA),
}


@pytest.mark.parametrize("case", list(CUDA_CASES), ids=list(CUDA_CASES))
def test_cuda_fp8_compiles_to_qgmma(case):
    from schedgen.toolchain.nvrtc import resource_usage, sass
    path, ov = CUDA_CASES[case]
    b = build_spec(str(path), {"schedule.backends": ["cuda"], **ov})
    p = b.plan
    src = b.files["kernel.cu"].decode()
    ptx = {"f8e4m3": "e4m3", "f8e5m2": "e5m2"}[p.in_dtype]
    assert f"wgmma.mma_async.sync.aligned.m64n{p.warps.wg_tile_n}k32.f32.{ptx}.{ptx} " in src
    text = sass(b.files["kernel.cubin"])
    gmma = set(re.findall(r"\b[HQ]GMMA\.[0-9A-Za-z_.]+", text))
    want = f"QGMMA.64x{p.warps.wg_tile_n}x32.F32.{ptx.upper()}.{ptx.upper()}"
    assert gmma == {want}, gmma
    assert not any("tnsp" in ln for ln in text.splitlines() if "GMMA" in ln)
    ops = opcodes(text)
    assert not any(op.startswith(("LDL", "STL")) for op in ops)
    (usage,) = resource_usage(b.files["kernel.cubin"]).values()
    assert usage["LOCAL"] == 0 and usage["STACK"] == 0, usage
    # the per-tensor scales are read once per consumer, not per element
    for e in p.extras:
        if e.bcast == "scalar":
            assert src.count(f"__ldg({e.cname})") == 1


# ------------------------------------------------------------------------------------ Pallas: lowering, interpreter

def _module(built, folder: Path):
    path = folder / "pallas_kernel.py"
    path.write_bytes(built.files["pallas_kernel.py"])
    name = f"_test_fp8_{built.plan.launch.kernel_name}_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path, ov", [(PER_TENSOR, {}), (ROWWISE, {}), (PER_TENSOR, {**E5M2, **F32_OUT})],
                         ids=["per_tensor", "rowwise", "e5m2_f32"])
def test_pallas_fp8_lowers_for_mosaic_gpu(path, ov, tmp_path):
    built = build_spec(str(path), {"schedule.backends": ["pallas"], **ov})
    mod = _module(built, tmp_path)
    args = [jax.ShapeDtypeStruct(o.shape, mod._DTYPES[o.dtype]) for o in built.plan.inputs]
    text = jax.jit(mod.make()).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert re.findall(r"stablehlo\.custom_call @(\w+)", text) == ["mosaic_gpu_v2"]
    assert "tensor<4096x4096xf8E4M3FN>" in text or "tensor<4096x4096xf8E5M2>" in text


INTERPRET_CASES = {
    "per_tensor": (PER_TENSOR, {"M": 256, "N": 512, "K": 512}),
    "rowwise_bias": (ROWWISE, {"M": 256, "N": 512, "K": 384}),
    "e5m2_f32_out_cluster_2x1": (PER_TENSOR, {"M": 256, "N": 256, "K": 384, **E5M2, **F32_OUT, **TILE_128x256x128}),
    "tk64_swizzle64": (ROWWISE, {"M": 256, "N": 256, "K": 256, **TK64}),
    "tk256_two_boxes": (PER_TENSOR, {"M": 128, "N": 256, "K": 512, **TK256}),
    "cluster_1x2_wg_n_f16": (ROWWISE, {"M": 128, "N": 512, "K": 256, **CLUSTER_1X2_WG_N}),
    # a ragged M (a multiple of 8 rows, what Mosaic GPU's tiled views take): per-tensor scales only (the Pallas
    # epilogue's plgpu.load has no masked form for a column scale along a ragged M)
    "ragged_n_cluster_2x1": (PER_TENSOR, {"M": 256, "N": 384, "K": 256, **ZERO_EDGES}),
    "one_consumer_ragged_m": (PER_TENSOR, {"M": 200, "N": 256, "K": 256, **ONE_WG,
                                           "schedule.in_specs.a.out_of_bounds": "zero",
                                           "schedule.in_specs.b.out_of_bounds": "zero"}),
}


@pytest.mark.parametrize("case", list(INTERPRET_CASES), ids=list(INTERPRET_CASES))
def test_pallas_fp8_interpret_matches_float64(case, tmp_path):
    """Fresh random fp8 inputs (the reference takes the fp8 values as given), NaN-poisoned outputs."""
    from schedgen.verify import interpret_params, races_found
    path, ov = INTERPRET_CASES[case]
    built = build_spec(str(path), {"schedule.backends": ["pallas"], **ov})
    plan = built.plan
    sizes = {k: v for k, v in ov.items() if k in ("M", "N", "K")}
    mod = _module(built, tmp_path)
    seed = int(np.random.default_rng().integers(1 << 30))
    inputs = random_inputs(built.spec, sizes, seed)
    o = plan.outputs[0]
    poisoned = np.full(o.shape, np.nan, NP_DTYPES[o.dtype])
    (out,) = mod.run_into([jnp.asarray(inputs[x.name]) for x in plan.inputs], [jnp.asarray(poisoned)],
                          interpret=interpret_params())
    out = np.asarray(out)
    assert out.dtype == NP_DTYPES[o.dtype] and out.shape == o.shape and not np.isnan(out.astype(np.float32)).any()
    ref = reference(built.spec, sizes, inputs)[o.name]
    err = rel_error(out, ref)
    assert err <= TOL[o.dtype], (case, seed, err)
    assert races_found() is False


def test_interpreter_catches_swapped_scales(tmp_path):
    """Not vacuous: a kernel reading the row scale where the column scale belongs fails against the reference."""
    from schedgen.verify import interpret_params
    sizes = {"M": 256, "N": 256, "K": 256}
    good = build_spec(str(ROWWISE), {"schedule.backends": ["pallas"], **sizes, **TK64})
    wrong = build_spec(str(ROWWISE), {"schedule.backends": ["pallas"], **sizes, **TK64,
                                      "op.inputs.scale_a.shape": [1, "M"], "op.inputs.scale_b.shape": ["N", 1]})
    mod = _module(wrong, tmp_path)
    inputs = random_inputs(good.spec, sizes, 3)
    ins = dict(inputs, scale_a=inputs["scale_a"].reshape(1, -1), scale_b=inputs["scale_b"].reshape(-1, 1))
    o = good.plan.outputs[0]
    (out,) = mod.run_into([jnp.asarray(ins[x.name]) for x in wrong.plan.inputs],
                          [jnp.asarray(np.full(o.shape, np.nan, NP_DTYPES[o.dtype]))], interpret=interpret_params())
    assert rel_error(np.asarray(out), reference(good.spec, sizes, inputs)[o.name]) > 1e-1


def test_pallas_ragged_k_off_its_tiling_picks_cuda(tmp_path):
    """Mosaic GPU views an fp8 operand through 128-byte (128-element) rows: a K that is not a multiple of 128 leaves
    the Pallas rendering out (backends not written: the planner picks [cuda]; both written: a located error saying
    why)."""
    text = PER_TENSOR.read_text()
    bare = tmp_path / "fp8_bare.yaml"
    bare.write_text(text[:text.index("schedule:")])
    assert build_spec(str(bare), {"M": 1000, "N": 1496, "K": 2000}).plan.launch.backends == ("cuda",)
    assert build_spec(str(PER_TENSOR), {"M": 1000, "N": 1536, "K": 2000, **ZERO_EDGES}).plan.launch.backends == ("cuda",)
    msg = _errors(PER_TENSOR, {"M": 1000, "N": 1536, "K": 2000, **ZERO_EDGES,
                               "schedule.backends": ["cuda", "pallas"]})
    assert "K = 2000 is not a multiple of the tile; the Pallas matmul takes that only for K a multiple of 128" in msg


# ------------------------------------------------------------------------------------ on the GPU

def _verify(path, ov, backends=("cuda", "pallas")):
    from schedgen.verify import verify_built
    built = build_spec(str(path), ov)
    checks = verify_built(built, [b for b in backends if b in built.plan.launch.backends], count=1)
    for c in checks:
        print(f"{c.spec} {c.backend} {c.shape} rel_error {c.rel_error:.3e} tol {c.tolerance:.1e} {c.note}")
    assert checks and all(c.ok for c in checks), [c.row() for c in checks]
    return checks


# (spec, overrides, backends): the bundled specs, ragged sizes and e5m2 on both backends (where the plan has them);
# the layout variants on CUDA (the interpreter covers them on Pallas; each Mosaic GPU compile costs seconds)
BOTH, CUDA = ("cuda", "pallas"), ("cuda",)
GPU_CASES = {
    "per_tensor_4096": (PER_TENSOR, {}, BOTH),
    "rowwise_4096": (ROWWISE, {}, BOTH),
    "per_tensor_ragged": (PER_TENSOR, RAGGED_CUDA, CUDA),
    # Pallas's ragged edges: M a multiple of 8 rows, N of 64 (the bf16 output's 128-byte rows), K whole tiles
    "per_tensor_ragged_mn": (PER_TENSOR, {"M": 1000, "N": 1536, "K": 2048, **ZERO_EDGES}, BOTH),
    "rowwise_ragged": (ROWWISE, {"M": 3000, "N": 5000, "K": 1040, **ZERO_EDGES, "schedule.backends": ["cuda"]}, CUDA),
    "e5m2_f32_out_2048": (PER_TENSOR, {"M": 2048, "N": 2048, "K": 2048, **E5M2, **F32_OUT}, BOTH),
    "tk256_2048": (PER_TENSOR, {"M": 2048, "N": 2048, "K": 2048, **TK256}, CUDA),
    "tk64_2048": (ROWWISE, {"M": 2048, "N": 2048, "K": 2048, **TK64}, CUDA),
    "cluster_1x2_wg_n_f16_2048": (ROWWISE, {"M": 2048, "N": 2048, "K": 2048, **CLUSTER_1X2_WG_N}, CUDA),
    "one_consumer_2048": (PER_TENSOR, {"M": 2048, "N": 2048, "K": 2048, **ONE_WG}, CUDA),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(GPU_CASES), ids=list(GPU_CASES))
def test_fp8_on_gpu(case):
    """Built, run with NaN-poisoned outputs and checked against float64 (sampled rows at 4096^3)."""
    path, ov, backends = GPU_CASES[case]
    _verify(path, ov, backends)


@pytest.mark.gpu
def test_fp8_per_tensor_accuracy_on_gpu():
    """fp8 wgmma's running sum is shorter than f32's (about 14 bits, truncating): at K = 8192 without promotion the
    error grows past bf16's own rounding; verify's fp8 tolerance (FP8_ACCUM_BITS) allows for it. The error is
    printed (the record of how far it goes on the H200); the block-scaled kernel, promoted every 128 K terms, is
    held to bf16's tolerance (test_block_scaled_on_gpu)."""
    _verify(PER_TENSOR, {"M": 2048, "N": 2048, "K": 8192}, CUDA)


# ------------------------------------------------------------------------------------ bench peers (CPU tensors)

def _case(path, sizes):
    import types
    from schedgen.bench.case import Case
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan as planner
    spec, src = load_spec(str(path), {"schedule.backends": ["cuda"], **sizes})
    p = planner(spec, src)
    host = random_inputs(spec, sizes, seed=1)
    full = reference(spec, sizes, host, sample=True, seed=2)[p.outputs[0].name]
    return Case(types.SimpleNamespace(plan=p, spec=spec), host, 2, 10, 2), full


@pytest.mark.parametrize("path, kind, bias", [(PER_TENSOR, "tensorwise", None), (ROWWISE, "rowwise", "bias")],
                         ids=["per_tensor", "rowwise"])
def test_scaled_mm_form_reads_the_epilogue(path, kind, bias):
    from schedgen.families.matmul.fp8_peers import scaled_mm_form
    case, _ = _case(path, {"M": 256, "N": 256, "K": 256})
    form, why = scaled_mm_form(case.spec, case.plan)
    assert form == {"scale_a": "scale_a", "scale_b": "scale_b", "bias": bias, "kind": kind}, why


def test_scaled_mm_form_refuses_what_torch_does_not_take():
    from schedgen.families.matmul.fp8_peers import scaled_mm_form
    for ov, words in (({"op.epilogue": "out = gelu(acc * scale_a * scale_b)"}, "product"),
                      ({"op.inputs.scale_b.shape": ["N"], "op.epilogue": "out = acc * scale_a * scale_b"}, "a mix")):
        case, _ = _case(PER_TENSOR, {"M": 256, "N": 256, "K": 256, **ov})
        form, why = scaled_mm_form(case.spec, case.plan)
        assert form is None and words in why, why


@pytest.mark.parametrize("path", [PER_TENSOR, ROWWISE], ids=["per_tensor", "rowwise"])
def test_scaled_mm_peer_is_verified_on_cpu_tensors(path):
    """torch._scaled_mm (CPU here) with the spec's scales and bias matches the float64 reference of the epilogue;
    the bf16 cuBLAS reference point matches the bare product."""
    torch = pytest.importorskip("torch")
    from schedgen.families.matmul import fp8_peers
    from schedgen.families.matmul.peers import product_only
    case, full = _case(path, {"M": 256, "N": 256, "K": 256})
    peer = fp8_peers.scaled_mm_peer(case, full, fast=True, device="cpu")
    assert peer.contender is not None, peer.info
    assert peer.info["verified"] and peer.info["rel_error"] < 1e-2, peer.info
    peer.contender.call(1)
    peer.close()
    prod = reference(product_only(case.spec), case.plan.sizes, case.host, rows=full.rows)["out"]
    ref_peer = fp8_peers.cublas_bf16_peer(case, prod, device="cpu")
    assert ref_peer.info["verified"], ref_peer.info
    assert torch.float8_e4m3fn is not None


# ------------------------------------------------------------------------------------ 128 x 128 block scaling

BLOCK = SPECS_DIR / "matmul_fp8_blockscaled_4096x7168x16384.yaml"
BLOCK_SMALL = {"M": 256, "N": 384, "K": 640, "KB": 5, "NB": 3}
BLOCK_RAGGED = {"M": 1000, "N": 1496, "K": 2000, "KB": 16, "NB": 12,
                "schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero"}


@pytest.mark.parametrize("overrides, where, words", [
    ({"schedule.in_specs.a.block_shape": [128, 64], "schedule.in_specs.b.block_shape": [128, 64]},
     "schedule.in_specs.a.block_shape", ["tile_k must be 128"]),
    ({"schedule.in_specs.b.block_shape": [256, 128], "schedule.out_specs.out.block_shape": [128, 256]},
     "schedule.in_specs.b.block_shape", ["must divide 128"]),
    ({"schedule.backends": ["cuda", "pallas"]}, "schedule.backends", ["CUDA backend only", "[cuda]"]),
    ({"op.inputs.scale_a.shape": ["M", "NB"]}, "op.inputs.scale_a.shape", ["[M, cdiv(K, 128)] = [4096, 128]"]),
    ({"op.inputs.scale_b.dtype": "bf16"}, "op.inputs.scale_b.dtype", ["block scales are f32"]),
    ({"op.block_scales.lhs": "a"}, "op.block_scales.lhs", ["not an input other than lhs and rhs"]),
    ({"op.inputs.a.dtype": "bf16", "op.inputs.b.dtype": "bf16"}, "op.block_scales", ["fp8 products"]),
    ({"op.epilogue": "out = acc * scale_a"}, "op.epilogue", ["scale_a"]),
], ids=["tile_k_64", "tile_n_256", "pallas", "scale_a_shape", "scale_b_dtype", "names_lhs", "bf16_inputs",
        "epilogue_reads_a_scale"])
def test_block_scale_rules_are_located_errors(overrides, where, words):
    text = _errors(BLOCK, overrides)
    line = next((ln for ln in text.splitlines() if where + ":" in ln), None)
    assert line is not None, text
    for w in words:
        assert w in line, (w, line)


def test_block_scaled_planner_picks():
    p = build_spec(str(BLOCK), {}).plan
    assert p.launch.backends == ("cuda",) and (p.tiles.tile_m, p.tiles.tile_n, p.tiles.tile_k) == (128, 128, 128)
    assert (p.warps.wg_tile_m, p.warps.wg_tile_n, p.warps.num_consumers, p.pipeline.delay_release) == (64, 128, 2, 0)
    assert {e.name: e.bcast for e in p.extras} == {"scale_a": "kblock_lhs", "scale_b": "kblock_rhs"}
    assert p.identity_epilogue and p.tiles.k_iters == 128 and p.launch.smem_bytes <= 232448
    # the planner's own picks, with no schedule written, are the bundled spec's
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan as planner
    spec, src = load_spec(str(BLOCK))
    bare = spec.model_copy(update={"schedule": type(spec.schedule)(backends=["cuda"])})
    q = planner(bare, src)
    assert (q.tiles.tile_m, q.tiles.tile_n, q.tiles.tile_k, q.pipeline.stages, q.pipeline.delay_release, q.cluster.cluster_m) == (128, 128, 128, 6, 0, 2)


PS1 = {"schedule.pipeline.partial_sums": 1}
PF = {"schedule.pipeline.scale_prefetch": True}
NPF = {"schedule.pipeline.scale_prefetch": False}


def _promotion_order(text: str) -> str:
    """The k-loop's wgmma / wait / promotion order in SASS, one letter an instruction: z a QGMMA with scale-d 0 (a
    K block's first: `RZ, !UPT`, no zeroed registers), q a QGMMA, W<n> a WARPGROUP.DEPBAR.LE gsb0 n
    (wgmma.wait_group n), f{count} a run of FFMAs (the promotion)."""
    out = []
    for line in text.splitlines():
        if "QGMMA" in line:
            out.append("z" if "RZ, !UPT" in line else "q")
        elif "WARPGROUP.DEPBAR.LE" in line:
            out.append("W" + re.search(r"gsb0, 0x(\d)", line).group(1))
        elif re.search(r"\bFFMA\b", line):
            out.append("f")
    return re.sub(r"f{2,}", lambda m: f"f{{{len(m.group())}}}", "".join(out))


@pytest.mark.parametrize("ov, sets", [({}, 2), ({**BLOCK_RAGGED, **NPF}, 2), ({**PS1, **NPF}, 1),
                                      ({**BLOCK_SMALL, **PS1, **NPF}, 1), ({**BLOCK_SMALL, **NPF}, 2), (PF, 2),
                                      ({**PS1, **PF}, 1), ({**BLOCK_SMALL, **PF}, 2)],
                         ids=["bundled", "ragged", "one_set", "one_set_kb5", "kb5", "prefetch", "one_set_prefetch",
                              "kb5_prefetch"])
def test_block_scaled_cuda_compiles_promoting_per_k_block(ov, sets):
    """Each K block's first wgmma starts its partial sum (scale-d 0, no zeroing); one set waits for every block
    before its promotion; two sets issue block kb + 1's wgmmas before block kb is waited for (wait_group 1) and
    promoted, then wait for kb + 1 (wait_group 0) and promote it; an odd last block waits alone. With
    scale_prefetch (the planner's pick when absent) the first step's scales are loaded before any wgmma (the loop
    then loads a step ahead); without,
    every scale load follows a wgmma. No spills, no ptxas verdicts (C7514 would serialize the wgmmas)."""
    import json
    from schedgen.toolchain.nvrtc import resource_usage, sass
    b = build_spec(str(BLOCK), ov)
    assert b.plan.partial_sums == sets
    src = b.files["kernel.cu"].decode()
    assert "part[i][r] = 0.0f" not in src and "part0[i][r] = 0.0f" not in src
    text = sass(b.files["kernel.cubin"])
    assert set(re.findall(r"\b[HQ]GMMA\.[0-9A-Za-z_.]+", text)) == {"QGMMA.64x128x32.F32.E4M3.E4M3"}
    ops = opcodes(text)
    assert not any(op.startswith(("LDL", "STL")) for op in ops)
    (usage,) = resource_usage(b.files["kernel.cubin"]).values()
    assert usage["LOCAL"] == 0 and usage["STACK"] == 0, usage
    assert json.loads(b.files["manifest.json"])["compiler_verdicts"] == []
    lines = text.splitlines()
    first_wgmma = next(i for i, ln in enumerate(lines) if "QGMMA" in ln)
    early_loads = sum("LDG.E" in ln for ln in lines[:first_wgmma])
    assert b.plan.scale_prefetch == ov.get("schedule.pipeline.scale_prefetch", True)   # absent: the planner's true
    assert (early_loads >= 3) == b.plan.scale_prefetch and early_loads in (0, 3, 6), early_loads
    order = _promotion_order(text)
    kb = b.plan.tiles.k_iters
    if sets == 1:
        # (the caller's release waits again: ptxas may place a few of the FFMAs between the two waits)
        m = re.search(r"zqqqW0(?:f\{(\d+)\})?(?:W0)?f\{(\d+)\}", order)
        assert "W1" not in order and m and int(m.group(1) or 0) + int(m.group(2)) == 64, order
    else:
        # the pair: set 0's four wgmmas, set 1's four, wait_group 1, set 0's promotion, wait_group 0, set 1's (ptxas
        # may place the odd last block's wait and promotion between the two sets' wgmmas, behind a branch)
        assert re.search(r"zqqq(W0f\{64\})?zqqqW1f\{64\}W0f\{64\}", order), order
        assert ("zqqqW0f{64}" in order) == (kb % 2 == 1), order    # the odd last block


def test_partial_sums_rules_are_located_errors():
    """partial_sums: only with block scales (every family), 2 only with delay_release 0 and three accumulator
    tiles within compute_registers; the planner picks 1 where two sets do not fit."""
    cases = [
        (PER_TENSOR, {"schedule.pipeline.partial_sums": 2}, "schedule.pipeline.partial_sums", "no block scales"),
        (PER_TENSOR, PF, "schedule.pipeline.scale_prefetch", "no block scales"),
        (BLOCK, {"schedule.pipeline.partial_sums": 2, "schedule.in_specs.a.delay_release": 1,
                 "schedule.in_specs.b.delay_release": 1}, "schedule.pipeline.partial_sums", "delay_release must be 0"),
        (BLOCK, {"schedule.pipeline.partial_sums": 2, "schedule.pipeline.compute_registers": 224},
         "schedule.pipeline.partial_sums", "3 x 64 f32 registers"),
    ]
    for path, ov, where, words in cases:
        text = _errors(path, ov)
        line = next((ln for ln in text.splitlines() if where + ":" in ln), None)
        assert line is not None and words in line, (ov, text)
    # not written: two sets where they fit, one where the registers or a held stage say so
    assert build_spec(str(BLOCK), {}).plan.partial_sums == 2
    assert build_spec(str(BLOCK), {"schedule.pipeline.compute_registers": 224}).plan.partial_sums == 1
    held = {"schedule.in_specs.a.delay_release": 1, "schedule.in_specs.b.delay_release": 1}
    assert build_spec(str(BLOCK), held).plan.partial_sums == 1


def test_block_scaled_reference_is_the_scaled_product():
    """The float64 reference (per-K-block products times their scales) equals the product of the inputs scaled
    elementwise by their blocks' scales: an independent spelling of the recipe."""
    built = build_spec(str(BLOCK), BLOCK_SMALL)
    inputs = random_inputs(built.spec, BLOCK_SMALL, 5)
    ref = reference(built.spec, BLOCK_SMALL, inputs)["out"]
    a = np.asarray(inputs["a"], np.float64)
    b = np.asarray(inputs["b"], np.float64)
    k = a.shape[1]
    sa = np.repeat(np.asarray(inputs["scale_a"], np.float64), 128, axis=1)[:, :k]
    sb = np.repeat(np.repeat(np.asarray(inputs["scale_b"], np.float64), 128, axis=0)[:b.shape[0]], 128, axis=1)[:, :k]
    want = (a * sa) @ (b * sb).T
    assert rel_error(np.asarray(ref, np.float64), want) < 1e-12
    # not vacuous: without the scales it is far off
    assert rel_error(a @ b.T, want) > 1e-1


@pytest.mark.gpu
@pytest.mark.parametrize("ov", [
    {}, BLOCK_RAGGED, {"M": 2048, "N": 2048, "K": 4096, "KB": 32, "NB": 16}, PS1, {**BLOCK_RAGGED, **PS1},
    # an odd number of K blocks: two sets' last block waits alone
    {"M": 2048, "N": 2048, "K": 4224, "KB": 33, "NB": 16},
    # split-K over a [1, 1, 2] cluster: rank 1's share starts at K block 16 of 33 (17 blocks, odd)
    {"M": 2048, "N": 2048, "K": 4224, "KB": 33, "NB": 16, "schedule.cluster": [1, 1, 2],
     "schedule.in_specs.b.collective_axes": [], "schedule.pipeline.max_concurrent_steps": 4},
    # the scales read a step ahead (the last step's read clamped to the last block)
    PF, {**BLOCK_RAGGED, **PS1, **PF}, {"M": 2048, "N": 2048, "K": 4224, "KB": 33, "NB": 16, **PF},
    {"M": 2048, "N": 2048, "K": 4224, "KB": 33, "NB": 16, "schedule.cluster": [1, 1, 2],
     "schedule.in_specs.b.collective_axes": [], "schedule.pipeline.max_concurrent_steps": 4, **PF},
], ids=["bundled_4096x7168x16384", "ragged", "2048x2048x4096", "one_set_bundled", "one_set_ragged", "kb33",
        "split_k2_kb33", "prefetch_bundled", "prefetch_one_set_ragged", "prefetch_kb33", "prefetch_split_k2_kb33"])
def test_block_scaled_on_gpu(ov):
    checks = _verify(BLOCK, ov, backends=("cuda",))
    # promoted every 128 K terms: as close to float64 as bf16's own rounding allows
    assert all(c.rel_error <= 1e-2 for c in checks), [c.row() for c in checks]


def test_block_scaled_small_sizes_follow_k_and_n():
    """verify's shrunk sizes keep the scale shapes consistent (KB = cdiv(K, 128), NB = cdiv(N, 128)), so
    `verify --interpret` reports the CUDA-only spec as skipped, not as a shape error."""
    from schedgen.verify import small_overrides
    built = build_spec(str(BLOCK), {})
    small = small_overrides(built)
    assert small["KB"] == -(-small["K"] // 128) and small["NB"] == -(-small["N"] // 128), small
    build_spec(str(BLOCK), small)
