"""The attention_backward family's CUDA C++ kernel: one launch (dK/dV blocks, then dQ blocks) on mma.sync m16n8k16
from cp.async SMEM rings. On the CPU: it renders and compiles with NVRTC for sm_90a for each shape of problem
(causal or not, GQA, head_dim 64 and 128, bf16 and f16, bhsd, 1 to 3 stages, 128-row blocks), its SASS has the
tensor-core MMAs and the ldmatrix loads (plain and transposed) and no local memory, its plan numbers, the backends
the defaults pick and the located errors. On the GPU (`-m gpu`): `verify` of the CUDA kernel against the float64
reference at small sizes (outputs poisoned), and torch autograd through an attention package's backward step."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR, opcodes
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.toolchain.nvrtc import resource_usage, sass
from test_attention_backward import _bwd_overrides

SPEC = SPECS_DIR / "attention_backward_bf16_4096.yaml"
CUDA = {"schedule.backends": ["cuda"]}
F16 = {f"op.{g}.{n}.dtype": "f16" for g, ns in (("inputs", ("q", "k", "v", "fwd_o", "grad_o")),
                                                ("outputs", ("dq", "dk", "dv"))) for n in ns}
S128 = {"B": 1, "SQ": 128, "SKV": 128, "H": 2, "D": 64}

# small problems: each a different path through the kernel (the GPU tests run them; the CPU ones compile them)
CASES = {
    "plain_d64": _bwd_overrides(S128),
    "causal_d128": _bwd_overrides({"B": 2, "SQ": 256, "SKV": 256, "H": 2, "D": 128}, causal=True, d=128),
    "gqa_causal_d128": _bwd_overrides({"B": 2, "SQ": 256, "SKV": 256, "H": 4, "G": 2, "D": 128}, causal=True,
                                      gqa=True, d=128),
    # bottom-right with more keys: the first key block is seen by every query, the last by the last rows only
    "causal_sq_lt_skv": _bwd_overrides({"B": 1, "SQ": 128, "SKV": 256, "H": 1, "D": 64}, causal=True),
    # top-left with fewer keys: the queries past Skv see every key
    "top_left_sq_gt_skv": _bwd_overrides({"B": 1, "SQ": 256, "SKV": 128, "H": 1, "D": 64}, causal="top_left"),
    # top-left with more keys: keys past Sq are seen by no query (dK = dV = 0 there: the blocks with no step)
    "top_left_sq_lt_skv": _bwd_overrides({"B": 1, "SQ": 64, "SKV": 192, "H": 1, "D": 64}, causal="top_left"),
    "bhsd_scale_f16_stages1": {**_bwd_overrides({"B": 2, "SQ": 192, "SKV": 320, "H": 3, "D": 128}, layout="bhsd",
                                                scale=0.3, d=128),
                               "schedule.pipeline.max_concurrent_steps": 1, **F16,
                               "schedule.compiler_params.approx_math": False},
    "blocks128_stages3_causal_d64": {**_bwd_overrides({"B": 1, "SQ": 384, "SKV": 384, "H": 2, "D": 64}, causal=True,
                                                      blocks=(128, 128)),
                                     "schedule.pipeline.max_concurrent_steps": 3},
    "gqa_f16_d64_kv128": {**_bwd_overrides({"B": 1, "SQ": 256, "SKV": 384, "H": 4, "G": 1, "D": 64}, gqa=True,
                                           blocks=(64, 128)), **F16},
}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    return {name: build_spec(str(SPEC), {**ov, **CUDA}, cache=cache) for name, ov in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_compiles_to_tensor_core_mmas_without_local_memory(built, name):
    b = built[name]
    p = b.plan
    text = sass(b.files["kernel.cubin"])
    ops = opcodes(text)
    mma = {o for o in ops if o.startswith("HMMA.")}
    assert mma == {"HMMA.16816.F32.BF16" if p.dtype == "bf16" else "HMMA.16816.F32"}, mma
    # S (S^T), dP (dP^T) from K-major tiles; dV, dK, dQ from N-major ones (ldmatrix .trans)
    assert "LDSM.16.M88.4" in ops and "LDSM.16.MT88.4" in ops
    assert "LDGSTS.E.BYPASS.128" in ops                     # the cp.async rings (16 bytes, L1 bypassed)
    assert not [o for o in ops if o.startswith(("LDL", "STL", "ATOM", "RED"))]   # no spills, no atomics
    assert "MUFU.EX2" in ops
    u = resource_usage(b.files["kernel.cubin"])[p.launch.kernel_name]
    assert u["STACK"] == 0 and u["LOCAL"] == 0 and u["REG"] <= 255
    assert b.warnings == []


def test_the_plan_is_one_launch_of_both_roles(built):
    p = built["gqa_causal_d128"].plan
    c = p.cuda
    assert (c.dkv_blocks, c.dq_blocks) == (256 // 64 * 2 * 2, 256 // 64 * 4 * 2)
    assert p.launch.num_blocks == c.dkv_blocks + c.dq_blocks and p.launch.threads == 128
    assert [a.kind for a in p.launch.kernel_args] == ["ptr"] * 9 and [a.operand for a in p.launch.kernel_args] == list(range(9))
    assert c.q_strides == (256 * 4 * 128, 4 * 128, 128) and c.kv_strides == (256 * 2 * 128, 2 * 128, 128)
    assert p.launch.smem_bytes == c.smem_bytes >= c.dkv_delta + 64 * 4 + 1024
    bh = built["bhsd_scale_f16_stages1"].plan.cuda
    assert bh.q_strides == (3 * 192 * 128, 128, 192 * 128) and bh.kv_strides == (3 * 320 * 128, 128, 320 * 128)


def test_rendering_reflects_the_plan(built):
    cu = built["causal_sq_lt_skv"].files["kernel.cu"].decode()
    assert "constexpr int OFFSET = 128;" in cu and "crosses" in cu and "ex2.approx.ftz.f32" in cu
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in cu
    plain = built["plain_d64"].files["kernel.cu"].decode()
    assert "OFFSET" not in plain and "crosses" not in plain and "constexpr int qb0 = 0;" in plain
    f16 = built["bhsd_scale_f16_stages1"].files["kernel.cu"].decode()
    assert "f32.f16.f16.f32" in f16 and "cvt.rn.f16x2.f32" in f16 and "exp2f(x)" in f16
    assert "sg_cp_wait<0>()" in f16 and "sg_cp_wait<2>()" in built["blocks128_stages3_causal_d64"].files[
        "kernel.cu"].decode()


# (overrides, path, text, whether the Pallas kernels take it)
ERRORS = {
    "dq_registers": ({"schedule.in_specs.k.block_shape": [128, 128]}, "schedule.in_specs.k.block_shape[0]",
                     "the CUDA kernel's dQ thread holds about", True),
    "dkv_registers_d64": ({"D": 64, "S": 3072, "schedule.in_specs.q.block_shape": [192, 64],
                           "schedule.in_specs.k.block_shape": [64, 64]},
                          "schedule.in_specs.q.block_shape[0]", "legal here: block_q <= 128", False),
    "smem": ({"schedule.pipeline.max_concurrent_steps": 5}, "schedule.pipeline.max_concurrent_steps",
             "the CUDA kernel needs", True),
}


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_located_errors(case):
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    ov, path, text, pallas_ok = ERRORS[case]
    spec, src = load_spec(str(SPEC), {**ov, **CUDA})
    with pytest.raises(SpecErrors) as exc:
        plan(spec, src)
    msg = str(exc.value)
    assert path in msg and text in msg, msg
    if pallas_ok:
        spec, src = load_spec(str(SPEC), {**ov, "schedule.backends": ["pallas"]})
        assert plan(spec, src).cuda is None          # the Pallas kernels take it


def test_defaults_pick_both_backends_where_the_cuda_kernel_fits(tmp_path):
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    text = SPEC.read_text()
    assert "  backends: [cuda, pallas]\n" in text
    path = tmp_path / "no_backends.yaml"
    path.write_text(text.replace("  backends: [cuda, pallas]\n", ""))
    spec, src = load_spec(str(path))
    assert "backends" not in spec.schedule.model_fields_set
    p = plan(spec, src)
    assert p.launch.backends == ("cuda", "pallas") and p.wgmma is not None     # the planner's kind: warp_specialized
    spec, src = load_spec(str(path), {"schedule.in_specs.k.block_shape": [128, 128]})
    p = plan(spec, src)
    assert p.launch.backends == ("pallas",) and p.cuda is None


# ------------------------------------------------------------------------------ on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
def test_cuda_kernel_matches_float64_on_gpu(case):
    """`schedgen verify --backend cuda`: fresh random inputs (o and lse the forward's), outputs poisoned, every
    gradient against the float64 reference within the dtype's tolerance."""
    from schedgen.verify import verify_file
    checks = verify_file(str(SPEC), ["cuda"], {**CASES[case], **CUDA}, seed=0)
    assert {c.backend for c in checks} == {"cuda"}, checks
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ["attention_backward_bf16_4096", "attention_backward_causal_bf16_4096"])
def test_bundled_specs_verify_on_gpu(spec):
    from schedgen.verify import verify_file
    checks = verify_file(str(SPECS_DIR / f"{spec}.yaml"), ["cuda"], None, seed=0)
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_torch_autograd_through_the_attention_package_on_gpu(tmp_path, causal):
    """An attention spec with `backward: {}` built for CUDA: torch.autograd.grad runs the forward's op and the
    attention_backward step's CUDA kernel; the gradients against torch's float32 autograd of softmax attention."""
    import importlib
    import sys

    import yaml
    torch = pytest.importorskip("torch")
    from schedgen.build import package
    name = f"attn_bwd_cuda_{int(causal)}"
    data = {"name": name, "op": {
        "kind": "attention", "sizes": {"B": 2, "S": 256, "H": 4, "G": 2, "D": 128}, "causal": causal,
        "inputs": {"q": {"shape": ["B", "S", "H", "D"], "dtype": "bf16"},
                   "k": {"shape": ["B", "S", "G", "D"], "dtype": "bf16"},
                   "v": {"shape": ["B", "S", "G", "D"], "dtype": "bf16"}},
        "outputs": {"o": {"shape": ["B", "S", "H", "D"], "dtype": "bf16"}}},
        "schedule": {"backends": ["cuda"]}, "backward": {}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    b = build_spec(str(path))
    assert "cuda" in b.backward.steps["attention_bwd"].plan.launch.backends
    package(b, tmp_path / "pkgs")
    sys.path.insert(0, str(tmp_path / "pkgs"))
    try:
        fn = getattr(importlib.import_module(name), name)
    finally:
        sys.path.remove(str(tmp_path / "pkgs"))
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 256, 4, 128, device="cuda", generator=g).bfloat16().requires_grad_()
    k = torch.randn(2, 256, 2, 128, device="cuda", generator=g).bfloat16().requires_grad_()
    v = torch.randn(2, 256, 2, 128, device="cuda", generator=g).bfloat16().requires_grad_()
    w = torch.randn(2, 256, 4, 128, device="cuda", generator=g)
    got = torch.autograd.grad((fn(q, k, v).float() * w).sum(), (q, k, v))

    def ref(q, k, v):
        qf, kf, vf = (x.float().transpose(1, 2) for x in (q, k, v))
        kf, vf = kf.repeat_interleave(2, dim=1), vf.repeat_interleave(2, dim=1)
        o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
        return (o.transpose(1, 2) * w).sum()
    want = torch.autograd.grad(ref(q, k, v), (q, k, v))
    for n, a, e in zip("qkv", got, want):
        err = float(torch.linalg.norm((a.float() - e).flatten()) / torch.linalg.norm(e.flatten()))
        assert err < 2e-2, (n, err)
