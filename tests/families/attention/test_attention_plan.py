"""The attention planner and its CUDA kernel on the CPU: plan numbers, located rejections, and the SASS of every
variant (HGMMA for S = Q K^T and for O += P V with P from registers, TMA, setmaxnreg, exp2 on the MUFU, no
spills). The GPU runs of this family are bench.gpu's."""
from __future__ import annotations

import re

import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.toolchain.nvrtc import resource_usage, sass
from schedgen.errors import SpecErrors
from schedgen.plan import plan
from schedgen.explain import explain
from schedgen.families.attention.records import tile_of
from schedgen.frontend.validate import load_spec

BASE = SPECS_DIR / "attention_bf16_4096.yaml"
CUDA = {"schedule.backends": ["cuda"]}
D64 = {"D": 64, "schedule.in_specs.q.block_shape": [128, 64], "schedule.in_specs.k.block_shape": [128, 64],
       "schedule.in_specs.v.block_shape": [128, 64]}
D256 = {"D": 256, "schedule.in_specs.q.block_shape": [128, 256], "schedule.in_specs.k.block_shape": [64, 256],
        "schedule.in_specs.v.block_shape": [64, 256]}
GQA = {"op.sizes": {"B": 1, "S": 1024, "H": 8, "G": 2, "D": 128}, "op.inputs.k.shape": ["B", "S", "G", "D"],
       "op.inputs.v.shape": ["B", "S", "G", "D"]}
NC3 = {"D": 64, "schedule.in_specs.q.block_shape": [192, 64], "schedule.in_specs.k.block_shape": [128, 64],
       "schedule.in_specs.v.block_shape": [128, 64], "schedule.pipeline.num_compute_wgs": 3,
       "schedule.pipeline.compute_registers": 160, "schedule.barriers.schedule.num_arrivals": 3}
RAGGED = {"op.sizes": {"B": 2, "S": 1000, "T": 1000, "H": 4, "D": 128}, "op.inputs.k.shape": ["B", "T", "H", "D"],
          "op.inputs.v.shape": ["B", "T", "H", "D"], "op.causal": True}
# top-left causal with more queries than keys (rows 600..999 see every key), both ragged
TOP_LEFT = {**RAGGED, "op.sizes": {"B": 2, "S": 1000, "T": 600, "H": 4, "D": 128}, "op.causal": "top_left"}
PERSIST = {"schedule.persistent.loop": "nd_loop"}
# dynamic sizes (launch arguments): any batch and length (ragged last blocks), heads too; Sq and Skv apart, causal
DYN_BS = {"op.sizes": {"B": {"dynamic": True, "max": 64}, "S": {"dynamic": True, "max": 32768}, "H": 16, "D": 128}}
DYN_HEADS = {"op.sizes": {"B": 2, "S": 4096, "H": {"dynamic": True, "min": 8, "max": 64, "multiple_of": 8}, "D": 128}}
DYN_SQ_SKV = {"op.sizes": {"B": 1, "S": {"dynamic": True, "max": 2048}, "T": {"dynamic": True, "min": 2048,
                                                                                "max": 65536}, "H": 4, "D": 128},
              "op.inputs.k.shape": ["B", "T", "H", "D"], "op.inputs.v.shape": ["B", "T", "H", "D"], "op.causal": True}
DYN_GQA = {"op.sizes": {"B": {"dynamic": True, "max": 16}, "S": {"dynamic": True, "max": 32768}, "H": 8, "G": 2,
                        "D": 128},
           "op.inputs.k.shape": ["B", "S", "G", "D"], "op.inputs.v.shape": ["B", "S", "G", "D"]}
DYN = {"schedule.persistent.loop": "dynamic", "schedule.pipeline.memory_registers": 32,
       "schedule.pipeline.compute_registers": 232}
VARIANTS = {
    "base": {}, "three_consumers": NC3, "ragged_causal": RAGGED, "top_left_sq_gt_skv": TOP_LEFT, "persistent": PERSIST,
    "persistent_d256": {**PERSIST, **D256}, "dynamic_causal": {**DYN, "op.causal": True},
    "dynamic_gqa_lse": {**DYN, **GQA, "op.causal": True, "op.outputs.lse": {"shape": ["B", "H", "S"], "dtype": "f32"}}, "causal": {"op.causal": True}, "lse": {"op.outputs.lse": {"shape": ["B", "H", "S"], "dtype": "f32"}},
    "nopp": {"schedule.barriers": {}}, "d64": D64, "d256": D256, "gqa": GQA,
    "one_consumer": {"schedule.barriers": {}, "schedule.pipeline.num_compute_wgs": 1,
                     "schedule.in_specs.q.block_shape": [64, 128]},
    "dyn_bs": DYN_BS, "dyn_bs_causal_persistent": {**DYN_BS, **PERSIST, "op.causal": True},
    "dyn_heads_bhsd_lse": {**DYN_HEADS, "op.layout": "bhsd", "op.outputs.lse": {"shape": ["B", "H", "S"], "dtype": "f32"},
                           **{f"op.{g}.{n}.shape": ["B", "H", "S", "D"] for g, n in
                              (("inputs", "q"), ("inputs", "k"), ("inputs", "v"), ("outputs", "o"))}},
    "dyn_sq_skv_causal": DYN_SQ_SKV,
    # 3 consumers on 160 registers: the epilogue recounts its tile (kept through the loop, its coordinates spilled)
    "dyn_three_consumers": {**NC3, "op.sizes.S": {"dynamic": True, "min": 256, "max": 4096, "multiple_of": 256},
                            "op.sizes.B": {"dynamic": True, "max": 8}},
    "dyn_gqa_causal_dynamic_lse": {**DYN_GQA, **DYN, "op.causal": True,
                                   "op.outputs.lse": {"shape": ["B", "H", "S"], "dtype": "f32"}},
}


def _plan(ov=None):
    spec, src = load_spec(str(BASE), {**CUDA, **(ov or {})})
    return plan(spec, src)


def test_plan_numbers():
    p = _plan()
    assert (p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_kv, p.head_dim) == (1, 16, 16, 4096, 4096, 128)
    assert (p.block_q, p.block_kv, p.stages, p.num_consumers, p.pingpong) == (128, 128, 2, 2, True)
    assert p.num_tiles == 32 * 16 and p.launch.num_blocks == p.num_tiles
    assert p.flops == 4 * 16 * 4096 * 4096 * 128
    assert abs(p.scale - 128 ** -0.5) < 1e-12 and abs(p.scale_log2 - p.scale * 1.4426950408889634) < 1e-12
    assert p.q_bytes == 128 * 128 * 2 and p.kv_stage_bytes == 128 * 128 * 2
    # [B, S, H, D] seen by TMA as [B, S, H*D] (clipped at each sequence's end); boxes of 64 columns (128 B, swizzled)
    assert p.launch.kernel_args[0].shape == (1, 4096, 16 * 128) and p.launch.kernel_args[0].box == (1, 64, 64)
    assert p.launch.kernel_args[0].strides == (4096 * 16 * 128 * 2, 16 * 128 * 2, 2)
    assert p.launch.kernel_args[1].box == (1, 128, 64)
    # causal at Sq = Skv: query i sees i + 1 keys, 4096 * 4097 / 2 pairs a head (not half of 4096^2)
    assert _plan({"op.causal": True}).flops == 4 * 128 * 16 * (4096 * 4097 // 2)
    g = _plan(GQA)
    assert (g.heads_q, g.heads_kv) == (8, 2) and g.launch.kernel_args[1].shape == (1, 1024, 2 * 128)


@pytest.mark.parametrize("ov, needle", [
    ({"D": 96, "schedule.in_specs.q.block_shape": [128, 96], "schedule.in_specs.k.block_shape": [128, 96],
      "schedule.in_specs.v.block_shape": [128, 96]}, "head_dim 96 is not supported; legal: 64, 128, 256"),
    ({"schedule.in_specs.q.block_shape": [64, 128]}, "block_q is 128 with 2 consumer(s), got 64"),
    ({"S": 4001, "schedule.backends": ["cuda", "pallas"]},
     "op.inputs.q.shape: Sq = 4001 is not a multiple of 8: the Pallas attention takes a ragged last block (block_q = "
     "128) only for Sq a multiple of 8 or under 8 (Mosaic GPU in jax 0.11.2 views the q, k, v and output arrays in "
     "GMEM through their SMEM tiling of 8 rows and cannot round a partial tile up); pad the sequence to a multiple of "
     "8, or set schedule.backends: [cuda]"),
    ({"schedule.pipeline.num_compute_wgs": 3, "schedule.in_specs.q.block_shape": [192, 128],
      "schedule.barriers.schedule.num_arrivals": 3, "schedule.pipeline.compute_registers": 160},
     "holds S (64), O (64) and P (32) registers plus about 32: 192, over its budget of 160"),
    ({"schedule.pipeline.max_concurrent_steps": 4}, "SMEM needed is"),
    ({"op.inputs.k.dtype": "f16"}, "q, k and v share one dtype"),
    ({"op.scale": -1.0}, "the softmax scale must be positive"),
    ({"schedule.barriers": {"schedule": {"num_arrivals": 3}}}, "num_arrivals = num_compute_wgs (2 or 3), got num_arrivals 3 with 2"),
    ({"schedule.in_specs.k.block_shape": [256, 128], "schedule.in_specs.v.block_shape": [256, 128]},
     "over its budget"),
    ({"op.outputs.lse": {"shape": ["B", "S", "H"], "dtype": "f32"}}, "the log-sum-exp output is f32 [B, Hq, Sq]"),
    ({"schedule.persistent.tile_order": "planar_snake"}, "attention tiles go row_major (query blocks fastest) or lpt"),
])
def test_rejections_are_located(ov, needle):
    with pytest.raises(SpecErrors) as info:
        _plan(ov)
    lines = info.value.lines()
    assert any(needle in l for l in lines), lines
    assert all(l.split(":")[0].endswith("attention_bf16_4096.yaml") for l in lines)


def _order(p):
    return [tile_of(p, t) for t in range(p.num_tiles)]


@pytest.mark.parametrize("ov, sections, last", [
    ({"op.causal": True}, 1, 16),                                  # 16 heads x 2 MiB of K/V: one section
    ({"op.causal": True, "B": 2, "H": 32, "S": 8192}, 8, 8),       # 64 heads x 4 MiB: 8 sections of 8
    ({"op.causal": True, "S": 16384}, 4, 4),
    # 5 kv heads of 16 MiB, 2 to a section: 3 sections of 2, 2 and 1 groups of 4 q heads
    ({**GQA, "op.causal": True, "op.sizes": {"B": 5, "S": 32768, "H": 4, "G": 1, "D": 128}}, 3, 4),
])
def test_lpt_order_is_a_permutation_longest_first_per_section(ov, sections, last):
    p = _plan(ov)
    assert p.tile_order == "lpt" and p.sections == sections and p.last_section_heads == last
    order = _order(p)
    assert sorted(order) == sorted((b, h, qb) for b in range(p.batch) for h in range(p.heads_q)
                                   for qb in range(p.q_blocks))
    per = p.section_heads * p.q_blocks
    assert p.last_section_heads * p.q_blocks == p.num_tiles - (sections - 1) * per
    for s in range(sections):
        sec = order[s * per:(s + 1) * per]
        ends = [p.kv_end(qb) for _, _, qb in sec]
        assert ends == sorted(ends, reverse=True)              # the longest tiles of a section first
        groups = {(b, h // (p.heads_q // p.heads_kv)) for b, h, _ in sec}
        assert len(groups) * 2 * p.seq_kv * p.head_dim * 2 <= 0.625 * (60 << 20)   # its K/V share the L2
        assert len(groups) * (p.heads_q // p.heads_kv) == len({(b, h) for b, h, _ in sec})  # whole kv-head groups


def test_tile_order_defaults_and_choice():
    """Causal defaults to lpt, non-causal to row_major (q blocks fastest: one head's K/V shared by consecutive CTAs);
    either may be named."""
    plain, causal = _plan(), _plan({"op.causal": True})
    assert plain.tile_order == "row_major" and _order(plain)[:3] == [(0, 0, 0), (0, 0, 1), (0, 0, 2)]
    assert causal.tile_order == "lpt" and _order(causal)[:3] == [(0, 0, 31), (0, 1, 31), (0, 2, 31)]
    old = _plan({"op.causal": True, "schedule.persistent.tile_order": "row_major"})
    assert old.tile_order == "row_major" and _order(old)[:3] == [(0, 0, 31), (0, 0, 30), (0, 0, 29)]
    assert _plan({"schedule.persistent.tile_order": "lpt"}).tile_order == "lpt"
    src = build_spec(BASE, {**CUDA, "op.causal": True}).files["kernel.cu"].decode()
    assert "r / here" in src and "constexpr int here = 16;" in src


def test_lpt_is_for_attention_only():
    from conftest import SPECS_DIR as D
    for spec in ("add_bf16.yaml", "matmul_bf16_4096.yaml"):
        with pytest.raises(SpecErrors) as info:
            plan(*load_spec(str(D / spec), {"schedule.persistent.tile_order": "lpt"}))
        assert any("schedule.persistent.tile_order" in l and "lpt (longest tiles first) orders attention tiles" in l
                   for l in info.value.lines())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    return {name: build_spec(BASE, {**CUDA, **ov}, cache=cache) for name, ov in VARIANTS.items()}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_sass(built, name):
    b = built[name]
    p = b.plan
    text = sass(b.files["kernel.cubin"])
    hgmma = [l for l in text.splitlines() if "HGMMA." in l]
    shapes = set(re.findall(r"HGMMA\.(64x\d+x16)", "\n".join(hgmma)))
    assert shapes == {f"64x{p.block_kv}x16", f"64x{p.head_dim}x16"}
    # O += P V: A from registers (no gdesc for A) and V transposed (N-major)
    pv = [l for l in hgmma if f"64x{p.head_dim}x16" in l and "tnspB" in l]
    assert pv and all("gdesc" in l for l in pv)
    ops = set(re.findall(r"\b(UTMALDG\.3D|UTMASTG\.3D|USETMAXREG\S*|MUFU\.EX2|LDL|STL|BAR\.ARV)\b", text))
    assert {"UTMALDG.3D", "UTMASTG.3D", "MUFU.EX2"} <= ops and not ({"LDL", "STL"} & ops), ops
    assert any(o.startswith("USETMAXREG") for o in ops)
    assert ("BAR.ARV" in ops) == p.pingpong
    # a dynamic grid claims tiles with a GPU-scope atomic add on the counter (the claim and the done count)
    assert len(re.findall(r"ATOMG\.E\.ADD\S*\.GPU", text)) == (2 if p.dynamic else 0)
    u = resource_usage(b.files["kernel.cubin"])[p.launch.kernel_name]
    assert u["STACK"] == 0 and u["LOCAL"] == 0
    assert b.warnings == []          # ptxas neither spilled nor serialized the wgmmas


def test_compiler_verdicts_are_located_warnings(tmp_path):
    """A low register budget ptxas cannot honour: the build says so at compute_registers, with the way out."""
    ov = {"op.sizes": {"B": 1, "S": 64, "T": 64, "H": 2, "D": 128}, "op.inputs.k.shape": ["B", "T", "H", "D"],
          "op.inputs.v.shape": ["B", "T", "H", "D"], "schedule.in_specs.q.block_shape": [64, 128],
          "schedule.in_specs.k.block_shape": [48, 128], "schedule.in_specs.v.block_shape": [48, 128],
          "schedule.pipeline.num_compute_wgs": 1, "schedule.pipeline.compute_registers": 160,
          "schedule.pipeline.max_concurrent_steps": 1, "schedule.barriers": {}}
    b = build_spec(BASE, {**CUDA, **ov}, cache=Cache(tmp_path))
    assert b.warnings, "ptxas spilled here on 2026-12-02 (NVRTC 13.x); if it no longer does, pick a tighter case"
    w = b.warnings[0]
    assert w.startswith(f"{BASE}:") and "schedule.pipeline.compute_registers: warning:" in w
    assert "raise compute_registers" in w


def test_persistent_plan_stages_o_where_smem_allows():
    p = _plan(PERSIST)
    assert p.persistent and p.launch.auto_blocks and p.o_staging and p.launch.kernel_name.endswith("_persist")
    names = [b.name for b in p.smem_buffers]
    assert "o" in names and "q_empty" in names
    # D = 256: Q 64 KiB + 4 x 32 KiB of K/V leave no room for a 64 KiB O buffer: O goes through the Q tile
    big = _plan({**PERSIST, **D256})
    assert big.persistent and not big.o_staging and "o" not in [b.name for b in big.smem_buffers]
    assert big.launch.smem_bytes <= 232448
    # one CTA a tile unless the spec asks for the persistent loop (the model's nd_loop default is not a request)
    assert not _plan().persistent and not _plan().launch.auto_blocks


def test_dynamic_plan_claims_tiles_from_a_counter():
    p = _plan({**DYN, "op.causal": True})
    assert p.persistent and p.dynamic and p.launch.auto_blocks and p.launch.kernel_name.endswith("_dyn")
    assert [a.kind for a in p.launch.kernel_args] == ["tmap"] * 4 + ["counter"]
    assert "tile" in [b.name for b in p.smem_buffers] and "tile" not in [b.name for b in _plan(PERSIST).smem_buffers]
    # unset budgets: 32 for the claiming producer, the rest of a 384-thread block's 64512 registers to the consumers
    d = _plan({"schedule.persistent.loop": "dynamic", "schedule.pipeline.memory_registers": None,
               "schedule.pipeline.compute_registers": None})
    assert (d.producer_regs, d.consumer_regs) == (32, 232)
    assert "claims each next of 512 tiles from a counter" in explain(p)
    src = build_spec(BASE, {**CUDA, **DYN}).files["kernel.cu"].decode()
    assert "atomicAdd(tile_counter, 1u)" in src and "tile_counter[0] = 0u;" in src


@pytest.mark.parametrize("ov, needle", [
    ({"schedule.persistent.loop": "dynamic"},      # the bundled spec's 24 producer registers
     "schedule.pipeline.memory_registers: the producer of a dynamic persistent grid claims its tiles from a counter "
     "and needs 32 registers (24 spill); give memory_registers: 32 and at most 232 compute_registers"),
    ({"schedule.pipeline.memory_registers": 32},   # 32 + 2 x 240: over the 64512 a 384-thread block holds
     "register budgets 32 + 2 x 240 need 65536 registers; a block of 384 threads holds 64512 (at most 232 per "
     "consumer with 32 for the producer)"),
    ({"schedule.pipeline.compute_registers": 236}, "setmaxnreg takes a multiple of 8 registers, got 236; use 232 or 240"),
    ({**DYN, "schedule.backends": ["cuda", "pallas"]},
     "schedule.persistent.loop: the Pallas attention's persistent grid is nd_loop (block i takes tiles i, i + grid, "
     "...); loop: dynamic is the CUDA kernel's (an atomic tile counter): jax 0.11.2's plgpu.dynamic_scheduling_loop "
     "is cluster launch control (sm_100 and up, not Hopper) and its atomics return no old value to claim a tile "
     "with; use loop: nd_loop or set schedule.backends: [cuda]"),
])
def test_register_budgets_and_dynamic_limits_are_located(ov, needle):
    spec, src = load_spec(str(BASE), {**CUDA, **ov})
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    assert any(needle in l and l.startswith(str(BASE)) for l in info.value.lines()), info.value.lines()


def test_three_consumers_are_cuda_only():
    spec, src = load_spec(str(BASE), {**NC3, "schedule.backends": ["cuda", "pallas"]})
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    assert "the Pallas attention has 1 or 2 consumer warpgroups" in info.value.render()


def test_the_static_persistent_grid_plans_for_both_backends():
    """persistent.loop: nd_loop is both backends' (the Pallas kernel's nd_loop); only dynamic is the CUDA one's."""
    spec, src = load_spec(str(BASE), {**PERSIST, "schedule.backends": ["cuda", "pallas"]})
    p = plan(spec, src)
    assert p.launch.backends == ("cuda", "pallas") and p.persistent and not p.dynamic


def test_softmax_code_shape_follows_head_dim():
    assert (_plan().row_chains, _plan().skip_rescale) == (1, False)
    assert _plan(D256).skip_rescale
    text = build_spec(BASE, {**CUDA, **D256}).files["kernel.cu"].decode()
    assert "__any_sync" in text


def test_explain_names_the_gemms_and_blocks():
    from schedgen.explain import explain
    text = explain(_plan({"op.causal": True}))
    for needle in ("wgmma m64n128k16 x 8", "P from registers", "512 CTAs", "ping-pong",
                   "4 D per unmasked (q, k) pair x H x B, causal bottom_right", "j <= i + Skv - Sq"):
        assert needle in text, (needle, text)


def test_jax_peer_inputs_are_f16_with_q_prescaled():
    import numpy as np
    from schedgen.families.attention.peers import jax_attention_inputs
    p = _plan(GQA)
    rng = np.random.default_rng(0)
    host = {o.name: rng.standard_normal(o.shape).astype(np.float32) for o in p.inputs}
    q, k, v = jax_attention_inputs(p, host)
    assert q.dtype == k.dtype == v.dtype == np.float16 and q.shape == tuple(p.inputs[0].shape)
    np.testing.assert_allclose(q.astype(np.float32), host["q"] * p.scale, rtol=1e-3, atol=1e-4)
    np.testing.assert_array_equal(k, host["k"].astype(np.float16))


def test_jax_peer_sweep_configs_fit_smem():
    from schedgen.families.attention.peers import jax_attention_configs, jax_attention_peer
    assert jax_attention_configs(_plan()) == [(64, 128, 2), (64, 64, 2), (64, 64, 3), (64, 128, 3)]
    assert jax_attention_configs(_plan(), sweep=False) == [(64, 128, 2)]
    # D = 256: only 64-key blocks fit beside the Q tiles; 3 consumers have no same-tuning config, only the sweep
    assert jax_attention_configs(_plan(D256)) == [(64, 64, 2)]
    assert jax_attention_configs(_plan(NC3)) == [(64, 64, 2), (64, 64, 3), (64, 128, 2), (64, 128, 3)]
    assert jax_attention_peer(_plan(RAGGED))[0] is None


def test_jax_peer_and_markdown_rows():
    from schedgen.families.attention.peers import attention_markdown, jax_attention_peer
    fn, note = jax_attention_peer(_plan())
    assert fn is not None and "block_kv 128" in note
    assert jax_attention_peer(_plan({"op.outputs.lse": {"shape": ["B", "H", "S"], "dtype": "f32"}}))[0] is None
    row = {"family": "attention", "spec": "a", "backend": "cuda", "kernel": "k", "shape": {"S": 4096}, "causal": True,
           "time_ms": 0.25, "tflops": 600.0, "verified": True, "rel_error": 3e-3,
           "peers": {"sdpa_cudnn": {"ratio": 1.1, "tflops": 545.0, "note": "SDPBackend.CUDNN_ATTENTION only"},
                     "sdpa_flash": {"skipped": "no form of our mask verified"},
                     "jax_pallas": {"skipped": "timed without the lse"}}}
    text = attention_markdown([row])
    assert "| vs SDPA cuDNN | vs SDPA flash | vs JAX attention_mgpu |" in text
    assert ("| a | cuda | `k` | S=4096 | True | 0.2500 | 600 | 1.10x (545 TFLOP/s) | skipped | skipped | yes | "
            "3.00e-03 |") in text
    assert "\n- a cuda jax_pallas: timed without the lse\n" in text      # why a peer is missing, under the table
    assert "\n- a sdpa_cudnn: SDPBackend.CUDNN_ATTENTION only\n" in text  # what a timed peer is
