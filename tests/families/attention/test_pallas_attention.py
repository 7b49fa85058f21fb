"""The Pallas (Mosaic GPU) backend of the attention family, on the CPU: the rendered module lowers for CUDA (bundled
spec at full size and variants), runs in the Mosaic GPU interpreter (race detection on) at tiny sizes against the
float64 reference, and the planner rejects what the Pallas rendering cannot express.

In interpret mode the kernel feeds P to the P V wgmma through SMEM (jax's interpreter models wgmma operands as SMEM
only); compiled, P comes from registers. Everything else (TMA rings, barriers, ping-pong, masking, LSE) is the same
code."""
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
from schedgen.families.attention.reference import attention_reference
from schedgen.reference import reference, rel_error, tolerance

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402

SPEC = SPECS_DIR / "attention_bf16_4096.yaml"
BOTH = {"schedule.backends": ["cuda", "pallas"]}
NP_DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}

BSHD = ["B", "S", "H", "D"]
LSE = {"op.outputs.lse": {"shape": ["B", "H", "S"], "dtype": "f32"}}
BHSD = {"op.layout": "bhsd", **{f"op.{g}.{n}.shape": ["B", "H", "S", "D"]
                                for g, n in (("inputs", "q"), ("inputs", "k"), ("inputs", "v"), ("outputs", "o"))}}
NO_PINGPONG = {"schedule.barriers": {}}
ONE_CONSUMER = {"schedule.barriers": {}, "schedule.pipeline.num_compute_wgs": 1, "schedule.pipeline.compute_registers": 256}


def _blocks(d, block_q=128, block_kv=64):
    return {"D": d, "schedule.in_specs.q.block_shape": [block_q, d], "schedule.in_specs.k.block_shape": [block_kv, d],
            "schedule.in_specs.v.block_shape": [block_kv, d]}


def _gqa(sizes):
    """k and v over G kv heads (H / G q heads share one)."""
    return {"op.sizes": sizes, "op.inputs.k.shape": ["B", "S", "G", "D"], "op.inputs.v.shape": ["B", "S", "G", "D"]}


def _sq_skv(sizes):
    """Sq queries against Skv keys (causal alignment: query i sees keys j <= i + Skv - Sq)."""
    return {"op.sizes": sizes, "op.inputs.q.shape": ["B", "SQ", "H", "D"], "op.outputs.o.shape": ["B", "SQ", "H", "D"],
            "op.inputs.k.shape": ["B", "SKV", "H", "D"], "op.inputs.v.shape": ["B", "SKV", "H", "D"]}


# Tiny problems for the interpreter: S = 256 with 64-key blocks is 4 K/V steps through 2 stages (the rings wrap),
# 2 query blocks of 128 rows; causal, the two consumers of a block see different numbers of K/V blocks.
SMALL = {"S": 256, "H": 2, **_blocks(64)}
INTERPRET_CASES = {
    "plain": SMALL,
    "causal": {**SMALL, "op.causal": True},
    "causal_no_pingpong": {**SMALL, **NO_PINGPONG, "op.causal": True},
    "causal_one_consumer": {**SMALL, **ONE_CONSUMER, "schedule.in_specs.q.block_shape": [64, 64], "op.causal": True},
    "causal_sq_lt_skv_lse": {**_blocks(64), **_sq_skv({"B": 1, "SQ": 128, "SKV": 320, "H": 2, "D": 64}),
                             "op.outputs.lse": {"shape": ["B", "H", "SQ"], "dtype": "f32"}, "op.causal": True},
    # top-left (query i sees keys j <= i) against more keys, and against fewer: rows 192..383 see all 3 key blocks
    # (one consumer's rows before Skv, the other's past it; the causal key-block counts capped at Skv)
    "top_left_sq_lt_skv_lse": {**_blocks(64), **_sq_skv({"B": 1, "SQ": 128, "SKV": 320, "H": 2, "D": 64}),
                               "op.outputs.lse": {"shape": ["B", "H", "SQ"], "dtype": "f32"}, "op.causal": "top_left"},
    "top_left_sq_gt_skv": {**_blocks(64), **_sq_skv({"B": 1, "SQ": 384, "SKV": 192, "H": 1, "D": 64}),
                           "op.causal": "top_left"},
    "gqa": {**_blocks(64), **_gqa({"B": 2, "S": 128, "H": 4, "G": 2, "D": 64})},
    "bhsd": {**SMALL, **BHSD},
    "f16_exact_scale_stages3": {**SMALL, **{f"op.{g}.{n}.dtype": "f16" for g, n in
                                            (("inputs", "q"), ("inputs", "k"), ("inputs", "v"), ("outputs", "o"))},
                                "schedule.compiler_params.approx_math": False, "op.scale": 0.5,
                                "schedule.pipeline.max_concurrent_steps": 3},
    "d128_kv128_stages1": {"S": 256, "H": 2, "schedule.pipeline.max_concurrent_steps": 1},
    "d256": {"S": 128, "H": 1, **_blocks(256)},
    # ragged: S = 200 is 1 full 128-row query block and 72 rows (the second consumer's 8 rows before Sq, 56 past),
    # 3 full 64-key blocks and 8 keys; S = 136 leaves the second consumer of the last block wholly past Sq
    "ragged": {**SMALL, "S": 200},
    "ragged_causal": {**SMALL, "S": 200, "op.causal": True},
    "ragged_causal_no_pingpong_136": {**SMALL, **NO_PINGPONG, "S": 136, "op.causal": True},
    "ragged_causal_sq_lt_skv": {**_blocks(64), **_sq_skv({"B": 1, "SQ": 136, "SKV": 200, "H": 2, "D": 64}),
                                "op.causal": True},
    # top-left, rows 136..263 past Skv see every key, the last (8-key) block masked to Skv
    "ragged_top_left_sq_gt_skv": {**_blocks(64), **_sq_skv({"B": 1, "SQ": 264, "SKV": 136, "H": 1, "D": 64}),
                                  "op.causal": "top_left"},
    "ragged_gqa_causal": {**_blocks(64), **_gqa({"B": 2, "S": 136, "H": 4, "G": 2, "D": 64}), "op.causal": True},
    "ragged_bhsd_one_consumer": {**SMALL, **BHSD, **ONE_CONSUMER, "S": 200, "schedule.in_specs.q.block_shape": [64, 64]},
    # under 8 rows (Mosaic GPU's tiling takes a dimension smaller than its tile): one query against 200 keys (decode,
    # bottom-right: it sees them all), 5 against 5
    "decode_sq1_causal": {**_blocks(64), **_sq_skv({"B": 2, "SQ": 1, "SKV": 200, "H": 2, "D": 64}), "op.causal": True},
    "sq_skv_5_causal": {**_blocks(64), **_sq_skv({"B": 1, "SQ": 5, "SKV": 5, "H": 2, "D": 64}), "op.causal": True},
}
# the persistent grid in the interpreter: the module's SM count (its grid) set to PERSISTENT_SMS, fewer than the
# tiles, so each block walks several tiles and the K/V ring runs on across them
PERSISTENT_SMS = 3
NDLOOP = {"schedule.persistent.loop": "nd_loop"}
PERSISTENT_CASES = {
    "row_major": {**SMALL, **NDLOOP, "H": 4},                                    # 8 tiles on 3 blocks
    "causal_lpt": {**SMALL, **NDLOOP, "H": 4, "op.causal": True},               # lpt, the default when causal
    "causal_row_major_ragged": {**SMALL, **NDLOOP, "H": 3, "S": 200, "op.causal": True,
                                "schedule.persistent.tile_order": "row_major"},
    "causal_row_major_lse": {**SMALL, **NDLOOP, **LSE, "H": 3, "S": 256, "op.causal": True,
                             "schedule.persistent.tile_order": "row_major"},
    "one_consumer_stages3_gqa": {**_blocks(64), **_gqa({"B": 2, "S": 136, "H": 4, "G": 2, "D": 64}), **NDLOOP,
                                 **ONE_CONSUMER, "schedule.in_specs.q.block_shape": [64, 64],
                                 "schedule.pipeline.max_concurrent_steps": 3},
}
LOWER_CASES = {
    "bundled": {},
    "causal": {"op.causal": True},
    "lse": LSE,
    "causal_lse_no_pingpong": {"op.causal": True, **LSE, **NO_PINGPONG},
    "gqa": _gqa({"B": 2, "S": 2048, "H": 16, "G": 4, "D": 128}),
    "bhsd": BHSD,
    "one_consumer": {**ONE_CONSUMER, "schedule.in_specs.q.block_shape": [64, 128]},
    "d64_kv128": _blocks(64, block_kv=128),
    "d64_kv192": {"S": 3072, **_blocks(64, block_kv=192)},
    "d256": _blocks(256),
    "f16": {f"op.{g}.{n}.dtype": "f16" for g, n in (("inputs", "q"), ("inputs", "k"), ("inputs", "v"), ("outputs", "o"))},
    "causal_sq_lt_skv": {**_sq_skv({"B": 1, "SQ": 1024, "SKV": 4096, "H": 16, "D": 128}), "op.causal": True},
    "top_left_sq_gt_skv": {**_sq_skv({"B": 1, "SQ": 4096, "SKV": 1024, "H": 16, "D": 128}), "op.causal": "top_left"},
    "stages3_exact": {"schedule.pipeline.max_concurrent_steps": 3, "schedule.compiler_params.approx_math": False},
    # ragged sequences (multiples of 8, of no block) and the persistent grid
    "ragged_1000": {"S": 1000},
    "ragged_1000_causal": {"S": 1000, "op.causal": True},
    "ragged_4000_causal_gqa": {**_gqa({"B": 1, "S": 4000, "H": 16, "G": 4, "D": 128}), "op.causal": True},
    "ragged_causal_sq_lt_skv": {**_sq_skv({"B": 1, "SQ": 1000, "SKV": 4000, "H": 16, "D": 128}), "op.causal": True},
    "ragged_top_left_sq_gt_skv": {**_sq_skv({"B": 1, "SQ": 4000, "SKV": 1000, "H": 16, "D": 128}),
                                  "op.causal": "top_left"},
    "ragged_d64_bhsd": {**BHSD, **_blocks(64), "S": 1000},
    "decode_sq1_skv4000": {**_sq_skv({"B": 8, "SQ": 1, "SKV": 4000, "H": 16, "D": 128}), "op.causal": True},
    "sq4_skv1000": {**_sq_skv({"B": 2, "SQ": 4, "SKV": 1000, "H": 16, "D": 128})},
    "persistent_16k": {"S": 16384, **NDLOOP},
    "persistent_causal_lpt": {"op.causal": True, **NDLOOP, **LSE},
    "persistent_ragged_causal_row_major": {"S": 4000, "op.causal": True, **NDLOOP,
                                           "schedule.persistent.tile_order": "row_major"},
    "persistent_one_consumer": {**NDLOOP, **ONE_CONSUMER, "schedule.in_specs.q.block_shape": [64, 128]},
}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _build(overrides):
    """The bundled spec with overrides, Pallas only (the CUDA side is tests/test_attention_plan.py's)."""
    return build_spec(str(SPEC), {"schedule.backends": ["pallas"], **overrides})


def _module(built, folder: Path):
    """Import the rendered Pallas module (pallas_kernel.py) on its own."""
    path = folder / "pallas_kernel.py"
    path.write_bytes(built.files["pallas_kernel.py"])
    name = f"_test_pallas_attention_{built.plan.launch.kernel_name}_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _inputs(plan, seed=0):
    rng = np.random.default_rng(seed)
    return {o.name: rng.standard_normal(o.shape, dtype=np.float32).astype(NP_DTYPES[o.dtype]) for o in plan.inputs}


def _poisoned(plan):
    return [np.full(o.shape, np.nan, NP_DTYPES[o.dtype]) for o in plan.outputs]


_RUNS: dict[str, tuple] = {}   # interpreted runs by case (the wrong-mask test reuses "plain")


def _interpret(case, tmp_path):
    """(built, inputs, outputs, races found) of INTERPRET_CASES[case] run in the interpreter, outputs poisoned."""
    from schedgen.verify import interpret_params, races_found
    if case not in _RUNS:
        built = _build(INTERPRET_CASES[case])
        plan = built.plan
        mod = _module(built, tmp_path)
        inputs = _inputs(plan)
        outs = mod.run_into([jnp.asarray(inputs[o.name]) for o in plan.inputs],
                            [jnp.asarray(x) for x in _poisoned(plan)], interpret=interpret_params())
        _RUNS[case] = (built, inputs, [np.asarray(x) for x in outs], races_found())
    return _RUNS[case]


# ------------------------------------------------------------------------------------ lowering for CUDA on CPU

@pytest.mark.parametrize("case", list(LOWER_CASES), ids=list(LOWER_CASES))
def test_pallas_attention_lowers_for_cuda(case, tmp_path):
    built = _build(LOWER_CASES[case])
    plan = built.plan
    mod = _module(built, tmp_path)
    args = [jax.ShapeDtypeStruct(o.shape, mod._DTYPES[o.dtype]) for o in plan.inputs]
    text = jax.jit(mod.make()).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    calls = re.findall(r"stablehlo\.custom_call @(\w+)\(([^)]*)\)", text)
    assert [c[0] for c in calls] == ["mosaic_gpu_v2"], calls
    assert len(calls[0][1].split(",")) == len(plan.inputs)
    assert plan.launch.kernel_name in text
    for o in plan.outputs:
        assert re.search(r"tensor<{}x{}>".format("x".join(map(str, o.shape)), o.dtype), text), o.name


def test_bundled_spec_plans_for_both_backends():
    """The Pallas limits accept the bundled spec (and the CUDA side is unchanged by them)."""
    from schedgen import plan as planner
    from schedgen.frontend.validate import load_spec
    spec, src = load_spec(str(SPEC), BOTH)
    both = planner.plan(spec, src)
    spec, src = load_spec(str(SPEC), {"schedule.backends": ["cuda"]})
    assert both.launch.backends == ("cuda", "pallas") and planner.to_dict(both) | {"backends": None} == \
        planner.to_dict(planner.plan(spec, src)) | {"backends": None}


def test_rendered_module_reflects_the_plan():
    """The knobs reach the Pallas source: blocks, ring depth, register budgets, ping-pong, masking, LSE, layout."""
    built = _build({})
    p, src = built.plan, built.files["pallas_kernel.py"].decode()
    compile(src, "pallas_kernel.py", "exec")
    assert f"BLOCK_Q = {p.block_q}" in src and f"BLOCK_KV = {p.block_kv}" in src and f"STAGES = {p.stages}" in src
    assert f"PRODUCER_REGS, CONSUMER_REGS = {p.producer_regs}, {p.consumer_regs}" in src
    assert 'set_max_registers(CONSUMER_REGS, action="increase")' in src
    assert 'set_max_registers(PRODUCER_REGS, action="decrease")' in src
    assert f"SCALE_LOG2 = {p.scale_log2!r}" in src and "jnp.exp2(" in src
    assert "num_threads=NUM_CONSUMERS + 1" in src and f"NUM_CONSUMERS = {p.num_consumers}" in src
    assert '"schedule": plgpu.Barrier(num_arrivals=2)' in src and "take_turn()" in src
    assert "plgpu.wgmma(o_ref, p16, v_smem.at[slot])" in src          # P from registers when compiled
    assert "approx_math=True" in src and "LoweringSemantics.Lane" in src
    assert "ref.at[b, pl.ds(start, size), h]" in src                    # bshd, read in place
    assert "broadcasted_iota" not in src and "lse_gmem" not in src and "_drain" not in src
    causal = _build({"op.causal": True, **LSE, **BHSD}).files["pallas_kernel.py"].decode()
    assert "broadcasted_iota" in causal and "_drain" in causal and "CAUSAL_OFFSET = 0" in causal
    assert "lse_gmem.at[b, h, pl.ds(q_base, ROWS)]" in causal and "jnp.log(l_i)" in causal
    assert "ref.at[b, h, pl.ds(start, size)]" in causal
    one = _build({**ONE_CONSUMER, "schedule.in_specs.q.block_shape": [64, 128],
                  "schedule.compiler_params.approx_math": False}).files["pallas_kernel.py"].decode()
    assert '"schedule"' not in one and "take_turn" not in one and "NUM_CONSUMERS = 1" in one
    assert "approx_math=False" in one


# ------------------------------------------------------------------------------------ the interpreter

@pytest.mark.parametrize("case", list(INTERPRET_CASES), ids=list(INTERPRET_CASES))
def test_pallas_attention_interpret_matches_reference(case, tmp_path):
    built, inputs, outs, raced = _interpret(case, tmp_path)
    plan = built.plan
    ref = attention_reference(built.spec, plan.sizes, inputs, sample=False)
    for o, out in zip(plan.outputs, outs):
        assert out.dtype == NP_DTYPES[o.dtype] and out.shape == o.shape
        err = rel_error(out, ref[o.name])
        assert err <= tolerance(o.dtype, plan.approx_math), (case, o.name, err)
    assert raced is False


def _run_persistent(case, tmp_path, sms=PERSISTENT_SMS):
    """(built, inputs, output arrays, races found) of PERSISTENT_CASES[case] interpreted on a grid of `sms` blocks."""
    from schedgen.verify import interpret_params, races_found
    built = _build(PERSISTENT_CASES[case])
    plan = built.plan
    mod = _module(built, tmp_path)
    mod._sm_count = lambda: sms      # (on a GPU host too, where the module would count the device's SMs)
    assert plan.persistent and sms < plan.num_tiles     # each block takes more than one tile
    inputs = _inputs(plan, seed=2)
    outs = mod.run_into([jnp.asarray(inputs[o.name]) for o in plan.inputs],
                        [jnp.asarray(x) for x in _poisoned(plan)], interpret=interpret_params())
    return built, inputs, [np.asarray(x) for x in outs], races_found()


@pytest.mark.parametrize("case", list(PERSISTENT_CASES))
def test_pallas_attention_persistent_grid_interpret(case, tmp_path):
    """The persistent grid (nd_loop over the tiles, the K/V ring and its barrier phases running on from tile to
    tile, Q reloaded after each O store), row_major and lpt, ragged, GQA, one consumer: every tile's output against
    the float64 reference, outputs poisoned first."""
    built, inputs, outs, raced = _run_persistent(case, tmp_path)
    plan = built.plan
    assert plan.tile_order == ("lpt" if case == "causal_lpt" else "row_major")
    ref = attention_reference(built.spec, plan.sizes, inputs, sample=False)
    for o, out in zip(plan.outputs, outs):
        assert rel_error(out, ref[o.name]) <= tolerance(o.dtype, plan.approx_math), (case, o.name)
    assert raced is False


def test_persistent_grid_is_rendered_as_nd_loop():
    """The grid is min(tiles, the device's SMs), each block walking its tiles with nd_loop; the bundled spec, a block
    a tile, keeps its grid of tiles."""
    src = _build(PERSISTENT_CASES["row_major"]).files["pallas_kernel.py"].decode()
    assert "grid=(min(NUM_TILES, _sm_count()),)" in src and 'grid_names=("blocks",)' in src
    assert src.count('@plgpu.nd_loop((NUM_TILES,), collective_axes="blocks", init_carry=0)') == 2   # consumers, producer
    assert 'jax.devices("gpu")[0].core_count' in src and "SM_COUNT = 132" in src
    plain = _build({}).files["pallas_kernel.py"].decode()
    assert "nd_loop" not in plain and "grid=(NUM_TILES,)" in plain and "_sm_count" not in plain


def test_persistent_grid_counts_the_sms_or_falls_back_to_the_plan(tmp_path):
    """make() sizes the grid by the GPU's SM count; where jax sees no GPU (here), by SM_COUNT, the H200's."""
    mod = _module(_build(PERSISTENT_CASES["row_major"]), tmp_path)
    try:
        want = jax.devices("gpu")[0].core_count
    except RuntimeError:
        want = 132
    assert mod._sm_count() == want and mod.SM_COUNT == 132


def test_ragged_masks_are_rendered_where_needed():
    """The key mask (c + j * BLOCK_KV < Skv) only where Skv is ragged; the causal key-block counts capped only where
    rows can reach past the keys."""
    ragged = _build(INTERPRET_CASES["ragged"]).files["pallas_kernel.py"].decode()
    assert "seen = c + j * BLOCK_KV < SEQ_KV" in ragged and "lax.fori_loop(0, SEQ_KV // BLOCK_KV, kv_step" in ragged
    causal = _build(INTERPRET_CASES["ragged_causal"]).files["pallas_kernel.py"].decode()
    assert "& (c + j * BLOCK_KV < SEQ_KV)" in causal and "jnp.minimum(kv_steps, SEQ_KV // BLOCK_KV)" in causal
    assert "jnp.minimum(lax.div(q_base + ROWS + CAUSAL_OFFSET + BLOCK_KV - 1, BLOCK_KV), KV_BLOCKS)" in causal
    whole = _build(INTERPRET_CASES["causal"]).files["pallas_kernel.py"].decode()
    assert "SEQ_KV // BLOCK_KV" not in whole and "< SEQ_KV" not in whole and "jnp.minimum(" not in whole


def test_interpreter_catches_a_missing_key_mask(tmp_path, monkeypatch):
    """Not vacuous: with the ragged key mask left out (the plan told Skv divides), the 8 zero-filled keys of the last
    block enter the softmax and the output fails against the reference."""
    from schedgen.families.attention import records
    from schedgen.verify import interpret_params
    from schedgen.cache import Cache
    monkeypatch.setattr(records.AttentionPlan, "may_ragged_kv", property(lambda self: False))
    built = build_spec(str(SPEC), {"schedule.backends": ["pallas"], **INTERPRET_CASES["ragged"]},
                       cache=Cache(tmp_path / "cache"))      # not the shared one: the render differs, the plan not
    assert "< SEQ_KV" not in built.files["pallas_kernel.py"].decode()
    plan = built.plan
    mod = _module(built, tmp_path)
    inputs = _inputs(plan)
    (out,) = mod.run_into([jnp.asarray(inputs[o.name]) for o in plan.inputs],
                          [jnp.asarray(x) for x in _poisoned(plan)], interpret=interpret_params())
    ref = attention_reference(built.spec, plan.sizes, inputs, sample=False)
    assert rel_error(np.asarray(out), ref["o"]) > 1e-1


def test_pallas_attention_lpt_sections_interpret(tmp_path, monkeypatch):
    """Causal attention in the lpt tile order over sections of unequal size (the L2 share shrunk so that 2 of the 3
    kv heads fill one): every block finds its (batch, head, q block), outputs poisoned first."""
    import schedgen.families.attention.plan as planner
    from schedgen.verify import interpret_params, races_found
    monkeypatch.setattr(planner, "L2_SECTION", 2 * (2 * 256 * 64 * 2) / (60 << 20) * 1.01)
    built = _build({**_blocks(64), **_gqa({"B": 3, "S": 256, "H": 2, "G": 1, "D": 64}), "op.causal": True})
    plan = built.plan
    assert (plan.tile_order, plan.sections, plan.section_heads, plan.last_section_heads) == ("lpt", 2, 4, 2)
    mod = _module(built, tmp_path)
    inputs = _inputs(plan, seed=3)
    (out,) = mod.run_into([jnp.asarray(inputs[o.name]) for o in plan.inputs],
                          [jnp.asarray(x) for x in _poisoned(plan)], interpret=interpret_params())
    assert races_found() is False
    ref = attention_reference(built.spec, plan.sizes, inputs, sample=False)
    assert rel_error(np.asarray(out), ref["o"]) <= tolerance("bf16", plan.approx_math)


def test_pallas_attention_public_function(tmp_path):
    """`<name>(q, k, v, interpret=...)` returns (o, lse) with the log-sum-exp output (natural log, [B, Hq, Sq])."""
    from schedgen.verify import interpret_params, races_found
    built = _build({**SMALL, **LSE})
    plan = built.plan
    mod = _module(built, tmp_path)
    inputs = _inputs(plan, seed=1)
    o, lse = getattr(mod, plan.launch.name)(*(jnp.asarray(inputs[x.name]) for x in plan.inputs), interpret=interpret_params())
    assert races_found() is False
    ref = attention_reference(built.spec, plan.sizes, inputs, sample=False)
    assert o.shape == plan.outputs[0].shape and lse.shape == (1, 2, 256) and lse.dtype == jnp.float32
    assert rel_error(np.asarray(o), ref["o"]) <= 1e-2 and rel_error(np.asarray(lse), ref["lse"]) <= 1e-5


def test_interpreter_catches_a_wrong_mask(tmp_path):
    """Not vacuous: the non-causal kernel's output fails against the causal reference."""
    causal = _build(INTERPRET_CASES["causal"])
    _, inputs, (out,), _ = _interpret("plain", tmp_path)
    ref = attention_reference(causal.spec, causal.plan.sizes, inputs, sample=False)
    assert rel_error(out, ref["o"]) > 1e-1


def test_interpreter_catches_the_other_alignment(tmp_path):
    """Not vacuous either: at Sq != Skv the top-left kernel's output fails against the bottom-right reference (and
    the bottom-right kernel's against the top-left one)."""
    tl, inputs, (out, _), _ = _interpret("top_left_sq_lt_skv_lse", tmp_path)
    br_spec = build_spec(str(SPEC), {"schedule.backends": ["pallas"], **INTERPRET_CASES["top_left_sq_lt_skv_lse"],
                                     "op.causal": "bottom_right"}).spec
    assert rel_error(out, attention_reference(br_spec, tl.plan.sizes, inputs, sample=False)["o"]) > 1e-1
    br, inputs, (out, _), _ = _interpret("causal_sq_lt_skv_lse", tmp_path)
    assert rel_error(out, attention_reference(tl.spec, br.plan.sizes, inputs, sample=False)["o"]) > 1e-1


# ------------------------------------------------------------------------------------ what Pallas cannot express

@pytest.mark.parametrize("overrides, path, words", [
    ({"schedule.in_specs.k.block_shape": [32, 128], "schedule.in_specs.v.block_shape": [32, 128]},
     "schedule.in_specs.k.block_shape[0]", "a multiple of 64"),
    ({"schedule.pipeline.compute_registers": 236}, "schedule.pipeline.compute_registers", "use 232 or 240"),
    ({"schedule.pipeline.memory_registers": 28}, "schedule.pipeline.memory_registers", "multiple of 8"),
    ({"schedule.compiler_params.lowering_semantics": "warpgroup"}, "schedule.compiler_params.lowering_semantics",
     "Lane semantics"),
    ({"schedule.compiler_params.unsafe_no_auto_barriers": True}, "schedule.compiler_params.unsafe_no_auto_barriers",
     "automatic barriers"),
    ({"schedule.compiler_params.profile_space": 64}, "schedule.compiler_params.profile_space", "profiler"),
    ({"op.inputs": {"interpret": {"shape": BSHD, "dtype": "bf16"}, "k": {"shape": BSHD, "dtype": "bf16"},
                    "v": {"shape": BSHD, "dtype": "bf16"}}, "schedule.in_specs": {}},
     "op.inputs.interpret", "keyword argument"),
], ids=["block_kv", "compute_registers", "memory_registers", "warpgroup_semantics", "no_auto_barriers",
        "profile_space", "input_named_interpret"])
def test_pallas_limits_are_located_errors(overrides, path, words):
    with pytest.raises(SpecErrors) as info:
        build_spec(str(SPEC), {**BOTH, **overrides})
    text = str(info.value)
    assert path in text and words in text and "schedule.backends: [cuda]" in text, text
    assert all(line.split(":")[0].endswith("attention_bf16_4096.yaml") for line in info.value.lines())


def test_pallas_limits_do_not_apply_to_cuda_only_specs():
    from schedgen import plan as planner
    from schedgen.frontend.validate import load_spec
    spec, src = load_spec(str(SPEC), {"schedule.backends": ["cuda"], "schedule.in_specs.k.block_shape": [32, 128],
                                      "schedule.in_specs.v.block_shape": [32, 128],
                                      "schedule.compiler_params.lowering_semantics": "warpgroup"})
    assert planner.plan(spec, src).block_kv == 32


def test_lane_semantics_may_be_named():
    assert _build({"schedule.compiler_params.lowering_semantics": "lane"}).plan.block_kv == 128


def test_dynamic_persistent_grid_stays_cuda_only_while_jax_claims_tiles_by_cluster_launch_control():
    """A pin: loop: dynamic is refused for Pallas because jax 0.11.2's plgpu.dynamic_scheduling_loop (the Mosaic GPU
    rendering of a grid that claims its tiles) is cluster launch control: lowering the smallest such kernel puts
    clusterlaunchcontrol.try_cancel in the module, which ptxas takes only for sm_100 and up. When a jax upgrade
    claims tiles another way on Hopper, the first assertion fails: then the Pallas attention can render loop:
    dynamic and plan.py's refusal can go."""
    from jax.experimental import pallas as pl  # noqa: F401  (plgpu needs pallas imported)
    from jax.experimental.pallas import mosaic_gpu as plgpu
    from schedgen.errors import ToolchainError
    from schedgen.toolchain.nvrtc import compile_cuda

    def body(x_gmem, o_gmem):
        @plgpu.dynamic_scheduling_loop(("tiles",))
        def _(info):
            (t,) = info.index
            o_gmem[t] = x_gmem[t]

    kern = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(8,), grid_names=("tiles",))
    text = jax.jit(kern).trace(jax.ShapeDtypeStruct((8, 128), jnp.float32)).lower(lowering_platforms=("cuda",)).as_text()
    assert "clusterlaunchcontrol.try_cancel" in text
    probe = r"""
extern "C" __global__ void probe(unsigned long long* out) {
  __shared__ __align__(16) unsigned int result[4];
  __shared__ __align__(8) unsigned long long bar;
  unsigned r = (unsigned)__cvta_generic_to_shared(result), b = (unsigned)__cvta_generic_to_shared(&bar);
  asm volatile("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%0], [%1];"
               :: "r"(r), "r"(b) : "memory");
  out[0] = bar;
}
"""
    with pytest.raises(ToolchainError, match="requires .target sm_100 or higher"):
        compile_cuda(probe, arch="sm_90a")
    compile_cuda(probe, arch="sm_100a")        # the probe itself is sound
    # nor can a GMEM counter hand out tiles: Mosaic GPU's atomics are store-reductions that return no old value
    import inspect
    assert all(inspect.signature(getattr(plgpu, f"atomic_{op}")).return_annotation in (None, "None")
               for op in ("add", "max", "min", "and", "or", "xor"))
    with pytest.raises(SpecErrors, match="plgpu.dynamic_scheduling_loop is cluster launch control"):
        build_spec(str(SPEC), {**BOTH, "schedule.persistent.loop": "dynamic", "schedule.pipeline.memory_registers": 32,
                               "schedule.pipeline.compute_registers": 232})


def test_unaligned_sequences_are_located_errors():
    """Ragged lengths off Mosaic GPU's 8-row tiling (tests/build/test_pallas_lowers.py pins the jax failure), both
    at once, each at its operand's shape."""
    with pytest.raises(SpecErrors) as info:
        build_spec(str(SPEC), {**BOTH, **_sq_skv({"B": 1, "SQ": 1001, "SKV": 2050, "H": 16, "D": 128})})
    lines = info.value.lines()
    assert len(lines) == 2, lines
    assert "op.inputs.q.shape: Sq = 1001 is not a multiple of 8" in lines[0] and "block_q = 128" in lines[0]
    assert "op.inputs.k.shape: Skv = 2050 is not a multiple of 8" in lines[1] and "block_kv = 128" in lines[1]
    assert all("Mosaic GPU in jax 0.11.2" in x and "schedule.backends: [cuda]" in x for x in lines)
    with pytest.raises(SpecErrors) as info:    # 5 rows: under the tiling, but the LSE rows are 20 bytes
        build_spec(str(SPEC), {**BOTH, **_sq_skv({"B": 1, "SQ": 5, "SKV": 1000, "H": 16, "D": 128}),
                               "op.outputs.lse": {"shape": ["B", "H", "SQ"], "dtype": "f32"}})
    (line,) = info.value.lines()
    assert "op.outputs.lse.shape: the Pallas attention stores the log-sum-exp rows" in line
    assert "Sq (5) must be a multiple of 4" in line and "schedule.backends: [cuda]" in line


# ------------------------------------------------------------------------------------ on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("case", ["bundled", "causal", "lse", "causal_lse_no_pingpong", "gqa", "bhsd", "one_consumer",
                                  "d64_kv128", "d256", "f16", "causal_sq_lt_skv", "top_left_sq_gt_skv"])
def test_pallas_attention_on_gpu(case, tmp_path):
    """Compiled by Mosaic GPU and run on the H200 at full size, outputs poisoned, against the (sampled) float64
    reference."""
    _run_on_gpu(LOWER_CASES[case], case, tmp_path)


def _run_on_gpu(overrides, case, tmp_path):
    built = _build(overrides)
    plan = built.plan
    mod = _module(built, tmp_path)
    inputs = _inputs(plan)
    outs = mod.run_into([jnp.asarray(inputs[o.name]) for o in plan.inputs], [jnp.asarray(x) for x in _poisoned(plan)])
    refs = reference(built.spec, plan.sizes, inputs, seed=0)
    for o, out in zip(plan.outputs, outs):
        out = np.asarray(out)
        assert not np.isnan(out.astype(np.float32)).any(), (case, o.name)     # every row written (poisoned first)
        err = rel_error(out, refs[o.name])
        assert err <= tolerance(o.dtype, plan.approx_math), (case, o.name, err)
    return built


RAGGED_GPU = ["ragged_1000", "ragged_1000_causal", "ragged_4000_causal_gqa", "ragged_causal_sq_lt_skv",
              "ragged_top_left_sq_gt_skv", "ragged_d64_bhsd", "decode_sq1_skv4000", "sq4_skv1000", "persistent_16k", "persistent_causal_lpt",
              "persistent_ragged_causal_row_major", "persistent_one_consumer"]


@pytest.mark.gpu
@pytest.mark.parametrize("case", RAGGED_GPU)
def test_pallas_attention_ragged_and_persistent_on_gpu(case, tmp_path):
    """Ragged sequences (Sq, Skv = 1000, 4000: multiples of 8, of no block) and the persistent grid (one block an SM,
    nd_loop, 16k), compiled by Mosaic GPU on the H200, outputs poisoned, against the (sampled) float64 reference."""
    built = _run_on_gpu(LOWER_CASES[case], case, tmp_path)
    assert built.plan.persistent == case.startswith("persistent")


@pytest.mark.gpu
@pytest.mark.parametrize("case", RAGGED_GPU)
def test_both_backends_verify_ragged_and_persistent_on_gpu(case):
    """`schedgen verify --backend all` at full size on the H200: the CUDA and the Pallas kernel of one build, each
    output against the float64 reference."""
    from schedgen.verify import verify_file
    checks = verify_file(str(SPEC), ["cuda", "pallas"], {**BOTH, **LOWER_CASES[case]}, seed=0)
    assert {c.backend for c in checks} == {"cuda", "pallas"}, checks
    assert all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


@pytest.mark.parametrize("over", [{"S": 1000, "op.causal": True, **LSE},
                                  {**_sq_skv({"B": 2, "SQ": 4, "SKV": 1000, "H": 16, "D": 128}),
                                   "op.outputs.lse": {"shape": ["B", "H", "SQ"], "dtype": "f32"}}],
                         ids=["sq_skv_1000", "sq4_skv1000"])
def test_lse_with_ragged_blocks_is_refused_on_pallas(over):
    """Regression (H200, 2026-12-04): with ragged last blocks the Pallas kernel's log-sum-exp rows came out wrong
    (relative error 0.10 at Sq = Skv = 1000, 0.06 at Sq = 4 over 1000 keys; o right, the interpreter right). The
    planner now refuses the LSE with ragged blocks on Pallas, at the LSE's shape, naming what to do."""
    with pytest.raises(SpecErrors) as exc:
        build_spec(str(SPECS_DIR / "attention_bf16_4096.yaml"), {**over, "schedule.backends": ["pallas"]})
    (p,) = [q for q in exc.value.problems if "log-sum-exp" in q.message]
    assert p.path[:3] == ("op", "outputs", "lse") and "whole blocks" in p.message and "backends: [cuda]" in p.message
    # the CUDA backend takes them (its GPU tests verify the LSE of ragged blocks)
    assert "cuda" in build_spec(str(SPECS_DIR / "attention_bf16_4096.yaml"),
                                {**over, "schedule.backends": ["cuda"]}).plan.launch.backends
