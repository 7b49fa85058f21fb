"""The rowwise family on the CPU: the body language and its located errors, the planner's choices, the float64
reference against direct numpy formulas, the CUDA kernels compiled by NVRTC (no local memory), and the Pallas
kernels interpreted against float64 at small sizes with fresh random inputs and NaN-poisoned outputs."""
from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import SPECS_DIR, without_warpgroups
from schedgen.build import build_spec, package
from schedgen.errors import SpecErrors
from schedgen.families.rowwise.defaults import APPROX_WHY_ROWS
from schedgen.explain import explain
from schedgen.frontend.validate import load_spec
from schedgen.plan import dims, plan
from schedgen.reference import reference, rel_error, tolerance
from schedgen.render import render
from schedgen.runtime.kernel import load_package
from schedgen.toolchain.nvrtc import compile_cuda, sass

SOFTMAX = SPECS_DIR / "softmax_bf16.yaml"
LAYERNORM = SPECS_DIR / "layernorm_bf16.yaml"
RMSNORM = SPECS_DIR / "rmsnorm_bf16.yaml"
XENT = SPECS_DIR / "crossentropy_bf16.yaml"
BUNDLED = [SOFTMAX, LAYERNORM, RMSNORM, XENT]
EIGHT = {"block_shape": [8], "out_of_bounds": "zero"}     # 8 rows a block (M dynamic: the last block partial)


def _plan(path, ov=None):
    spec, src = load_spec(str(path), ov)
    return plan(spec, src)


def _errors(path, ov) -> list[str]:
    spec, src = load_spec(str(path), ov)
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    return [line[line.index(".yaml:") + 6:] for line in info.value.lines()]


# ------------------------------------------------------------------------------------------------ planning

def test_bundled_specs_plan_with_the_picks():
    got = {p.launch.name: (p.rows_per_block, p.warps_per_row, p.steps, p.vec, p.chunks, p.levels, p.launch.backends)
           for p in map(_plan, BUNDLED)}
    assert got == {
        "softmax_bf16": (1, 8, 2, 8, 4, 2, ("cuda", "pallas")),
        "layernorm_bf16": (2, 4, 2, 8, 4, 2, ("cuda", "pallas")),
        "rmsnorm_bf16": (1, 8, 1, 8, 4, 1, ("cuda", "pallas")),
        # 1 row a block: the Pallas kernel's per-row TMA would move 4 B (a located limit; the planner drops it)
        "crossentropy_bf16": (1, 16, 1, 8, 8, 1, ("cuda",)),
    }


def test_dynamic_m_is_an_extent_and_a_launch_argument():
    p = _plan(SOFTMAX)
    M = dims.size("M")
    assert p.m == M and p.num_row_blocks == dims.cdiv(M, 2) and p.launch.auto_blocks
    assert [(a.kind, a.operand) for a in p.launch.kernel_args] == [("ptr", 0), ("ptr", 1), ("i32", -1)]
    cu = render(p, "cuda")
    assert re.search(r"uint16_t\* __restrict__ out_y,\s+int sz_M\)", cu)
    assert "const int num_row_blocks = ((sz_M + 2 - 1) / 2);" in cu
    fixed = render(_plan(SOFTMAX, {"op.sizes.M": 4096}), "cuda")
    assert "sz_M" not in fixed and "const int kM = 4096;" in fixed


def test_reductions_get_levels_and_the_row_stays_in_registers():
    p = _plan(LAYERNORM)
    assert [(r.op, r.level) for r in p.reductions] == [("mean", 1), ("mean", 2)]
    assert p.body_level == {"mu": 1, "xc": 1, "var": 2, "y": 2}
    assert p.body_varies == {"mu": False, "xc": True, "var": False, "y": True}
    cu = render(p, "cuda")
    # x is copied once a row block (the first block's before the loop, each next one's in it) into the prefetch
    # ring, read back once (before the sweeps), stored once
    assert p.prefetch and cu.count("reinterpret_cast<const uint4*>(in_x + at0 + c * kGroup * kVec) + i") == 2
    assert cu.count("*ring_at(slot, s, c, kQoff_x + i)") == 1 and cu.count("st_out_y(out_y + at") == 1
    assert "__syncthreads();" in cu and "sg_warp_sum" in cu
    # pipeline.kind: none: no ring, x loaded straight into the registers once
    cu = render(_plan(LAYERNORM, {"schedule.pipeline.kind": "none",
                                  "schedule.pipeline.max_concurrent_steps": 2}), "cuda")
    assert cu.count("ld_in_x(in_x + at") == 1 and "sg_cp16(" not in cu.split("namespace {", 1)[1]


def test_softmax_by_logsumexp_is_one_sweep():
    p = _plan(SOFTMAX, {"op.body": "y = exp(x - logsumexp(x))"})
    assert p.levels == 1 and [r.combine for r in p.reductions] == ["lse"] and p.red_slots == 2
    assert "sg_warp_lse" in render(p, "cuda")


def test_ragged_row_falls_back_to_element_accesses():
    p = _plan(SOFTMAX, {"op.sizes.N": 1001})
    assert p.vec == 1 and p.chunks == -(-1001 // 256)
    assert "kQ_" not in render(p, "cuda")


def test_explain_names_the_passes_and_the_registers():
    text = explain(_plan(LAYERNORM))
    assert "2 sweep(s) over the row on chip" in text and "one HBM read of every input row" in text
    assert "red__r1 = mean over the row of (t_xc * t_xc)  (level 2: mean)" in text


# ------------------------------------------------------------------------------------------------ located errors

@pytest.mark.parametrize("ov, where, what", [
    ({"op.sizes.N": 262144, "schedule.cluster": [1]}, "schedule.out_specs.y", "too long for one CTA's registers"),
    ({"op.body": "y = sum(sum(x))"}, "op.body", "its argument has one value a row"),
    ({"op.body": "y = x * 2.0"}, "op.body", "elementwise body is the map family's"),
    ({"op.body": "y = take(x, x)"}, "op.body", "the column i must have one value a row"),
    ({"op.body": "y = mean(x, 1)"}, "op.body", "mean() takes one expression"),
    ({"op.body": "y = median(x)"}, "op.body", "function 'median' is not allowed"),
    ({"op.inputs.x.dtype": "f8e4m3"}, "op.inputs.x.dtype", "not a rowwise dtype"),
    ({"op.outputs.y.shape": ["M", 7]}, "op.outputs.y.shape", "none of the row shapes"),
    ({"schedule.cluster": [2], "schedule.backends": ["cuda", "pallas"]}, "schedule.cluster[0]",
     "the Pallas kernel keeps each row in one CTA"),
    ({"schedule.cluster": [3]}, "schedule.cluster[0]", "legal: 1, 2, 4, 8 (portable) or 16 (non-portable"),
    ({"schedule.cluster": [2, 2]}, "schedule.cluster[1]", "[C, 1, 1] (C CTAs a row)"),
    ({"op.sizes.N": 8200, "schedule.cluster": [4]}, "schedule.cluster[0]",
     "N = 8200 is not 4 equal slices of whole 8-element vectors (a multiple of 4 x 8 = 32)"),
    ({"schedule.cluster": [4], "schedule.persistent.num_blocks": 130}, "schedule.persistent.num_blocks",
     "not whole clusters of 4 CTAs"),
    ({"op.sizes.N": 262144, "schedule.cluster": [2]}, "schedule.out_specs.y.block_shape[0]",
     "too long for the registers of a cluster of 2 CTAs"),
    ({"schedule.num_warpgroups": 1, "schedule.out_specs.y.block_shape": [3, 8192]},
     "schedule.out_specs.y.block_shape[0]", "the rows must divide 4: 1, 2, 4"),
    ({"schedule.out_specs.y.block_shape": [1, 4096]}, "schedule.out_specs.y.block_shape[1]", "whole rows"),
    ({"schedule.out_specs.y.block_shape": [1, 8192], "schedule.out_specs.y.out_of_bounds": "nan"},
     "schedule.out_specs.y.out_of_bounds", "never load a row past M"),
    ({"schedule.pipeline.kind": "warp_specialized"}, "schedule.pipeline.kind", "no MMA"),
    ({"schedule.persistent.tile_order": "planar_snake"}, "schedule.persistent.tile_order", "row_major"),
    ({"schedule.grid": [4]}, "schedule.grid", "do not read grid"),
    ({"schedule.out_specs.y.block_shape": [1, 8192], "schedule.out_specs.y.delay_release": 1},
     "schedule.out_specs.y.delay_release", "do not read a block's delay_release"),
    ({"schedule.in_specs.x.block_shape": [1, 8192]}, "schedule.in_specs.x", "follows the first output's"),
])
def test_located_errors(ov, where, what):
    lines = _errors(SOFTMAX, ov)
    assert any(where in line and what in line for line in lines), lines


def test_per_row_output_must_be_reduced():
    lines = _errors(XENT, {"op.body": "loss = x - take(x, t)"})
    assert any("op.outputs.loss.shape" in line and "varies along the row" in line for line in lines), lines


def test_dynamic_row_length_is_rejected_where_it_is_declared():
    lines = _errors(SOFTMAX, {"op.sizes.N": {"dynamic": True, "max": 8192}})
    assert any("op.inputs.x.shape[1]" in line and "row length N must be a fixed size" in line for line in lines), lines


def test_ragged_m_needs_out_of_bounds_zero():
    lines = _errors(SOFTMAX, {"op.sizes.M": 4095, "schedule.out_specs.y.block_shape": [1, 8192]})
    assert any("out_of_bounds" in line and "not a whole number of row blocks of 2 rows" in line for line in lines)


def test_pallas_per_row_tma_limit_is_located_and_pinned():
    """jax 0.11.2's Mosaic GPU moves GMEM <-> SMEM by TMA only: a per-row block of 1 f32 (4 B) cannot go."""
    lines = _errors(XENT, {"schedule.backends": ["cuda", "pallas"]})
    assert any("schedule.out_specs.loss.block_shape[0]" in line and "multiple of 16 B" in line for line in lines)
    assert _plan(XENT, {"schedule.backends": ["cuda", "pallas"], "op.sizes.N": 1024,
                        "schedule.out_specs.loss": EIGHT}).rows_per_block == 8


def test_a_row_kept_for_a_later_pass_has_a_located_register_limit():
    """Without a cluster (written [1]) the error names the cluster that fits the written blocking."""
    lines = _errors(SOFTMAX, {"op.sizes.N": 262144, "schedule.cluster": [1]})
    assert any("too long for one CTA's registers" in line and "DSMEM" in line and "at most 32768" in line and
               "schedule.cluster: [16, 1, 1] fits this blocking" in line for line in lines), lines
    lines = _errors(LAYERNORM, {"op.sizes.N": 262144, "schedule.out_specs.y": {"block_shape": [4, 262144]}})
    # (4 rows a block on 8 warps: two warps a row; even 16 CTAs are too few)
    assert any("even a cluster of 16 CTAs (through DSMEM) does not fit" in line for line in lines), lines


def test_take_loads_its_one_element_instead_of_a_compare_per_element():
    """take(e, i): one thread of the row loads e's inputs at column i (the others add 0); the sweep has no
    per-element compare against the column."""
    cu = render(_plan(XENT), "cuda")
    assert "e == col1" not in cu and "if (t == 0 && live[s] && col1[s] >= 0 && col1[s] < kN) {" in cu
    assert cu.count("__ldg(in_x + (long long)row[s] * kN + gcol)") == 1
    cu = render(_plan(XENT, TAKE_OF_AN_EXPRESSION), "cuda")
    assert "__ldg(in_w + gcol)" in cu and "acc2[s] = ((v_x * v_w) - red__r1[s]);" in cu
    cu = render(_plan(XENT, {"op.sizes.N": 65536, "schedule.cluster": [4]}), "cuda")
    assert "if (t == 0 && rank == 0 && live[s] && col1[s] >= 0 && col1[s] < kN) {" in cu


def test_only_the_lead_warp_combines_a_last_level_nothing_along_the_row_reads():
    """Cross-entropy's one level feeds only its per-row loss (written by thread 0): the row's 15 other warps skip
    the SMEM combination of the 16 partials; softmax's last level feeds its rows, so every warp combines."""
    assert "    if (wr == 0) {" in render(_plan(XENT), "cuda")
    assert "if (wr == 0)" not in render(_plan(SOFTMAX), "cuda")
    cu = render(_plan(XENT, {"op.sizes.N": 65536, "schedule.cluster": [4]}), "cuda")
    assert cu.index("    if (wr == 0) {") < cu.index("sg_cluster_sync();")


# ------------------------------------------------------------------------------------------------ prefetch ring

def test_the_prefetch_ring_follows_pipeline_kind(tmp_path):
    """emit_pipeline (the default): two SMEM slots of a piece of rows (every thread's vectors of kSteps rows), the
    next one copied by cp.async while this one is reduced; none: no ring, the SMEM and the occupancy of before."""
    p = _plan(SOFTMAX)
    assert p.prefetch and p.ring_slot_bytes == 256 * 2 * 4 * 16 and p.ring_offset % 16 == 0
    assert p.launch.smem_bytes == p.ring_offset + 2 * p.ring_slot_bytes and p.launch.blocks_per_sm == 2
    cu = render(p, "cuda")
    assert "sg_cp_wait<1>();" in cu and "constexpr int kRingOffset = 256;" in cu
    assert "the next row block is copied to SMEM by cp.async" in explain(p)
    q = _plan(SOFTMAX, {"schedule.pipeline.kind": "none", "schedule.pipeline.max_concurrent_steps": 2})
    # (2 parities x 2 levels x 8 warps x 1 partial, f32; one row in flight: 80 registers, three blocks an SM)
    assert not q.prefetch and q.launch.smem_bytes == 2 * 2 * 8 * 1 * 4 and q.steps == 1 and q.launch.blocks_per_sm == 3
    assert "sg_cp_wait<" not in render(q, "cuda") and "prefetch   none (pipeline.kind: none)" in explain(q)
    # element accesses (N not a multiple of 8): cp.async cannot move 2 bytes, so no ring
    assert not _plan(SOFTMAX, {"op.sizes.N": 1001}).prefetch
    # a Pallas-only spec has no CUDA ring
    assert not _plan(without_warpgroups(SOFTMAX, tmp_path), {"schedule.backends": ["pallas"]}).prefetch


def test_the_ring_bounds_blocks_per_sm_and_segments():
    """One 512-thread block of a 32000 vocabulary row: two 64 KiB slots (8 vectors a thread), one block an SM;
    a streaming row goes through the ring in segments of at most 32 registers."""
    x = _plan(XENT)
    assert x.prefetch and x.segments == 1 and x.ring_slot_bytes == 512 * 8 * 16 and x.launch.blocks_per_sm == 1
    y = _plan(XENT, {"op.sizes.N": 65536})            # 64 registers kept: streams in 2 segments through the ring
    assert y.prefetch and (y.segments, y.chunks, y.row_regs) == (2, 8, 32)
    z = _plan(XENT, {"op.sizes.N": 65536, "schedule.pipeline.kind": "none",      # fits the registers whole
                     "schedule.pipeline.max_concurrent_steps": 2})
    assert not z.prefetch and (z.segments, z.chunks, z.row_regs) == (1, 16, 64)


def test_a_ring_past_smem_is_located_or_picked_away(tmp_path):
    """A written emit_pipeline whose ring does not fit a block's SMEM is a located error naming pipeline.kind:
    none; an unscheduled spec at that row length gets pipeline.kind: none picked."""
    ov = {"op.sizes.N": 65536, "schedule.num_warpgroups": 4, "schedule.pipeline.max_concurrent_steps": 1,
          "schedule.pipeline.kind": "emit_pipeline", "schedule.backends": ["cuda"]}
    lines = _errors(SOFTMAX, ov)
    assert any("schedule.pipeline.kind" in line and "prefetch ring" in line and "262144 B" in line and
               "pipeline.kind: none" in line for line in lines), lines
    assert not _plan(SOFTMAX, {**ov, "schedule.pipeline.kind": "none",
                               "schedule.pipeline.max_concurrent_steps": 2}).prefetch
    from schedgen.plan import plan_with_picks
    spec, src = load_spec(str(unscheduled(SOFTMAX, tmp_path)), {"op.sizes.N": 65536})
    p, picks = plan_with_picks(spec, src)
    assert not p.prefetch and ("schedule", "pipeline", "kind") in [k.path for k in picks]
    assert ("schedule", "pipeline", "max_concurrent_steps") not in [k.path for k in picks]


# ------------------------------------------------------------------------------------------------ clusters

SOFTMAX_262K = SPECS_DIR / "softmax_bf16_262k.yaml"


def unscheduled(path, where):
    """A copy of a bundled spec without its schedule section (so the planner picks every field)."""
    from pathlib import Path
    text = Path(path).read_text()
    out = Path(where) / Path(path).name
    out.write_text(text[:text.index("\nschedule:") + 1])
    return out


def test_the_bundled_262k_softmax_splits_its_rows_across_a_picked_cluster():
    spec, src = load_spec(str(SOFTMAX_262K))
    from schedgen.plan import plan_with_picks
    p, picks = plan_with_picks(spec, src)
    assert (p.launch.cluster_dims, p.rows_per_block, p.warps_per_row, p.steps, p.vec, p.chunks, p.row_regs) == \
        ((8, 1, 1), 1, 16, 1, 8, 8, 32)
    assert p.launch.num_blocks == 256 * 8 and p.launch.backends == ("cuda",) and p.launch.kernel_name.endswith("_c8")
    # the cross-warp partials (2 parities x 2 levels x 16 warps) and the cluster's (2 x 2 x 1 row), f32, then the
    # prefetch ring (16-byte aligned): two slots of 512 threads x 8 vectors of 16 B
    assert p.ring_offset == (2 * 2 * 16 + 2 * 2) * 4 and p.ring_slot_bytes == 512 * 8 * 16
    assert p.launch.smem_bytes == p.ring_offset + 2 * p.ring_slot_bytes
    assert [(k.path, k.value) for k in picks if k.path == ("schedule", "cluster")] == [(("schedule", "cluster"),
                                                                                        [8, 1, 1])]
    from schedgen.plan.launch import launch_record
    rec = launch_record(p)
    assert rec.cluster == (8, 1, 1) and rec.num_blocks % 8 == 0
    text = explain(p)
    assert "cluster    8 CTAs a row block" in text and "[r x 32768, (r+1) x 32768)" in text


@pytest.mark.parametrize("path, n, cluster, regs", [(SOFTMAX, 131072, 4, 32), (SOFTMAX, 262144, 8, 32),
                                                    (LAYERNORM, 131072, 8, 16), (LAYERNORM, 262144, 16, 16),
                                                    (RMSNORM, 131072, 16, 16), (RMSNORM, 262144, 16, 32)])
def test_a_long_kept_row_plans_with_no_schedule_written(path, n, cluster, regs, tmp_path):
    """Softmax, layernorm and rmsnorm at 128 K and 256 K columns: the planner picks the fewest CTAs a row whose
    slices take at most 32 registers a thread, 16 when weights along the row are loaded in every sweep too
    (layernorm, rmsnorm: 32 there spills at 512 threads; rmsnorm keeps two input rows, twice the registers a
    column, so at 256 K even 16 CTAs take 32)."""
    spec, src = load_spec(str(unscheduled(path, tmp_path)), {"op.sizes.N": n})
    p = plan(spec, src)
    assert p.launch.cluster_dims == (cluster, 1, 1) and p.row_regs == regs and p.segments == 1, (p.launch.kernel_name, p.row_regs)
    assert p.launch.backends == ("cuda",)


def test_the_bundled_blocking_gets_the_cluster_that_fits_it():
    """A written blocking (2 warpgroups, 2 rows in flight) at 256 K columns: 16 CTAs (non-portable)."""
    p = _plan(SOFTMAX, {"op.sizes.N": 262144})
    assert p.launch.cluster_dims == (16, 1, 1) and p.row_regs == 64
    assert "non-portable size" in explain(p)


def test_a_written_cluster_splits_short_and_streaming_rows_too():
    p = _plan(SOFTMAX, {"schedule.cluster": [2]})          # 8192: 4096 columns a CTA
    assert p.launch.cluster_dims == (2, 1, 1) and p.chunks == 2 and p.launch.backends == ("cuda",)
    x = _plan(XENT, {"op.sizes.N": 262144, "schedule.cluster": [2]})   # streams each CTA's 131072 columns
    assert x.launch.cluster_dims == (2, 1, 1) and x.segments == 4 and x.chunks == 8


CLUSTER_VARIANTS = [(SOFTMAX_262K, None),
                    (SOFTMAX, {"op.sizes.N": 262144}),                                         # 16 CTAs
                    (LAYERNORM, {"op.sizes.N": 16384, "schedule.cluster": [4]}),                # vectors along the row
                    (RMSNORM, {"op.sizes.N": 131072, "schedule.cluster": [8]}),
                    (XENT, {"op.sizes.N": 65536, "schedule.cluster": [4]}),                    # take, logsumexp
                    (SOFTMAX, {"op.sizes.N": 5008, "schedule.cluster": [2]}),                  # partial chunks
                    (SOFTMAX, {"op.sizes.N": 65536, "schedule.cluster": [8], "op.inputs.x.dtype": "f32",
                               "op.outputs.y.dtype": "f32"})]


@pytest.mark.parametrize("path, ov", CLUSTER_VARIANTS, ids=lambda v: getattr(v, "stem", str(v)))
def test_cluster_kernels_reduce_through_dsmem(path, ov):
    """NVRTC + SASS: the cluster barrier (UCGABAR_ARV / UCGABAR_WAIT), the DSMEM loads (mapa lowers to a PRMT
    into the shared window, SR_SWINHI, then a generic LD), the CTA's rank, and no local memory."""
    p = _plan(path, ov)
    assert p.launch.cluster_dims[0] > 1
    cu = render(p, "cuda")
    assert "barrier.cluster.arrive.release.aligned" in cu and "mapa.shared::cluster.u32" in cu
    assert "ld.shared::cluster.f32" in cu and cu.count("sg_cluster_sync();") == p.levels + 1
    text = sass(compile_cuda(cu).cubin)
    assert not re.search(r"\b(LDL|STL)\b", text), "local memory (spills) in the kernel"
    assert re.search(r"\bUCGABAR_ARV\b", text) and re.search(r"\bUCGABAR_WAIT\b", text)
    assert re.search(r"\bPRMT R\d+, R\d+, 0x654, R\d+", text) and "SR_SWINHI" in text
    assert re.search(r"\bLD\.E R\d+, \[R\d+\]", text) and "SR_CgaCtaId" in text


def test_unclustered_kernels_have_no_cluster_code():
    cu = render(_plan(SOFTMAX), "cuda")
    assert "sg_cluster" not in cu and "kNc" not in cu and "col0" not in cu


@pytest.mark.parametrize("n, segments, vec", [(128256, 4, 8), (262144, 8, 8), (128257, 32, 1)])
def test_long_vocabulary_rows_stream_through_the_registers(n, segments, vec):
    """Cross-entropy reads its row in one reduction level and keeps nothing of it: a Llama-3 vocabulary (128256)
    or longer streams through the registers in segments, log-sum-exp merged online."""
    p = _plan(XENT, {"op.sizes.N": n})
    assert (p.segments, p.chunks, p.vec) == (segments, 8, vec)
    cu = render(p, "cuda")
    assert f"constexpr int kSegs = {segments};" in cu and "for (int seg = 0; seg < kSegs; ++seg) {" in cu
    assert "lse0[s] = acc0[s] == sg_ninf() ? 0.0f : lse0[s] * sg_exp(acc0[s] - mx0);" in cu
    text = sass(compile_cuda(cu).cubin)
    assert not re.search(r"\b(LDL|STL)\b", text)
    assert "streams through the registers in" in explain(p)


# ------------------------------------------------------------------------------------------------ float64 reference

def test_reference_matches_direct_formulas():
    rng = np.random.default_rng(1)
    m, n = 5, 64
    x, r = rng.standard_normal((m, n)), rng.standard_normal((m, n))
    w, b = rng.standard_normal(n), rng.standard_normal(n)
    t = rng.integers(0, n, m).astype(np.float32)
    sm = reference(load_spec(str(SOFTMAX))[0], {"M": m, "N": n}, {"x": x})["y"]
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(1, keepdims=True), rtol=1e-12)
    ln = reference(load_spec(str(LAYERNORM))[0], {"M": m, "N": n}, {"x": x, "w": w, "b": b})["y"]
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    np.testing.assert_allclose(ln, (x - mu) / np.sqrt(var + 1e-5) * w + b, rtol=1e-6)
    out = reference(load_spec(str(RMSNORM))[0], {"M": m, "N": n}, {"x": x, "residual": r, "w": w})
    h = x + r
    np.testing.assert_allclose(out["h"], h, rtol=1e-12)
    np.testing.assert_allclose(out["y"], h / np.sqrt((h * h).mean(1, keepdims=True) + 1e-6) * w, rtol=1e-6)
    ce = reference(load_spec(str(XENT))[0], {"M": m, "N": n}, {"x": x, "t": t})["loss"]
    lse = np.log(np.exp(x).sum(1))
    assert ce.shape == (m,)
    np.testing.assert_allclose(ce, lse - x[np.arange(m), t.astype(int)], rtol=1e-10)


# ------------------------------------------------------------------------------------------------ CUDA: NVRTC, SASS

# take of an expression of a row input, a vector along the row and a lower level's reduction (level 2)
TAKE_OF_AN_EXPRESSION = {"op.inputs.w": {"shape": ["N"], "dtype": "bf16"},
                         "op.body": "loss = logsumexp(x) - take(x * w - mean(x), t)"}

VARIANTS = [(SOFTMAX, None), (LAYERNORM, None), (RMSNORM, None), (XENT, None),
            (SOFTMAX, {"op.sizes.N": 1001}),                                   # ragged row: element accesses
            (SOFTMAX, {"op.inputs.x.dtype": "f32", "op.outputs.y.dtype": "f32"}),
            (LAYERNORM, {"op.inputs.x.dtype": "f16", "op.outputs.y.dtype": "f32", "op.sizes.N": 256}),
            (XENT, {"op.inputs.t.shape": ["M", 1], "op.outputs.loss.shape": ["M", 1], "op.sizes.N": 32000,
                    "schedule.out_specs.loss.block_shape": [1, 1],
                    "op.inputs.x.dtype": "bf16"}),
            (SOFTMAX, {"op.body": "y = exp(x - logsumexp(x))", "schedule.persistent.loop": "none"}),
            (SOFTMAX, {"schedule.pipeline.kind": "none"}),                     # no prefetch: the old loads
            (XENT, {"op.sizes.N": 128256}),                                    # segments through the ring
            (XENT, {"op.sizes.N": 128256, "schedule.pipeline.kind": "none",
                    "schedule.pipeline.max_concurrent_steps": 2}),
            (XENT, TAKE_OF_AN_EXPRESSION)]


@pytest.mark.parametrize("path, ov", VARIANTS, ids=lambda v: getattr(v, "stem", str(v)))
def test_cuda_compiles_without_local_memory(path, ov):
    try:
        p = _plan(path, ov)
    except SpecErrors as exc:   # a variant past the register limit is its own test above
        pytest.skip(str(exc.lines()[0]))
    cubin = compile_cuda(render(p, "cuda")).cubin
    text = sass(cubin)
    assert not re.search(r"\b(LDL|STL)\b", text), "local memory (spills) in the kernel"
    assert re.search(r"\bSHFL\.BFLY\b", text)
    loads = r"\bLDGSTS\.E\.BYPASS\.128\b" if p.prefetch else r"\bLDG\.E\.(128|ENL2\.256)"
    if p.vec > 1:
        assert re.search(loads, text)
        assert re.search(r"\bSTG\.E\.(EF\.)?128\b", text) or any(o.kind != "row" for o in p.outputs)
    if p.prefetch:         # the ring read back in 16-byte words after waiting for all but the newest group
        assert re.search(r"\bLDS\.128\b", text) and re.search(r"\bDEPBAR\.LE SB0, 0x1\b", text)


# ------------------------------------------------------------------------------------------------ Pallas, interpreted

def _interpret(path, sizes: dict, seed: int, ov=None, inputs=None):
    pytest.importorskip("jax")
    import jax.numpy as jnp
    from schedgen.reference import random_inputs
    from schedgen.verify import interpret_params, poisoned_outputs
    b = build_spec(str(path), overrides={**{f"op.sizes.{k}": v for k, v in sizes.items() if k == "N"}, **(ov or {})})
    assert "pallas" in b.plan.launch.backends, b.plan.launch.backends
    kernel = load_package(package(b, __import__("tempfile").mkdtemp(prefix="rowwise-")))
    ins = inputs(b.plan, sizes) if inputs else random_inputs(b.spec, sizes, seed)
    call = kernel.bind([ins[o.name].shape for o in b.plan.inputs])
    outs = [jnp.asarray(o) for o in poisoned_outputs(b.plan, kernel.output_shapes(call))]
    got = kernel._pallas.run_into([jnp.asarray(ins[o.name]) for o in b.plan.inputs], outs,
                                  interpret=interpret_params())
    ref = reference(b.spec, sizes, ins)
    for o, g in zip(b.plan.outputs, got):
        g = np.asarray(g)
        assert g.shape == ref[o.name].shape and np.isfinite(g.astype(np.float32)).all()
        err = rel_error(g, ref[o.name])
        assert err <= tolerance(o.dtype, False), (o.name, err)
    return b.plan


@pytest.mark.parametrize("path", [SOFTMAX, LAYERNORM, RMSNORM], ids=lambda p: p.stem)
def test_pallas_interpreted_matches_float64(path):
    p = _interpret(path, {"M": 7, "N": 512}, seed=3)            # M odd: the last step partial
    assert p.n == 512


def test_approx_math_is_picked_where_the_16_bit_data_bounds_the_error():
    """Not written: approx_math where every output is bf16 / f16 (softmax), and where the f32 outputs are per-row
    values of 16-bit rows (cross-entropy's loss); not where a full row is written in f32, nor for f32 logits;
    written, as written."""
    p = _plan(SOFTMAX)
    assert p.approx_math is True
    assert _plan(SOFTMAX, {"schedule.compiler_params.approx_math": False}).approx_math is False
    assert _plan(SOFTMAX, {"op.outputs.y.dtype": "f32"}).approx_math is False
    assert _plan(SOFTMAX, {"op.inputs.x.dtype": "f32"}).approx_math is True      # the bf16 output rounds
    assert _plan(XENT).approx_math is True
    assert _plan(XENT, {"op.inputs.x.dtype": "f32"}).approx_math is False
    assert _plan(XENT, {"schedule.compiler_params.approx_math": False}).approx_math is False
    from schedgen.plan import plan_with_picks
    _, picks = plan_with_picks(*load_spec(str(XENT)))
    assert [p.why for p in picks if p.path[-1] == "approx_math"] == [APPROX_WHY_ROWS]


def test_approx_math_hoists_a_per_row_divisor_into_one_reciprocal():
    """approx_math: softmax's e / sum(e) becomes e * (1 / sum(e)), one reciprocal a row (a per-row statement
    before y, after the reductions that statement reads); the Pallas kernel, interpreted, still matches float64
    (the bf16 tolerance of exact math). Exact math keeps the division an element."""
    ov = {"schedule.compiler_params.approx_math": True}
    p = _plan(SOFTMAX, ov)
    assert [t for t, _ in p.body] == ["m", "e", "_q0", "y"] and p.body_roles["_q0"] == "scalar"
    assert [r.statement for r in p.reductions] == [0, 2]          # sum(e) is reduced before _q0 reads it
    cu = render(p, "cuda")
    assert "u__q0[s] = (1.0f / red__r1[s]);" in cu and "const float o_y = (t_e * u__q0[s]);" in cu
    # SASS: no division check (FCHK) an element, a handful of reciprocals (two rows, their slow paths) where the
    # exact kernel has one division an element (2 rows x 32 elements a thread)
    text = sass(compile_cuda(cu).cubin)
    assert "FCHK" not in text and len(re.findall(r"\bMUFU\.RCP\b", text)) <= 8
    exact = render(_plan(SOFTMAX, {"schedule.compiler_params.approx_math": False}), "cuda")
    assert "const float o_y = (t_e / red__r1[s]);" in exact and "_q0" not in exact
    assert len(re.findall(r"\bFCHK\b", sass(compile_cuda(exact).cubin))) == 64
    # a divisor that varies along the row stays a division, and so does one inside a reduction's argument (those
    # are not rewritten); a per-row divisor of a divided expression is hoisted
    q = _plan(SOFTMAX, {**ov, "op.body": "m = max(x)\ny = (x - m) / (x * x + 1.0) / sum(exp(x / m))"})
    assert [t for t, _ in q.body] == ["m", "_q0", "y"], q.body
    assert "(x * x + 1.0)" in str(q.body[-1][1].expr.text) and "_q1" not in q.body_roles
    _interpret(SOFTMAX, {"M": 5, "N": 512}, seed=9, ov=ov)


def _targets(plan, sizes):
    from schedgen.reference import random_inputs
    rng = np.random.default_rng(11)
    ins = random_inputs(load_spec(str(XENT))[0], sizes, 11)
    ins["t"] = rng.integers(0, sizes["N"], sizes["M"]).astype(np.float32)
    return ins


def test_pallas_cross_entropy_interpreted_with_class_targets():
    p = _interpret(XENT, {"M": 9, "N": 1024}, seed=0, inputs=_targets,
                   ov={"schedule.backends": ["cuda", "pallas"], "schedule.out_specs.loss": EIGHT})
    assert p.rows_per_block % 4 == 0     # the per-row TMA moves a multiple of 16 B


def test_pallas_ragged_row_and_f32():
    p = _interpret(SOFTMAX, {"M": 5, "N": 1152}, seed=4)     # 9 chunks of 128 columns
    assert (p.pallas_chunk, p.pallas_chunks) == (128, 9)
    _interpret(LAYERNORM, {"M": 3, "N": 256}, seed=5, ov={"op.inputs.x.dtype": "f32", "op.outputs.y.dtype": "f32"})


def test_pallas_renders_the_reductions_with_jnp(tmp_path):
    src = render(_plan(LAYERNORM), "pallas")
    assert "red__r0 = _mean([v_x[c] for c in range(_C)])" in src
    assert "in_specs += [plgpu.BlockSpec((_R, _L), lambda k, c=c: (_rows(k), c)) for c in range(_C)]   # x" in src
    assert "plgpu.emit_pipeline(" in src and "max_concurrent_steps=2," in src
    src = render(_plan(without_warpgroups(XENT, tmp_path), {"op.sizes.N": 1024, "schedule.backends": ["pallas"],
                                                      "schedule.out_specs.loss": EIGHT}),
                 "pallas")
    assert "red__r0 = _logsumexp([v_x[c] for c in range(_C)])" in src
    assert "red__r1 = _take([v_x[c] for c in range(_C)], p_t)" in src


@pytest.mark.parametrize("ov, what", [
    ({"op.sizes.N": 1000}, "has no such divisor"),                 # 1000 = 8 x 125: no multiple of 128 tiles it
    ({"op.sizes.N": 1001}, "a multiple of 16 B"),                  # 2002-byte rows: no TMA at all
])
def test_pallas_row_limits_are_located(ov, what):
    lines = _errors(SOFTMAX, {**ov, "schedule.backends": ["pallas"]})
    assert any("op." in line and what in line and "jax 0.11.2" in line for line in lines), lines
    assert _plan(SOFTMAX, ov).launch.backends == ("cuda",)               # unwritten backends: the planner drops Pallas


def test_unknown_kind_lists_the_families(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: sm\nop:\n  kind: softmax\n  sizes: {M: 4}\n")
    with pytest.raises(SpecErrors) as info:
        load_spec(str(path))
    (line,) = info.value.lines()
    from schedgen import families
    assert f"unknown kind 'softmax'; legal kinds: {', '.join(families.kinds())} (" in line and "rowwise" in line
    assert "_FAMILIES" in line and "rowwise: a body over each row with reductions" in line


# ------------------------------------------------------------------------------------------------ Pallas, lowered

def _lower(built, tmp_path):
    import jax
    from schedgen.runtime.arrays import DTYPES
    kernel = load_package(package(built, tmp_path / "out"))
    sizes = {r.name: r.max for r in kernel.launch.sizes}
    args = [jax.ShapeDtypeStruct(kernel.shape_of(o, sizes), DTYPES[o.dtype]) for o in kernel.inputs]
    return jax.jit(kernel._pallas.module().make(sizes)).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize("path, ov", [
    (XENT, {"op.sizes.N": 1024, "schedule.backends": ["cuda", "pallas"],       # logsumexp + take, 8 rows a step
            "schedule.out_specs.loss": EIGHT}),
    (SOFTMAX, {"op.sizes.N": 1152, "op.inputs.x.dtype": "f32", "op.outputs.y.dtype": "f32"}),
    (LAYERNORM, {"op.inputs.w.shape": [1, "N"], "op.sizes.M": 4099}),
], ids=["xent_1024", "softmax_f32_1152", "layernorm_1xN_ragged_m"])
def test_pallas_holdouts_lower_for_cuda(path, ov, tmp_path):
    pytest.importorskip("jax")
    built = build_spec(str(path), ov)
    assert "pallas" in built.plan.launch.backends
    assert "mosaic_gpu" in _lower(built, tmp_path)


def test_the_refused_pallas_shapes_still_fail_to_lower(tmp_path, monkeypatch):
    """Pins of the planner's Pallas limits (jax 0.11.2): with each check turned off, Mosaic GPU refuses the kernel
    while lowering: a per-row block of 4 B, a [M, 1] operand's 4-byte stride."""
    pytest.importorskip("jax")
    from schedgen.families.rowwise import plan as rowplan
    monkeypatch.setattr(rowplan, "_pallas_limits", lambda *a, **k: None)
    cases = [({"schedule.backends": ["cuda", "pallas"], "op.sizes.M": 64, "op.sizes.N": 1024,
               "schedule.out_specs.loss": {"block_shape": [1]}}, "divisible by 128, but got 32"),
             ({"op.inputs.t.shape": ["M", 1], "op.sizes.N": 512, "op.sizes.M": 64,
               "schedule.out_specs.loss.block_shape": [4], "schedule.backends": ["cuda", "pallas"]},
              "multiple of 16 bytes")]
    for i, (ov, what) in enumerate(cases):
        built = build_spec(str(XENT), ov)
        with pytest.raises(ValueError, match=what):
            _lower(built, tmp_path / str(i))
    # (chunks of 200 columns, not a multiple of a warpgroup's 128 lanes, fail Mosaic GPU's layout inference too,
    # but that search takes minutes to give up: checked by hand on 2026-12-04, not pinned here)


def test_gpu_softmax_variants_plan_on_the_cpu():
    """What the GPU tests build is legal, so a GPU run fails only on numbers (regression, H200 2026-12-04: the one-warp-
    a-row variant at N = 8192 was a located planning error that only the GPU run found)."""
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    from test_rowwise_gpu import SOFTMAX_VARIANTS
    for case, (ov, _n) in SOFTMAX_VARIANTS.items():
        spec, src = load_spec(str(SPECS_DIR / "softmax_bf16.yaml"), ov)
        p = plan(spec, src)
        assert p is not None, case


def test_gpu_cluster_cases_plan_on_the_cpu(tmp_path):
    """What the GPU cluster tests build is legal, clustered and compiles without local memory, so a GPU run fails
    only on numbers."""
    from test_rowwise_gpu import CLUSTERED
    for case, (stem, ov, _n) in CLUSTERED.items():
        path = SPECS_DIR / f"{stem}.yaml"
        if "schedule.cluster" not in ov:
            path = unscheduled(path, tmp_path)
        p = _plan(path, ov)
        assert p.launch.cluster_dims[0] > 1 and p.launch.backends == ("cuda",), case
        assert not re.search(r"\b(LDL|STL)\b", sass(compile_cuda(render(p, "cuda")).cubin)), case


def test_the_pallas_cluster_refusal_is_pinned_to_jax_0_11_2():
    """The Pallas kernel refuses a cluster because jax 0.11.2's interpret mode cannot run plgpu.cluster_ref (the
    lowering has it): an upgrade of jax should revisit the refusal."""
    jax = pytest.importorskip("jax")
    from pathlib import Path
    from jax.experimental.pallas import mosaic_gpu as plgpu
    from jax._src.pallas.mosaic_gpu import interpret
    assert jax.__version__ == "0.11.2" and hasattr(plgpu, "cluster_ref")
    sources = list(Path(interpret.__file__).parent.glob("*.py"))
    assert sources and not any("ClusterRef" in f.read_text() for f in sources)
    lines = _errors(SOFTMAX, {"schedule.cluster": [4], "schedule.backends": ["cuda", "pallas"]})
    assert any("schedule.cluster[0]" in line and "jax 0.11.2" in line and "interpret mode" in line for line in lines)


def test_a_dynamic_clustered_launch_record_round_trips():
    """M dynamic: the grid is cdiv(M, rows) clusters of C CTAs, an extent the launch record stores and reads back."""
    from schedgen.plan.launch import launch_record, loads
    p = _plan(SOFTMAX, {"op.sizes.N": 262144})
    rec = loads(launch_record(p).to_json())
    assert rec.cluster == (16, 1, 1)
    for m in (1, 3, 4096):
        got = dims.evaluate(rec.num_blocks, {"M": m})
        assert got == -(-m // 2) * 16 and got % 16 == 0


def test_an_output_rows_size_that_is_no_literal_is_no_partial_sum_output():
    """softmax_bf16_262k with x [2, N] written (y stays [M, N], M = 256): y's first extent is a size's value, not a
    literal P, so y is no partial-sum output: a located error about its shape, not a ValueError from int('M')
    (found by test_every_field)."""
    spec, src = load_spec(str(SPECS_DIR / "softmax_bf16_262k.yaml"), {"op.inputs.x.shape": [2, "N"]})
    with pytest.raises(SpecErrors) as exc:
        plan(spec, src)
    assert "op.outputs.y.shape" in str(exc.value) and "none of the row shapes" in str(exc.value)
