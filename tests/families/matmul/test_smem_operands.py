"""The epilogue's row / column operands staged in SMEM (schedule.epilogue.operands: smem; issue 17: fused
linear + bias + gelu ran 19-30% behind the bare matmul on the H200, its bias read with LDGs per 64-column chunk after
the chunk's barrier). Producer warp 1 copies each tile's slice with cp.async (LDGSTS) while the k-loop runs; the
epilogue reads it with ld.shared. On the CPU: the plan (SMEM slots in the budget, the kernel name), the rendered
reads, the SASS (the bias LDGs gone, LDGSTS in their place, no local memory) of the bias + gelu spec and of the
variants (ragged, ping-pong, batched with a column operand, split-K, stream-K, direct stores, dynamic sizes), the
located errors of what cannot take it, and explain. On the GPU (marked gpu): bias + gelu and bias + residual against
float64 at ragged and full shapes."""
from __future__ import annotations

import re
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT, opcodes, plan_errors, plan_spec
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.explain import explain
from schedgen.render import render
from schedgen.toolchain.nvrtc import resource_usage, sass

BIAS_GELU = ROOT / "specs" / "matmul_bias_gelu_bf16.yaml"                                 # bias [N] f32
RESIDUAL = ROOT / "bench" / "user_shapes" / "linear_bias_residual_4096x4096x1024.yaml"   # bias [N] f32, res [M, N] bf16
RESIDUAL_PP = ROOT / "tests" / "data" / "pingpong" / "linear_bias_residual_4096x4096x1024_pp.yaml"
NOEPI = ROOT / "bench" / "user_shapes" / "linear_4096x4096x1024_noepi.yaml"
FP8_ROWWISE = ROOT / "specs" / "matmul_fp8_e4m3_rowwise_4096.yaml"
CUDA = {"schedule.backends": ["cuda"]}
SMEM = {**CUDA, "schedule.epilogue.operands": "smem"}
RAGGED = {"op.sizes": {"M": 1000, "N": 1000, "K": 512}}

BATCHED = textwrap.dedent("""\
    name: mm_batched_vectors
    op:
      kind: matmul
      sizes: {B: 3, M: 200, N: 264, K: 128}
      inputs:
        a: {shape: [B, M, K], dtype: bf16}
        b: {shape: [K, N], dtype: bf16}
        bias: {shape: [N], dtype: f32}
        col: {shape: [M, 1], dtype: bf16}
        c: {shape: [B, M, N], dtype: f32}
      outputs:
        out: {shape: [B, M, N], dtype: f32}
      epilogue: out = 0.5 * (acc + bias) + 2.0 * c + col
    schedule:
      backends: [cuda]
      epilogue: {operands: smem}
    """)


def _counts(built) -> Counter:
    return Counter(op.split(".")[0] for op in opcodes(sass(built.files["kernel.cubin"])))


def _no_local(built) -> None:
    usage = resource_usage(built.files["kernel.cubin"])[built.plan.launch.kernel_name]
    assert usage["LOCAL"] == 0 and usage["STACK"] == 0, usage


# ------------------------------------------------------------------------------------------------------ the plan

def test_default_reads_global_memory_and_smem_adds_a_slot():
    g, s = plan_spec(BIAS_GELU, CUDA), plan_spec(BIAS_GELU, SMEM)
    assert g.epi_vectors.slots == 0 and not g.launch.kernel_name.endswith("_vs")
    assert "vec" not in {b.name for b in g.pipeline.smem_buffers}
    vs = s.epi_vectors
    assert s.launch.kernel_name == g.launch.kernel_name + "_vs"
    assert [(v.name, v.bcast, v.elems, v.copies) for v in vs.vectors] == [("bias", "row", 256, 64)]   # 256 f32
    assert (vs.slots, vs.slot_bytes, vs.readers) == (1, 1024, 2)       # cooperative: one slot both consumers read
    bufs = {b.name: b for b in s.pipeline.smem_buffers}
    assert bufs["vec"].bytes * bufs["vec"].count == 1024 and bufs["vec_full"].count == 1 == bufs["vec_empty"].count
    assert s.launch.smem_bytes - g.launch.smem_bytes == 1024 + 16                     # the slot and its two barriers, in the budget


def test_pingpong_has_a_slot_a_consumer_and_columns_are_staged():
    pp = plan_spec(RESIDUAL_PP, {"schedule.epilogue.operands": "smem"}).epi_vectors
    assert (pp.slots, pp.readers) == (2, 1)
    col = plan_spec(RESIDUAL, {**SMEM, **RAGGED, "op.inputs.bias": {"shape": ["M", 1], "dtype": "bf16"}})
    v, = col.epi_vectors.vectors
    assert (v.bcast, v.elems, v.itemsize, v.copies) == ("col", col.tiles.tile_m, 2, col.tiles.tile_m * 2 // 16)


def test_rendered_reads_come_from_the_slot():
    cu = render(plan_spec(RESIDUAL, {**SMEM, **RAGGED}), "cuda")
    assert "sg_mbar_wait(S_vec_full + 8 * vslot, (vec_n / 1) & 1);" in cu                  # before the epilogue
    assert "lds2_in_bias(vbase + 0u + (uint32_t)(gcol - n0) * 4u, p_bias);" in cu
    assert "const float v_bias = p_bias[q & 1];" in cu
    assert "ld2_in_res(in_res, b, grow + 8, gcol, p_res[1]);" in cu                          # the residual: global
    assert "sg_mbar_arrive(S_vec_empty + 8 * vslot);" in cu
    # ragged N: the copy past the end is zero-filled, its source clamped to the operand
    assert "const int left = (1000 - e0) * 4;" in cu
    assert "left >= 16 ? 16u : left > 0 ? (uint32_t)left : 0u" in cu
    assert "ld2_in_bias(in_bias" not in cu


def test_rendered_fills_follow_the_tiles_that_run_an_epilogue():
    pp = render(plan_spec(RESIDUAL_PP, {"schedule.epilogue.operands": "smem"}), "cuda")
    assert "const int vslot = lt % 2;" in pp and "sg_mbar_wait(S_vec_full + 8 * vslot, (lt / 2) & 1);" in pp
    assert "sg_mbar_init(S_vec_empty + 8 * s, 128);" in pp                 # one consumer reads a ping-pong slot
    split = render(plan_spec(RESIDUAL, {**SMEM, **VARIANTS["split_k"][1]}), "cuda")
    assert "} else if (wg_thread / 32 == 1 && rank == 0) {" in split       # rank 0 runs the epilogue
    sk = render(plan_spec(RESIDUAL, {**SMEM, **VARIANTS["stream_k"][1]}), "cuda")
    fill = sk[sk.index("} else if (wg_thread / 32 == 1) {"):]
    assert fill.index("if (kb_lo != 0) continue;") < fill.index("sg_cp16_zfill(")   # only the k-step-0 units


# ------------------------------------------------------------------------------------------------------- SASS

@pytest.fixture(scope="module")
def bias_gelu(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("smem-operands"))
    return build_spec(str(BIAS_GELU), CUDA, cache=cache), build_spec(str(BIAS_GELU), SMEM, cache=cache)


def test_sass_bias_ldgs_become_ldgsts(bias_gelu):
    g, s = (_counts(b) for b in bias_gelu)
    # the bias is the epilogue's only global operand: read per chunk with LDG from global memory, copied by LDGSTS
    # (cp.async) with operands: smem, where no LDG is left and the epilogue reads shared memory (LDS)
    assert g["LDG"] > 0 and g["LDGSTS"] == 0, g
    assert s["LDG"] == 0 and s["LDGSTS"] > 0 and s["LDS"] > 0, s
    assert s["HGMMA"] == g["HGMMA"]
    for b in bias_gelu:
        _no_local(b)


VARIANTS = {
    "ragged": (RESIDUAL, RAGGED),
    "pingpong": (RESIDUAL_PP, {}),
    "column_bias": (RESIDUAL, {**RAGGED, "op.inputs.bias": {"shape": ["M", 1], "dtype": "bf16"}}),
    "split_k": (RESIDUAL, {"schedule.cluster": [1, 1, 2], "schedule.in_specs": {
        "a": {"block_shape": [128, 64]}, "b": {"block_shape": [128, 64]}},
        "schedule.out_specs": {"out": {"block_shape": [128, 128]}}, "schedule.pipeline.max_concurrent_steps": 3}),
    "stream_k": (RESIDUAL, {"schedule.persistent.decomposition": "stream_k", "schedule.cluster": [1, 1]}),
    "direct": (RESIDUAL, {**RAGGED, "schedule.epilogue.store": "direct"}),
    "dynamic": (ROOT / "specs" / "linear_gelu_bf16_dynamic.yaml", {}),
}


@pytest.mark.parametrize("case", list(VARIANTS))
def test_variants_compile_with_copies_and_no_bias_ldg(case, tmp_path):
    path, ov = VARIANTS[case]
    b = build_spec(str(path), {**SMEM, **ov}, cache=Cache(tmp_path))
    assert b.plan.epi_vectors.slots
    ops = opcodes(sass(b.files["kernel.cubin"]))
    assert any(op.startswith("LDGSTS") for op in ops), case
    # the f32 bias pairs were the kernels' only 8-byte LDGs and a bf16 column bias their only 2-byte ones (the bf16
    # residual is read in 4-byte pairs); the dynamic spec reads nothing else
    loads = [op for op in ops if op.startswith("LDG.")]
    assert not any(re.search(r"\.(64|U16|S16)\b", op) for op in loads), (case, sorted(set(loads)))
    assert case != "dynamic" or not loads, loads
    _no_local(b)


def test_batched_with_a_column_operand_compiles(tmp_path):
    spec = tmp_path / "batched.yaml"
    spec.write_text(BATCHED)
    b = build_spec(str(spec), {}, cache=Cache(tmp_path))
    assert b.plan.batched and b.plan.tiles.ragged
    assert {v.name for v in b.plan.epi_vectors.vectors} == {"bias", "col"}
    c = _counts(b)
    assert c["LDGSTS"] > 0, c
    _no_local(b)


# ----------------------------------------------------------------------------------------------- located errors

@pytest.mark.parametrize("path, overrides, says", [
    (BIAS_GELU, {"schedule.epilogue.operands": "smem"}, "plgpu.load"),                       # backends: cuda, pallas
    (BIAS_GELU, {**SMEM, "schedule.target": "sm_100a"}, "sm_100a"),
    (NOEPI, SMEM, "reads none"),
    (ROOT / "specs" / "collective_matmul_bf16_1024x4096.yaml", {"schedule.epilogue.operands": "smem"},
     "collective matmul"),
    (ROOT / "specs" / "grouped_moe_mixtral_bf16_dynamic.yaml", {"schedule.epilogue.operands": "smem"},
     "grouped matmul"),
    # (not a map or attention field: an unknown key at the epilogue, issue 42)
    (ROOT / "specs" / "add_bf16.yaml", {"schedule.epilogue.operands": "smem"}, "unknown key 'epilogue'"),
    (ROOT / "specs" / "attention_bf16_4096.yaml", {"schedule.epilogue.operands": "smem"}, "unknown key 'epilogue'"),
])
def test_what_cannot_stage_its_operands_is_located(path, overrides, says):
    lines = plan_errors(path, overrides)
    hits = [ln for ln in lines if ("schedule.epilogue.operands:" in ln or "schedule.epilogue:" in ln) and says in ln]
    assert hits, lines
    assert re.match(r".+\.(yaml|toml):\d+:\d+: ", hits[0]), hits[0]


def test_the_slots_count_in_the_smem_budget():
    # fp8 128 x 256 x 128, 4 stages: 230464 B without; scale_a (128 rows), scale_b and bias (256 columns) add 2.5 KiB
    assert plan_spec(FP8_ROWWISE).launch.smem_bytes == 230464
    lines = plan_errors(FP8_ROWWISE, SMEM)
    hit = [ln for ln in lines if "schedule.pipeline.max_concurrent_steps:" in ln and "vec 2560 B" in ln]
    assert hit and "at most 3 stages fit" in hit[0], lines
    assert plan_spec(FP8_ROWWISE, {**SMEM, "schedule.pipeline.max_concurrent_steps": 3}).epi_vectors.slots == 1


def test_the_planners_ring_leaves_room_for_the_slots(tmp_path):
    # the fp8 spec without its schedule: 4 stages of 128 x 256 x 128 fill the SMEM to 1984 B of the end, so with its
    # three vectors staged (2560 B + barriers) the planner picks 3 stages instead of a plan that does not fit
    spec = tmp_path / "fp8.yaml"
    spec.write_text(FP8_ROWWISE.read_text().split("\nschedule:")[0] + "\n")
    assert plan_spec(spec, CUDA).pipeline.stages == 4
    p = plan_spec(spec, SMEM)
    assert p.pipeline.stages == 3 and p.epi_vectors.slot_bytes == 2560


def test_explain_says_where_the_operands_are_read():
    assert "operands from global memory: each thread loads its values of bias" in explain(plan_spec(BIAS_GELU, CUDA))
    text = explain(plan_spec(BIAS_GELU, SMEM))
    assert "operands from SMEM: producer warp 1 copies each tile's slice of bias (256 columns a tile)" in text
    assert re.search(r"vec +1 x 1024 B", text), text


# --------------------------------------------------------------------------------------------------------- GPU

GPU_CASES = {
    "bias_gelu_ragged": (BIAS_GELU, {**RAGGED, "schedule.in_specs.x.out_of_bounds": "zero",
                                     "schedule.in_specs.w.out_of_bounds": "zero"}),
    "bias_gelu_4096x4096x1024": (BIAS_GELU, {"op.sizes.K": 1024}),
    "bias_residual_ragged": (RESIDUAL, RAGGED),
    "bias_residual_4096x4096x1024": (RESIDUAL, {}),
    "bias_residual_pingpong": (RESIDUAL_PP, {**RAGGED, "schedule.in_specs.a.out_of_bounds": "zero",
                                             "schedule.in_specs.b.out_of_bounds": "zero"}),
    "bias_residual_stream_k": (RESIDUAL, {"schedule.persistent.decomposition": "stream_k",
                                          "schedule.cluster": [1, 1]}),
    "column_bias_direct": (RESIDUAL, {**RAGGED, "schedule.epilogue.store": "direct",
                                      "op.inputs.bias": {"shape": ["M", 1], "dtype": "bf16"}}),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_smem_operands_match_float64_on_gpu(case):
    from schedgen.verify import verify_built
    path, ov = GPU_CASES[case]
    b = build_spec(str(path), {**SMEM, **ov}, cache=Cache(Path(tempfile.mkdtemp(prefix="schedgen-smem-ops-"))))
    assert b.plan.epi_vectors.slots
    checks = verify_built(b, ["cuda"])
    assert checks and all(c.ok for c in checks), checks


def test_gpu_cases_plan_on_the_cpu():
    for case, (path, ov) in GPU_CASES.items():
        assert plan_spec(path, {**SMEM, **ov}).epi_vectors.slots, case


def test_tune_alias_sets_the_field_and_builds_cuda_for_smem(tmp_path):
    from schedgen import tune as T
    spec = tmp_path / "tuned.yaml"
    spec.write_text(BIAS_GELU.read_text() + "tune:\n  params:\n    epilogue_operands: [global, smem]\n")
    points = {c.values["epilogue_operands"]: c.overrides for c in T.expand(T.load_space(spec))}
    assert points["smem"]["schedule.epilogue.operands"] == "smem" and points["smem"]["schedule.backends"] == ["cuda"]
    assert points["global"]["schedule.epilogue.operands"] == "global"
    assert points["global"]["schedule.backends"] == ["cuda", "pallas"]          # the spec's own (the default)
    for ov in points.values():
        plan_spec(spec, ov)                                                         # both plan
