"""The attention family's peers (issue 17): torch SDPA restricted to one backend each (`sdpa_cudnn`, `sdpa_flash`)
and JAX's attention_mgpu; each verified against float64 with our mask first, a backend that cannot run the case a
skipped peer with the reason torch gives, each timed peer saying what it is (backend, config, mask), the backend
choice entered once per timed block. On the CPU: torch's CPU flash kernel runs under SDPBackend.FLASH_ATTENTION and
no CPU cuDNN exists (a real refusal, with torch's words); the H200 parts are the `gpu` test."""
from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

from conftest import SPECS_DIR
from schedgen.bench.case import Case
from schedgen.families.attention import peers
from schedgen.families.attention.reference import attention_reference
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan
from schedgen.reference import random_inputs

BASE = SPECS_DIR / "attention_bf16_4096.yaml"
GQA = {"op.sizes": {"B": 1, "SQ": 64, "SKV": 192, "H": 4, "G": 2, "D": 64}, "op.causal": True,
       "op.inputs.q.shape": ["B", "SQ", "H", "D"], "op.outputs.o.shape": ["B", "SQ", "H", "D"],
       "op.inputs.k.shape": ["B", "SKV", "G", "D"], "op.inputs.v.shape": ["B", "SKV", "G", "D"],
       "schedule.in_specs.q.block_shape": [128, 64], "schedule.in_specs.k.block_shape": [64, 64],
       "schedule.in_specs.v.block_shape": [64, 64], "schedule.backends": ["cuda"]}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _case(ov=GQA):
    torch = pytest.importorskip("torch")
    spec, src = load_spec(str(BASE), ov)
    p = plan(spec, src)
    host = random_inputs(spec, p.sizes, seed=4)
    ref = attention_reference(spec, p.sizes, host, sample=False)["o"]
    views = [torch.from_numpy(np.asarray(host[o.name], dtype=np.float32)).to(torch.bfloat16).transpose(1, 2)
             for o in p.inputs]
    return torch, p, views, ref


def test_the_peers_are_cudnn_flash_and_jax():
    assert peers.peer_names() == ["sdpa_cudnn", "sdpa_flash", "jax_pallas"]
    assert peers.SDPA_BACKENDS == {"sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_flash": "FLASH_ATTENTION"}
    spec, src = load_spec(str(BASE))
    p = plan(spec, src)
    case = Case(types.SimpleNamespace(plan=p, spec=spec), {}, 1, 10, 2)
    made = []
    pk = pytest.MonkeyPatch()
    pk.setattr(peers, "sdpa_peer", lambda c, backend, ref: made.append(backend) or peers.Peer.skipped("x"))
    pk.setattr(peers, "jax_peer", lambda c, ref: made.append("jax") or peers.Peer.skipped("x"))
    try:
        assert list(peers.peers(case)) == ["sdpa_cudnn", "sdpa_flash", "jax_pallas"]
    finally:
        pk.undo()
    assert made == ["CUDNN_ATTENTION", "FLASH_ATTENTION", "jax"]


def test_flash_backend_runs_our_bottom_right_gqa_mask_and_passes():
    """Under SDPBackend.FLASH_ATTENTION only (torch's CPU flash kernel here), GQA and our bottom-right mask verify."""
    torch, p, views, ref = _case()
    chosen, tried = peers.sdpa_verified(torch, p, views, ref, "cpu", peers.sdpa_scope(torch, "FLASH_ATTENTION"))
    assert chosen is not None and "bottom-right" in chosen[0], tried
    assert tried[-1]["verified"]


def test_a_backend_that_cannot_run_the_case_is_skipped_with_torchs_reason():
    """No cuDNN attention on the CPU: every form of our mask is refused, and the skip reason carries torch's error."""
    torch, p, views, ref = _case()
    chosen, tried = peers.sdpa_verified(torch, p, views, ref, "cpu", peers.sdpa_scope(torch, "CUDNN_ATTENTION"))
    assert chosen is None and tried and all("error" in t for t in tried), tried
    reason = peers.sdpa_skip_reason("CUDNN_ATTENTION", tried)
    assert reason.startswith("no form of our mask verified in torch SDPA with SDPBackend.CUDNN_ATTENTION only: ")
    assert "causal_lower_right (bottom-right): RuntimeError: " in reason and "backend" in reason


def test_torchs_warnings_say_why_and_lose_their_source_location(monkeypatch):
    torch, p, views, ref = _case()

    def refuse(torch, plan, views, kwargs):
        warnings.warn("Flash attention does not support non-null attn_mask. (Triggered internally at "
                      "/pytorch/aten/src/ATen/native/transformers/sdp_utils_cpp.h:263.)", stacklevel=2)
        warnings.warn("Flash attention does not support non-null attn_mask. (Triggered internally at x.h:1.)", stacklevel=2)
        raise RuntimeError("No available kernel. Aborting execution.")
    monkeypatch.setattr(peers, "sdpa_call", refuse)
    with pytest.raises(peers.SdpaError) as err:
        peers.sdpa_try(torch, p, views, {}, None)
    assert str(err.value) == ("RuntimeError: No available kernel. Aborting execution. (torch: Flash attention does "
                              "not support non-null attn_mask.)")


def test_the_info_says_backend_config_and_mask():
    torch, p, views, ref = _case()
    chosen, tried = peers.sdpa_verified(torch, p, views, ref, "cpu", peers.sdpa_scope(torch, "FLASH_ATTENTION"))
    info = peers.sdpa_info(torch, p, "FLASH_ATTENTION", chosen[0], tried)
    assert info["backend"] == "SDPBackend.FLASH_ATTENTION" and info["mask"] == chosen[0]
    assert info["config"]["enable_gqa"] is True and info["config"]["scale"] == p.scale
    assert "SDPBackend.FLASH_ATTENTION only (sdpa_kernel, entered once per timed block)" in info["note"]
    assert info["verified"] and info["rel_error"] == tried[-1]["rel_error"]


def test_the_scope_restricts_and_is_restored():
    """sdpa_scope's context turns every other backend off while it is entered, and leaves them as they were."""
    torch = pytest.importorskip("torch")
    before = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled(),
              torch.backends.cuda.math_sdp_enabled())
    with peers.sdpa_scope(torch, "CUDNN_ATTENTION")():
        assert torch.backends.cuda.cudnn_sdp_enabled() and not torch.backends.cuda.flash_sdp_enabled()
        assert not torch.backends.cuda.math_sdp_enabled()
    assert (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled(),
            torch.backends.cuda.math_sdp_enabled()) == before
    assert peers.sdpa_scope(torch, None) is None


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ["attention_bf16_4096.yaml", "attention_gqa_causal_bf16_1024x4096.yaml"])
def test_sdpa_backend_peers_on_the_gpu(spec):
    """On the H200: both SDPA peers of a bundled spec are verified and timed, or skipped with torch's reason."""
    pytest.importorskip("torch")
    from schedgen.bench import interleaved
    s, src = load_spec(str(SPECS_DIR / spec))
    p = plan(s, src)
    case = Case(types.SimpleNamespace(plan=p, spec=s), random_inputs(s, p.sizes, seed=1), 1, 10, 2)
    got = {n: peers.sdpa_peer(case, b) for n, b in peers.SDPA_BACKENDS.items()}
    for name, peer in got.items():
        assert peer.contender is not None or "SDPBackend" in peer.info["skipped"], (name, peer.info)
    assert any(g.contender is not None for g in got.values()), {n: g.info for n, g in got.items()}
    timed = interleaved([g.contender for g in got.values() if g.contender], block=3, rounds=2)
    assert all(t["time_ms"] for t in timed.values()), timed
    for g in got.values():
        if g.close:
            g.close()
