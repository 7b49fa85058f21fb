"""The GPU comparison of examples/llama (issue 43): the schedgen Llama against the same model on torch ops, eager and
under torch.compile(fullgraph=True), from the same weights on the same batches.

    python examples/llama/run.py --config 1.5b --batch 4 --seq 2048 --steps 100 --json llama.jsonl
    python examples/llama/run.py --config 8b-layer --batch 2 --seq 4096 --steps 50 --prefill 1x8192 --json llama.jsonl
    python examples/llama/run.py --config 8b-layer --skip-train --decode 1x1x4096 16x1x8192 4x16x32752 --json llama.jsonl

What it does, in order (a GPU is needed; nothing here has run on one yet: the numbers are pending):
1. builds the config's packages (specs.py; skipped when their specs are unchanged) and imports them;
2. verifies: one forward and backward at a small batch, ours (bf16 kernels) and torch eager bf16 each against
   TorchLlama in float64 (or --verify-dtype float32) from the same weights: the loss and every parameter gradient
   (norm-wise relative error). Ours passes where each error is within 2x torch bf16's own error + 1e-3;
3. trains each contender (ours, torch_compile, torch_eager) for --steps steps of AdamW from the same weights on the
   same batches of a synthetic language (a fixed random Markov chain over the vocabulary: each token has a few
   likely successors, so the loss falls towards the chain's entropy): step time (CUDA events around forward,
   backward and the optimizer step, median after --warmup steps), peak memory (torch.cuda.max_memory_allocated,
   which counts the kernels' workspaces: they come from torch's allocator; it includes the shared initial weights
   and the batches, the same for every contender), the loss curves and their largest relative gap (ours against
   each torch mode); `--contenders ... ours_compile` adds ours under torch.compile(fullgraph=True);
4. prefill: a no-grad forward returning the logits, at each --prefill BxS, timed the same way;
5. decode: at each --decode BxSQxCTX, one decode step of SQ new tokens for each of B sequences against a KV cache
   holding CTX tokens (model.KVCache, contiguous [B, CTX + SQ, G, D] per layer and k / v; random contents: the
   time does not depend on them), repeated at the same position (the cache length reset to CTX before each step).
   First verified: a prompt of --verify-batch's shape prefilled, then one decode step of SQ tokens, ours (bf16) and
   torch eager bf16 against TorchLlama in --verify-dtype: the logits of the prefill's last position and of the
   decode step (norm-wise relative error; the same 2x torch bf16 + 1e-3 rule). Contenders: ours (eager),
   ours_graph (the whole step captured in one CUDA graph by torch.cuda.graph and replayed; its logits checked
   against the eager step's, norm-wise within 1e-3), torch_compile (torch.compile(mode="reduce-overhead",
   fullgraph=True): CUDA graphs by torch, the cache tensors marked static), torch_eager. A graph holds one
   (B, SQ, CTX): the kernels take the sizes as launch arguments captured with it (a generation loop needs a graph
   per context length; no kernel reads the length from device memory yet). ms is the step, per_token_ms the step
   / SQ (each sequence's latency per new token). llama_decode_attention is no split-KV (flash-decoding) kernel:
   one CTA per (batch, q head) walks all CTX keys with a 64-row q block of which SQ rows are real, so small B at
   long CTX leaves most SMs idle (B x H CTAs: 32 of 132 SMs at B = 1 on 8b-layer);
6. prints a table and appends one JSON line per (model, mode, tokens) to --json: model, mode (train / prefill /
   decode), tokens, ms {ours, torch_compile, torch_eager (decode: and ours_graph)}, peak_mem_bytes {...},
   loss_max_rel_gap, verified, commit, gpu_uuid (and the details: batch, seq, steps, the curves' first and last
   losses, the verification's errors; decode: context, per_token_ms, tokens_per_s, graph_matches_eager, verify).
Exit status 1 when a verification fails (a decode graph's replay included) or the loss curves part by more than
--tolerance.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(ROOT))     # schedgen from this checkout (what the packages were built with)
import config as llama_config  # noqa: E402
import model as llama_model  # noqa: E402
import specs as llama_specs  # noqa: E402

CONTENDERS = ("ours", "torch_compile", "torch_eager")
EXTRA = ("ours_compile",)     # --contenders ... ours_compile: SchedgenLlama under torch.compile(fullgraph=True) too
DEVICE = "cuda"


# ------------------------------------------------------------------------------------------------ synthetic data

class MarkovLanguage:
    """A fixed random Markov chain over the vocabulary: token i is followed by one of `fanout` successors drawn once
    (a Zipf-like weighting), so a model can learn it and every model sees the same sequences."""

    def __init__(self, vocab: int, seed: int = 0, fanout: int = 4, device=None):
        device = device or DEVICE
        g = torch.Generator(device="cpu").manual_seed(seed)
        self.next = torch.randint(0, vocab, (vocab, fanout), generator=g).to(device)
        w = 1.0 / torch.arange(1, fanout + 1, dtype=torch.float32)
        self.probs = (w / w.sum()).to(device)
        self.vocab, self.device = vocab, device

    def batch(self, b: int, s: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator(device=self.device).manual_seed(seed)
        seq = torch.empty(b, s + 1, dtype=torch.int64, device=self.device)
        seq[:, 0] = torch.randint(0, self.vocab, (b,), generator=g, device=self.device)
        picks = torch.multinomial(self.probs.expand(b * s, -1), 1, replacement=True, generator=g).view(b, s)
        for j in range(s):
            seq[:, j + 1] = self.next[seq[:, j], picks[:, j]]
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


# ------------------------------------------------------------------------------------------------ the contenders

def make(which: str, cfg, params, kernels):
    if which in ("ours", "ours_compile"):
        m = llama_model.SchedgenLlama(cfg, params, kernels)
        return torch.compile(m, fullgraph=True) if which == "ours_compile" else m
    m = llama_model.TorchLlama(cfg, params)
    return torch.compile(m, fullgraph=True) if which == "torch_compile" else m


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def verify(cfg, kernels, base, batch: int, seq: int, dtype) -> dict:
    """Ours and torch eager (bf16) against TorchLlama in `dtype` (float64 / float32), one step's loss and every
    gradient; ours passes where each error is within 2x torch bf16's + 1e-3."""
    lang = MarkovLanguage(cfg.vocab, seed=123)
    tokens, targets = lang.batch(batch, seq, seed=7)
    errs = {}
    ref_p = llama_model.clone_params(base, dtype=dtype)
    ref = llama_model.TorchLlama(cfg, ref_p)
    want = ref(tokens, targets)
    want.backward()
    for which in ("ours", "torch_eager"):
        p = llama_model.clone_params(base)
        loss = make(which, cfg, p, kernels)(tokens, targets)
        loss.backward()
        e = {"loss": abs(loss.item() - want.item()) / abs(want.item())}
        e.update({n: rel(p[n].grad, ref_p[n].grad) for n in p})
        errs[which] = e
    ok = {n: errs["ours"][n] <= 2 * errs["torch_eager"][n] + 1e-3 for n in errs["ours"]}
    worst = sorted(errs["ours"], key=lambda n: errs["ours"][n] / (errs["torch_eager"][n] + 1e-3))[-3:]
    return {"ok": all(ok.values()), "failed": [n for n, v in ok.items() if not v], "dtype": str(dtype),
            "batch": batch, "seq": seq,
            "worst": {n: {"ours": errs["ours"][n], "torch_bf16": errs["torch_eager"][n]} for n in worst}}


def timed(fn, steps: int, warmup: int) -> tuple[list, float]:
    """fn(i) for i < steps, each between CUDA events; (its returns, the median ms after warmup)."""
    outs, events = [], []
    for i in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        outs.append(fn(i))
        end.record()
        if i >= warmup:
            events.append((start, end))
    torch.cuda.synchronize()
    return outs, statistics.median(s.elapsed_time(e) for s, e in events)


def train(which, cfg, base, kernels, batches, steps, warmup, lr) -> dict:
    params = llama_model.clone_params(base)
    m = make(which, cfg, params, kernels)
    opt = torch.optim.AdamW(list(params.values()), lr=lr, weight_decay=0.0)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()

    def step(i):
        tokens, targets = batches[i % len(batches)]
        loss = m(tokens, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()
    losses, ms = timed(step, steps, warmup)
    return {"ms": ms, "peak": torch.cuda.max_memory_allocated(), "losses": [x.item() for x in losses]}


def prefill(which, cfg, base, kernels, tokens, reps, warmup) -> dict:
    params = {k: torch.nn.Parameter(v.detach(), requires_grad=False) for k, v in base.items()}
    m = make(which, cfg, params, kernels)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        _, ms = timed(lambda i: m(tokens), reps, warmup)
    return {"ms": ms, "peak": torch.cuda.max_memory_allocated()}


def kernel_table(which, cfg, base, kernels, batches, steps: int = 3, top: int = 14) -> list[tuple[str, float, int]]:
    """Where one training step's GPU time goes: `steps` steps (after one untimed) under torch.profiler (CUPTI
    underneath), each kernel's device time summed by name and divided by `steps`: [(kernel, ms a step, launches a
    step)], the `top` largest and the rest as one line."""
    from torch.profiler import ProfilerActivity, profile
    params = llama_model.clone_params(base)
    m = make(which, cfg, params, kernels)
    opt = torch.optim.AdamW(list(params.values()), lr=1e-6, weight_decay=0.0)

    def step(i):
        tokens, targets = batches[i % len(batches)]
        m(tokens, targets).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    step(0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            step(i)
        torch.cuda.synchronize()
    per: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            t = per.setdefault(e.name[:90], [0.0, 0])
            t[0] += e.device_time_total / 1e3 / steps
            t[1] += 1
    rows = sorted(((n, ms, int(c / steps)) for n, (ms, c) in per.items()), key=lambda r: -r[1])
    rest = rows[top:]
    return rows[:top] + ([(f"({len(rest)} other kernels)", sum(r[1] for r in rest), sum(r[2] for r in rest))]
                         if rest else [])


def verify_decode(cfg, kernels, base, batch: int, seq: int, sq: int, dtype) -> dict:
    """Prefill `seq` tokens then decode `sq`: ours (bf16) and torch eager bf16 against TorchLlama in `dtype`, the
    logits of the prefill's last position and of the decode step; ours passes where each error is within 2x torch
    bf16's + 1e-3."""
    tokens = MarkovLanguage(cfg.vocab, seed=321).batch(batch, seq + sq, seed=8)[0]
    errs = {}

    def run(model):
        last, cache = model.prefill(tokens[:, :seq], max_len=seq + sq)
        return last, model.decode(tokens[:, seq:], cache)
    want = run(llama_model.TorchLlama(cfg, llama_model.clone_params(base, dtype=dtype)))
    for which, m in (("ours", llama_model.SchedgenLlama(cfg, base, kernels)),
                     ("torch_eager", llama_model.TorchLlama(cfg, base))):
        got = run(m)
        errs[which] = {"prefill_last": rel(got[0], want[0]), "decode": rel(got[1], want[1])}
    ok = {n: errs["ours"][n] <= 2 * errs["torch_eager"][n] + 1e-3 for n in errs["ours"]}
    return {"ok": all(ok.values()), "failed": [n for n, v in ok.items() if not v], "dtype": str(dtype),
            "batch": batch, "seq": seq, "sq": sq, "errors": errs}


def decode_step(which, cfg, base, kernels, b: int, sq: int, ctx: int, reps: int, warmup: int) -> dict:
    """One contender's decode step of b x sq tokens at context ctx, timed (see the module docstring, 5.)."""
    params = {k: torch.nn.Parameter(v.detach(), requires_grad=False) for k, v in base.items()}
    m = (llama_model.SchedgenLlama(cfg, params, kernels) if which.startswith("ours")
         else llama_model.TorchLlama(cfg, params))
    g = torch.Generator(device=DEVICE).manual_seed(5)
    cache = llama_model.KVCache.allocate(cfg, b, ctx + sq, dtype=torch.bfloat16, device=DEVICE)
    for t in cache.k + cache.v:
        t.normal_(generator=g)
    tokens = torch.randint(0, cfg.vocab, (b, sq), device=DEVICE, generator=g)
    res = {"graph_matches_eager": None}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    if which == "ours_graph":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):        # warm-up off the capture: loads the cubins, encodes the maps
            for _ in range(2):
                cache.length = ctx
                eager = m.decode(tokens, cache)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        cache.length = ctx
        with torch.cuda.graph(graph):
            static = m.decode(tokens, cache)
        graph.replay()
        torch.cuda.synchronize()
        res["graph_vs_eager"] = rel(static, eager)      # the same inputs: 0 unless a kernel is nondeterministic
        res["graph_matches_eager"] = res["graph_vs_eager"] <= 1e-3

        def step(i):
            graph.replay()
    else:
        fn = m.decode
        if which == "torch_compile":
            for t in cache.k + cache.v:
                torch._dynamo.mark_static_address(t)    # mutated in place: static, so the CUDA graph keeps them
            fn = torch.compile(m.decode, mode="reduce-overhead", fullgraph=True)

        def step(i):
            cache.length = ctx
            if which == "torch_compile":
                torch.compiler.cudagraph_mark_step_begin()   # each call a new step: its outputs may be reused
            fn(tokens, cache)                                # nothing kept: the logits are B x SQ x vocab each
    _, ms = timed(step, reps, warmup)
    res.update(ms=ms, peak=torch.cuda.max_memory_allocated())
    return res


def kernel_tables(cfg, base, kernels, batches, contenders) -> dict:
    """kernel_table for each contender, printed; {contender: table}."""
    out = {}
    for w in contenders:
        try:
            table = freed(kernel_table(w, cfg, base, kernels, batches))
        except Exception as exc:          # the profiler is a diagnostic: its failure ends no run
            print(f"\n{w}: no kernel table ({type(exc).__name__}: {exc})")
            continue
        out[w] = table
        print(f"\n{w}: GPU time of one training step by kernel ({sum(r[1] for r in table):.2f} ms in all)")
        for name, ms, n in table:
            print(f"  {ms:9.3f} ms  {n:5d} x  {name}")
    return out


def freed(result):
    """`result`, after the memory of the run that made it is handed back (the next contender's peak is its own)."""
    gc.collect()
    torch.cuda.empty_cache()
    return result


def gpu_uuid() -> str | None:
    try:
        return str(torch.cuda.get_device_properties(0).uuid)
    except Exception:
        try:
            from schedgen.bench.environment import environment
            return environment().get("gpu_uuid")
        except Exception:
            return None


def check_decode(cfg, b: int, sq: int, ctx: int) -> None:
    if b > cfg.max_decode_batch or sq > cfg.max_new or ctx + sq > cfg.max_cache or ctx + sq < cfg.max_new:
        sys.exit(f"--decode {b}x{sq}x{ctx}: llama_decode_attention takes B <= {cfg.max_decode_batch}, SQ <= "
                 f"{cfg.max_new}, {cfg.max_new} <= CTX + SQ <= {cfg.max_cache} (change the config's max_* fields)")


def check_shape(cfg, b: int, s: int, what: str) -> None:
    if b > cfg.max_batch or s > cfg.max_seq or s % cfg.seq_multiple or b * s > cfg.max_tokens:
        sys.exit(f"{what}: B={b}, S={s}: the specs take B <= {cfg.max_batch}, S <= {cfg.max_seq} a multiple of "
                 f"{cfg.seq_multiple}, B*S <= {cfg.max_tokens} (change the config's max_* fields)")


def run_decodes(cfg, kernels, base, args, decodes, meta, vb, vs) -> tuple[list, list, bool]:
    """Verify the decode path at each SQ of --decode, then time every (B, SQ, CTX): (the rows, the decode
    contenders, whether every check passed)."""
    rows, decode_ok, dchecks = [], True, {}
    for sq in sorted({sq for _, sq, _ in decodes}):
        dchecks[sq] = c = freed(verify_decode(cfg, kernels, base, vb, vs, sq, getattr(torch, args.verify_dtype)))
        decode_ok &= c["ok"]
        print(f"verify decode ({c['dtype']}, prefill B={vb} S={vs}, then SQ={sq}): "
              f"{'ok' if c['ok'] else 'FAILED ' + str(c['failed'])}; errors (ours / torch bf16): " +
              ", ".join(f"{n} {c['errors']['ours'][n]:.2e} / {c['errors']['torch_eager'][n]:.2e}"
                        for n in c["errors"]["ours"]))
    dmodes = [w for w in ("ours", "ours_graph", "torch_compile", "torch_eager")
              if w.removesuffix("_graph") in args.contenders]
    for b, sq, ctx in decodes:
        res = {w: freed(decode_step(w, cfg, base, kernels, b, sq, ctx, max(args.warmup + 20, 30), args.warmup))
               for w in dmodes}
        ge = res.get("ours_graph", {}).get("graph_matches_eager")
        decode_ok &= ge is not False
        rows.append({**meta, "mode": "decode", "tokens": b * sq, "batch": b, "seq": sq, "context": ctx,
                     "ms": {w: r["ms"] for w, r in res.items()},
                     "per_token_ms": {w: r["ms"] / sq for w, r in res.items()},
                     "tokens_per_s": {w: 1e3 * b * sq / r["ms"] for w, r in res.items()},
                     "peak_mem_bytes": {w: r["peak"] for w, r in res.items()}, "loss_max_rel_gap": None,
                     "graph_matches_eager": ge, "graph_vs_eager": res.get("ours_graph", {}).get("graph_vs_eager"),
                     "verified": dchecks[sq]["ok"], "verify": dchecks[sq]})
    return rows, dmodes, decode_ok


def print_decodes(rows, dmodes) -> None:
    drows = [r for r in rows if r["mode"] == "decode"]
    if drows:
        print(f"\n{'decode BxSQxCTX':>18} " + " ".join(f"{w + ' ms/tok':>20}" for w in dmodes))
    for r in drows:
        print(f"{r['batch']:>8}x{r['seq']}x{r['context']:<7} " +
              " ".join(f"{r['per_token_ms'][w]:20.3f}" for w in dmodes))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="1.5b", choices=sorted(llama_config.CONFIGS))
    ap.add_argument("--layers", type=int, default=None, help="override the config's n_layers")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--batches", type=int, default=8, help="distinct batches, cycled")
    ap.add_argument("--prefill", nargs="*", default=["1x4096"], help="BxS shapes of the prefill timing")
    ap.add_argument("--decode", nargs="*", default=[], help="BxSQxCTX shapes of the decode-step timing")
    ap.add_argument("--skip-train", action="store_true", help="no training run (prefill / decode only)")
    ap.add_argument("--verify-batch", default="1x256", help="BxS of the verification step")
    ap.add_argument("--verify-dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--tolerance", type=float, default=0.05, help="largest relative gap of the loss curves")
    ap.add_argument("--contenders", nargs="*", default=list(CONTENDERS), choices=CONTENDERS + EXTRA)
    ap.add_argument("--packages", default=str(ROOT / "build" / "llama"))
    ap.add_argument("--json", default="", help="append the rows here (JSON lines)")
    ap.add_argument("--kernels", action="store_true",
                    help="print where a training step's GPU time goes, per kernel, for each contender (torch.profiler)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("run.py needs a CUDA GPU (the CPU checks are tests/examples/test_llama.py)")
    cfg = llama_config.get(args.config, **({"n_layers": args.layers} if args.layers else {}))
    check_shape(cfg, args.batch, args.seq, "--batch/--seq")
    prefills = [tuple(int(v) for v in p.lower().split("x")) for p in args.prefill]
    for b, s in prefills:
        check_shape(cfg, b, s, "--prefill")
    vb, vs = (int(v) for v in args.verify_batch.lower().split("x"))
    check_shape(cfg, vb, vs, "--verify-batch")
    decodes = [tuple(int(v) for v in d.lower().split("x")) for d in args.decode]
    for b, sq, ctx in decodes:
        check_decode(cfg, b, sq, ctx)

    kernels = llama_specs.load(cfg, Path(args.packages) / cfg.name)
    base = llama_model.init_params(cfg, seed=0, device=DEVICE)
    from schedgen.bench.environment import source_commit
    meta = {"model": cfg.name, "commit": source_commit(), "gpu_uuid": gpu_uuid()}
    print(f"{cfg}\n{torch.cuda.get_device_name()}  commit {meta['commit']}")

    check = freed(verify(cfg, kernels, base, vb, vs, getattr(torch, args.verify_dtype)))
    print(f"verify ({check['dtype']}, B={vb} S={vs}): {'ok' if check['ok'] else 'FAILED ' + str(check['failed'])}; "
          "largest errors (ours / torch bf16): " +
          ", ".join(f"{n} {e['ours']:.2e} / {e['torch_bf16']:.2e}" for n, e in check["worst"].items()))

    lang = MarkovLanguage(cfg.vocab, seed=1)
    rows, curves, gap = [], {}, None
    if not args.skip_train:
        batches = [lang.batch(args.batch, args.seq, seed=100 + i) for i in range(args.batches)]
        runs = {w: freed(train(w, cfg, base, kernels, batches, args.steps, args.warmup, args.lr))
                for w in args.contenders}
        curves = {w: r["losses"] for w, r in runs.items()}
        gaps = {w: max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(curves["ours"], c))
                for w, c in curves.items() if w.startswith("torch") and "ours" in curves}
        gap = max(gaps.values()) if gaps else None
        rows.append({**meta, "mode": "train", "tokens": args.batch * args.seq, "batch": args.batch,
                     "seq": args.seq, "steps": args.steps, "ms": {w: r["ms"] for w, r in runs.items()},
                     "peak_mem_bytes": {w: r["peak"] for w, r in runs.items()}, "loss_max_rel_gap": gap,
                     "loss_gaps": gaps, "loss_first_last": {w: [c[0], c[-1]] for w, c in curves.items()},
                     "verified": check["ok"], "verify": check})
    for b, s in prefills:
        tokens = lang.batch(b, s, seed=999)[0]
        res = {w: freed(prefill(w, cfg, base, kernels, tokens, max(args.warmup + 10, 20), args.warmup))
               for w in args.contenders}
        rows.append({**meta, "mode": "prefill", "tokens": b * s, "batch": b, "seq": s,
                     "ms": {w: r["ms"] for w, r in res.items()},
                     "peak_mem_bytes": {w: r["peak"] for w, r in res.items()}, "loss_max_rel_gap": None,
                     "verified": check["ok"]})

    if args.kernels and curves:
        rows[0]["kernels"] = kernel_tables(cfg, base, kernels, batches, args.contenders)
    drows, dmodes, decode_ok = run_decodes(cfg, kernels, base, args, decodes, meta, vb, vs)
    rows += drows

    if curves:
        print(f"\n{'step':>6} " + " ".join(f"{w:>14}" for w in curves))
    for i in sorted({0, 1, 2, 5, 10, 20, 50, 100, 200, args.steps - 1} & set(range(args.steps))) if curves else ():
        print(f"{i:6d} " + " ".join(f"{curves[w][i]:14.5f}" for w in curves))
    print(f"\n{'mode':>8} {'tokens':>8} " + " ".join(f"{w + ' ms':>18}" for w in args.contenders) +
          " " + " ".join(f"{w + ' GiB':>18}" for w in args.contenders))
    for r in rows:
        if r["mode"] == "decode":
            continue
        print(f"{r['mode']:>8} {r['tokens']:8d} " + " ".join(f"{r['ms'][w]:18.3f}" for w in args.contenders) + " " +
              " ".join(f"{r['peak_mem_bytes'][w] / 2**30:18.2f}" for w in args.contenders))
    print_decodes(rows, dmodes)
    if gap is not None:
        print(f"loss curves: largest relative gap of ours to torch {gap:.3%} (tolerance {args.tolerance:.0%})")
    if args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    ok = check["ok"] and decode_ok and (gap is None or gap <= args.tolerance)
    print("ok" if ok else "FAIL: " + ("verification failed; " if not check["ok"] else "") +
          ("decode verification or graph replay failed; " if not decode_ok else "") +
          ("the loss curves part" if gap is not None and gap > args.tolerance else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
