"""Causal attention's two alignments (issue 16, section 3) on the CPU: `causal: top_left` (query i sees keys j <= i)
and `bottom_right` (j <= i + Skv - Sq; what `causal: true` means): the float64 reference on cases worked out by hand,
the planner (Sq > Skv legal top-left only), the exact FLOP count, both backends' rendered kernels (and the CUDA one
compiled by NVRTC), and the benchmark peers' masks (torch SDPA checked on the CPU, attention_mgpu's alignment pinned).
The Pallas kernels of both alignments run in the interpreter in test_pallas_attention.py."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec
from schedgen.errors import SpecErrors
from schedgen.families.attention import peers
from schedgen.families.attention.records import attention_flops, score_pairs
from schedgen.families.attention.reference import attention_reference, small_sizes
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan
from schedgen.reference import random_inputs, rel_error

BASE = SPECS_DIR / "attention_bf16_4096.yaml"


def _sq_skv(sq, skv, causal, h=2, d=64, **more):
    """The bundled spec with Sq queries against Skv keys, 64-key blocks."""
    return {"op.sizes": {"B": 1, "SQ": sq, "SKV": skv, "H": h, "D": d}, "op.causal": causal,
            "op.inputs.q.shape": ["B", "SQ", "H", "D"], "op.outputs.o.shape": ["B", "SQ", "H", "D"],
            "op.inputs.k.shape": ["B", "SKV", "H", "D"], "op.inputs.v.shape": ["B", "SKV", "H", "D"],
            "schedule.in_specs.q.block_shape": [128, d], "schedule.in_specs.k.block_shape": [64, d],
            "schedule.in_specs.v.block_shape": [64, d], **more}


def _spec(ov, backends=("cuda",)):
    return load_spec(str(BASE), {"schedule.backends": list(backends), **ov})


def _plan(ov, backends=("cuda",)):
    return plan(*_spec(ov, backends))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


# ------------------------------------------------------------------------------------ the float64 reference

def _mean_of_visible(sq, skv, causal):
    """The reference's output and log-sum-exp when q = 0 (every score 0): each row is the mean of the v rows it
    sees, its log-sum-exp the log of how many. v row j is 2^j in every column (so each visible set has its own
    mean)."""
    spec, _ = _spec({**_sq_skv(sq, skv, causal), "op.scale": 1.0, "op.outputs.lse": {"shape": ["B", "H", "SQ"],
                                                                                      "dtype": "f32"}})
    v = np.broadcast_to((2.0 ** np.arange(skv))[None, :, None, None], (1, skv, 2, 64)).copy()
    ins = {"q": np.zeros((1, sq, 2, 64)), "k": np.ones((1, skv, 2, 64)), "v": v}
    ref = attention_reference(spec, {}, ins, sample=False)
    return ref["o"][0, :, 0, 0], ref["lse"][0, 0]


@pytest.mark.parametrize("sq, skv, causal, seen", [
    # top-left: query i sees keys 0..i; rows from Skv on see every key
    (2, 3, "top_left", [[0], [0, 1]]),
    (3, 2, "top_left", [[0], [0, 1], [0, 1]]),
    # bottom-right (and true): query i sees keys 0..i + Skv - Sq, the last query every key
    (2, 3, "bottom_right", [[0, 1], [0, 1, 2]]),
    (2, 3, True, [[0, 1], [0, 1, 2]]),
    (1, 4, True, [[0, 1, 2, 3]]),
    # Sq = Skv: the two agree
    (2, 2, "top_left", [[0], [0, 1]]),
    (2, 2, "bottom_right", [[0], [0, 1]]),
    (2, 3, False, [[0, 1, 2], [0, 1, 2]]),
], ids=["tl_2x3", "tl_3x2", "br_2x3", "true_2x3", "true_1x4", "tl_2x2", "br_2x2", "none_2x3"])
def test_reference_masks_by_hand(sq, skv, causal, seen):
    o, lse = _mean_of_visible(sq, skv, causal)
    np.testing.assert_allclose(o, [np.mean([2.0 ** j for j in keys]) for keys in seen], rtol=1e-12)
    np.testing.assert_allclose(lse, [np.log(len(keys)) for keys in seen], rtol=1e-12, atol=1e-12)


def test_small_sizes_keep_the_shape_of_the_problem():
    """verify --small shrinks Sq and Skv keeping Skv - Sq (the bottom-right offset), else their proportion (top-left
    Sq > Skv stays so) and a ragged last key block."""
    for ov, want in ((_sq_skv(1024, 4096, True), (256, 3328)), (_sq_skv(1024, 256, "top_left"), (256, 64)),
                     (_sq_skv(1024, 4096, "top_left"), (256, 1024)), (_sq_skv(1000, 600, "top_left"), (256, 152)),
                     (_sq_skv(1024, 4096, False), (256, 1024)), (_sq_skv(512, 512, "top_left"), (256, 256))):
        spec, src = _spec(ov)
        got = small_sizes(spec, plan(spec, src), 2)
        assert (got["SQ"], got["SKV"]) == want, (ov["op.causal"], got)


# ------------------------------------------------------------------------------------ the planner

def test_top_left_takes_more_queries_than_keys():
    p = _plan(_sq_skv(1000, 600, "top_left"))
    assert (p.causal, p.causal_alignment, p.causal_offset, p.causal_past_keys) == (True, "top_left", 0, True)
    # the last query block (rows 896..999, all past Skv) reads all 10 key blocks; the first one 2
    assert [p.kv_end(qb) for qb in range(p.q_blocks)] == [2, 4, 6, 8, 10, 10, 10, 10]
    br = _plan(_sq_skv(600, 1000, True))
    assert (br.causal_alignment, br.causal_offset, br.causal_past_keys) == ("bottom_right", 400, False)
    assert [br.kv_end(qb) for qb in range(br.q_blocks)] == [9, 11, 13, 15, 16]
    assert _plan(_sq_skv(600, 1000, "top_left")).causal_past_keys is False


@pytest.mark.parametrize("causal, spelled", [(True, "causal: true (bottom_right)"), ("bottom_right",
                                                                                    "causal: bottom_right")])
def test_bottom_right_with_more_queries_than_keys_is_located(causal, spelled):
    with pytest.raises(SpecErrors) as info:
        build_spec(str(BASE), {"schedule.backends": ["cuda"], **_sq_skv(1024, 512, causal)})
    (line,) = info.value.lines()
    assert line.startswith(f"{BASE}:") and f"op.causal: {spelled} aligns the last query with the last key" in line
    assert "Sq = 1024, Skv = 512 (the first 512 queries would see no key)" in line and "causal: top_left" in line


def test_dynamic_ranges_that_cross_are_legal_top_left_only():
    ov = {"op.sizes": {"B": 1, "Q": {"dynamic": True, "max": 4096, "multiple_of": 128},
                       "T": {"dynamic": True, "max": 2048, "multiple_of": 128}, "H": 4, "D": 128},
          "op.inputs.q.shape": ["B", "Q", "H", "D"], "op.outputs.o.shape": ["B", "Q", "H", "D"],
          "op.inputs.k.shape": ["B", "T", "H", "D"], "op.inputs.v.shape": ["B", "T", "H", "D"]}
    p = _plan({**ov, "op.causal": "top_left"}, ("cuda", "pallas"))
    assert p.causal_offset == 0 and p.causal_past_keys
    at = p.at({"Q": 512, "T": 256})
    assert (at.kv_end(0), at.kv_end(1), at.kv_end(3)) == (1, 2, 2)   # rows 256..511 see both 128-key blocks
    with pytest.raises(SpecErrors, match="causal: bottom_right aligns the last query"):
        _plan({**ov, "op.causal": "bottom_right"})


# ------------------------------------------------------------------------------------ FLOPs

def test_score_pairs_closed_form_counts_the_mask():
    for sq in range(0, 9):
        for skv in range(0, 9):
            for offset in (None, 0, skv - sq, 3, -2):
                brute = sum(1 for i in range(sq) for j in range(skv) if offset is None or j <= i + offset)
                assert score_pairs(sq, skv, offset) == brute, (sq, skv, offset)


def test_flops_count_unmasked_pairs():
    """The issue's shape: Sq = 1024 against Skv = 4096, bottom-right: 1024 x 3072 + 1024 x 1025 / 2 pairs a head,
    1.75x the halved count the benchmark used to report."""
    p = _plan(_sq_skv(1024, 4096, True, h=8, d=128, **{"schedule.in_specs.k.block_shape": [128, 128],
                                                        "schedule.in_specs.v.block_shape": [128, 128]}))
    pairs = 1024 * 3072 + 1024 * 1025 // 2
    assert p.flops == 4 * 128 * pairs * 8
    assert p.flops / (4 * 8 * 1024 * 4096 * 128 // 2) == pytest.approx(1.75, rel=1e-3)
    tl = _plan(_sq_skv(1024, 4096, "top_left", h=8, d=128, **{"schedule.in_specs.k.block_shape": [128, 128],
                                                               "schedule.in_specs.v.block_shape": [128, 128]}))
    assert tl.flops == 4 * 128 * (1024 * 1025 // 2) * 8
    past = _plan(_sq_skv(1000, 600, "top_left"))              # rows 600..999 see all 600 keys
    assert past.flops == 4 * 64 * (600 * 601 // 2 + 400 * 600) * 2
    assert _plan(_sq_skv(1000, 600, False)).flops == 4 * 64 * 1000 * 600 * 2


def test_dynamic_flops_at_the_sizes_timed():
    ov = {"op.sizes": {"B": {"dynamic": True, "max": 4}, "Q": {"dynamic": True, "max": 2048},
                       "T": {"dynamic": True, "min": 2048, "max": 8192}, "H": 4, "D": 128}, "op.causal": True,
          "op.inputs.q.shape": ["B", "Q", "H", "D"], "op.outputs.o.shape": ["B", "Q", "H", "D"],
          "op.inputs.k.shape": ["B", "T", "H", "D"], "op.inputs.v.shape": ["B", "T", "H", "D"]}
    p = _plan(ov)
    assert p.flops == attention_flops(4, 4, 2048, 8192, 128, "bottom_right")         # at the largest call
    at = p.at({"B": 2, "Q": 1000, "T": 3000})
    assert at.flops == 4 * 128 * (1000 * 2000 + 1000 * 1001 // 2) * 4 * 2


# ------------------------------------------------------------------------------------ the rendered kernels

def test_both_backends_render_the_alignment():
    """At Sq != Skv the alignments render different kernels on both backends (the offset the plan derives); CUDA
    compiles both with NVRTC. Top-left at Sq > Skv caps Pallas' causal key-block counts at the key blocks there are."""
    ov = _sq_skv(256, 448, None)
    tl = build_spec(str(BASE), {"schedule.backends": ["cuda", "pallas"], **ov, "op.causal": "top_left"})
    br = build_spec(str(BASE), {"schedule.backends": ["cuda", "pallas"], **ov, "op.causal": "bottom_right"})
    for name in ("kernel.cu", "pallas_kernel.py"):
        assert tl.files[name] != br.files[name], name
    assert tl.files["kernel.cubin"] and br.files["kernel.cubin"]
    cu_tl, cu_br = tl.files["kernel.cu"].decode(), br.files["kernel.cu"].decode()
    assert "(T.q0 + 128 + 0 + 63) / 64" in cu_tl and "(T.q0 + 128 + 192 + 63) / 64" in cu_br
    assert "T.q0 + w * 64 + r0 + 0;" in cu_tl and "T.q0 + w * 64 + r0 + 192;" in cu_br
    py_tl, py_br = tl.files["pallas_kernel.py"].decode(), br.files["pallas_kernel.py"].decode()
    assert "CAUSAL_OFFSET = 0 " in py_tl and "CAUSAL_OFFSET = 192 " in py_br
    assert "jnp.minimum" not in py_tl + py_br
    past = build_spec(str(BASE), {"schedule.backends": ["cuda", "pallas"], **_sq_skv(384, 192, "top_left")})
    py = past.files["pallas_kernel.py"].decode()
    assert py.count("jnp.minimum(") == 3 and "BLOCK_KV), KV_BLOCKS)" in py and past.files["kernel.cubin"]
    # the same with dynamic lengths: the CUDA kernel takes no offset argument (top-left is 0 at every call)
    dyn = {"op.sizes": {"B": 1, "Q": {"dynamic": True, "max": 4096}, "T": {"dynamic": True, "max": 4096}, "H": 2,
                        "D": 128}, "op.inputs.q.shape": ["B", "Q", "H", "D"], "op.outputs.o.shape": ["B", "Q", "H", "D"],
           "op.inputs.k.shape": ["B", "T", "H", "D"], "op.inputs.v.shape": ["B", "T", "H", "D"]}
    d_tl = build_spec(str(BASE), {"schedule.backends": ["cuda"], **dyn, "op.causal": "top_left"})
    assert "sg_causal_offset" not in d_tl.files["kernel.cu"].decode() and d_tl.files["kernel.cubin"]
    with pytest.raises(SpecErrors, match="Sq .Q. reaches 4096 and Skv .T. may be 1"):
        build_spec(str(BASE), {"schedule.backends": ["cuda"], **dyn, "op.causal": True})


# ------------------------------------------------------------------------------------ the peers' masks

def test_jax_attention_mgpu_is_top_left():
    """jax 0.11.2's attention_mgpu masks top-left, and counts its causal key blocks without a cap at Skv: the peer
    runs it only where that is our mask (a jax upgrade that changes it fails here)."""
    src = inspect.getsource(peers._attention_mgpu())
    assert "mask = (q_ids + q_seq_base) >= (kv_ids + kv_step * block_kv)" in src
    assert "kv_steps = pl.cdiv(q_seq_base + block_q, jnp.array(block_kv, jnp.int32))" in src
    assert "bottom-right" in peers.jax_attention_peer(_plan(_sq_skv(256, 512, True)))[1]
    assert "past the keys" in peers.jax_attention_peer(_plan(_sq_skv(512, 256, "top_left")))[1]
    for ov in (_sq_skv(256, 512, "top_left"), _sq_skv(256, 256, True), _sq_skv(256, 512, False)):
        assert peers.jax_mask_mismatch(_plan(ov)) is None


def _sdpa_case(sq, skv, causal, **more):
    torch = pytest.importorskip("torch")
    spec, src = _spec(_sq_skv(sq, skv, causal, **more))
    p = plan(spec, src)
    host = random_inputs(spec, p.sizes, seed=4)
    ref = attention_reference(spec, p.sizes, host, sample=False)["o"]
    to = {o.name: torch.from_numpy(np.asarray(host[o.name], dtype=np.float32)).to(torch.bfloat16) for o in p.inputs}
    views = [to[o.name].transpose(1, 2) for o in p.inputs]            # bshd -> [B, H, S, D]
    return torch, p, views, ref


@pytest.mark.parametrize("sq, skv, causal, label", [
    (64, 192, "bottom_right", "causal_lower_right (bottom-right)"),
    (64, 192, True, "causal_lower_right (bottom-right)"),
    (64, 192, "top_left", "is_causal=True (top-left)"),
    (192, 64, "top_left", "is_causal=True (top-left)"),
    (128, 128, True, "is_causal=True (top-left)"),
    (64, 192, False, "no mask"),
], ids=["br", "true", "tl", "tl_sq_gt_skv", "square", "none"])
def test_sdpa_runs_our_mask_and_passes_the_check(sq, skv, causal, label):
    """torch SDPA on the CPU (bf16, GQA) with the mask sdpa_masks gives it matches our float64 reference."""
    torch, p, views, ref = _sdpa_case(sq, skv, causal, **{"op.sizes.H": 4, "op.sizes.G": 2,
                                                            "op.inputs.k.shape": ["B", "SKV", "G", "D"],
                                                            "op.inputs.v.shape": ["B", "SKV", "G", "D"]})
    chosen, tried = peers.sdpa_verified(torch, p, views, ref, "cpu")
    assert chosen is not None and chosen[0] == label, tried
    assert tried[-1]["verified"] and tried[-1]["rel_error"] < 1e-2


def test_sdpa_boolean_mask_is_bottom_right():
    torch, p, views, ref = _sdpa_case(64, 192, "bottom_right")
    (label, kwargs), = [m for m in peers.sdpa_masks(torch, p, "cpu") if m[0].startswith("boolean")]
    mask = kwargs["attn_mask"]
    assert mask.shape == (64, 192) and bool(mask[0, 128]) and not bool(mask[0, 129]) and bool(mask[63].all())
    out = peers.sdpa_call(torch, p, views, kwargs).transpose(1, 2).float().numpy()
    assert rel_error(out, ref) < 1e-2


def test_sdpa_with_another_mask_fails_the_check(monkeypatch):
    """Not vacuous: torch's is_causal (top-left) on a bottom-right problem is caught, and the peer is skipped."""
    torch, p, views, ref = _sdpa_case(64, 192, True)
    monkeypatch.setattr(peers, "sdpa_masks", lambda torch, plan, device: [("is_causal", {"is_causal": True})])
    chosen, tried = peers.sdpa_verified(torch, p, views, ref, "cpu")
    assert chosen is None and tried[0]["verified"] is False and tried[0]["rel_error"] > 0.1


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [True, "top_left"])
def test_sdpa_peer_on_gpu_at_the_issues_shape(causal):
    """The issue's shape on the H200 (Sq = 1024, Skv = 4096, GQA 32 / 8): SDPA's fused kernels with our mask pass the
    check (bottom-right through causal_lower_right, or the boolean mask where it falls back)."""
    torch = pytest.importorskip("torch")
    spec, src = _spec(_sq_skv(1024, 4096, causal, d=128, **{
        "op.sizes.H": 32, "op.sizes.G": 8, "op.inputs.k.shape": ["B", "SKV", "G", "D"],
        "op.inputs.v.shape": ["B", "SKV", "G", "D"], "schedule.in_specs.k.block_shape": [128, 128],
        "schedule.in_specs.v.block_shape": [128, 128]}))
    p = plan(spec, src)
    host = random_inputs(spec, p.sizes, seed=4)
    ref = attention_reference(spec, p.sizes, host, sample=True, seed=2)["o"]
    to = {o.name: torch.from_numpy(np.asarray(host[o.name], dtype=np.float32)).to("cuda", torch.bfloat16)
          for o in p.inputs}
    chosen, tried = peers.sdpa_verified(torch, p, [to[o.name].transpose(1, 2) for o in p.inputs], ref, "cuda")
    assert chosen is not None, tried


def test_report_names_a_top_left_mask():
    from schedgen.families.attention.report import shape_label
    shape = {"B": 1, "Hq": 32, "Hkv": 8, "Sq": 1024, "Skv": 4096, "D": 128}
    row = {"spec": "x", "shape": shape, "causal": True}
    assert shape_label(row) == "1x32/8x1024/4096x128 causal"
    assert shape_label({**row, "causal_alignment": "bottom_right"}) == "1x32/8x1024/4096x128 causal"
    assert shape_label({**row, "causal_alignment": "top_left"}) == "1x32/8x1024/4096x128 causal top-left"
    assert peers.markdown([{**row, "backend": "cuda", "kernel": "k", "causal_alignment": "top_left"}]).count(
        "| top_left |") == 1
