"""Split-K clusters (issue 17: `schedule.cluster: [1, 1, S]`): the S CTAs of a cluster share each output tile, rank
r running k-steps [r k_iters / S, (r + 1) k_iters / S), and ranks > 0 hand their f32 partial tile to rank 0 through
distributed shared memory, which sums them and runs the epilogue. For problems with fewer tiles than SMs (decode,
long K). On the CPU: the plan (the partial-tile buffer and its barriers, local stage releases, the kernel name),
every located error, explain, the tune knob, the rendered CUDA and NVRTC builds with their SASS (remote arrivals and
DSMEM loads, no local memory). On the GPU (marked gpu): split kernels against float64, including persistent CTAs that
hand over many tiles (the red barriers' phases), K ranges that do not divide, dynamic M and fused epilogues."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, opcodes, plan_errors, plan_spec
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.explain import explain
from schedgen.families.matmul.tune import matmul_aliases
from schedgen.frontend.validate import load_spec
from schedgen.render import render
from schedgen.toolchain.nvrtc import resource_usage, sass

DECODE = ROOT / "bench" / "user_shapes" / "decode_16x8192x8192.yaml"   # no schedule: the planner's picks
BASE = ROOT / "tests" / "data" / "matmul_base.yaml"                    # 4096^3 bf16, 128x256x64, cluster 2x1
CUDA = {"schedule.backends": ["cuda"]}
ZERO = {"schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero"}
# decode: 64 x 128 tiles (64 of them), two CTAs a tile: 128 CTAs
DECODE_SPLIT2 = {**CUDA, **ZERO, "schedule.cluster": [1, 1, 2], "schedule.in_specs.a.delay_release": 1,
                 "schedule.in_specs.b.delay_release": 1, "schedule.in_specs.a.block_shape": [64, 128],
                 "schedule.in_specs.b.block_shape": [128, 128], "schedule.out_specs.out.block_shape": [64, 128],
                 "schedule.pipeline.max_concurrent_steps": 3}
# the base spec's 128 x 128 tiles with two consumers, no multicast, split over 4
BASE_SPLIT4 = {**CUDA, "schedule.cluster": [1, 1, 4], "schedule.in_specs.b.collective_axes": [],
               "schedule.in_specs.b.block_shape": [64, 128], "schedule.out_specs.out.block_shape": [128, 128],
               "schedule.pipeline.max_concurrent_steps": 4}


# ------------------------------------------------------------------------------------------------ planning

def test_split_plan_has_the_partial_tile_and_local_releases():
    p = plan_spec(DECODE, DECODE_SPLIT2)
    assert (p.cluster.split_k, p.cluster.cluster_size, p.launch.cluster_dims, p.cluster.multicast) == (2, 2, (2, 1, 1), "")
    assert (p.tiles.tile_m, p.tiles.tile_n, p.tiles.k_iters) == (64, 128, 64)
    # each CTA reads its own stages: one consumer arrival (a multicast cluster would count both CTAs' consumers)
    assert p.pipeline.empty_arrivals == p.warps.num_consumers == 1
    bufs = {b.name: b for b in p.pipeline.smem_buffers}
    assert bufs["red"].bytes == 64 * 128 * 4 and bufs["red"].count == 1
    assert {"red_full", "red_empty"} <= set(bufs)
    assert p.launch.kernel_name.endswith("_c1x1x2")
    # 64 tiles x 2 CTAs fill 128 of the 132 SMs; no cluster of 2 is left without a tile
    assert p.tiles.num_tiles == 64 and p.launch.num_blocks == 128
    four = plan_spec(BASE, BASE_SPLIT4)
    assert (four.cluster.split_k, four.warps.num_consumers, four.pipeline.empty_arrivals) == (4, 2, 2)
    assert {b.name: b.bytes for b in four.pipeline.smem_buffers}["red"] == 128 * 128 * 4


def test_no_split_plans_as_before():
    p = plan_spec(BASE, CUDA)
    assert p.cluster.split_k == 1 and "red" not in {b.name for b in p.pipeline.smem_buffers}
    assert p.pipeline.empty_arrivals == 4              # 2 consumers x 2 CTAs reading each multicast stage


def test_split_errors_are_located_and_say_what_is_legal():
    lines = plan_errors(DECODE, {**DECODE_SPLIT2, "schedule.cluster": [1, 1, 8]})
    (line,) = [ln for ln in lines if "schedule.cluster[2]" in ln]
    assert "at most 4" in line and "got 8" in line
    lines = plan_errors(BASE, {**CUDA, "schedule.cluster": [2, 1, 2]})
    assert any("schedule.cluster[2]" in ln and "cannot also multicast" in ln and "[1, 1, 2]" in ln for ln in lines)
    # each CTA needs a k-step: K = 128 at tile_k 128 is one
    lines = plan_errors(DECODE, {**DECODE_SPLIT2, "op.sizes.K": 128})
    assert any("needs at least 2 k-steps" in ln and "K = 128 is 1 step" in ln for ln in lines)
    # ping-pong runs two tiles at once in a CTA
    lines = plan_errors(BASE, {**BASE_SPLIT4, "schedule.pipeline.consumer_schedule": "pingpong",
                           "schedule.pipeline.wg_axis": None})
    assert any("schedule.cluster[2]" in ln and "consumer_schedule: cooperative" in ln for ln in lines)
    # no operand is shared: collective_axes has nothing to multicast
    lines = plan_errors(BASE, {**BASE_SPLIT4, "schedule.in_specs.b.collective_axes": ["cluster"]})
    assert any("collective_axes" in ln and "split-K cluster's CTAs share no operand" in ln for ln in lines)


def test_the_pallas_backend_is_a_located_error():
    lines = plan_errors(DECODE, {**DECODE_SPLIT2, "schedule.backends": ["cuda", "pallas"]})
    (line,) = [ln for ln in lines if "schedule.cluster[2]" in ln]
    assert "CUDA backend only" in line and "emit_pipeline_warp_specialized" in line
    assert "schedule.backends: [cuda]" in line


def test_explain_says_split():
    text = explain(plan_spec(DECODE, DECODE_SPLIT2))
    assert "1 x 1 x 2 CTAs (split-K)" in text and "k-steps 0-31, 32-63" in text and "DSMEM" in text
    assert "split-K" not in explain(plan_spec(BASE, CUDA))


def test_tune_knob_sets_the_third_cluster_entry():
    spec, _ = load_spec(str(BASE))
    ((path, index),) = matmul_aliases(spec)["split_k"]
    assert path == ("schedule", "cluster") and index == 2


# -------------------------------------------------------------------------------------------------- render

def test_rendered_cuda_runs_its_share_and_hands_over():
    cu = render(plan_spec(DECODE, DECODE_SPLIT2), "cuda")
    assert cu.count("const int kb_lo = ((int)rank * 64) / 2, kb_hi = ((int)rank + 1) * 64 / 2;") == 2
    assert cu.count("for (int kb = kb_lo; kb < kb_hi; ++kb, ++it)") == 2       # the producer and the consumer
    assert "if (kb > kb_lo && wg_thread == 0)" in cu
    assert "sg_mbar_init(S_red_full, 128);" in cu and "sg_mbar_init(S_red_empty, 128);" in cu
    assert "sg_mbar_arrive_release_cluster(sg_map_rank(S_red_full, 0));" in cu
    assert "ld.shared::cluster.v4.f32" in cu and "mbarrier.try_wait.parity.acquire.cluster" in cu
    # stages are released in the CTA that read them only
    assert "sg_mbar_arrive_cluster(sg_map_rank(S_empty" not in cu
    dyn = render(plan_spec(DECODE, {**DECODE_SPLIT2, "op.sizes.K": {"dynamic": True, "max": 8192, "multiple_of": 128}}),
                 "cuda")
    assert "const int kb_lo = ((int)rank * k_iters) / 2, kb_hi = ((int)rank + 1) * k_iters / 2;" in dyn
    # no split: the k-loop runs from 0 and nothing of the hand-over is rendered
    plain = render(plan_spec(BASE, CUDA), "cuda")
    assert "kb_lo" not in plain and "S_red" not in plain and "for (int kb = 0; kb < 64; ++kb, ++it)" in plain


# ------------------------------------------------------------------------------------- NVRTC builds and SASS

VARIANTS = {
    "decode_split2": (DECODE, DECODE_SPLIT2),
    # (a 64 x 256 tile with one consumer also builds, but its epilogue's swizzled addresses beside 128 accumulators
    # spill one register, 8 B of stack, at 240-256 registers: seen 2026-12-04)
    "decode_split4_k64": (DECODE, {**DECODE_SPLIT2, "schedule.cluster": [1, 1, 4],
                                   "schedule.in_specs.a.block_shape": [64, 64],
                                   "schedule.in_specs.b.block_shape": [128, 64],
                                   "schedule.pipeline.max_concurrent_steps": 6}),
    "base_split4_two_consumers": (BASE, BASE_SPLIT4),
    "split3_ragged_k_direct": (BASE, {**BASE_SPLIT4, **ZERO, "schedule.cluster": [1, 1, 3],
                                      "op.sizes": {"M": 1000, "N": 1000, "K": 1000},
                                      "schedule.epilogue.store": "direct", "schedule.epilogue.tile": None}),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    out = {name: build_spec(path, ov, cache=cache) for name, (path, ov) in VARIANTS.items()}
    return {name: (b, sass(b.files["kernel.cubin"])) for name, b in out.items()}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_sass_hands_over_through_dsmem_without_spills(built, name):
    b, text = built[name]
    p = b.plan
    ops = opcodes(text)
    assert p.cluster.split_k > 1
    want = f"HGMMA.64x{p.warps.wg_tile_n}x16.F32.BF16"
    assert want in set(re.findall(r"\bHGMMA\.[0-9A-Za-z_.]+", text))
    assert not [op for op in ops if op.split(".")[0] in ("LDL", "STL")], "local-memory spills"
    usage = resource_usage(b.files["kernel.cubin"])[p.launch.kernel_name]
    assert usage["STACK"] == 0 and usage["LOCAL"] == 0
    assert "SYNCS.ARRIVE.TRANS64.RED.A1T0" in ops      # an arrival on a peer CTA's barrier
    assert "LD.E.128" in ops                           # a peer's partial, 16 B a load, over DSMEM
    assert "STS.128" in ops                            # this CTA's partial into its own SMEM
    assert not any(op.endswith("MULTICAST") for op in ops)


# ---------------------------------------------------------------------------------------------- on the GPU

def _verify(path, overrides=None, count=1):
    from schedgen.verify import verify_built
    b = build_spec(str(path), overrides or {}, cache=Cache(Path(tempfile.mkdtemp(prefix="schedgen-sk-"))))
    checks = verify_built(b, ["cuda"], count=count)
    assert checks and all(c.ok for c in checks), checks
    return checks


GPU_CASES = {
    **VARIANTS,
    # 64 tiles of 128 x 128 over 4 clusters of 2: each CTA hands over 16 partial tiles (the red barriers' phases)
    "persistent_many_tiles": (BASE, {**BASE_SPLIT4, "schedule.cluster": [1, 1, 2],
                                     "op.sizes": {"M": 1024, "N": 1024, "K": 2048},
                                     "schedule.persistent.num_blocks": 8}),
    # f32 out with a row bias and a residual: the epilogue runs on the summed tile only
    "f32_bias_residual": (BASE, {**BASE_SPLIT4, "schedule.cluster": [1, 1, 2], "op.outputs.out.dtype": "f32",
                                 "schedule.epilogue.tile": [64, 32], "op.sizes": {"M": 512, "N": 1024, "K": 4096},
                                 "op.inputs.bias": {"shape": ["N"], "dtype": "f32"},
                                 "op.inputs.res": {"shape": ["M", "N"], "dtype": "bf16"},
                                 "op.epilogue": "out = acc + bias + res"}),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_split_k_matches_float64_on_gpu(case):
    path, overrides = GPU_CASES[case]
    _verify(path, overrides)


@pytest.mark.gpu
def test_split_k_dynamic_m_at_three_sizes_on_gpu():
    checks = _verify(DECODE, {**DECODE_SPLIT2, "op.sizes.M": {"dynamic": True, "max": 512, "multiple_of": 8}},
                     count=3)
    assert len({tuple(sorted(c.shape.items())) for c in checks}) == 3, checks


def test_gpu_cases_plan_on_the_cpu():
    """What the GPU tests build is legal (so a GPU run fails only on numbers)."""
    for case, (path, overrides) in GPU_CASES.items():
        assert plan_spec(path, overrides).cluster.split_k > 1, case
    p = plan_spec(BASE, GPU_CASES["persistent_many_tiles"][1])
    assert p.tiles.num_tiles == 64 and p.launch.num_blocks == 8
