"""The one-kernel attention backward (FlashAttention-3's form, `pipeline.kind: warp_specialized`, Pallas). On the CPU:
the kernel in jax's Mosaic GPU interpreter (race detection on) against the float64 reference, where the dQ partials
are plain TMA stores into one f32 slice a 64-key block summed by jnp (the interpreter has no TMA reduce-add); its
lowering for CUDA, which carries the reduce-add and the register-operand wgmmas; the planner's picks and located
errors; explain. On the GPU (`-m gpu`): verify against float64 at training sizes."""
from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec
from schedgen.errors import SpecErrors
from schedgen.families.attention_backward.reference import attention_backward_reference
from schedgen.frontend.validate import load_spec
from schedgen.reference import random_inputs, rel_error, tolerance
from test_attention_backward import _bwd_overrides, _module

SPEC = SPECS_DIR / "attention_backward_bf16_4096.yaml"
FUSED = {"schedule.pipeline.kind": "warp_specialized", "schedule.backends": ["pallas"]}
F16 = {f"op.{g}.{n}.dtype": "f16" for g, ns in (("inputs", ("q", "k", "v", "fwd_o", "grad_o")),
                                                 ("outputs", ("dq", "dk", "dv"))) for n in ns}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _fused(*, wgs=None, stages=None, **kw):
    ov = {**_bwd_overrides(**kw), **FUSED}
    ov["schedule.in_specs.k.block_shape"] = [64, kw.get("d", 64)]
    if wgs is not None:
        ov["schedule.pipeline.num_compute_wgs"] = wgs
    if stages is not None:
        ov["schedule.pipeline.max_concurrent_steps"] = stages
    return ov


INTERPRET_CASES = {
    # two consumers (128 keys a block), both q heads
    "plain": _fused(sizes={"B": 1, "SQ": 128, "SKV": 128, "H": 2, "D": 64}),
    # bottom-right, Sq = Skv: the diagonal crosses the block's two consumers at different q blocks
    "causal": _fused(sizes={"B": 1, "SQ": 256, "SKV": 256, "H": 1, "D": 64}, causal=True),
    # GQA (2 q heads a kv head) with more keys than queries: each block loops over its group's heads
    "gqa_causal_sq_lt_skv": _fused(sizes={"B": 2, "SQ": 128, "SKV": 256, "H": 4, "G": 2, "D": 64}, causal=True,
                                   gqa=True),
    # top-left with more queries than keys, one consumer, 128-query steps: the queries past Skv see every key
    "top_left_sq_gt_skv_wg1": _fused(sizes={"B": 1, "SQ": 256, "SKV": 128, "H": 1, "D": 64}, causal="top_left",
                                     blocks=(128, 64), wgs=1),
    # top-left with more keys: the keys past Sq are seen by no query (dk = dv = 0, the blocks take no step)
    "top_left_sq_lt_skv": _fused(sizes={"B": 1, "SQ": 64, "SKV": 256, "H": 1, "D": 64}, causal="top_left"),
    "d128_bhsd_scale_stages1": _fused(sizes={"B": 1, "SQ": 128, "SKV": 128, "H": 1, "D": 128}, layout="bhsd",
                                      scale=0.3, d=128, stages=1),
    # one consumer: 3 stages fit its SMEM at head_dim 128 (two consumers' do not)
    "d128_f16_exact_causal_stages3_wg1": {**_fused(sizes={"B": 1, "SQ": 192, "SKV": 256, "H": 1, "D": 128},
                                                   causal=True, d=128, stages=3, wgs=1),
                                      **F16, "schedule.compiler_params.approx_math": False},
}


def _interpret(ov, tmp_path):
    import jax.numpy as jnp

    from schedgen.verify import interpret_params, races_found
    built = build_spec(str(SPEC), ov)
    plan = built.plan
    assert plan.fused
    mod = _module(built, tmp_path)
    ins = random_inputs(built.spec, plan.sizes, seed=0)
    outs = mod.run_into([jnp.asarray(ins[o.name]) for o in plan.inputs],
                        [jnp.full(o.shape, jnp.nan, mod._DTYPES[o.dtype]) for o in plan.outputs],
                        interpret=interpret_params())
    return built, ins, [np.asarray(x) for x in outs], races_found()


@pytest.mark.parametrize("case", list(INTERPRET_CASES), ids=list(INTERPRET_CASES))
def test_fused_interpret_matches_reference(case, tmp_path):
    pytest.importorskip("jax")
    built, ins, outs, raced = _interpret(INTERPRET_CASES[case], tmp_path)
    plan = built.plan
    ref = attention_backward_reference(built.spec, plan.sizes, ins)
    for o, out in zip(plan.outputs, outs):
        assert out.shape == o.shape and str(out.dtype) == {"bf16": "bfloat16", "f16": "float16"}[o.dtype]
        err = rel_error(out, ref[o.name])
        assert err <= tolerance(o.dtype, plan.approx_math), (case, o.name, err)
    assert raced is False


def test_fused_wrong_mask_fails_the_check(tmp_path):
    """The interpreted causal kernel against the non-causal reference: far off in every gradient (it can fail)."""
    pytest.importorskip("jax")
    ov = INTERPRET_CASES["causal"]
    built, ins, outs, _ = _interpret(ov, tmp_path)
    plain, _ = load_spec(str(SPEC), {**ov, "op.causal": False})
    ref = attention_backward_reference(plain, built.plan.sizes, ins)
    for o, out in zip(built.plan.outputs, outs):
        assert rel_error(out, ref[o.name]) > 0.1, o.name


LOWER_CASES = {
    "d128": {},
    "d128_causal": {"op.causal": True},
    "d128_wg1": {"schedule.pipeline.num_compute_wgs": 1},
    "d64_causal_block_q128": {"D": 64, "op.causal": True, "schedule.in_specs.q.block_shape": [128, 64],
                              "schedule.in_specs.k.block_shape": [64, 64]},
    "d64_gqa": {"D": 64, "schedule.in_specs.q.block_shape": [64, 64], "schedule.in_specs.k.block_shape": [64, 64],
                "op.sizes": {"B": 2, "S": 4096, "H": 16, "G": 4, "D": 64},
                **{f"op.{g}.{n}.shape": ["B", "S", "G", "D"] for g, n in
                   (("inputs", "k"), ("inputs", "v"), ("outputs", "dk"), ("outputs", "dv"))}},
}


def _d(ov):
    """The bundled spec at head_dim D (its blocks' second extent too)."""
    d = ov.pop("D", None)
    if d is not None:
        ov.setdefault("op.sizes", {"B": 2, "S": 4096, "H": 16, "D": d})
        for n in ("q", "k"):
            ov.setdefault(f"schedule.in_specs.{n}.block_shape", [64, d])
    return ov


@pytest.mark.parametrize("case", list(LOWER_CASES), ids=list(LOWER_CASES))
def test_fused_lowers_for_cuda(case, tmp_path):
    """One Mosaic GPU kernel (no dQ kernel), its dQ partials leaving by TMA reduce-add (one copy a step), P^T and
    dS^T as register operands (no P^T staging buffer), setmaxnreg for the producer and the consumers."""
    jax = pytest.importorskip("jax")
    built = build_spec(str(SPEC), {**FUSED, **_d(dict(LOWER_CASES[case]))})
    plan = built.plan
    assert plan.fused and plan.consumers == (1 if "wg1" in case else 2)
    mod = _module(built, tmp_path)
    args = [jax.ShapeDtypeStruct(o.shape, mod._DTYPES[o.dtype]) for o in plan.inputs]
    traced = jax.jit(mod.make()).trace(*args)
    text = traced.lower(lowering_platforms=("cuda",)).as_text()
    assert re.findall(r"stablehlo\.custom_call @(\w+)\(", text) == ["mosaic_gpu_v2"]
    assert f"{plan.launch.kernel_name}_fused" in text and "_dq\"" not in text
    jaxpr = str(traced.jaxpr)
    # one reduce-add a step body (causal: the masked and the unmasked one)
    assert jaxpr.count("reduction_op=add") == (2 if plan.causal else 1) and "set_max_registers" in jaxpr
    # the two-kernel form, for contrast: two kernels, no reduction
    two = build_spec(str(SPEC), {**_d(dict(LOWER_CASES[case])), "schedule.pipeline.kind": "emit_pipeline",
                                 "schedule.backends": ["pallas"]})
    (tmp_path / "two").mkdir()
    mod2 = _module(two, tmp_path / "two")
    traced2 = jax.jit(mod2.make()).trace(*args)
    assert "reduction_op" not in str(traced2.jaxpr)
    assert len(re.findall(r"stablehlo\.custom_call @mosaic_gpu_v2\(",
                          traced2.lower(lowering_platforms=("cuda",)).as_text())) == 2


def test_rendered_module_reflects_the_plan():
    built = build_spec(str(SPEC), {**FUSED, "op.causal": True})
    p, src = built.plan, built.files["pallas_kernel.py"].decode()
    assert p.fused and p.consumers == 2 and p.keys == 128 and p.launch.kernel_name.endswith("_fa3")
    assert "NUM_CONSUMERS = 2" in src and "KEYS = 128" in src and "CONSUMER_REGS, PRODUCER_REGS = 232, 40" in src
    assert 'reduction_op="add"' in src and "_dkv_body" not in src and "_dq_body" not in src
    assert src.count("if masked:") == 1 and "num_threads=NUM_CONSUMERS + 1" in src
    one = build_spec(str(SPEC), {**FUSED, "schedule.pipeline.num_compute_wgs": 1}).files["pallas_kernel.py"].decode()
    assert "NUM_CONSUMERS = 1" in one and "CONSUMER_REGS, PRODUCER_REGS = 256, 40" in one and "if masked" not in one


def _plan(ov):
    from schedgen.plan import plan
    spec, src = load_spec(str(SPEC), ov)
    return plan(spec, src)


def _explain(ov) -> str:
    from schedgen.explain import explain
    from schedgen.plan import plan_with_picks
    spec, src = load_spec(str(SPEC), ov)
    return explain(*plan_with_picks(spec, src))


def test_picks_and_explain():
    """kind not written: warp_specialized where it plans (the bundled spec: two consumers), with the reason; with
    emit_pipeline written, the two-kernel form; warp_specialized: two consumers when Skv is a multiple of 128, else
    one; explain says which form and its numbers."""
    p = _plan({})
    assert p.fused and p.consumers == 2
    text = _explain({})
    assert "schedule.pipeline.kind = warp_specialized" in text and "1.35x" in text
    assert "schedule.pipeline.num_compute_wgs = 2" in text
    two = {"schedule.pipeline.kind": "emit_pipeline"}
    assert not _plan(two).fused
    text = _explain(two)
    assert "pipeline.kind emit_pipeline: two Pallas kernels" in text and "schedule.pipeline.kind =" not in text
    p = _plan(FUSED)
    assert p.fused and p.consumers == 2 and p.launch.num_blocks == 32 * 16 * 2
    text = _explain(FUSED)
    assert "ONE Pallas kernel" in text and "TMA reduce-add" in text and "step 3, dQ kernel" not in text
    assert "schedule.pipeline.num_compute_wgs = 2" in text and f"{p.fused_smem_bytes} B SMEM" in text
    odd = _plan({**FUSED, "op.sizes": {"B": 1, "S": 192, "H": 2, "D": 128}})
    assert odd.consumers == 1 and odd.launch.num_blocks == 3 * 2


def test_the_kind_pick_falls_back_with_the_reason():
    """Where the warp-specialized forms cannot plan (dynamic sizes, head_dim 256, a block they do not stream), kind
    not written picks emit_pipeline and says why; the spec plans."""
    for ov, said in (({**DYN}, "fixed sizes only"),
                      ({"op.sizes": {"B": 1, "S": 4096, "H": 2, "D": 256}, "schedule.backends": ["pallas"],
                       "schedule.in_specs.q.block_shape": [64, 256], "schedule.in_specs.k.block_shape": [64, 256]},
                      "head_dim 64 or 128 only"),
                     ({"op.sizes": {"B": 1, "S": 4096, "H": 2, "D": 64}, "schedule.in_specs.q.block_shape": [64, 64],
                       "schedule.in_specs.k.block_shape": [128, 64]}, "streams 64 keys a step")):
        p = _plan(ov)
        assert not p.fused, ov
        text = _explain(ov)
        assert "schedule.pipeline.kind = emit_pipeline" in text and "warp_specialized does not take this spec" in text
        assert said in text, text


DYN = {"op.sizes": {"B": {"dynamic": True, "max": 4}, "S": 4096, "H": 2, "D": 64},
       "schedule.in_specs.q.block_shape": [64, 64], "schedule.in_specs.k.block_shape": [64, 64]}
ERRORS = {
    "budgets": ({**FUSED, "schedule.pipeline.compute_registers": 240}, "schedule.pipeline.compute_registers",
                "sets its own budgets"),
    "dynamic": ({**FUSED, **DYN}, "schedule.pipeline.kind", "fixed sizes only"),
    # a dynamic sequence length: a located error, not the TypeError of comparing Skv's launch-time extent
    "dynamic_seq": ({**FUSED, **DYN, "op.sizes": {"B": 1, "S": {"dynamic": True, "max": 4096}, "H": 2, "D": 64}},
                    "schedule.pipeline.kind", "fixed sizes only"),
    "d256": ({**FUSED, "op.sizes": {"B": 1, "S": 4096, "H": 2, "D": 256},
              "schedule.in_specs.q.block_shape": [64, 256], "schedule.in_specs.k.block_shape": [64, 256]},
             "schedule.pipeline.kind", "head_dim 64 or 128 only"),
    "three_wgs": ({**FUSED, "schedule.pipeline.num_compute_wgs": 3}, "schedule.pipeline.num_compute_wgs",
                  "legal 1 or 2"),
    "skv_not_128": ({**FUSED, "op.sizes": {"B": 1, "S": 192, "H": 2, "D": 128},
                     "schedule.pipeline.num_compute_wgs": 2}, "schedule.pipeline.num_compute_wgs",
                    "not a multiple of it"),
    "registers": ({**FUSED, "schedule.in_specs.q.block_shape": [128, 128]}, "schedule.in_specs.q.block_shape[0]",
                  "legal here: block_q <= 64"),
    "block_kv_unread": ({**FUSED, "schedule.in_specs.k.block_shape": [128, 128]},
                        "schedule.in_specs.k.block_shape[0]", "legal: 64 (the default), or add cuda"),
    "smem": ({**FUSED, "schedule.pipeline.max_concurrent_steps": 3}, "schedule.pipeline.max_concurrent_steps",
             "over the 232448 B"),
    "wgs_two_kernels": ({"schedule.pipeline.kind": "emit_pipeline", "schedule.pipeline.num_compute_wgs": 2},
                        "schedule.pipeline.num_compute_wgs", "warp_specialized"),
    "wgs_kind_fell_back": ({**DYN, "schedule.pipeline.num_compute_wgs": 2}, "schedule.pipeline.num_compute_wgs",
                           "warp_specialized"),
    "kind_none": ({"schedule.pipeline.kind": "none"}, "schedule.pipeline.kind", "warp_specialized (one Pallas kernel"),
}


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_located_errors(case):
    ov, path, text = ERRORS[case]
    with pytest.raises(SpecErrors) as exc:
        _plan(ov)
    msg = str(exc.value)
    assert path in msg and text in msg, msg


def test_legal_neighbours_plan():
    """The values beside the errors plan: 2 stages, block_q 64 at D128, 128 at D64, block_kv read with cuda."""
    assert _plan({**FUSED, "schedule.pipeline.max_concurrent_steps": 2}).stages == 2
    p = _plan({**FUSED, "op.sizes": {"B": 1, "S": 4096, "H": 2, "D": 64},
               "schedule.in_specs.q.block_shape": [128, 64], "schedule.in_specs.k.block_shape": [64, 64]})
    assert p.fused and p.block_q == 128 and p.fused_regs == 64 + 128 + 32
    p = _plan({**FUSED, "schedule.backends": ["cuda", "pallas"]})   # each backend's warp-specialized form
    assert p.fused and p.cuda is None and p.wgmma is not None and p.wgmma.consumers == p.consumers == 2
    assert (p.producer_regs, p.consumer_regs) == (40, 232) and (p.wgmma.producer_regs, p.wgmma.consumer_regs) == (24, 240)


# ------------------------------------------------------------------------------ the GPU

GPU_CASES = {
    "d128_plain": {"op.sizes": {"B": 2, "SQ": 1024, "SKV": 1024, "H": 4, "D": 128}},
    "d128_causal": {"op.sizes": {"B": 1, "SQ": 1024, "SKV": 1024, "H": 4, "D": 128}, "op.causal": True},
    "d128_wg1_stages1": {"op.sizes": {"B": 1, "SQ": 512, "SKV": 512, "H": 2, "D": 128},
                         "schedule.pipeline.num_compute_wgs": 1, "schedule.pipeline.max_concurrent_steps": 1},
    "d64_gqa_causal_sq_lt_skv": {"op.sizes": {"B": 2, "SQ": 512, "SKV": 1024, "H": 8, "G": 2, "D": 64},
                                 "op.causal": True, "gqa": True},
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(GPU_CASES), ids=list(GPU_CASES))
def test_fused_verifies_on_gpu(case):
    """The one kernel compiled by Mosaic GPU (TMA reduce-add, register-operand wgmmas, setmaxnreg) on the H200,
    against float64."""
    from schedgen.verify import verify_file
    kw = dict(GPU_CASES[case])
    sizes = kw.pop("op.sizes")
    gqa = kw.pop("gqa", False)
    d = sizes["D"]
    ov = {**_fused(sizes=sizes, causal=kw.pop("op.causal", False), gqa=gqa, d=d), **kw}
    checks = verify_file(str(SPEC), ["pallas"], ov, seed=0)
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]
