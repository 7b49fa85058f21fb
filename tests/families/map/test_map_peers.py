"""The map family's peers (issue 17: ">= 1.00x torch's own eager op and >= 0.97x the copy"): a device copy of the
same bytes and torch's eager ops on the same tensors, the body rendered from its checked tree; on CPU tensors
against the float64 reference, the peer list, the table; the timed peers on the H200 are the `gpu` test."""
from __future__ import annotations

import types

import numpy as np
import pytest

from conftest import SPECS_DIR, small_legal, spec_files
from schedgen.bench.case import Case
from schedgen.families.map import peers
from schedgen.families.map.reference import map_reference
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan
from schedgen.reference import random_inputs, rel_error


def _small(path, **sizes):
    spec, _ = load_spec(str(path))
    over = {f"op.sizes.{k}": v for k, v in {"B": 2, "M": 64, "N": 512, **sizes}.items() if k in spec.op.sizes}
    over |= {f"op.sizes.{k}": small_legal(v) for k, v in spec.op.sizes.items()    # any other dynamic size
             if not isinstance(v, int) and f"op.sizes.{k}" not in over}
    spec, src = load_spec(str(path), over)
    return spec, plan(spec, src)


@pytest.mark.parametrize("path", spec_files("map"), ids=lambda p: p.stem)
def test_the_eager_function_is_the_body(path):
    """Every bundled map spec: the body as torch ops on float64 CPU tensors is the float64 reference."""
    torch = pytest.importorskip("torch")
    spec, p = _small(path)
    host = random_inputs(spec, p.sizes, seed=5)
    fn = peers.torch_map_fn(torch, spec, {o.name: tuple(o.shape) for o in p.outputs},
                            {o.name: torch.float64 for o in p.outputs})
    outs = fn(*[torch.from_numpy(np.asarray(host[o.name], dtype=np.float64)) for o in p.inputs])
    ref = map_reference(spec, p.sizes, host)
    for t, o in zip(outs, p.outputs):
        assert tuple(t.shape) == tuple(o.shape) and rel_error(t.numpy(), ref[o.name]) < 1e-12, o.name


def test_the_eager_peer_is_verified_and_says_what_it_is():
    pytest.importorskip("torch")
    spec, p = _small(SPECS_DIR / "gelu_bias_bf16.yaml")
    host = random_inputs(spec, p.sizes, seed=1)
    case = Case(types.SimpleNamespace(plan=p, spec=spec), host, 2, 10, 2)
    peer = peers.eager_peer(case, device="cpu")
    assert peer.contender is not None and peer.contender.name == "torch_eager"
    assert peer.info["verified"] and 0 < peer.info["rel_error"] < 1e-2
    assert peer.info["body"] == "h = x * w + b; y = gelu(h)" and peer.info["backend"] == "torch eager"
    peer.contender.call(1)
    peer.close()


def test_a_wrong_eager_result_is_not_verified(monkeypatch):
    """Not vacuous: a function that computes something else fails the check (the peer says so in its row)."""
    pytest.importorskip("torch")
    spec, p = _small(SPECS_DIR / "add_bf16.yaml")
    host = random_inputs(spec, p.sizes, seed=1)
    case = Case(types.SimpleNamespace(plan=p, spec=spec), host, 1, 10, 2)
    real = peers.torch_map_fn
    monkeypatch.setattr(peers, "torch_map_fn", lambda *a: (lambda *xs: tuple(2 * t for t in real(*a)(*xs))))
    assert peers.eager_peer(case, device="cpu").info["verified"] is False


def test_the_peers_are_the_copy_and_torch():
    """peers() names both; without a GPU each is a skipped peer with the reason (never an exception)."""
    spec, p = _small(SPECS_DIR / "add_bf16.yaml")
    case = Case(types.SimpleNamespace(plan=p, spec=spec), random_inputs(spec, p.sizes, seed=1), 1, 10, 2)
    got = peers.peers(case)
    assert list(got) == peers.peer_names() == ["copy", "torch_eager"]
    assert all(g.contender is not None or g.info["skipped"] for g in got.values())


def test_the_map_table_has_both_peers():
    row = {"family": "map", "spec": "add_bf16", "backend": "cuda", "shape": {"M": 32768, "N": 16384}, "dtype": "bf16",
           "time_ms": 0.78, "gbps": 4141.0, "verified": True, "rel_error": 1.8e-3, "peer": "copy",
           "peer_time_ms": 0.76, "ratio": 0.974,
           "peers": {"copy": {"time_ms": 0.76, "gbps": 4250.0, "ratio": 0.974, "note": "device-to-device copy"},
                     "torch_eager": {"time_ms": 0.73, "gbps": 4400.0, "ratio": 0.941, "verified": True,
                                     "note": "the body `o = x + y` as eager torch ops"}}}
    text = peers.markdown([row, {**row, "backend": "pallas", "peers": {"copy": row["peers"]["copy"],
                                                                       "torch_eager": {"skipped": "torch not available"}}}])
    assert "| vs device copy | vs torch eager |" in text
    assert "| add_bf16 | default | cuda | M=32768 N=16384 | bf16 | 0.7800 | 4141 | 0.974 (4250 GB/s) | 0.941 (4400 GB/s) |" \
           in text
    assert "\n- add_bf16 torch_eager: the body `o = x + y` as eager torch ops\n" in text
    assert "\n- add_bf16 pallas torch_eager: torch not available\n" in text


@pytest.mark.gpu
def test_map_peers_on_the_gpu():
    pytest.importorskip("torch")
    from schedgen.bench import interleaved
    spec, p = _small(SPECS_DIR / "gelu_bias_bf16.yaml", M=8192, N=4096)
    case = Case(types.SimpleNamespace(plan=p, spec=spec), random_inputs(spec, p.sizes, seed=1), 1, 10, 2)
    got = peers.peers(case)
    assert got["torch_eager"].info["verified"], got["torch_eager"].info
    timed = interleaved([g.contender for g in got.values()], block=3, rounds=2)
    assert all(t["time_ms"] for t in timed.values()), timed
    for g in got.values():
        g.close()
