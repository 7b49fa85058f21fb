"""Dynamic (runtime) sizes in the attention family, on the CPU: planning over ranges (the plan's extents and
dynamic_sizes, explain's ranges), the located errors of what cannot be dynamic, the CUDA kernel's sz_ launch
arguments, the launch record's extents against static builds of the same sizes through the fake driver, the tile
order at a call's sizes, and one built Pallas package run in the interpreter at several sizes (no rebuild).

The CUDA kernels of dynamic variants compile to SASS with no local memory in test_attention_plan.py (test_sass,
the dyn_* variants); the bundled dynamic specs go through every bundled-spec test (goldens, launch record)."""
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
from schedgen.explain import explain
from schedgen.families.attention.records import tile_of
from schedgen.frontend.validate import load_spec
from schedgen.plan import dims, plan
from schedgen.plan import launch as L
from schedgen.plan.dims import SizeRange
from schedgen.render import render
from schedgen.runtime import driver
from schedgen.runtime.arrays import ArgumentError
from schedgen.runtime.kernel import load_package

DYN = SPECS_DIR / "attention_bf16_dynamic.yaml"
GQA = SPECS_DIR / "attention_gqa_causal_bf16_dynamic.yaml"
STATIC = SPECS_DIR / "attention_bf16_4096.yaml"


def _plan(path, ov=None):
    spec, src = load_spec(str(path), ov or {})
    return plan(spec, src)


def _errors(path, ov) -> list[str]:
    with pytest.raises(SpecErrors) as info:
        _plan(path, ov)
    return info.value.lines()


# ------------------------------------------------------------------------------------------------ planning

def test_dynamic_plan_holds_ranges_and_extents():
    p = _plan(DYN)
    assert p.launch.dynamic_sizes == (SizeRange("B", 1, 64, 1), SizeRange("S", 128, 32768, 128))
    assert (p.batch, p.seq_q, p.seq_kv, p.heads_q, p.head_dim) == (dims.size("B"), dims.size("S"), dims.size("S"),
                                                                   16, 128)
    at = {"B": 3, "S": 1280}
    assert dims.evaluate(p.num_tiles, at) == 10 * 16 * 3 == dims.evaluate(p.launch.num_blocks, at)
    assert p.inputs[0].shape == (dims.size("B"), dims.size("S"), 16, 128)
    assert not p.may_ragged_q and not p.may_ragged_kv           # S is a multiple of both blocks
    i32 = [a for a in p.launch.kernel_args if a.kind == "i32"]
    assert [a.value for a in i32] == [dims.size("B"), dims.size("S")]
    # the largest call: FLOPs for the reports, the 32-bit index math
    assert p.flops == 4 * 64 * 16 * 32768 * 32768 * 128
    g = _plan(GQA)
    assert g.may_ragged_q and g.may_ragged_kv and g.dynamic and g.tile_order == "lpt" and g.group == 4


def test_explain_prints_each_dynamic_range():
    spec, src = load_spec(str(DYN))
    text = explain(plan(spec, src))
    assert "  sizes      B: dynamic, 1..64; S: dynamic, 128..32768, a multiple of 128" in text
    assert "at the largest sizes" in text
    g = explain(_plan(GQA))
    assert "S: dynamic, 1..32768 " in g and "a ragged last key block when S is not a multiple of 128" in g


ERRORS = {
    "head_dim": ({"op.sizes.D": {"dynamic": True, "max": 128}},
                 ["op.sizes.D: head_dim (D) cannot be dynamic"]),
    "gqa_heads": ({"op.sizes": {"B": 1, "S": 1024, "H": {"dynamic": True, "max": 32}, "G": 8, "D": 128},
                   "op.inputs.k.shape": ["B", "S", "G", "D"], "op.inputs.v.shape": ["B", "S", "G", "D"]},
                  ["op.sizes.H: H (the q heads) may be dynamic only as the one size of both q and kv heads"]),
    "gqa_kv_heads": ({"op.sizes": {"B": 1, "S": 1024, "H": 32, "G": {"dynamic": True, "max": 8}, "D": 128},
                      "op.inputs.k.shape": ["B", "S", "G", "D"], "op.inputs.v.shape": ["B", "S", "G", "D"]},
                     ["op.sizes.G: G (the kv heads) may be dynamic only"]),
    "causal_ranges_cross": ({"op.sizes": {"B": 1, "Q": {"dynamic": True, "max": 4096}, "T": {"dynamic": True,
                                                                                          "max": 8192}, "H": 4, "D": 128},
                             "op.inputs.q.shape": ["B", "Q", "H", "D"], "op.outputs.o.shape": ["B", "Q", "H", "D"],
                             "op.inputs.k.shape": ["B", "T", "H", "D"], "op.inputs.v.shape": ["B", "T", "H", "D"],
                             "op.causal": True},
                            ["op.causal: causal: true (bottom_right) aligns the last query with the last key; it needs Sq <= Skv "
                             "at every call, but Sq (Q) reaches 4096 and Skv (T) may be 1"]),
    "pallas_ragged": ({"op.sizes.S": {"dynamic": True, "min": 64, "max": 8192, "multiple_of": 4}},
                      ["op.sizes.S.multiple_of: Sq (S: dynamic, 64..8192, a multiple of 4) is not always a multiple "
                       "of 8: the Pallas attention takes a ragged last block only for Sq a multiple of 8 or under 8 "
                       "(Mosaic GPU in jax 0.11.2 views the q, k, v and output arrays in GMEM through their SMEM "
                       "tiling of 8 rows and cannot round a partial tile up)", "set S's multiple_of to a multiple of "
                       "8, or set schedule.backends: [cuda]",
                       "op.sizes.S.multiple_of: Skv (S: dynamic, 64..8192, a multiple of 4) is not always a multiple "
                       "of 8"]),
    "unbound": ({"op.sizes.E": {"dynamic": True, "max": 8}},
                ["op.sizes.E: the dynamic size E is no input's dimension"]),
    "tile_count": ({"op.sizes.B": {"dynamic": True, "max": 1 << 20}, "op.sizes.S": {"dynamic": True, "min": 128,
                                                                                       "max": 1 << 21,
                                                                                       "multiple_of": 128}},
                   ["op.sizes.B.max: the largest call has 274877906944 tiles (query blocks x heads x batch), over the "
                    "2^31 - 1 of the grid and the kernel's 32-bit tile index; lower the max of B, S"]),
    "sequence_max": ({"op.sizes.S": {"dynamic": True, "max": 1 << 31}, "schedule.backends": ["cuda"]},
                     ["op.sizes.S.max: S up to 2147483648 overflows the kernel's 32-bit block counts"]),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_what_cannot_be_dynamic_is_a_located_error(case):
    ov, needles = ERRORS[case]
    lines = _errors(DYN, ov)
    text = "\n".join(lines)
    for needle in needles:
        assert needle in text, text
    assert all(re.match(r".*attention_bf16_dynamic\.yaml:\d+:\d+: ", line) for line in lines), lines


def test_what_may_be_dynamic_plans():
    """Ragged lengths (CUDA), one dynamic size for q and kv heads, Sq and Skv apart with ranges that cannot cross."""
    cuda = {"schedule.backends": ["cuda"]}
    p = _plan(DYN, {**cuda, "op.sizes.S": {"dynamic": True, "max": 8192}})
    assert p.may_ragged_q and p.may_ragged_kv
    h = _plan(DYN, {"op.sizes.H": {"dynamic": True, "min": 8, "max": 64, "multiple_of": 8}})
    assert h.heads_q == h.heads_kv == dims.size("H") and h.group == 1
    q = _plan(DYN, {**cuda, "op.sizes": {"B": 1, "Q": {"dynamic": True, "max": 2048},
                                         "T": {"dynamic": True, "min": 2048, "max": 65536}, "H": 4, "D": 128},
                    "op.inputs.q.shape": ["B", "Q", "H", "D"], "op.outputs.o.shape": ["B", "Q", "H", "D"],
                    "op.inputs.k.shape": ["B", "T", "H", "D"], "op.inputs.v.shape": ["B", "T", "H", "D"],
                    "op.causal": True})
    assert q.causal_offset is None                               # Skv - Sq, taken at the call
    cu = render(q, "cuda")
    assert "const int sg_causal_offset = sz_T - sz_Q;" in cu


def test_small_sizes_of_a_dynamic_spec_are_legal_fixed_values():
    """verify --small / --interpret: the family's small sizes of a dynamic spec respect each range (multiple_of,
    min), so the small build plans."""
    from schedgen.families.attention.reference import small_sizes
    for path, want in ((DYN, {"B": 1, "S": 256, "H": 2}), (GQA, {"B": 1, "S": 256, "H": 8, "G": 2})):
        spec, _ = load_spec(str(path))
        got = small_sizes(spec, _plan(path), 2)
        assert got == want, got
        assert _plan(path, got).launch.dynamic_sizes == ()
    spec, _ = load_spec(str(DYN), {"op.sizes.S": {"dynamic": True, "min": 384, "max": 7680, "multiple_of": 384},
                                   "schedule.backends": ["cuda"]})
    got = small_sizes(spec, plan(spec, _), 2)
    assert got["S"] == 384


def test_a_one_value_range_is_a_fixed_size_where_the_kernel_needs_a_constant():
    """Every size declared dynamic at its own value (bench/dynamic_vs_static.py's copies): head_dim and the grouped
    heads, whose ranges hold one value, are that value; B and S stay dynamic."""
    one = {"dynamic": True, "max": 8, "multiple_of": 8}
    p = _plan(SPECS_DIR / "attention_gqa_causal_bf16_8192.yaml", {
        "op.sizes": {"B": {"dynamic": True, "max": 1}, "S": {"dynamic": True, "max": 8192, "multiple_of": 256},
                     "H": {**one, "max": 32, "multiple_of": 32}, "G": one,
                     "D": {"dynamic": True, "max": 128, "multiple_of": 128}}})
    assert [r.name for r in p.launch.dynamic_sizes] == ["B", "S"]
    assert (p.head_dim, p.heads_q, p.heads_kv, p.group) == (128, 32, 8, 4)
    assert p.inputs[1].shape == (dims.size("B"), dims.size("S"), 8, 128)


# ------------------------------------------------------------------------------------------------ the CUDA kernel

def test_cuda_kernel_takes_the_dynamic_sizes_as_arguments():
    p = _plan(GQA)
    cu = render(p, "cuda")
    sig = re.search(rf"{p.launch.kernel_name}\((.*?)\) {{", cu, re.S).group(1)
    assert sig.rstrip().endswith("unsigned int* __restrict__ tile_counter, int sz_B, int sz_S")
    # every count comes from the arguments, once, at entry; the loops and the tile order read the locals
    assert "const int sg_num_tiles = ((((sz_S + 128 - 1) / 128) * 32) * sz_B);" in cu
    assert "const int sg_last_section_heads = ((((sz_B * 32) + 7) % 8) + 1);" in cu
    assert "if (t >= sg_num_tiles) break;" in cu and "if (c >= sg_seq_kv)" in cu and "if (qr < sg_seq_q)" in cu
    uses = [line for line in cu.splitlines() if "sz_" in line]    # the signature, then the entry locals only
    assert uses[0].endswith("int sz_B, int sz_S) {") and len(uses) == 9
    assert all(line.startswith("  const int sg_") for line in uses[1:]), uses
    # a static spec has no size arguments and no locals: its numbers are literals
    s = render(_plan(STATIC), "cuda")
    assert "sz_" not in s and "sg_num_tiles" not in s and "t < 512;" in s


# ------------------------------------------------------------------------------------------------ the launch record

def _fake_driver():
    path = Path(__file__).resolve().parents[2] / "runtime" / "test_launch_record.py"
    spec = importlib.util.spec_from_file_location("_attn_dyn_launch_record", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FakeDriver


def _package(tmp_path, p, name):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "launch.json").write_text(L.launch_record(p).to_json())
    (folder / "kernel.cubin").write_bytes(b"CUBIN")
    return load_package(folder)


def _static_overrides(path, sizes: dict) -> dict:
    data = _plan(path)
    fixed = {k: v if isinstance(v, int) else sizes[k] for k, v in data.sizes.items()}
    return {"op.sizes": fixed, "schedule.backends": ["cuda"]}


@pytest.mark.parametrize("path, calls", [
    (DYN, [{"B": 1, "S": 128}, {"B": 3, "S": 1280}, {"B": 64, "S": 32768}]),
    (GQA, [{"B": 1, "S": 1}, {"B": 2, "S": 1000}, {"B": 16, "S": 32768}]),
])
def test_launch_record_extents_match_static_builds(path, calls, tmp_path, monkeypatch):
    """One dynamic record, evaluated at each call's sizes, gives the tensor maps, grid and pointers that a static
    build of those sizes gives, plus the sizes themselves as i32 arguments."""
    fake = _fake_driver()(monkeypatch, sm_count=132)
    dyn = _plan(path)
    kernel = _package(tmp_path, dyn, "dynamic")
    for i, sizes in enumerate(calls):
        static = _plan(path, _static_overrides(path, sizes))
        skernel = _package(tmp_path, static, f"static{i}")
        ptrs = [0x7F0000000000 + (j << 32) for j in range(len(static.inputs) + len(static.outputs))]
        n_in = len(static.inputs)
        shapes = [kernel.shape_of(o, sizes) for o in kernel.inputs]
        assert kernel.bind(shapes) == sizes and shapes == [o.shape for o in static.inputs]
        assert kernel.output_shapes(sizes) == tuple(o.shape for o in static.outputs)
        fake.encoded.clear()
        fake.launches.clear()
        kernel._launcher(ptrs[:n_in], ptrs[n_in:], stream=0, sizes=sizes)()
        got_maps, (got,) = list(fake.encoded), list(fake.launches)
        fake.encoded.clear()
        fake.launches.clear()
        skernel._launcher(ptrs[:n_in], ptrs[n_in:], stream=0)()
        want_maps, (want,) = list(fake.encoded), list(fake.launches)
        assert got_maps == want_maps
        assert got["grid"] == want["grid"] and got["block"] == want["block"] and got["smem"] == want["smem"]
        n_static = len(static.launch.kernel_args)
        kinds = [a.kind for a in static.launch.kernel_args]      # each package owns its tile counter: its own address
        assert [x for x, k in zip(got["args"], kinds) if k != "counter"] == \
            [x for x, k in zip(want["args"], kinds) if k != "counter"]
        assert got["args"][n_static:] == [driver.Arg.i32(sizes[r.name]) for r in dyn.launch.dynamic_sizes]


def test_a_size_out_of_range_is_an_argument_error(tmp_path):
    kernel = _package(tmp_path, _plan(DYN), "dynamic")
    with pytest.raises(ArgumentError, match=r"S.*200.*multiple of 128"):
        kernel.bind([(1, 200, 16, 128)] * 3)
    with pytest.raises(ArgumentError, match=r"B.*65.*1\.\.64"):
        kernel.bind([(65, 128, 16, 128)] * 3)


# ------------------------------------------------------------------------------------------------ tile order

@pytest.mark.parametrize("sizes", [{"B": 1, "S": 1}, {"B": 3, "S": 1000}, {"B": 16, "S": 4096}])
def test_tile_order_at_a_call_is_a_permutation_longest_first(sizes):
    """The lpt order of a dynamic plan at a call's sizes (what sg_tile computes from the locals) covers every
    (batch, head, q block) once, each section's longest tiles first."""
    p = _plan(GQA).at(sizes)
    assert isinstance(p.num_tiles, int) and p.num_tiles == -(-sizes["S"] // 128) * 32 * sizes["B"]
    tiles = [tile_of(p, t) for t in range(p.num_tiles)]
    assert sorted(tiles) == sorted((b, h, q) for b in range(sizes["B"]) for h in range(32)
                                   for q in range(p.q_blocks))
    per = p.section_heads * p.q_blocks
    for s in range(0, p.num_tiles, per):
        qbs = [q for _, _, q in tiles[s:s + per]]
        assert qbs == sorted(qbs, reverse=True)


# ------------------------------------------------------------------------------------------------ Pallas, interpreted

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402

# the bundled dynamic spec made small for the interpreter: head_dim 64, 64-key blocks, 2 heads, B up to 2, S up to
# 512 in steps of 128; causal with the LSE (masking at the diagonal, a row sum per query)
SMALL = {"D": 64, "H": 2, "op.sizes.B": {"dynamic": True, "max": 2},
         "op.sizes.S": {"dynamic": True, "min": 128, "max": 512, "multiple_of": 128},
         "schedule.in_specs.q.block_shape": [128, 64], "schedule.in_specs.k.block_shape": [64, 64],
         "schedule.in_specs.v.block_shape": [64, 64], "op.causal": True,
         "op.outputs.lse": {"shape": ["B", "H", "S"], "dtype": "f32"}, "schedule.backends": ["pallas"]}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _module(built, folder: Path):
    path = folder / "pallas_kernel.py"
    path.write_bytes(built.files["pallas_kernel.py"])
    name = f"_test_attention_dynamic_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_one_pallas_package_serves_several_sizes_in_the_interpreter(tmp_path):
    from schedgen.families.attention.reference import attention_reference
    from schedgen.reference import rel_error, tolerance
    from schedgen.verify import interpret_params, races_found
    built = build_spec(str(DYN), SMALL)
    mod = _module(built, tmp_path)
    spec, p = built.spec, built.plan
    with pytest.raises(TypeError, match="dynamic sizes"):
        mod.make()
    rng = np.random.default_rng(0)
    for sizes in ({"B": 1, "S": 128}, {"B": 2, "S": 384}, {"B": 1, "S": 512}):
        pa = p.at(sizes)
        ins = {o.name: rng.standard_normal(o.shape, dtype=np.float32).astype(ml_dtypes.bfloat16) for o in pa.inputs}
        assert mod.sizes_of([ins[o.name] for o in pa.inputs]) == sizes
        poisoned = [jnp.full(o.shape, jnp.nan, mod._DTYPES[o.dtype]) for o in pa.outputs]
        outs = mod.run_into([jnp.asarray(ins[o.name]) for o in pa.inputs], poisoned, interpret=interpret_params())
        assert races_found() is not True
        ref = attention_reference(spec, {**pa.sizes}, ins, sample=False)
        for o, out in zip(pa.outputs, outs):
            out = np.asarray(out)
            assert out.shape == o.shape and not np.isnan(out.astype(np.float32)).any(), (sizes, o.name)
            assert rel_error(out, ref[o.name]) <= tolerance(o.dtype, p.approx_math), (sizes, o.name)


def test_one_pallas_package_serves_ragged_lengths_in_the_interpreter(tmp_path):
    """S a multiple of 8 (of no block): one package at S = 136 (the second consumer of the last query block wholly
    past Sq), 200 (8 keys in the last key block) and 256 (whole blocks: the mask then masks nothing), causal,
    without the LSE (the Pallas kernel takes the LSE with whole blocks only: test_pallas_attention.py's
    test_lse_with_ragged_blocks_is_refused_on_pallas), on a persistent grid of 2 blocks, outputs poisoned, each
    against the float64 reference."""
    from schedgen.families.attention.reference import attention_reference
    from schedgen.reference import rel_error, tolerance
    from schedgen.verify import interpret_params, races_found
    ov = {**{k: v for k, v in SMALL.items() if k != "op.outputs.lse"},
          "op.sizes.S": {"dynamic": True, "min": 8, "max": 256, "multiple_of": 8}, "schedule.persistent.loop": "nd_loop"}
    built = build_spec(str(DYN), ov)
    mod = _module(built, tmp_path)
    mod._sm_count = lambda: 2       # a grid of 2 blocks (the module would count a GPU's SMs)
    spec, p = built.spec, built.plan
    assert p.may_ragged_q and p.may_ragged_kv and p.persistent
    assert "ext.seq_kv // BLOCK_KV" in built.files["pallas_kernel.py"].decode()
    rng = np.random.default_rng(2)
    for sizes in ({"B": 2, "S": 136}, {"B": 1, "S": 200}, {"B": 1, "S": 256}, {"B": 1, "S": 8}):
        pa = p.at(sizes)
        ins = {o.name: rng.standard_normal(o.shape, dtype=np.float32).astype(ml_dtypes.bfloat16) for o in pa.inputs}
        poisoned = [jnp.full(o.shape, jnp.nan, mod._DTYPES[o.dtype]) for o in pa.outputs]
        outs = mod.run_into([jnp.asarray(ins[o.name]) for o in pa.inputs], poisoned, interpret=interpret_params())
        assert races_found() is not True
        ref = attention_reference(spec, {**pa.sizes}, ins, sample=False)
        for o, out in zip(pa.outputs, outs):
            out = np.asarray(out)
            assert out.shape == o.shape and not np.isnan(out.astype(np.float32)).any(), (sizes, o.name)
            assert rel_error(out, ref[o.name]) <= tolerance(o.dtype, p.approx_math), (sizes, o.name)


def test_top_left_pallas_package_with_lengths_that_cross(tmp_path):
    """Top-left causal with separate dynamic Sq and Skv (ranges that cross, legal top-left only): one package at more
    keys than queries, as many, and fewer (rows past Skv see every key: the causal key-block counts are capped at
    the call's key blocks), each against the float64 reference."""
    from schedgen.families.attention.reference import attention_reference
    from schedgen.reference import rel_error, tolerance
    from schedgen.verify import interpret_params, races_found
    ov = {**SMALL, "op.causal": "top_left", "op.sizes.B": 1,
          "op.sizes.T": {"dynamic": True, "min": 64, "max": 512, "multiple_of": 64},
          "op.inputs.k.shape": ["B", "T", "H", "D"], "op.inputs.v.shape": ["B", "T", "H", "D"]}
    built = build_spec(str(DYN), ov)
    mod = _module(built, tmp_path)
    spec, p = built.spec, built.plan
    assert p.causal_past_keys and "jnp.minimum(" in built.files["pallas_kernel.py"].decode()
    rng = np.random.default_rng(1)
    for sizes in ({"S": 128, "T": 320}, {"S": 256, "T": 256}, {"S": 384, "T": 128}, {"S": 512, "T": 64}):
        pa = p.at(sizes)
        ins = {o.name: rng.standard_normal(o.shape, dtype=np.float32).astype(ml_dtypes.bfloat16) for o in pa.inputs}
        poisoned = [jnp.full(o.shape, jnp.nan, mod._DTYPES[o.dtype]) for o in pa.outputs]
        outs = mod.run_into([jnp.asarray(ins[o.name]) for o in pa.inputs], poisoned, interpret=interpret_params())
        assert races_found() is not True
        ref = attention_reference(spec, {**pa.sizes}, ins, sample=False)
        for o, out in zip(pa.outputs, outs):
            assert rel_error(np.asarray(out), ref[o.name]) <= tolerance(o.dtype, p.approx_math), (sizes, o.name)


BHSD_HEADS = {"op.layout": "bhsd", "op.causal": True, "op.sizes.H": {"dynamic": True, "min": 4, "max": 64,
                                                                     "multiple_of": 4},
              "op.outputs.lse": {"shape": ["B", "H", "S"], "dtype": "f32"},
              **{f"op.{g}.{n}.shape": ["B", "H", "S", "D"] for g, n in
                 (("inputs", "q"), ("inputs", "k"), ("inputs", "v"), ("outputs", "o"))}}


@pytest.mark.parametrize("ov, sizes", [({}, {"B": 1, "S": 128}), ({}, {"B": 4, "S": 4096}),
                                       (BHSD_HEADS, {"B": 2, "S": 1024, "H": 12})],
                         ids=["b1_s128", "b4_s4096", "bhsd_causal_lse_heads12"])
def test_bundled_dynamic_module_lowers_for_cuda_at_each_size(ov, sizes, tmp_path):
    """The bundled dynamic spec (head_dim 128, 128-row blocks) at full size, and a causal bhsd variant with dynamic
    heads and the LSE: make(sizes) lowers to one Mosaic GPU call over the call's shapes and grid."""
    built = build_spec(str(DYN), ov)
    mod = _module(built, tmp_path)
    pa = built.plan.at(sizes)
    args = [jax.ShapeDtypeStruct(o.shape, mod._DTYPES[o.dtype]) for o in pa.inputs]
    text = jax.jit(mod.make(sizes)).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    calls = re.findall(r"stablehlo\.custom_call @(\w+)\(([^)]*)\)", text)
    assert [c[0] for c in calls] == ["mosaic_gpu_v2"], calls
    for o in pa.outputs:
        assert re.search(r"tensor<{}x{}>".format("x".join(map(str, o.shape)), o.dtype), text), o.name
    assert mod._extents(sizes).num_tiles == pa.num_tiles
