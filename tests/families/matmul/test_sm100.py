"""The matmul on sm_100a (issue 20): bundled-style specs compile with NVRTC, no GPU, to sm_100a cubins whose SASS
holds the tcgen05 MMA (UTCHMMA), its commit (UTCBAR), the TMEM allocation and loads (UTCATOMSWS, LDTM), TMA loads,
the epilogue's SMEM staging (STS.128) and TMA store (UTMASTG) with no st.global, and with loop: dynamic cluster
launch control (UGETNEXTWORKID), with no local memory; the planner's numbers for the target (the instruction
descriptor's fields, TMEM columns, the staging tiles in the SMEM budget); located errors for what sm_100a does not
take.
These kernels have NOT run on Blackwell hardware."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR, opcodes
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan
from schedgen.plan.gemm import instruction_descriptor
from schedgen.toolchain.nvrtc import resource_usage, sass

SPEC = SPECS_DIR / "matmul_bf16_4096_sm100.yaml"
FP8 = {"op.inputs.a.dtype": "f8e4m3", "op.inputs.b.dtype": "f8e4m3", "op.transpose_rhs": True,
       "op.inputs.b.shape": ["N", "K"], "schedule.in_specs.a.block_shape": [128, 128],
       "schedule.in_specs.b.block_shape": [256, 128]}
VARIANTS = {
    "bundled": {},
    "static_loop": {"schedule.persistent.loop": "nd_loop"},
    "f16": {"op.inputs.a.dtype": "f16", "op.inputs.b.dtype": "f16", "op.outputs.out.dtype": "f16"},
    "f32_out_bias_silu": {"op.outputs.out.dtype": "f32", "op.inputs.bias": {"shape": ["N"], "dtype": "f32"},
                          "op.epilogue": "out = silu(acc + bias)"},
    "row_scale_residual": {"op.inputs.s": {"shape": ["M", 1], "dtype": "f32"},
                           "op.inputs.r": {"shape": ["M", "N"], "dtype": "bf16"},
                           "op.epilogue": "out = acc * s + r"},
    "cluster2x1_multicast_rhs": {"schedule.persistent.loop": "nd_loop", "schedule.cluster": [2, 1],
                                 "schedule.in_specs.b.collective_axes": ["cluster"]},
    "cluster1x2_multicast_lhs": {"schedule.persistent.loop": "nd_loop", "schedule.cluster": [1, 2],
                                 "schedule.in_specs.a.collective_axes": ["cluster"]},
    "cta_pair_256": {"schedule.persistent.loop": "nd_loop", "schedule.cluster": [2, 1],
                     "schedule.in_specs.a.block_shape": [256, 64], "schedule.out_specs.out.block_shape": [256, 256]},
    "cta_pair_rhs_nk_f32_out": {"schedule.persistent.loop": "nd_loop", "schedule.cluster": [2, 1],
                                "op.transpose_rhs": True, "op.inputs.b.shape": ["N", "K"],
                                "op.outputs.out.dtype": "f32", "op.inputs.bias": {"shape": ["N"], "dtype": "f32"},
                                "op.epilogue": "out = gelu(acc + bias)",
                                "schedule.in_specs.a.block_shape": [256, 64], "schedule.in_specs.b.block_shape": [256, 64],
                                "schedule.out_specs.out.block_shape": [256, 256]},
    "rhs_nk_128": {"op.transpose_rhs": True, "op.inputs.b.shape": ["N", "K"],
                   "schedule.in_specs.b.block_shape": [128, 64], "schedule.out_specs.out.block_shape": [128, 128]},
    # fp8 (tcgen05.mma kind::f8f6f4, K 32): lhs [M, K], rhs [N, K], scales in the epilogue as on sm_90a
    "fp8_e4m3_tensor_scales": {**FP8, "op.inputs.sa": {"shape": [1], "dtype": "f32"},
                               "op.inputs.sb": {"shape": [1], "dtype": "f32"}, "op.epilogue": "out = acc * sa * sb"},
    "fp8_e5m2_row_col_scales_f32_out": {
        **FP8, "op.inputs.a.dtype": "f8e5m2", "op.inputs.b.dtype": "f8e5m2", "op.outputs.out.dtype": "f32",
        "op.inputs.sa": {"shape": ["M", 1], "dtype": "f32"}, "op.inputs.sb": {"shape": ["N"], "dtype": "f32"},
        "op.inputs.bias": {"shape": ["N"], "dtype": "f32"}, "op.epilogue": "out = acc * sa * sb + bias",
        "schedule.persistent.loop": "nd_loop"},
    "fp8_cta_pair_256": {**FP8, "schedule.persistent.loop": "nd_loop", "schedule.cluster": [2, 1],
                         "schedule.in_specs.a.block_shape": [256, 128],
                         "schedule.out_specs.out.block_shape": [256, 256]},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    out = {}
    for name, ov in VARIANTS.items():
        b = build_spec(SPEC, ov, cache=cache)
        out[name] = (b, sass(b.files["kernel.cubin"]))
    return out


@pytest.mark.parametrize("name", list(VARIANTS))
def test_sm100a_sass_has_tcgen05_mma_tmem_loads_and_no_local_memory(built, name):
    b, text = built[name]
    ops = opcodes(text)
    assert b.plan.launch.target == "sm_100a" and b.plan.mma.blackwell is not None
    fp8 = b.plan.in_dtype.startswith("f8")
    assert b.plan.mma.blackwell.mma_kind == ("f8f6f4" if fp8 else "f16")
    assert any(o.startswith("UTCQMMA" if fp8 else "UTCHMMA") for o in ops)   # tcgen05.mma kind::f8f6f4 / ::f16
    assert not any(o.startswith("UTCHMMA" if fp8 else "UTCQMMA") for o in ops)
    assert any(o.startswith("UTCBAR") for o in ops)            # tcgen05.commit -> mbarrier
    assert any(o.startswith("UTCATOMSWS") for o in ops)        # tcgen05.alloc / dealloc
    assert any(o.startswith("LDTM") for o in ops)              # tcgen05.ld
    assert any(o.startswith("UTMALDG") for o in ops)           # TMA loads
    # the epilogue: 16-byte st.shared into the swizzled staging tile, a TMA store (cp.async.bulk.tensor global <-
    # shared) and its bulk-group wait; the output never leaves by st.global
    assert any(o.startswith("UTMASTG.2D") for o in ops)
    assert any(o.startswith("STS.128") for o in ops)
    assert any(o.startswith("DEPBAR") for o in ops)            # cp.async.bulk.wait_group(.read)
    assert not any(o.startswith("STG") for o in ops)
    assert not any(o.startswith(("HGMMA", "WARPGROUP")) for o in ops)   # no Hopper wgmma
    assert not any(o.startswith(("LDL", "STL")) for o in ops)
    usage = resource_usage(b.files["kernel.cubin"])[b.plan.launch.kernel_name]
    assert usage.get("LOCAL", 0) == 0 and usage.get("STACK", 0) == 0
    assert (".target sm_100a" in b.files["kernel.ptx"].decode())
    clc = any(o.startswith("UGETNEXTWORKID") for o in ops)     # clusterlaunchcontrol.try_cancel
    assert clc == b.plan.mma.blackwell.dynamic
    pair = b.plan.mma.blackwell.cta_group == 2                     # tcgen05.mma.cta_group::2: the CTA pair's MMA
    assert any(o.startswith(("UTCHMMA.2CTA", "UTCQMMA.2CTA")) for o in ops) == pair
    assert any(o.startswith("UTMALDG.2D.2CTA") for o in ops) == pair   # loads completing on the leader's barrier
    assert any(o.startswith("UTCBAR.2CTA.MULTICAST") for o in ops) == pair
    multicast = b.plan.cluster.cluster_size > 1 and not pair           # TMA multicast, commit arriving in both CTAs
    assert any(o.startswith("UTMALDG.2D.MULTICAST") for o in ops) == multicast
    assert any(o.startswith("UTCBAR.MULTICAST") for o in ops) == multicast


def test_the_launch_record_carries_the_target_and_the_clc_grid(built):
    b, _ = built["bundled"]
    rec = b.files["launch.json"].decode()
    assert '"target": "sm_100a"' in rec
    p = b.plan
    assert p.launch.threads == 192 and p.launch.num_blocks == p.tiles.num_tiles == 32 * 16 and not p.launch.auto_blocks   # a CTA a tile
    s, _ = built["static_loop"]
    assert s.plan.launch.num_blocks == 148 and s.plan.launch.auto_blocks                                    # B200: 148 SMs


def test_instruction_descriptor_fields():
    d = instruction_descriptor("bf16", "f32", 128, 256, True, False)
    assert (d >> 4) & 3 == 1                    # D f32
    assert (d >> 7) & 7 == 1 and (d >> 10) & 7 == 1   # A, B bf16
    assert (d >> 15) & 1 == 0 and (d >> 16) & 1 == 1  # A K-major, B N-major
    assert (d >> 17) & 0x3F == 256 >> 3 and (d >> 24) & 0x1F == 128 >> 4
    assert d & 0xF == 0 and (d >> 13) & 3 == 0 and (d >> 23) & 1 == 0 and d >> 29 == 0
    assert instruction_descriptor("f16", "f32", 128, 128, True, True) == (1 << 4) | (128 >> 3) << 17 | (128 >> 4) << 24


def test_fp8_instruction_descriptor_and_k_steps(built):
    """kind::f8f6f4: A / B type codes 0 (e4m3) / 1 (e5m2) in bits 7-9 / 10-12, both K-major; 32 fp8 of K an MMA (4
    a 128-deep stage); the descriptors step 32 bytes a K step inside the 128-byte swizzle atom."""
    assert instruction_descriptor("f8e4m3", "f32", 128, 256, True, True) == 1 << 4 | 32 << 17 | 8 << 24
    d = instruction_descriptor("f8e5m2", "f32", 256, 128, True, True)
    assert (d >> 7) & 7 == 1 and (d >> 10) & 7 == 1 and (d >> 15) & 3 == 0 and (d >> 24) & 0x1F == 16
    for name, kind_code in (("fp8_e4m3_tensor_scales", 0), ("fp8_e5m2_row_col_scales_f32_out", 1)):
        b, _ = built[name]
        bw = b.plan.mma.blackwell
        assert (bw.mma_kind, bw.mma_k, bw.k_mmas) == ("f8f6f4", 32, 4)
        assert (bw.idesc >> 7) & 7 == kind_code and (bw.idesc >> 10) & 7 == kind_code
        src = b.files["kernel.cu"].decode()
        assert "tcgen05.mma.cta_group::1.kind::f8f6f4" in src and f"const uint32_t idesc = {bw.idesc}u;" in src
        assert "(uint32_t)((kk * 32) % 128) * 1u" in src             # 32 fp8 = 32 bytes a K step
        assert b.plan.launch.kernel_args[0].box == (128, 128) and b.plan.launch.kernel_args[1].box == (256, 128)
    pair = built["fp8_cta_pair_256"][0].plan.mma.blackwell
    assert (pair.cta_group, pair.mma_kind, (pair.idesc >> 24) & 0x1F) == (2, "f8f6f4", 256 >> 4)


def test_fp8_on_sm100a_is_cuda_only_and_picks_128_bytes_of_k(tmp_path):
    path = tmp_path / "fp8.yaml"
    path.write_text("name: fp8_sm100\nop:\n  kind: matmul\n  sizes: {M: 4096, N: 4096, K: 4096}\n  inputs:\n"
                    "    a: {shape: [M, K], dtype: f8e4m3}\n    b: {shape: [N, K], dtype: f8e4m3}\n"
                    "    sa: {shape: [1], dtype: f32}\n    sb: {shape: [1], dtype: f32}\n"
                    "  outputs:\n    out: {shape: [M, N], dtype: bf16}\n  transpose_rhs: true\n"
                    "  epilogue: out = acc * sa * sb\nschedule:\n  target: sm_100a\n")
    spec, src = load_spec(str(path), {})
    p = plan(spec, src)
    assert (p.tiles.tile_m, p.tiles.tile_n, p.tiles.tile_k) == (128, 256, 128) and p.mma.blackwell.k_mmas == 4
    lines = _errors({**FP8, "schedule.backends": ["cuda", "pallas"]})
    assert any("op.inputs.a.dtype:" in ln and "the Pallas sm_100a kernel takes bf16 / f16" in ln and
               "backends: [cuda]" in ln for ln in lines), lines


def test_a_cta_pair_splits_the_tile(built):
    p = built["cta_pair_256"][0].plan
    bw = p.mma.blackwell
    assert (bw.cta_group, bw.mma_m, bw.rows, bw.stage_bytes) == (2, 256, 128, 128 * 64 * 2 + 128 * 64 * 2)
    assert (bw.idesc >> 24) & 0x1F == 256 >> 4
    assert p.tiles.num_tiles == 16 * 16 and p.launch.num_blocks == 148 and p.launch.cluster_dims == (2, 1, 1)
    assert p.launch.kernel_args[0].box == (128, 64)                   # each CTA loads its 128 lhs rows
    assert len(bw.b_boxes) == 2                                # and 2 of the 4 64-column rhs slabs


def test_tmem_holds_two_accumulator_buffers(built):
    bw = built["bundled"][0].plan.mma.blackwell
    assert (bw.acc_stages, bw.tmem_cols, bw.epi_chunks * bw.epi_lds, bw.k_mmas) == (2, 512, 8, 4)
    bw = built["rhs_nk_128"][0].plan.mma.blackwell
    assert (bw.acc_stages, bw.tmem_cols) == (2, 256)


def _errors(overrides) -> list[str]:
    spec, src = load_spec(str(SPEC), overrides)
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    return info.value.lines()


@pytest.mark.parametrize("overrides,where,text", [
    ({"schedule.pipeline.num_compute_wgs": 2}, "schedule.pipeline.num_compute_wgs",
     "is a Hopper (sm_90a) field; on sm_100a one epilogue warpgroup"),
    ({"schedule.pipeline.compute_registers": 232}, "schedule.pipeline.compute_registers", "no setmaxnreg"),
    ({"schedule.epilogue.store": "direct"}, "schedule.epilogue.store", "stores every output tile by TMA"),
    ({"schedule.epilogue.tile": [64, 64]}, "schedule.epilogue.tile[0]", "the chunk is 32 rows"),
    ({"schedule.epilogue.tile": [32, 48]}, "schedule.epilogue.tile[1]", "32 or 64; got 48"),
    ({"op.outputs.out.dtype": "f32", "schedule.epilogue.tile": [32, 64]}, "schedule.epilogue.tile[1]",
     "at most 128 B (32 f32) a row: 32; got 64"),
    ({"op.outputs.h": {"shape": ["M", "N"], "dtype": "bf16"}, "op.epilogue": "h = acc\nout = relu(h)"},
     "op.outputs.h", "the sm_100a matmul kernel stores one output"),
    ({"schedule.in_specs.a.delay_release": 1}, "schedule.in_specs.a.delay_release", "tcgen05.commit frees"),
    ({**FP8, "schedule.in_specs.a.block_shape": [128, 48], "schedule.in_specs.b.block_shape": [256, 48]},
     "schedule.in_specs.a.block_shape", "tile_k must be a multiple of 32 (one tcgen05.mma K for f8e4m3)"),
    ({**FP8, "op.inputs.sa": {"shape": ["M", 32], "dtype": "f32"}, "op.inputs.sb": {"shape": [32, 32], "dtype": "f32"},
      "op.block_scales": {"lhs": "sa", "rhs": "sb"}}, "op.block_scales", "block scales applied in the k-loop"),
    ({"op.inputs.a.dtype": "f32", "op.inputs.b.dtype": "f32"}, "op.inputs.a.dtype", "not supported"),
    ({"op.sizes.M": 4000}, "schedule.in_specs.a.out_of_bounds", "set out_of_bounds: zero"),
    ({"schedule.out_specs.out.block_shape": [64, 256], "schedule.in_specs.a.block_shape": [64, 64]},
     "schedule.out_specs", "a CTA's tile is 128 rows"),
    ({"schedule.out_specs.out.block_shape": [128, 48], "schedule.in_specs.b.block_shape": [64, 48]},
     "schedule.out_specs", "tile_n is the tcgen05.mma.cta_group::1 N"),
    ({"schedule.cluster": [1, 1, 2]}, "schedule.cluster", "split-K"),
    ({"schedule.cluster": [2, 1], "schedule.in_specs.b.collective_axes": ["cluster"]}, "schedule.persistent.loop",
     "with a 2-CTA cluster use loop: nd_loop"),
    ({"schedule.persistent.loop": "nd_loop", "schedule.in_specs.a.block_shape": [256, 64],
      "schedule.out_specs.out.block_shape": [256, 256]}, "schedule.cluster", "write cluster: [2, 1]"),
    ({"schedule.persistent.loop": "nd_loop", "schedule.cluster": [2, 1], "schedule.in_specs.a.block_shape": [256, 64],
      "schedule.out_specs.out.block_shape": [256, 256], "schedule.in_specs.b.collective_axes": ["cluster"]},
     "schedule.in_specs.b.collective_axes", "nothing is multicast"),
    ({"schedule.persistent.loop": "none"}, "schedule.persistent.loop", "persistent"),
    ({"op.transpose_lhs": True, "op.inputs.a.shape": ["K", "M"], "schedule.in_specs.a.block_shape": [64, 128]},
     "op.transpose_lhs", "K-major lhs"),
    ({"schedule.pipeline.max_concurrent_steps": 6}, "schedule.pipeline.max_concurrent_steps", "would fit"),
    ({"schedule.in_specs.a.memory_space": "tmem"}, "schedule.in_specs.a.memory_space", "only the output's block"),
])
def test_what_sm100a_does_not_take_is_a_located_error(overrides, where, text):
    lines = _errors(overrides)
    assert any(f"{where}:" in line and text in line for line in lines), lines


def test_the_epilogue_stages_128_byte_rows_through_swizzled_smem_tiles(built):
    """Each warp's staging tile is its 32 rows x a 128-byte chunk row (64 bf16, 32 f32 columns), swizzled 128 B, and
    the output's tensor map has that box and swizzle; the tiles are in the SMEM map, 1 KiB aligned after the ring."""
    for name, cols in (("bundled", 64), ("f32_out_bias_silu", 32), ("cta_pair_256", 64)):
        p = built[name][0].plan
        bw = p.mma.blackwell
        assert (bw.epi_cols, bw.epi_swizzle, bw.epi_buffers, bw.epi_bytes) == (cols, 128, 2, 32 * 128), name
        assert bw.epi_chunks == p.tiles.tile_n // cols and bw.epi_lds == cols // 32
        out = p.launch.kernel_args[2]
        assert (out.kind, out.box, out.swizzle, out.dtype) == ("tmap", (32, cols), 128, p.out_dtype)
        epi = {b.name: b for b in p.pipeline.smem_buffers}["epi"]
        assert (epi.offset, epi.bytes, epi.count) == (bw.off_epi, 4096, 8)
        assert bw.off_epi % 1024 == 0 and bw.off_epi >= p.pipeline.stages * bw.stage_bytes
        assert bw.off_full >= bw.off_epi + 8 * 4096                  # the barriers after the staging tiles
        assert bw.smem_bytes >= p.pipeline.stages * bw.stage_bytes + 8 * 4096 and bw.smem_bytes <= 232448
        assert (p.staging.epi_store, p.staging.epi_rows, p.staging.epi_cols, p.staging.epi_swizzle_mask) == ("tma", 32, cols, 7)


def test_a_written_epilogue_tile_and_buffers_are_planned_as_written():
    spec, src = load_spec(str(SPEC), {"schedule.epilogue.tile": [32, 32], "schedule.epilogue.buffers": 1,
                                      "schedule.epilogue.store": "tma"})
    p = plan(spec, src)
    bw = p.mma.blackwell
    assert (bw.epi_cols, bw.epi_swizzle, bw.epi_buffers, bw.epi_chunks, bw.epi_lds) == (32, 64, 1, 8, 1)
    assert p.launch.kernel_args[2].box == (32, 32) and p.launch.kernel_args[2].swizzle == 64 and p.staging.epi_swizzle_mask == 3
    assert {b.name: b for b in p.pipeline.smem_buffers}["epi"].count == 4


TILE_192 = {"op.sizes.N": 3072, "schedule.in_specs.b.block_shape": [64, 192],
            "schedule.out_specs.out.block_shape": [128, 192]}


def test_the_staging_tiles_count_in_the_smem_budget():
    """128 x 192 x 64 bf16: stages of 40 KiB. Five fit 227 KiB beside the barriers alone, but not beside the
    epilogue's 32 KiB of staging tiles: the planner picks 4; five written is a located error saying what fits (and
    that five fit with one staging tile a warp), and planned with epilogue.buffers: 1."""
    spec, src = load_spec(str(SPEC), TILE_192)
    p = plan(spec, src)
    stage = (128 + 192) * 64 * 2
    assert p.mma.blackwell.stage_bytes == stage and 5 * stage + 2048 < 232448 and p.pipeline.stages == 4
    lines = _errors({**TILE_192, "schedule.pipeline.max_concurrent_steps": 5})
    assert any("schedule.pipeline.max_concurrent_steps:" in ln and "32768 B of staging tiles" in ln
               and "4 stages would fit (5 with epilogue.buffers: 1)" in ln for ln in lines), lines
    spec, src = load_spec(str(SPEC), {**TILE_192, "schedule.pipeline.max_concurrent_steps": 5,
                                      "schedule.epilogue.buffers": 1})
    p = plan(spec, src)
    assert p.pipeline.stages == 5 and p.mma.blackwell.epi_buffers == 1 and p.launch.smem_bytes <= 232448
    assert p.launch.smem_bytes >= 5 * stage + 4 * 4096


def test_the_tmem_buffer_is_freed_after_its_last_load_before_the_last_store(built):
    """In the PTX (asm volatile keeps its order), the epilogue's acc_empty arrival follows a tcgen05.wait::ld and
    precedes the chunk's TMA store; the staging tile is waited for (wait_group.read B - 1) before it is written,
    and the writes are fenced for the async proxy before the store."""
    ptx = built["static_loop"][0].files["kernel.ptx"].decode()
    epi = ptx[ptx.index("tcgen05.ld.sync.aligned.32x32b.x32"):]
    wait, arrive = epi.index("tcgen05.wait::ld"), epi.index("mbarrier.arrive.shared::cta.b64")
    read, fence = epi.index("cp.async.bulk.wait_group.read 1"), epi.index("fence.proxy.async.shared::cta")
    store = epi.index("cp.async.bulk.tensor.2d.global.shared::cta")
    assert wait < arrive < read < epi.index("st.shared.v4.b32") < fence < store < epi.index("cp.async.bulk.commit_group")
    assert "st.global" not in ptx


def test_tmem_output_block_is_legal_on_sm100a():
    spec, src = load_spec(str(SPEC), {"schedule.out_specs.out.memory_space": "tmem"})
    assert plan(spec, src).mma.blackwell is not None


BLACKWELL_CASES = {**{name: VARIANTS[name] for name in (
    "bundled", "static_loop", "f32_out_bias_silu", "row_scale_residual", "cluster2x1_multicast_rhs", "cta_pair_256",
    "cta_pair_rhs_nk_f32_out", "fp8_e4m3_tensor_scales", "fp8_e5m2_row_col_scales_f32_out", "fp8_cta_pair_256")},
    # one 32-column staging tile a warp (64 B swizzle), rewritten after each store has read it
    "one_staging_tile_32_cols": {"schedule.epilogue.tile": [32, 32], "schedule.epilogue.buffers": 1},
}


@pytest.mark.gpu(target="sm_100a")
@pytest.mark.parametrize("case", list(BLACKWELL_CASES))
def test_sm100a_cuda_kernel_on_blackwell(case):
    """On a B200: built at 2048^3, run with a NaN-poisoned output on fresh random inputs and checked against
    float64 (verify's per-dtype tolerance). Skips on any other GPU (the kernels have not run anywhere yet)."""
    from schedgen.runtime import driver
    from schedgen.verify import verify_built
    ok, why = driver.available("sm_100a")
    if not ok:
        pytest.skip(why)
    built = build_spec(SPEC, {**BLACKWELL_CASES[case], "op.sizes.M": 2048, "op.sizes.N": 2048, "op.sizes.K": 2048})
    checks = verify_built(built, ["cuda"], count=1)
    assert checks and all(c.ok for c in checks), [c.row() for c in checks]


@pytest.mark.gpu
def test_an_sm100a_package_refuses_the_h200(tmp_path):
    """On the H200 (sm_90): the sm_100a package's call raises the one-sentence refusal before any launch."""
    import ml_dtypes
    import numpy as np
    from schedgen.build import package
    from schedgen.runtime.kernel import load_package
    built = build_spec(SPEC, {"op.sizes": {"M": 256, "N": 256, "K": 128}}, cache=Cache(tmp_path / "c"))
    kernel = load_package(package(built, tmp_path / "pkg"))
    args = [np.zeros(o.shape, ml_dtypes.bfloat16) for o in kernel.inputs]
    with pytest.raises(RuntimeError, match=r"needs an NVIDIA Blackwell GPU: GPU 0 is an .* \(sm_90\), but this "
                                           r"package's kernel is built for Blackwell \(sm_100a: B200, GB200\) and "
                                           r"cannot run on it: rebuild the spec with schedule.target: sm_90a"):
        kernel(*args)


def test_the_fp8_layout_rule_names_the_targets_instruction():
    """fp8 operands are read K-major on both targets; the message names tcgen05.mma on sm_100a, wgmma on sm_90a."""
    nk = {**FP8, "op.transpose_rhs": False, "op.inputs.b.shape": ["K", "N"],
          "schedule.in_specs.b.block_shape": [128, 256]}
    (line,) = [ln for ln in _errors(nk) if "op.transpose_rhs:" in ln]
    assert "fp8 tcgen05.mma (kind::f8f6f4) reads rhs K-major only" in line and "wgmma" not in line
    assert "write transpose_rhs: true" in line
    hopper = {**nk, "schedule.target": "sm_90a", "schedule.persistent.loop": "nd_loop"}
    (line,) = [ln for ln in _errors(hopper) if "op.transpose_rhs:" in ln]
    assert "fp8 wgmma reads rhs K-major only (no transpose for 8-bit inputs)" in line and "tcgen05" not in line


def test_the_drawn_timeline_gives_the_epilogue_warpgroup_its_own_row():
    """explain --draw on sm_100a: the epilogue of tile 0 is on the epilogue warpgroup's row and overlaps the MMA
    thread's k-steps of tile 1 (the TMEM double buffer); the MMA row holds MMAs only. Hopper keeps the epilogue in
    its consumer rows."""
    from schedgen.families.matmul.draw import pipeline
    p = plan(*load_spec(str(SPEC), {"schedule.persistent.loop": "nd_loop"}))
    pl = pipeline(p)
    assert pl.rows[-2:] == ["consumer 0", "epilogue"] and "epilogue WG" in pl.names["epilogue"]
    assert {s.kind for s in pl.spans if s.row == "consumer 0"} == {"mma"}
    (epi0,) = [s for s in pl.spans if s.row == "epilogue" and s.label == "epilogue t0"]
    mma1 = [s for s in pl.spans if s.row == "consumer 0" and s.start >= epi0.start]
    assert mma1 and mma1[0].start < epi0.end                     # the next tile's MMAs run under the epilogue
    hopper = pipeline(plan(*load_spec(str(SPECS_DIR / "matmul_bf16_4096.yaml"))))
    assert "epilogue" not in hopper.rows and any(s.kind == "epilogue" and s.row.startswith("consumer")
                                                 for s in hopper.spans)


def test_explain_and_draw_hooks_take_a_dynamic_ragged_sm100a_plan():
    from schedgen.families import of
    p = plan(*load_spec(str(SPEC), {"op.sizes.M": {"dynamic": True, "max": 8192},
                                    "schedule.in_specs.a.out_of_bounds": "zero",
                                    "schedule.in_specs.b.out_of_bounds": "zero"}))
    text = of(p).explain(p)
    assert "M: dynamic, 1..8192" in text
    hooks = of(p).draw
    assert hooks.summary(p)[2].startswith("M x N x K = 8192 x 4096 x 4096")
    assert {s.row for s in hooks.pipeline(p).spans} <= set(hooks.pipeline(p).rows)
