"""The attention_backward family on the CPU: its float64 reference against finite differences of the attention
family's float64 forward, the Pallas (Mosaic GPU) kernels in jax's interpreter (race detection on) against that
reference, their lowering for CUDA at the bundled sizes, and the planner's located errors."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import SPECS_DIR
from schedgen.build import build_spec
from schedgen.errors import SpecErrors
from schedgen.families.attention.reference import attention_reference
from schedgen.families.attention_backward.records import backward_flops
from schedgen.families.attention_backward.reference import attention_backward_reference
from schedgen.frontend.validate import load_spec
from schedgen.reference import random_inputs, rel_error, tolerance

SPEC = SPECS_DIR / "attention_backward_bf16_4096.yaml"
FWD = SPECS_DIR / "attention_bf16_4096.yaml"
LSE = {"shape": ["B", "H", "SQ"], "dtype": "f32"}


def _fwd_overrides(sizes, causal=False, gqa=False, layout="bshd", scale=None):
    """The attention forward at tiny sizes (Sq, Skv apart; kv heads G), with its log-sum-exp output."""
    kvh = "G" if gqa else "H"
    qs, ks = ["B", "SQ", "H", "D"], ["B", "SKV", kvh, "D"]
    if layout == "bhsd":
        qs, ks = [qs[0], qs[2], qs[1], qs[3]], [ks[0], ks[2], ks[1], ks[3]]
    ov = {"op.sizes": sizes, "op.inputs.q.shape": qs, "op.inputs.k.shape": ks, "op.inputs.v.shape": ks,
          "op.outputs.o.shape": qs, "op.outputs.lse": LSE, "op.causal": causal, "op.layout": layout}
    if scale is not None:
        ov["op.scale"] = scale
    return ov


TWO = {"schedule.pipeline.kind": "emit_pipeline"}   # the two-kernel Pallas form and the mma.sync CUDA kernel


def _bwd_overrides(sizes, causal=False, gqa=False, layout="bshd", scale=None, blocks=(64, 64), d=64):
    """Overrides of the bundled spec for these sizes, in the two-kernel / mma.sync form (TWO: not the planner's
    warp-specialized pick, which its own tests cover); the other forms' tests write their kind over it."""
    kvh = "G" if gqa else "H"
    qs, ks = ["B", "SQ", "H", "D"], ["B", "SKV", kvh, "D"]
    if layout == "bhsd":
        qs, ks = [qs[0], qs[2], qs[1], qs[3]], [ks[0], ks[2], ks[1], ks[3]]
    ov = {"op.sizes": sizes, "op.layout": layout, "op.causal": causal,
          **{f"op.inputs.{n}.shape": qs for n in ("q", "fwd_o", "grad_o")},
          **{f"op.inputs.{n}.shape": ks for n in ("k", "v")}, "op.inputs.lse.shape": ["B", "H", "SQ"],
          "op.outputs.dq.shape": qs, "op.outputs.dk.shape": ks, "op.outputs.dv.shape": ks,
          "schedule.in_specs.q.block_shape": [blocks[0], d], "schedule.in_specs.k.block_shape": [blocks[1], d], **TWO}
    if scale is not None:
        ov["op.scale"] = scale
    return ov


# ------------------------------------------------------------------------------ the reference, by finite differences

FD_CASES = {
    "plain": dict(sizes={"B": 1, "SQ": 5, "SKV": 5, "H": 2, "D": 3}),
    "bottom_right_sq_lt_skv": dict(sizes={"B": 1, "SQ": 3, "SKV": 6, "H": 1, "D": 4}, causal=True),
    "top_left_sq_gt_skv": dict(sizes={"B": 1, "SQ": 6, "SKV": 4, "H": 1, "D": 3}, causal="top_left"),
    "gqa_causal": dict(sizes={"B": 2, "SQ": 4, "SKV": 4, "H": 4, "G": 2, "D": 2}, causal=True, gqa=True),
    "bhsd_scale": dict(sizes={"B": 1, "SQ": 4, "SKV": 5, "H": 2, "D": 3}, layout="bhsd", scale=0.7),
}


def _finite_differences(spec, inputs, g, eps=1e-6):
    """d sum(o * g) / d input, central differences of the attention family's float64 forward reference."""
    names = list(spec.op.inputs)
    o_name = list(spec.op.outputs)[0]
    out = {}
    for n in names:
        grad = np.zeros_like(inputs[n])
        for idx in np.ndindex(inputs[n].shape):
            val = []
            for sign in (1, -1):
                x = {m: a.copy() for m, a in inputs.items()}
                x[n][idx] += sign * eps
                val.append(float((attention_reference(spec, spec.op.sizes, x, sample=False)[o_name] * g).sum()))
            grad[idx] = (val[0] - val[1]) / (2 * eps)
        out[n] = grad
    return out


@pytest.mark.parametrize("case", list(FD_CASES), ids=list(FD_CASES))
def test_reference_matches_finite_differences(case):
    kw = FD_CASES[case]
    fwd, _ = load_spec(str(FWD), _fwd_overrides(**kw))
    bwd, _ = load_spec(str(SPEC), _bwd_overrides(**kw, d=kw["sizes"]["D"]))
    rng = np.random.default_rng(3)
    ins = {n: rng.standard_normal(tuple(fwd.op.sizes[d] for d in o.shape)) for n, o in fwd.op.inputs.items()}
    fo = attention_reference(fwd, fwd.op.sizes, ins, sample=False)
    g = rng.standard_normal(fo["o"].shape)
    got = attention_backward_reference(bwd, bwd.op.sizes, {**ins, "fwd_o": fo["o"], "grad_o": g, "lse": fo["lse"]})
    want = _finite_differences(fwd, ins, g)
    for n, dn in (("q", "dq"), ("k", "dk"), ("v", "dv")):
        assert got[dn].shape == ins[n].shape
        np.testing.assert_allclose(got[dn], want[n], rtol=1e-6, atol=1e-7, err_msg=f"{case} {dn}")


def test_random_inputs_are_the_forward_of_q_k_v():
    spec, _ = load_spec(str(SPEC), _bwd_overrides({"B": 1, "SQ": 64, "SKV": 128, "H": 2, "D": 64}, causal=True))
    ins = random_inputs(spec, spec.op.sizes, seed=1)
    fwd, _ = load_spec(str(FWD), {**_fwd_overrides({"B": 1, "SQ": 64, "SKV": 128, "H": 2, "D": 64}, causal=True)})
    ref = attention_reference(fwd, fwd.op.sizes, {n: ins[n] for n in "qkv"}, sample=False)
    assert rel_error(ins["fwd_o"], ref["o"]) < 1e-2 and rel_error(ins["lse"], ref["lse"]) < 1e-6


def test_flops_are_two_and_a_half_forwards():
    """5 matmul-equivalents of 2 D per unmasked pair: 10 D; causal (Sq = Skv = S) S (S + 1) / 2 pairs."""
    assert backward_flops(2, 16, 4096, 4096, 128, None) == 10 * 128 * 4096 * 4096 * 16 * 2
    assert backward_flops(1, 1, 4, 4, 64, "top_left") == 10 * 64 * 10


# ------------------------------------------------------------------------------ Pallas in the interpreter


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _module(built, folder: Path):
    path = folder / "pallas_kernel.py"
    path.write_bytes(built.files["pallas_kernel.py"])
    name = f"_test_attn_bwd_{built.plan.launch.kernel_name}_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


S128 = {"B": 1, "SQ": 128, "SKV": 128, "H": 2, "D": 64}
INTERPRET_CASES = {
    "plain": _bwd_overrides(S128),
    "causal": _bwd_overrides({**S128, "SQ": 192, "SKV": 192, "H": 1}, causal=True),
    # bottom-right with more keys: the first key block is seen by every query, the last by the last rows only
    "causal_sq_lt_skv": _bwd_overrides({"B": 1, "SQ": 128, "SKV": 256, "H": 1, "D": 64}, causal=True),
    # top-left with fewer keys: the queries past Skv see every key
    "top_left_sq_gt_skv": _bwd_overrides({"B": 1, "SQ": 256, "SKV": 128, "H": 1, "D": 64}, causal="top_left"),
    # top-left with more keys: the keys past Sq are seen by no query (dk = dv = 0 there)
    "top_left_sq_lt_skv": _bwd_overrides({"B": 1, "SQ": 64, "SKV": 192, "H": 1, "D": 64}, causal="top_left"),
    "gqa_causal": _bwd_overrides({"B": 2, "SQ": 128, "SKV": 128, "H": 4, "G": 2, "D": 64}, causal=True, gqa=True),
    "bhsd_scale_stages1": {**_bwd_overrides(S128, layout="bhsd", scale=0.3),
                           "schedule.pipeline.max_concurrent_steps": 1},
    "blocks128_stages3_causal": {**_bwd_overrides({**S128, "SQ": 256, "SKV": 256, "H": 1}, causal=True,
                                                  blocks=(128, 128)),
                                 "schedule.pipeline.max_concurrent_steps": 3},
    "d128_f16_exact": {**_bwd_overrides({**S128, "D": 128, "H": 1}, d=128),
                       **{f"op.{g}.{n}.dtype": "f16" for g, ns in (("inputs", ("q", "k", "v", "fwd_o", "grad_o")),
                                                                   ("outputs", ("dq", "dk", "dv"))) for n in ns},
                       "schedule.compiler_params.approx_math": False},
    # head_dim 256: two dK/dV blocks a key block, each with half of dK's and dV's columns (GQA: both q heads each)
    "d256_gqa_causal": {**_bwd_overrides({"B": 1, "SQ": 128, "SKV": 128, "H": 2, "G": 1, "D": 256}, causal=True,
                                         gqa=True, d=256),
                        "schedule.pipeline.max_concurrent_steps": 2, "schedule.backends": ["pallas"]},
    "d256_bhsd_stages1": {**_bwd_overrides({"B": 1, "SQ": 64, "SKV": 128, "H": 1, "D": 256}, layout="bhsd", d=256),
                          "schedule.pipeline.max_concurrent_steps": 1, "schedule.backends": ["pallas"]},
}


@pytest.mark.parametrize("case", list(INTERPRET_CASES), ids=list(INTERPRET_CASES))
def test_pallas_interpret_matches_reference(case, tmp_path):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from schedgen.verify import interpret_params, races_found
    built = build_spec(str(SPEC), INTERPRET_CASES[case])
    plan = built.plan
    mod = _module(built, tmp_path)
    ins = random_inputs(built.spec, plan.sizes, seed=0)
    outs = mod.run_into([jnp.asarray(ins[o.name]) for o in plan.inputs],
                        [jnp.full(o.shape, jnp.nan, mod._DTYPES[o.dtype]) for o in plan.outputs],
                        interpret=interpret_params())
    ref = attention_backward_reference(built.spec, plan.sizes, ins)
    for o, out in zip(plan.outputs, outs):
        out = np.asarray(out)
        assert out.shape == o.shape and str(out.dtype) == {"bf16": "bfloat16", "f16": "float16"}[o.dtype]
        err = rel_error(out, ref[o.name])
        assert err <= tolerance(o.dtype, plan.approx_math), (case, o.name, err)
    assert races_found() is False
    del jax


def test_a_wrong_mask_fails_the_check(tmp_path):
    """The interpreted causal kernel against the non-causal reference: far off (the test can fail)."""
    import jax.numpy as jnp

    from schedgen.verify import interpret_params
    built = build_spec(str(SPEC), INTERPRET_CASES["causal"])
    plan = built.plan
    mod = _module(built, tmp_path)
    ins = random_inputs(built.spec, plan.sizes, seed=0)
    outs = mod.run_into([jnp.asarray(ins[o.name]) for o in plan.inputs],
                        [jnp.zeros(o.shape, mod._DTYPES[o.dtype]) for o in plan.outputs], interpret=interpret_params())
    plain, _ = load_spec(str(SPEC), {**INTERPRET_CASES["causal"], "op.causal": False})
    ref = attention_backward_reference(plain, plan.sizes, ins)
    assert rel_error(np.asarray(outs[0]), ref["dq"]) > 0.1


LOWER_CASES = {
    "bundled": {},
    "causal": {"op.causal": True},
    "d64_blocks128": {"D": 64, "schedule.in_specs.q.block_shape": [128, 64],
                      "schedule.in_specs.k.block_shape": [128, 64]},
    "d256": {"D": 256, "schedule.in_specs.q.block_shape": [64, 256], "schedule.in_specs.k.block_shape": [64, 256],
             "schedule.pipeline.max_concurrent_steps": 2, "schedule.backends": ["pallas"]},
    "bhsd": {"op.layout": "bhsd", **{f"op.{g}.{n}.shape": ["B", "H", "S", "D"] for g, ns in
                                     (("inputs", ("q", "k", "v", "fwd_o", "grad_o")), ("outputs", ("dq", "dk", "dv")))
                                     for n in ns}},
}


@pytest.mark.parametrize("case", list(LOWER_CASES), ids=list(LOWER_CASES))
def test_pallas_lowers_for_cuda(case, tmp_path):
    jax = pytest.importorskip("jax")
    built = build_spec(str(SPEC), {**TWO, **LOWER_CASES[case]})
    plan = built.plan
    mod = _module(built, tmp_path)
    args = [jax.ShapeDtypeStruct(o.shape, mod._DTYPES[o.dtype]) for o in plan.inputs]
    text = jax.jit(mod.make()).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    calls = re.findall(r"stablehlo\.custom_call @(\w+)\(", text)
    assert calls == ["mosaic_gpu_v2", "mosaic_gpu_v2"], calls
    assert f"{plan.launch.kernel_name}_dkv" in text and f"{plan.launch.kernel_name}_dq" in text


# ------------------------------------------------------------------------------ the planner's located errors

ERRORS = {
    "d256_cuda": ({"D": 256, "schedule.in_specs.q.block_shape": [64, 256],
                   "schedule.in_specs.k.block_shape": [64, 256], "schedule.pipeline.max_concurrent_steps": 2},
                  "op.inputs.q.shape[3]", "the CUDA attention backward takes head_dim 64 or 128"),
    "d256_block_q_128": ({"D": 256, "schedule.in_specs.q.block_shape": [128, 256],
                          "schedule.in_specs.k.block_shape": [64, 256], "schedule.pipeline.max_concurrent_steps": 1,
                          "schedule.backends": ["pallas"]},
                         "schedule.in_specs.q.block_shape[0]", "128 of the 256 columns"),
    "d96": ({"D": 96, "schedule.in_specs.q.block_shape": [64, 96], "schedule.in_specs.k.block_shape": [64, 96]},
            "op.inputs.q.shape[3]", "legal: 64, 128, 256"),
    "ragged": ({"S": 4000}, "op.inputs.q.shape[1]", "must be a multiple of 64"),
    "lse_shape": ({"op.inputs.lse.shape": ["B", "S", "H"]}, "op.inputs.lse", "f32 [B, Hq, Sq]"),
    "bottom_right_sq_gt_skv": (_bwd_overrides({"B": 1, "SQ": 256, "SKV": 128, "H": 1, "D": 64}, causal=True),
                               "op.causal", "needs Sq <= Skv"),
    "block_96": ({"schedule.in_specs.k.block_shape": [96, 128]}, "schedule.in_specs.k.block_shape[0]",
                 "legal 64, 128, 192, 256"),
    "registers": ({"schedule.in_specs.q.block_shape": [256, 128]}, "schedule.in_specs.q.block_shape[0]",
                  "use a smaller block_q"),
    "v_block": ({"schedule.in_specs.v": {"block_shape": [64, 128]}}, "schedule.in_specs.v", "block_q"),
    "budgets_with_pallas": ({"schedule.pipeline.kind": "warp_specialized", "schedule.backends": ["cuda", "pallas"],
                             "schedule.pipeline.memory_registers": 24},
                            "schedule.pipeline.memory_registers", "sets its own budgets"),
    "dtype": ({"op.outputs.dq.dtype": "f16"}, "op.outputs.dq.dtype", "the inputs' dtype"),
    "gqa_ratio": ({"op.sizes": {"B": 1, "S": 128, "H": 3, "G": 2, "D": 64},
                   **{f"op.{g}.{n}.shape": ["B", "S", "G", "D"] for g, n in
                      (("inputs", "k"), ("inputs", "v"), ("outputs", "dk"), ("outputs", "dv"))}},
                  "op.inputs.k.shape", "must be a multiple of kv heads"),
}


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_located_errors(case):
    from schedgen.plan import plan
    ov, path, text = ERRORS[case]
    spec, src = load_spec(str(SPEC), ov)
    with pytest.raises(SpecErrors) as exc:
        plan(spec, src)
    msg = str(exc.value)
    assert path in msg and text in msg, msg


def test_bundled_specs_plan():
    from schedgen.plan import plan
    for name in ("attention_backward_bf16_4096", "attention_backward_causal_bf16_4096"):
        spec, src = load_spec(str(SPECS_DIR / f"{name}.yaml"))
        p = plan(spec, src)         # the planner's pick: each backend's warp-specialized form (one kernel each)
        assert p.fused and p.wgmma is not None and p.cuda is None and p.consumers == 2
        assert p.launch.backends == ("cuda", "pallas") and p.seq_q == 4096 and p.head_dim == 128 and p.heads_q == 16
        assert p.flops == backward_flops(p.batch, 16, 4096, 4096, 128, p.causal_alignment)


def test_rendered_module_reflects_the_plan():
    """The knobs reach the Pallas source: blocks, ring depth, scale, mask (split at the diagonal), layout."""
    built = build_spec(str(SPEC), TWO)
    p, src = built.plan, built.files["pallas_kernel.py"].decode()
    assert f"BLOCK_Q = {p.block_q}" in src and f"BLOCK_KV = {p.block_kv}" in src and f"STAGES = {p.stages}" in src
    assert f"SCALE_LOG2 = {p.scale_log2!r}" in src and "approx_math=True" in src and "LoweringSemantics.Lane" in src
    assert "ref.at[b, pl.ds(start, size), h]" in src and "bshd,bshd->bhs" in src
    assert "broadcasted_iota" not in src and "CAUSAL_OFFSET" not in src
    causal = build_spec(str(SPEC), {**TWO, "op.causal": True, "schedule.compiler_params.approx_math": False,
                                    **LOWER_CASES["bhsd"]}).files["pallas_kernel.py"].decode()
    assert causal.count("if masked:") == 2 and "CAUSAL_OFFSET = 0" in causal and "approx_math=False" in causal
    assert "ref.at[b, h, pl.ds(start, size)]" in causal and "bhsd,bhsd->bhs" in causal


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_pallas_head_dim_256_verifies_on_gpu(causal):
    """head_dim 256 (two dK/dV blocks a key block) compiled by Mosaic GPU on the H200, against float64."""
    from schedgen.verify import verify_file
    ov = {**INTERPRET_CASES["d256_gqa_causal"], "op.causal": causal,
          "op.sizes": {"B": 2, "SQ": 512, "SKV": 512, "H": 4, "G": 2, "D": 256}}
    checks = verify_file(str(SPEC), ["pallas"], ov, seed=0)
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


def test_malformed_shapes_get_located_errors_not_a_crash_in_the_picks(tmp_path):
    """q and k of rank 1 (a fuzzed document): the planner's picks read Skv and Sq, and raised IndexError once the
    kind pick planned every spec; now they leave such a spec to the planner's located errors."""
    from schedgen.plan import plan
    ins = {n: {"shape": [1], "dtype": "bf16"} for n in ("x", "y", "o", "a", "b", "c")}
    outs = {n: {"shape": [1], "dtype": "bf16"} for n in ("x", "y", "o")}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "op": {"kind": "attention_backward", "inputs": ins, "outputs": outs}}))
    spec, src = load_spec(str(path))
    with pytest.raises(SpecErrors) as exc:
        plan(spec, src)
    assert "op.inputs.a.shape" in str(exc.value) and "4-D" in str(exc.value)
