"""The matmul family's fused-epilogue peers (issue 17): `torch_eager` (torch.matmul, then the spec's epilogue in
eager torch ops) and `torch_compile` (torch.compile of that function), for every spec whose epilogue is not
`out = acc`; on CPU tensors against the float64 reference, the peer lists per spec, the skip reasons. The timed
peers on the H200 are the `gpu` test at the end."""
from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, spec_files
from schedgen.bench.case import Case
from schedgen.families.matmul import peers
from schedgen.families.matmul.reference import matmul_reference
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan
from schedgen.reference import random_inputs, rel_error

USER_SHAPES = sorted((ROOT / "bench" / "user_shapes").glob("*.yaml"))

# a batched, transposed-lhs spec with constants, a temporary, a bias row, a column and a full batched operand
EVERYTHING = """name: t_epi
op:
  kind: matmul
  sizes: {B: 2, M: 128, N: 256, K: 128}
  constants: {alpha: 0.5}
  inputs:
    a: {shape: [B, K, M], dtype: bf16}
    b: {shape: [K, N], dtype: bf16}
    bias: {shape: [N], dtype: f32}
    col: {shape: [M, 1], dtype: f32}
    c: {shape: [B, M, N], dtype: bf16}
  outputs:
    out: {shape: [B, M, N], dtype: bf16}
  transpose_lhs: true
  epilogue: |
    t = acc * alpha + bias
    out = silu(t) + col * c
"""


def _plan(path, overrides=None):
    spec, src = load_spec(str(path), overrides or {})
    return spec, plan(spec, src)


def _small(path: Path):
    """The spec at a few tiles of its own sizes (sizes it does not name left alone)."""
    spec, _ = load_spec(str(path))
    names = set(spec.op.sizes)
    return _plan(path, {f"op.sizes.{k}": v for k, v in {"M": 256, "N": 512, "K": 128}.items() if k in names})


def _everything(tmp_path):
    f = tmp_path / "t_epi.yaml"
    f.write_text(EVERYTHING)
    return f


def _matmul_specs() -> list[Path]:
    return spec_files("matmul", target="sm_90a") + USER_SHAPES


def test_the_peer_list_follows_the_epilogue():
    """cuBLAS and JAX's kernel for every matmul spec; torch eager and torch.compile exactly where the epilogue is not
    `out = acc` (the bundled fused linear layers and the users' fused shapes)."""
    fused = set()
    for path in _matmul_specs():
        spec, p = _plan(path)
        names = peers.peer_names(p)
        if p.in_dtype in ("f8e4m3", "f8e5m2"):       # torch._scaled_mm and a bf16 cuBLAS reference (test_fp8.py)
            assert names == ["scaled_mm_fast", "scaled_mm", "cublas"], path.name
            continue
        assert names[:2] == ["cublas", "jax_pallas"], path.name
        if names[2:]:
            assert names[2:] == ["torch_eager", "torch_compile"] and not p.identity_epilogue, path.name
            fused.add(path.stem)
        else:
            assert p.identity_epilogue, path.name
    assert {"matmul_bias_gelu_bf16", "linear_gelu_bf16_dynamic", "linear_bias_gelu_f16_4096",
            "linear_bias_residual_4096x4096x1024"} <= fused
    assert "linear_4096x4096x1024_noepi" not in fused and "matmul_bf16_4096" not in fused


def _check_in_float64(torch, spec, p):
    host = random_inputs(spec, p.sizes, seed=3)
    args = [t.double() for t in peers.torch_operands(torch, p, host, 1, device="cpu")[0]]
    out = peers.torch_epilogue_fn(torch, spec, torch.float64)(*args)
    ref = matmul_reference(spec, p.sizes, host, sample=False)[next(iter(spec.op.outputs))]
    assert tuple(out.shape) == ref.shape
    return rel_error(out.numpy(), ref)


@pytest.mark.parametrize("path", [p for p in _matmul_specs() if not _plan(p)[1].identity_epilogue
                                  and _plan(p)[1].in_dtype not in ("f8e4m3", "f8e5m2")],
                         ids=lambda p: p.stem)
def test_the_eager_function_is_the_specs_epilogue(path):
    """On float64 CPU tensors the function (the product, then the epilogue rendered from the parsed tree) is the
    float64 reference of the spec: every fused spec, with its transposed weight, bias and residual."""
    torch = pytest.importorskip("torch")
    spec, p = _small(path)
    assert _check_in_float64(torch, spec, p) < 1e-12


def test_every_kind_of_epilogue_operand_batched_and_transposed(tmp_path):
    torch = pytest.importorskip("torch")
    spec, p = _plan(_everything(tmp_path))
    assert p.batch == 2 and p.transpose_lhs
    assert _check_in_float64(torch, spec, p) < 1e-12
    # not vacuous: the same function with another constant is far from the reference
    spec2 = spec.model_copy(update={"op": spec.op.model_copy(update={"constants": {"alpha": 0.25}})})
    host = random_inputs(spec, p.sizes, seed=3)
    args = [t.double() for t in peers.torch_operands(torch, p, host, 1, device="cpu")[0]]
    wrong = peers.torch_epilogue_fn(torch, spec2, torch.float64)(*args)
    assert rel_error(wrong.numpy(), matmul_reference(spec, p.sizes, host, sample=False)["out"]) > 1e-2


def _case(spec, p):
    host = random_inputs(spec, p.sizes, seed=1)
    ref = matmul_reference(spec, p.sizes, host, sample=True, seed=2)[p.outputs[0].name]
    return Case(types.SimpleNamespace(plan=p, spec=spec), host, 2, 10, 2), ref


def test_the_eager_peer_is_verified_and_says_what_it_is(tmp_path):
    """The peer as bench builds it (on CPU tensors here): two input sets, checked against the float64 reference in
    bf16 (torch's own eager dtype semantics), its info naming the product, the epilogue and the backend."""
    pytest.importorskip("torch")
    spec, p = _plan(_everything(tmp_path))
    case, ref = _case(spec, p)
    peer = peers.torch_epilogue_peer(case, ref, compiled=False, device="cpu")
    assert peer.contender is not None and peer.contender.name == "torch_eager", peer.info
    info = peer.info
    assert info["verified"] and info["rel_error"] < 1e-2 and info["backend"] == "torch eager"
    assert info["product"] == "torch.matmul (cuBLAS)" and info["epilogue"] == "t = acc * alpha + bias; out = silu(t) + col * c"
    assert "then `t = acc * alpha + bias; out = silu(t) + col * c` in eager torch ops" in info["note"]
    peer.contender.call(1)            # the second input set
    peer.close()


def test_an_f32_output_that_cpu_torch_cannot_write_is_checked_at_the_input_dtype():
    """f16 in, f32 out: cuBLAS writes f32 straight (torch.mm out_dtype) on the GPU; where torch cannot (the CPU
    has no mm.dtype), the product comes in f16 and is checked at f16's tolerance, saying so."""
    pytest.importorskip("torch")
    spec, p = _small(ROOT / "bench" / "user_shapes" / "linear_bias_gelu_f16_4096.yaml")
    case, ref = _case(spec, p)
    peer = peers.torch_epilogue_peer(case, ref, compiled=False, device="cpu")
    assert peer.info["product"].startswith("torch.matmul in f16 (no f32 output"), peer.info
    assert peer.info["verified"], peer.info


def test_torch_compile_not_asked_for_or_failing_is_a_skipped_peer(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    spec, p = _plan(_everything(tmp_path))
    case, ref = _case(spec, p)
    monkeypatch.setattr(peers, "TORCH_COMPILE_MODE", None)
    skipped = peers.torch_epilogue_peer(case, ref, compiled=True, device="cpu")
    assert skipped.contender is None and skipped.info["skipped"] == \
        "torch.compile not asked for (the caller's choice)"
    monkeypatch.setattr(peers, "TORCH_COMPILE_MODE", "max-autotune-no-cudagraphs")

    def broken(torch, fn, args0, device):
        raise RuntimeError("inductor: no Triton for this GPU\nlong traceback")
    monkeypatch.setattr(peers, "_compiled", broken)
    failed = peers.torch_epilogue_peer(case, ref, compiled=True, device="cpu")
    assert failed.contender is None
    assert failed.info["skipped"] == ("torch.compile(mode='max-autotune-no-cudagraphs') failed: RuntimeError: "
                                      "inductor: no Triton for this GPU")
    assert failed.info["config"] == {"mode": "max-autotune-no-cudagraphs", "fullgraph": True, "dynamic": False}


def test_the_function_traces_as_one_graph(tmp_path):
    """torch.compile(fullgraph=True) of the rendered function (dynamo with the eager backend: no inductor needed
    here) traces it whole and computes the same values: the compiled peer times one graph, not a fallback."""
    torch = pytest.importorskip("torch")
    spec, p = _plan(_everything(tmp_path))
    host = random_inputs(spec, p.sizes, seed=3)
    args = [t.double() for t in peers.torch_operands(torch, p, host, 1, device="cpu")[0]]
    fn = peers.torch_epilogue_fn(torch, spec, torch.float64)
    torch._dynamo.reset()
    traced = torch.compile(fn, backend="eager", fullgraph=True, dynamic=False)
    np.testing.assert_allclose(traced(*args).numpy(), fn(*args).numpy(), rtol=0, atol=0)
    torch._dynamo.reset()


def test_identity_specs_get_no_torch_epilogue_peers(monkeypatch):
    """peers() builds exactly peer_names(): an `out = acc` spec gets cuBLAS and JAX only."""
    spec, p = _small(ROOT / "specs" / "matmul_bf16_4096.yaml")
    made = []
    monkeypatch.setattr(peers, "cublas_peer", lambda *a: made.append("cublas") or peers.Peer.skipped("x"))
    monkeypatch.setattr(peers, "jax_pallas_peer", lambda *a: made.append("jax") or peers.Peer.skipped("x"))
    monkeypatch.setattr(peers, "torch_epilogue_peer", lambda *a, **k: made.append("torch") or peers.Peer.skipped("x"))
    case, _ = _case(spec, p)
    assert list(peers.peers(case)) == ["cublas", "jax_pallas"] and made == ["cublas", "jax"]
    spec, p = _small(ROOT / "specs" / "matmul_bias_gelu_bf16.yaml")
    case, _ = _case(spec, p)
    made.clear()
    assert list(peers.peers(case)) == ["cublas", "jax_pallas", "torch_eager", "torch_compile"]
    assert made == ["cublas", "jax", "torch", "torch"]


@pytest.mark.gpu
def test_fused_peers_on_the_gpu():
    """On the H200: both torch peers of the bundled fused linear layer verify against float64 and time."""
    pytest.importorskip("torch")
    from schedgen.bench import interleaved
    spec, p = _plan(ROOT / "specs" / "matmul_bias_gelu_bf16.yaml")
    case, ref = _case(spec, p)
    eager = peers.torch_epilogue_peer(case, ref, compiled=False)
    compiled = peers.torch_epilogue_peer(case, ref, compiled=True)
    assert eager.info["verified"] and compiled.info.get("verified"), (eager.info, compiled.info)
    timed = interleaved([eager.contender, compiled.contender], block=3, rounds=2)
    assert all(t["time_ms"] for t in timed.values()), timed
    eager.close()
    compiled.close()
