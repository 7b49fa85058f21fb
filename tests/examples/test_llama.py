"""examples/llama (issue 43) on the CPU, at the `tiny` config: the specs specs.py writes build; SchedgenLlama's
forward and backward trace under torch.compile(fullgraph=True) on meta tensors with every computation a schedgen
custom op (no aten matmul, softmax or SDPA in either graph; the embedding is torch's); and run numerically with
each kernel's CUDA call (`Kernel._call_cuda`) stubbed by its float64 reference (as tests/autodiff/
test_backward_torch.py does), its loss and every parameter gradient match TorchLlama's in float64 (bf16
activations between the kernels: the tolerance is bf16's). Inference: prefill then decode steps (Sq = 1 and 5, B = 1
and 3) through the KV cache match the float64 full forward over the whole sequence; the cache's layout; a decode
step's fullgraph trace on meta tensors; run.py's decode verification."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import graph_keeping_backend, stub_cuda_with_references

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "examples") not in sys.path:
    sys.path.insert(0, str(ROOT / "examples"))
from llama import config as llama_config  # noqa: E402
from llama import model as llama_model  # noqa: E402
from llama import specs as llama_specs  # noqa: E402

CFG = llama_config.get("tiny")
INFERENCE_ONLY = {"llama_decode_attention"}     # no backward section; not in the training graph
B, S = 2, 64                      # S: a multiple of config.seq_multiple (the attention backward's 64-row blocks)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The tiny config's packages (function by kernel name) and every kernel's spec by kernel name, forward and
    backward steps (what the stub's reference reads)."""
    from schedgen.build import build_spec
    from schedgen.cache import Cache
    out = tmp_path_factory.mktemp("llama")
    cache = Cache(out / "cache")
    fns = llama_specs.load(CFG, out, cache_dir=out / "cache", log=lambda *_: None)
    kspecs = {}
    for name in fns:
        b = build_spec(out / "specs" / f"{name}.yaml", cache=cache)     # a cache hit: the specs of what was built
        kspecs[b.name] = b.spec
        if b.backward is not None:                                      # llama_decode_attention: inference only
            kspecs.update({s.name: s.spec for s in b.backward.steps.values()})
    return fns, kspecs


def test_every_spec_of_every_named_config_is_generated_from_its_config():
    for cfg in llama_config.CONFIGS.values():
        texts = llama_specs.spec_texts(cfg)
        assert f"N: {cfg.vocab}" in texts["llama_cross_entropy"]
        assert f"N: {cfg.qkv_width}" in texts["llama_qkv"] and f"K: {cfg.d_model}" in texts["llama_qkv"]
        assert f"G: {cfg.n_kv_heads}" in texts["llama_attention"]
        assert all("dynamic: true" in t for t in texts.values())
        assert all("backward:" in t for n, t in texts.items() if n not in INFERENCE_ONLY)


def _torch_op_names(fn) -> tuple[str, list[str]]:
    k = sys.modules[fn.__module__].kernel if hasattr(fn, "__module__") else fn.kernel
    return k.torch_op.name, [s.torch_op.name for s in k.backward.steps.values() if s.torch_op is not None]


FORBIDDEN = ("aten.mm", "aten.bmm", "aten.addmm", "aten.baddbmm", "aten.matmul", "aten._softmax",
             "aten._log_softmax", "aten.softmax", "aten.nll_loss", "scaled_dot_product", "aten.linear",
             "aten.rsqrt", "aten.silu", "aten.sigmoid")


def test_compile_fullgraph_traces_forward_and_backward_on_schedgen_ops_only(built):
    fns, _ = built
    backend, graphs = graph_keeping_backend()

    torch._dynamo.reset()
    params = llama_model.init_params(CFG, seed=0, device="meta")
    m = llama_model.SchedgenLlama(CFG, params, fns)
    compiled = torch.compile(m, fullgraph=True, backend=backend)
    tokens = torch.zeros(B, S, dtype=torch.int64, device="meta")
    loss = compiled(tokens, tokens)
    assert loss.shape == () and loss.device.type == "meta"
    grads = torch.autograd.grad(loss, list(params.values()))
    assert [g.shape for g in grads] == [p.shape for p in params.values()]
    calls = {k: [str(n.target) for n in g.graph.nodes if n.op == "call_function"] for k, g in graphs.items()}
    for kind, targets in calls.items():
        bad = [t for t in targets if any(f in t for f in FORBIDDEN)]
        assert not bad, f"{kind} graph computes outside schedgen: {bad}"
    for name, fn in fns.items():
        if name in INFERENCE_ONLY:
            continue
        fwd, steps = _torch_op_names(fn)
        assert any(fwd in t for t in calls["fw"]), f"{name}'s op is not in the forward graph"
        assert steps and all(any(s in t for t in calls["bw"]) for s in steps), f"{name}'s backward steps: {steps}"
    ops = [t for t in calls["fw"] if "schedgen" in t]
    per_layer = 8                                   # rmsnorm x2, qkv, rope, attention, out_proj, gate_up, swiglu, down
    assert len(ops) >= CFG.n_layers * per_layer + 3, ops   # + final norm, lm head, cross-entropy (saves may add)
    assert any("embedding" in t for t in calls["fw"])     # the one torch op that is no kernel: F.embedding
    torch._dynamo.reset()


@pytest.fixture
def stubbed(built, monkeypatch):
    """Kernel._call_cuda replaced by the kernel's float64 reference at the call's sizes, outputs rounded to the
    kernel's dtypes; the kernel names run, in order."""
    _, kspecs = built
    return stub_cuda_with_references(monkeypatch, kspecs)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def test_loss_and_every_gradient_match_torch_in_float64(built, stubbed):
    fns, _ = built
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, CFG.vocab, (B, S), generator=g)
    targets = torch.randint(0, CFG.vocab, (B, S), generator=g)
    targets[0, :5] = llama_model.IGNORE_INDEX                        # ignored rows leave the mean
    ours_p = llama_model.init_params(CFG, seed=1)                    # bf16, as the specs say
    ref_p = llama_model.clone_params(ours_p, dtype=torch.float64)    # the same values in float64
    ours = llama_model.SchedgenLlama(CFG, ours_p, fns)
    ref = llama_model.TorchLlama(CFG, ref_p)
    loss = ours(tokens, targets)
    want = ref(tokens, targets)
    assert loss.dtype == torch.float32 and loss.shape == ()
    assert abs(loss.item() - want.item()) <= 1e-3 * abs(want.item()), (loss.item(), want.item())
    assert set(stubbed) >= set(fns) - INFERENCE_ONLY                  # every kernel ran (through the stub)
    loss.backward()
    want.backward()
    worst = {}
    for name in ours_p:
        assert ours_p[name].grad is not None and ours_p[name].grad.dtype == torch.bfloat16, name
        worst[name] = _rel(ours_p[name].grad, ref_p[name].grad)
    assert max(worst.values()) <= 3e-2, sorted(worst.items(), key=lambda kv: -kv[1])[:5]
    with torch.no_grad():                                            # the prefill path: logits
        logits = ours(tokens)
        want_logits = ref(tokens)
    assert logits.shape == (B, S, CFG.vocab)
    assert _rel(logits, want_logits) <= 2e-2


def test_the_torch_fallback_and_the_rope_kernel_agree_with_hf_rotate_half(built, stubbed):
    fns, _ = built
    t, h, d = 3 * 64, CFG.n_heads + CFG.n_kv_heads, CFG.head_dim
    x = torch.randn(t, h + CFG.n_kv_heads, d, dtype=torch.float64)[:, :h]      # a strided view, as in the model
    cos, sin = llama_model.rope_tables(CFG, 3, 64, torch.float64, "cpu")
    want = x * cos + llama_model.rotate_half(x) * sin
    torch.testing.assert_close(llama_model.apply_rope(x, cos, sin), want)
    got = llama_model.apply_rope(x.to(torch.bfloat16), cos.to(torch.bfloat16), sin.to(torch.bfloat16), fns)
    assert stubbed == ["llama_rope_halves"]
    assert _rel(got, want) <= 1e-2


def test_a_config_not_named_in_the_example_builds_and_traces_at_several_batch_shapes(tmp_path):
    """Nothing in examples/llama is shape-specific: a held-out config (odd widths, vocab not a multiple of a tile,
    3 kv heads) builds from its config alone and traces forward, backward and the logits path under
    torch.compile(fullgraph=True) at two (B, S), one compiled graph each."""
    cfg = llama_config.LlamaConfig("held_out", d_model=384, n_heads=6, n_kv_heads=3, head_dim=64, d_ff=1056,
                                   vocab=1000, n_layers=1, max_tokens=8192, max_batch=4, max_seq=1024)
    fns = llama_specs.load(cfg, tmp_path, cache_dir=tmp_path / "cache", log=lambda *_: None)
    torch._dynamo.reset()
    params = llama_model.init_params(cfg, device="meta")
    compiled = torch.compile(llama_model.SchedgenLlama(cfg, params, fns), fullgraph=True, backend="aot_eager")
    for b, s in ((1, 64), (3, 192)):
        tokens = torch.zeros(b, s, dtype=torch.int64, device="meta")
        loss = compiled(tokens, tokens)
        grads = torch.autograd.grad(loss, list(params.values()))
        assert loss.shape == () and [g.shape for g in grads] == [p.shape for p in params.values()]
        assert compiled(tokens).shape == (b, s, cfg.vocab)
    with pytest.raises(ValueError, match="head_dim 72 must be a multiple of 16"):
        cfg.replace(head_dim=72)
    torch._dynamo.reset()


def test_a_package_is_rebuilt_only_when_its_spec_changes(tmp_path):
    logs = []
    for cfg in (CFG, CFG, CFG.replace(d_ff=2 * CFG.d_ff)):
        log = []
        llama_specs.build(cfg, tmp_path, names={"llama_swiglu"}, cache_dir=tmp_path / "cache", log=log.append)
        logs.append(log)
    assert logs == [["built llama_swiglu"], [], ["built llama_swiglu"]]
    assert f"F: {2 * CFG.d_ff}" in (tmp_path / "specs" / "llama_swiglu.yaml").read_text()


# ------------------------------------------------------------------------------------------------ decode (inference)

def test_the_decode_attention_spec_is_bottom_right_causal_over_a_dynamic_cache_and_forward_only():
    for cfg in llama_config.CONFIGS.values():
        text = llama_specs.spec_texts(cfg)["llama_decode_attention"]
        assert "causal: bottom_right" in text and "backward:" not in text
        assert f"SQ: {{dynamic: true, max: {cfg.max_new}}}" in text
        assert f"SKV: {{dynamic: true, min: {cfg.max_new}, max: {cfg.max_cache}}}" in text
    with pytest.raises(ValueError, match="max_new"):
        CFG.replace(max_new=0)


def test_the_kv_cache_is_contiguous_per_layer_and_decode_reads_it_as_strided_views(built):
    fns, _ = built
    cache = llama_model.KVCache.allocate(CFG, 3, max_len=256)
    G, D = CFG.n_kv_heads, CFG.head_dim
    assert len(cache.k) == len(cache.v) == CFG.n_layers and cache.length == 0
    for t in cache.k + cache.v:
        assert t.shape == (3, 256, G, D) and t.dtype == torch.bfloat16 and t.is_contiguous()
    assert (cache.batch, cache.max_len) == (3, 256)
    k = torch.randn(3, 5, G, D).to(torch.bfloat16)
    cache.store(1, 100, k, -k)
    assert torch.equal(cache.k[1][:, 100:105], k) and torch.equal(cache.v[1][:, 100:105], -k)
    assert not cache.k[1][:, :100].any() and not cache.k[0].any()
    # the decode attention reads k and v through tensor maps only, so it takes the cache's strided [:, :length]
    # views as they are (no copy; the call checks them: meta tensors here)
    kern = sys.modules["llama_decode_attention"].kernel
    assert all(kern.tmap_only)
    meta = llama_model.KVCache.allocate(CFG, 3, max_len=256, device="meta")
    q = torch.empty(3, 5, CFG.n_heads, D, dtype=torch.bfloat16, device="meta")
    o = fns["llama_decode_attention"](q, meta.k[1][:, :105], meta.v[1][:, :105])
    assert o.shape == (3, 5, CFG.n_heads, D)
    # and the rope kernel writes a decode step's rotated k halves into the cache's [:, start] slot (Sq = 1)
    assert all(sys.modules["llama_rope_halves"].kernel.tmap_only)
    slot = meta.k[0][:, 7]                                               # [B, G, D], batch stride 256 * G * D
    x = torch.empty(3, G, D, dtype=torch.bfloat16, device="meta")
    c = torch.empty(3, 1, D // 2, dtype=torch.bfloat16, device="meta")
    with torch.no_grad():
        fns["llama_rope_halves"](x[..., :D // 2], x[..., D // 2:], c, c, out=(slot[..., :D // 2], slot[..., D // 2:]))


def _prompt_and_more(b, s0, extra, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, CFG.vocab, (b, s0 + extra), generator=g)


@pytest.mark.parametrize("b", [1, 3])
@pytest.mark.parametrize("sq", [1, 5])
def test_decode_after_prefill_matches_a_full_forward_over_the_whole_sequence(built, stubbed, b, sq):
    """SchedgenLlama (bf16, the kernels stubbed by their float64 references) and TorchLlama (float64): prefill 64
    tokens, then two decode steps of sq tokens each; each step's logits match the float64 full forward's logits at
    those positions (and TorchLlama's own decode matches its full forward to float64 rounding)."""
    fns, _ = built
    s0, steps = 64, 2
    tokens = _prompt_and_more(b, s0, steps * sq, seed=10 * b + sq)
    ours_p = llama_model.init_params(CFG, seed=1)
    ref = llama_model.TorchLlama(CFG, llama_model.clone_params(ours_p, dtype=torch.float64))
    ours = llama_model.SchedgenLlama(CFG, ours_p, fns)
    with torch.no_grad():
        full = ref(tokens)                                            # [B, s0 + steps sq, V], float64
    last, cache = ours.prefill(tokens[:, :s0], max_len=128)
    rlast, rcache = ref.prefill(tokens[:, :s0], max_len=128)
    assert cache.length == rcache.length == s0 and cache.k[0].dtype == torch.bfloat16
    assert last.shape == (b, CFG.vocab) and _rel(last, full[:, s0 - 1]) <= 2e-2
    torch.testing.assert_close(rlast, full[:, s0 - 1])
    for j in range(steps):
        stubbed.clear()
        lo = s0 + j * sq
        got = ours.decode(tokens[:, lo:lo + sq], cache)
        want = ref.decode(tokens[:, lo:lo + sq], rcache)
        assert "llama_decode_attention" in stubbed and "llama_attention" not in stubbed
        assert got.shape == (b, sq, CFG.vocab) and cache.length == rcache.length == lo + sq
        torch.testing.assert_close(want, full[:, lo:lo + sq])
        assert _rel(got, full[:, lo:lo + sq]) <= 2e-2, (j, _rel(got, full[:, lo:lo + sq]))
    # the cache holds what a prefill of the whole sequence stores
    _, whole = ref.prefill(tokens, max_len=128)
    for i in range(CFG.n_layers):
        n = s0 + steps * sq
        assert _rel(cache.k[i][:, :n], whole.k[i][:, :n]) <= 2e-2 and _rel(cache.v[i][:, :n], whole.v[i][:, :n]) <= 2e-2
        assert not cache.k[i][:, n:].any()


def test_prefill_of_a_ragged_prompt_finishes_with_decode_steps(built, stubbed):
    fns, _ = built
    tokens = _prompt_and_more(2, 64, 21, seed=5)                      # 85 = 64 (one forward) + 16 + 5 (decode)
    ours_p = llama_model.init_params(CFG, seed=1)
    ref = llama_model.TorchLlama(CFG, llama_model.clone_params(ours_p, dtype=torch.float64))
    with torch.no_grad():
        full = ref(tokens)
    last, cache = llama_model.SchedgenLlama(CFG, ours_p, fns).prefill(tokens, max_len=128)
    assert cache.length == 85 and stubbed.count("llama_decode_attention") == 2 * CFG.n_layers
    assert _rel(last, full[:, -1]) <= 2e-2


def test_compile_fullgraph_traces_a_decode_step_on_schedgen_ops_and_cache_indexing_only(built):
    """A decode step (B=2, Sq=1 and 5, against a cache of 100) under torch.compile(fullgraph=True) on meta tensors,
    one graph each: every computation a schedgen op (the rope kernel's out= form writing the cache for Sq = 1), the
    rest the embedding, the RoPE tables and the cache's index / copy ops (listed)."""
    fns, _ = built
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    params = llama_model.init_params(CFG, seed=0, device="meta")
    m = llama_model.SchedgenLlama(CFG, params, fns)
    step = torch.compile(m.decode, fullgraph=True, backend=keep)
    for sq in (1, 5):
        cache = llama_model.KVCache.allocate(CFG, 2, max_len=256, device="meta")
        cache.length = 100
        logits = step(torch.zeros(2, sq, dtype=torch.int64, device="meta"), cache)
        assert logits.shape == (2, sq, CFG.vocab) and cache.length == 100 + sq
    assert len(graphs) == 2
    for gm, sq in zip(graphs, (1, 5)):
        targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        bad = [t for t in targets if any(f in t for f in FORBIDDEN)]
        assert not bad, f"the decode graph computes outside schedgen: {bad}"
        # what is not schedgen: the embedding, the RoPE tables (arange, outer, cat, cos, sin, ...), q's buffer, and
        # the cache's views and copies
        other = {getattr(n.target, "__name__", str(n.target)) for n in gm.graph.nodes
                 if n.op == "call_function" and "schedgen" not in str(n.target)}
        assert other <= {"embedding", "arange", "outer", "cat", "pow", "truediv", "neg", "add", "mul", "sub",
                         "getitem", "empty", "_set_grad_enabled"}, other
        methods = [str(n.target) for n in gm.graph.nodes if n.op == "call_method"]
        assert set(methods) <= {"contiguous", "copy_", "cos", "sin", "repeat", "reshape", "to", "unsqueeze",
                                "view"}, set(methods)
        # Sq = 1: rope writes k into the cache slot (out=), only v is copied; B = 2, Sq = 5: k and v are copied
        assert methods.count("copy_") == CFG.n_layers * (1 if sq == 1 else 2), methods
        ops = [t for t in targets if "schedgen" in t]
        assert sum("llama_decode_attention" in t for t in ops) == CFG.n_layers, ops
        assert not any("llama_attention" in t for t in ops)
        assert sum("llama_rope_halves" in t for t in ops) == 2 * CFG.n_layers, ops
        assert len(ops) == CFG.n_layers * 10 + 2, ops    # norm x2, qkv, rope x2, attn, out, gate_up, swiglu, down
    torch._dynamo.reset()


@pytest.fixture
def run_py(monkeypatch):
    """examples/llama/run.py imported as a module (it imports config, model and specs by their bare names: those
    leave sys.modules again afterwards), its DEVICE the CPU."""
    import importlib.util
    for name in ("config", "model", "specs"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("llama_run", ROOT / "examples" / "llama" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "DEVICE", "cpu")
    yield mod
    for name in ("config", "model", "specs"):
        sys.modules.pop(name, None)


def test_run_py_verifies_prefill_then_decode_against_float64(built, stubbed, run_py):
    """run.py's decode verification (prefill, then one decode step; ours and torch bf16 against TorchLlama in
    float64) passes with the kernels stubbed by their float64 references, and its --decode shapes are checked
    against the config's ranges."""
    fns, _ = built
    base = run_py.llama_model.init_params(CFG, seed=0)
    check = run_py.verify_decode(CFG, fns, base, 2, 64, 5, torch.float64)
    assert check["ok"], check
    assert set(check["errors"]["ours"]) == {"prefill_last", "decode"}
    assert stubbed.count("llama_decode_attention") == CFG.n_layers
    run_py.check_decode(CFG, 1, 1, 100)
    for bad in ((CFG.max_decode_batch + 1, 1, 100), (1, CFG.max_new + 1, 100), (1, 16, CFG.max_cache)):
        with pytest.raises(SystemExit, match="llama_decode_attention takes"):
            run_py.check_decode(CFG, *bad)
