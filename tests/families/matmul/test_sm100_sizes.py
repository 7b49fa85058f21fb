"""The sm_100a matmul at the sizes users bring (issue 20 / issue 17): partial tiles (M, N, K not multiples of the
tile: TMA zero-fills the loads past the edge, the output tensor map clips the stores, the epilogue's operands read 0
past M / N) and dynamic sizes (`op.sizes.M: {dynamic: true, max: ...}`: one package, the kernel takes `int sz_*`
arguments, the tile count / k-steps / grid and the tensor maps come from each call). On the CPU: the plans, NVRTC
sm_100a cubins and their SASS (tcgen05 MMA, TMA store, no local memory), the launch record against static builds
through the fake driver, the located errors for what stays refused. On a B200 (gpu-marked, skipped elsewhere): each
kernel against float64 with a poisoned output. NOT RUN on Blackwell hardware."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR, opcodes
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.plan import dims as D
from schedgen.plan import launch as L
from schedgen.plan import plan
from schedgen.toolchain.nvrtc import resource_usage, sass

SPEC = SPECS_DIR / "matmul_bf16_4096_sm100.yaml"
ZERO = {"schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero"}
ND = {"schedule.persistent.loop": "nd_loop"}
PAIR = {**ND, "schedule.cluster": [2, 1], "schedule.in_specs.a.block_shape": [256, 64],
        "schedule.out_specs.out.block_shape": [256, 256]}
FP8 = {"op.inputs.a.dtype": "f8e4m3", "op.inputs.b.dtype": "f8e4m3", "op.transpose_rhs": True,
       "op.inputs.b.shape": ["N", "K"], "schedule.in_specs.a.block_shape": [128, 128],
       "schedule.in_specs.b.block_shape": [256, 128]}
BIAS = {"op.inputs.bias": {"shape": ["N"], "dtype": "f32"}, "op.epilogue": "out = acc + bias"}


def dyn(max_, multiple_of=1):
    return {"dynamic": True, "max": max_, "min": multiple_of, "multiple_of": multiple_of}


RAGGED = {"op.sizes.M": 1000, "op.sizes.N": 1000, "op.sizes.K": 1000}
DYN_M = {"op.sizes.M": dyn(65536)}
DYN_MNK = {"op.sizes.M": dyn(65536), "op.sizes.N": dyn(8192, 8), "op.sizes.K": dyn(8192, 8)}

# compiled on the CPU and (gpu-marked) run on a B200: partial tiles in M, N and K; dynamic sizes
VARIANTS = {
    # every edge partial, a per-column operand read 0 past N, CLC tiles
    "ragged_mnk_bias_clc": {**ZERO, **RAGGED, **BIAS},
    # a static loop, a per-row scale and a full residual read past the edge of a partial tile
    "ragged_row_scale_residual_nd": {**ZERO, **ND, "op.sizes.M": 777, "op.sizes.N": 520, "op.sizes.K": 200,
                                     "op.inputs.s": {"shape": ["M", 1], "dtype": "f32"},
                                     "op.inputs.r": {"shape": ["M", "N"], "dtype": "bf16"},
                                     "op.epilogue": "out = acc * s + r"},
    # decode: M below one tile (the lhs box stays 128 rows: the stage's full barrier counts the whole box)
    "decode_m16": {**ZERO, **ND, "op.sizes.M": 16, "op.sizes.N": 2048, "op.sizes.K": 1024},
    "ragged_cta_pair": {**ZERO, **PAIR, "op.sizes.M": 300, "op.sizes.N": 1000, "op.sizes.K": 520},
    "ragged_cluster_1x2_multicast_lhs": {**ZERO, **ND, "op.sizes.M": 1000, "op.sizes.N": 1000, "op.sizes.K": 1000,
                                         "schedule.cluster": [1, 2], "schedule.in_specs.a.collective_axes": ["cluster"]},
    "dynamic_m_clc": {**ZERO, **DYN_M, **BIAS},
    "dynamic_mnk_nd_snake": {**ZERO, **ND, **DYN_MNK, **BIAS, "schedule.persistent.tile_order": "planar_snake"},
    "dynamic_m_cta_pair": {**ZERO, **PAIR, **DYN_M},
    "dynamic_m_cluster_2x1": {**ZERO, **ND, "op.sizes.M": dyn(65536, 256), "op.sizes.N": 1000,
                              "schedule.cluster": [2, 1], "schedule.in_specs.b.collective_axes": ["cluster"]},
    "fp8_dynamic_mnk_scales_f32_out": {**ZERO, **FP8, "op.sizes.M": dyn(65536), "op.sizes.N": dyn(8192, 16),
                                       "op.sizes.K": dyn(8192, 16), "op.outputs.out.dtype": "f32",
                                       "op.inputs.sa": {"shape": ["M", 1], "dtype": "f32"},
                                       "op.inputs.sb": {"shape": ["N"], "dtype": "f32"},
                                       "op.epilogue": "out = acc * sa * sb"},
}


def _plan(overrides):
    spec, src = load_spec(str(SPEC), overrides)
    return plan(spec, src)


def _errors(overrides) -> list[str]:
    with pytest.raises(SpecErrors) as info:
        _plan(overrides)
    return info.value.lines()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    return {name: build_spec(SPEC, ov, cache=cache) for name, ov in VARIANTS.items()}


# ------------------------------------------------------------------------------------------------ planning

def test_partial_tiles_round_the_tile_count_up():
    p = _plan({**ZERO, **RAGGED})
    assert p.launch.target == "sm_100a" and p.tiles.ragged and p.mma.blackwell is not None
    assert (p.m, p.n, p.k) == (1000, 1000, 1000)
    assert (p.tiles.cluster_tiles_m, p.tiles.cluster_tiles_n, p.tiles.k_iters) == (8, 4, 16)      # cdiv(1000, 128 / 256 / 64)
    assert p.tiles.num_tiles == 32 and p.launch.num_blocks == 32 and not p.launch.auto_blocks        # CLC: a CTA a tile
    # the tensor maps span the operands as they are; TMA zero-fills and clips at their edges
    a, b, out = p.launch.kernel_args[:3]
    assert (a.shape, a.box) == ((1000, 1000), (128, 64)) and (b.shape, b.box) == ((1000, 1000), (64, 64))
    assert (out.shape, out.box) == ((1000, 1000), (32, 64))


def test_an_m_below_the_tile_loads_whole_lhs_boxes():
    """sm_90a loads M rows of a short lhs (rounded to 8); the sm_100a stage's full barrier expects the whole 128-row
    box (tcgen05.mma reads all 128 lanes' rows), TMA zero-filling the rows past M."""
    p = _plan(VARIANTS["decode_m16"])
    assert p.launch.kernel_args[0].box == (128, 64)
    assert p.mma.blackwell.stage_bytes == p.pipeline.stage_tx_bytes == 128 * 64 * 2 + 64 * 256 * 2 and p.layout.a_box_rows == 128
    assert p.tiles.num_tiles == 8 and p.launch.num_blocks == 8


def test_a_cta_pair_takes_a_partial_256_row_tile():
    """One 256-row tile a [2, 1] cluster: M = 300 is 2 pair tiles (not an odd count of 128-row halves to refuse)."""
    p = _plan({**ZERO, **PAIR, "op.sizes.M": 300})
    assert p.mma.blackwell.cta_group == 2 and p.tiles.num_tiles == 2 * 16 and p.launch.num_blocks == 2 * 32
    p = _plan({**ZERO, **PAIR, "op.sizes.M": 200})
    assert p.tiles.num_tiles == 16 and p.launch.kernel_args[0].box == (128, 64)


def test_dynamic_sizes_are_kernel_arguments_and_extents():
    p = _plan({**ZERO, **DYN_MNK})
    assert [r.name for r in p.launch.dynamic_sizes] == ["M", "N", "K"] and p.tiles.ragged
    assert [a.value for a in p.launch.kernel_args if a.kind == "i32"] == [D.size(n) for n in "MNK"]
    assert p.launch.kernel_args[0].shape == (D.size("M"), D.size("K"))
    for m, n, k in ((1, 8, 8), (1000, 264, 72), (65536, 8192, 8192)):
        at = {"M": m, "N": n, "K": k}
        tiles = -(-m // 128) * -(-n // 256)
        assert D.evaluate(p.tiles.num_tiles, at) == tiles and D.evaluate(p.launch.num_blocks, at) == tiles   # CLC grid
        assert D.evaluate(p.tiles.k_iters, at) == -(-k // 64)
    nd = _plan({**ZERO, **ND, **DYN_M})
    assert nd.launch.auto_blocks and D.evaluate(nd.launch.num_blocks, {"M": 300}) == min(3 * 16, 148)
    pair = _plan({**ZERO, **PAIR, **DYN_M})
    assert D.evaluate(pair.tiles.num_tiles, {"M": 300}) == 2 * 16 and D.evaluate(pair.launch.num_blocks, {"M": 300}) == 64
    assert D.evaluate(pair.launch.num_blocks, {"M": 65536}) == 148


@pytest.mark.parametrize("m", [1, 200, 4096])
def test_record_extents_match_a_static_build(m, tmp_path, monkeypatch):
    """The dynamic-M package's tensor maps, grid and arguments at M = m are a static build's at M = m (+ sz_M)."""
    from runtime.fake_driver import FakeDriver
    from schedgen.runtime import driver
    from schedgen.runtime.kernel import load_package
    dyn_p, stat_p = _plan({**ZERO, **DYN_M, **BIAS}), _plan({**ZERO, **BIAS, "op.sizes.M": m})
    got = []
    for p, sub, sizes in ((dyn_p, "dyn", {"M": m}), (stat_p, "static", {})):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "launch.json").write_text(L.launch_record(p).to_json())
        (tmp_path / sub / "kernel.cubin").write_bytes(b"CUBIN")
        fake = FakeDriver(monkeypatch)
        k = load_package(tmp_path / sub)
        ptrs = list(range(0x1000, 0x1000 + 0x100 * 4, 0x100))
        k._launcher(ptrs[:3], ptrs[3:], 0, sizes=sizes)()
        (go,) = fake.launches
        got.append((fake.encoded, go))
    (enc_d, go_d), (enc_s, go_s) = got
    assert enc_d == enc_s and len(enc_d) == 3
    assert go_d["grid"] == go_s["grid"] == (-(-m // 128) * 16, 1, 1)
    assert go_d["args"][:-1] == go_s["args"] and go_d["args"][-1] == driver.Arg.i32(m)


# ------------------------------------------------------------------------------------------------ CUDA source, SASS

@pytest.mark.parametrize("name", list(VARIANTS))
def test_ragged_and_dynamic_kernels_compile_to_tcgen05_with_a_tma_store(built, name):
    b = built[name]
    p = b.plan
    ops = opcodes(sass(b.files["kernel.cubin"]))
    fp8 = p.in_dtype.startswith("f8")
    assert any(o.startswith("UTCQMMA" if fp8 else "UTCHMMA") for o in ops)
    assert any(o.startswith("LDTM") for o in ops) and any(o.startswith("UTMALDG") for o in ops)
    assert any(o.startswith("UTMASTG.2D") for o in ops)         # the clipped TMA store of a partial tile
    assert not any(o.startswith(("STG", "LDL", "STL", "HGMMA")) for o in ops)
    usage = resource_usage(b.files["kernel.cubin"])[p.launch.kernel_name]
    assert usage.get("LOCAL", 0) == 0 and usage.get("STACK", 0) == 0
    assert any(o.startswith("UGETNEXTWORKID") for o in ops) == p.mma.blackwell.dynamic
    src = b.files["kernel.cu"].decode()
    sizes = [r.name for r in p.launch.dynamic_sizes]
    params = "".join(f", const int sz_{n}" for n in sizes)
    assert (params + ") {") in src
    if "M" in sizes:
        assert "const int num_tiles = " in src and "sz_M + " in src
        assert ("sg_tile_coords(t, tiles_mc, tiles_nc, tmi, tni);" in src)
    if "K" in sizes:
        assert "const int k_iters = ((sz_K + " in src and src.count("kb < k_iters;") == 2
    else:
        assert "k_iters" not in src
    if p.tiles.num_tiles is not None and isinstance(p.tiles.num_tiles, D.Dim) and not p.mma.blackwell.dynamic:
        assert src.count("t < num_tiles;") == 3        # a clamped grid's CTA may have no tile of this call
    for e in p.extras:
        if e.bcast in ("row", "col", "full"):
            guard = f"if (row >= {'sz_M' if 'M' in sizes else p.m} || col >= {'sz_N' if 'N' in sizes else p.n}) " \
                    f"return 0.0f;"
            assert guard in src, e.name


def test_whole_tile_kernels_keep_their_literals():
    """A static, whole-tile plan renders no size argument and no edge guard."""
    p = _plan({**BIAS})
    from schedgen.render import render
    src = render(p, "cuda")
    assert not p.tiles.ragged and "sz_" not in src and "return 0.0f;" not in src and "k_iters" not in src


# ------------------------------------------------------------------------------------------------ what stays refused

@pytest.mark.parametrize("overrides,where,text", [
    # a partial tile needs zero padding (the sm_90a rule, located at the BlockSpec)
    (RAGGED, "schedule.in_specs.a.out_of_bounds", "out_of_bounds: zero"),
    # TMA's 16-byte row strides (the sm_90a check): a static N of 1001 bf16, a dynamic N that may be odd
    ({**ZERO, "op.sizes.N": 1001}, "op.sizes", "multiple of 16 B"),
    ({**ZERO, "op.sizes.N": dyn(8192)}, "op.sizes.N", "declare multiple_of: 8"),
    # a 2x1 cluster along a dynamic M of 128-row tiles: M a multiple of 256
    ({**ZERO, **ND, **DYN_M, "schedule.cluster": [2, 1], "schedule.in_specs.b.collective_axes": ["cluster"]},
     "schedule.cluster", "declare multiple_of: 256"),
    # the Pallas sm_100a kernel takes partial tiles and dynamic sizes where jax 0.11.2 can view the operands
    # (sm_90a's Pallas rules: 8 rows of M, 64 bf16 columns of K, no epilogue operand along a partial dimension)
    ({**ZERO, **RAGGED, "schedule.backends": ["cuda", "pallas"]}, "schedule.backends",
     "the Pallas matmul takes that only for K a multiple of 64"),
    ({**ZERO, **BIAS, "op.sizes.N": 1000, "schedule.backends": ["cuda", "pallas"]}, "op.inputs.bias.shape",
     "no masked form"),
    ({**ZERO, **DYN_M, "schedule.backends": ["cuda", "pallas"]}, "schedule.backends",
     "use M a multiple of 8 (multiple_of)"),
])
def test_what_stays_refused_is_a_located_error(overrides, where, text):
    lines = _errors(overrides)
    assert any(f"{where}:" in ln and text in ln for ln in lines), lines


def test_the_cuda_kernel_alone_takes_what_the_pallas_one_refuses():
    for over in ({**ZERO, **RAGGED}, {**ZERO, **DYN_M}):
        p = _plan(over)
        assert p.tiles.ragged and p.launch.backends == ("cuda",) and p.mma.blackwell is not None and p.mma.tcgen05 is None


# ------------------------------------------------------------------------------------------------ on a B200

@pytest.mark.gpu(target="sm_100a")
@pytest.mark.parametrize("case", list(VARIANTS))
def test_sm100a_partial_and_dynamic_kernels_on_blackwell(case):
    """On a B200: fresh random inputs, a NaN-poisoned output, against float64 (verify's per-dtype tolerance); a
    dynamic package at three sizes of one build (a large one, one of about 3/4 + 1, a small one: not tile
    multiples). Skips on any other GPU (these kernels have not run anywhere yet)."""
    from schedgen.runtime import driver
    from schedgen.verify import verify_built
    ok, why = driver.available("sm_100a")
    if not ok:
        pytest.skip(why)
    checks = verify_built(build_spec(SPEC, VARIANTS[case]), ["cuda"], count=3)
    assert checks and all(c.ok for c in checks), [c.row() for c in checks]
