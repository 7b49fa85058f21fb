"""Issue 19 on the H200: every bundled family's backward, verified against float64 gradients and timed interleaved
against torch's autograd of the same function (eager and torch.compile), in one process.

    python -m bench.backward_gpu [--out DIR] [--only NAME ...] [--iters N]

Per case: the spec with a `backward` section, its BackwardGraph from the family's hook, the forward (rewritten
when it saves values) and each step built as its own package and run on torch CUDA tensors (the step kernels in
graph order, a broadcast input's gradient summed back with torch.sum). Contenders, each verified first (relative
error of every gradient against the float64 reference of the graph, by the families' references):
- ours_bwd: the backward kernels alone; ours_step: forward + backward (one training step of this op)
- torch_bwd: torch.autograd.grad of the function in eager torch ops (retain_graph, so only the backward runs);
  torch_step: forward + backward; compile_step: the same under torch.compile (default mode)
- own ops where torch has them (F.layer_norm, F.rms_norm, torch.softmax; SDPA for attention; cuBLAS for matmul)
Results: DIR/backward.json (rows with times, clocks, errors) and a short table last on stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    # name: (spec file, overrides of op.sizes, backward section, call sizes)
    "gelu_bias": ("specs/gelu_bias_bf16.yaml", None, {}, None),
    "gelu_bias_save_h": ("specs/gelu_bias_bf16.yaml", None, {"save": ["h"]}, None),
    "softmax": ("specs/softmax_bf16.yaml", None, {}, {"M": 8192}),
    "layernorm": ("specs/layernorm_bf16.yaml", None, {}, {"M": 16384}),
    "rmsnorm": ("specs/rmsnorm_bf16.yaml", None, {}, {"M": 16384}),
    "crossentropy": ("specs/crossentropy_bf16.yaml", None, {}, {"M": 4096}),
    "linear_gelu": ("specs/linear_gelu_bf16_dynamic.yaml", None, {}, {"M": 8192}),
    "matmul_4096": ("specs/matmul_bf16_4096.yaml", None, {}, None),
    # attention at S = 2048 (the float64 reference of the backward at 4096+ takes minutes on the host)
    "attention_d128": ("specs/attention_bf16_4096.yaml", {"S": 2048}, {}, None),
    "attention_causal_gqa": ("specs/attention_gqa_causal_bf16_8192.yaml", {"S": 2048}, {}, None),
    # Mixtral's expert gate projection with silu: 8 experts, skewed token counts (some experts empty), T = 4096
    "grouped_moe_silu": ("specs/grouped_moe_mixtral_bf16_train.yaml", None, {}, {"T": 4096}),
}
# the CPU self-check's sizes where the case's own would make its float64 reference or torch's CPU run slow (the
# linear layer's N = K = 4096 cost tests/bench/test_backward_script.py half its time, which lowers the matmul
# reference's sampling threshold instead, to check that the forward's reference stays full past it)
DRY_SIZES = {"grouped_moe_silu": {"N": 512, "K": 256}, "linear_gelu": {"N": 512, "K": 256}}


def _load(path: str, backward: dict, tmp: Path, sizes: dict | None = None):
    from schedgen.frontend.validate import load_spec
    data = yaml.safe_load((ROOT / path).read_text())
    data["op"]["sizes"].update(sizes or {})
    data["backward"] = backward
    f = tmp / Path(path).name
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_spec(str(f))


def _package(data: dict, tmp: Path, label: str):
    from schedgen.build import build_spec, package
    from schedgen.runtime.kernel import load_package
    f = tmp / f"{label}.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    built = build_spec(str(f))
    return load_package(package(built, tmp / f"pkg_{label}")), built


def _sizes(spec, call_sizes):
    out = {}
    for n, v in spec.op.sizes.items():
        out[n] = v if isinstance(v, int) else (call_sizes or {}).get(n, v.max)
    return out


def _torch_fn(torch, spec, plan, sizes, device):
    """The forward as eager torch ops and, where torch has one, its own op: [(label, fn)]."""
    from schedgen.reference import shape_of
    kind = spec.op.kind
    if kind == "map":
        from schedgen.bench.case import torch_dtypes
        from schedgen.families.map.peers import torch_map_fn
        tdt = torch_dtypes(torch)
        return [("torch", torch_map_fn(torch, spec, {n: shape_of(o, sizes) for n, o in spec.op.outputs.items()},
                                       {n: tdt[o.dtype] for n, o in spec.op.outputs.items()}, device))]
    if kind == "rowwise":
        from schedgen.families.rowwise.peers import torch_body_fn, torch_candidates
        return [("torch", torch_body_fn(torch, plan, spec))] + [(f"torch_own[{n}]", f) for n, f in
                                                               torch_candidates(torch, plan, spec)]
    if kind == "matmul":
        from schedgen.bench.case import torch_dtypes
        from schedgen.families.matmul.peers import epilogue_operands, torch_epilogue_fn
        op = spec.op
        out = next(iter(op.outputs.values()))
        epi = torch_epilogue_fn(torch, spec, torch_dtypes(torch)[out.dtype])
        names, extras = list(op.inputs), epilogue_operands(spec)

        def mm(*ins):
            v = dict(zip(names, ins))
            a = v[op.lhs].transpose(-1, -2) if op.transpose_lhs else v[op.lhs]
            b = v[op.rhs].transpose(-1, -2) if op.transpose_rhs else v[op.rhs]
            return epi(a, b, *[v[n] for n in extras])
        return [("torch", mm)]
    if kind == "grouped_matmul":
        from schedgen.bench.case import torch_dtypes
        from schedgen.families.grouped_matmul.reference import group_rows
        from schedgen.families.matmul.peers import torch_epilogue_fn
        op = spec.op
        out_dt = torch_dtypes(torch)[next(iter(op.outputs.values())).dtype]
        epi = torch_epilogue_fn(torch, spec, out_dt)

        def loop(x, w, offs):
            # the groups' rows read on the host (what a loop of per-expert products does), then one product a group
            rows = group_rows(offs.cpu().numpy(), op.offsets_format, op.groups)
            wt = w.transpose(-1, -2) if op.transpose_rhs else w
            return torch.cat([epi(x[s:e], wt[g]) for g, (s, e) in enumerate(rows)], dim=0)
        fns = [("torch", loop)]
        if hasattr(torch, "_grouped_mm") and op.offsets_format in ("ends", "offsets"):
            held = {}      # the call's cumulative group ends (torch._grouped_mm's offs; group 0 starts at row 0)
            epi_g = torch_epilogue_fn(torch, spec, out_dt, product=lambda a, b: torch._grouped_mm(a, b, offs=held["ends"]))

            def grouped(x, w, offs):
                held["ends"] = offs[1:] if op.offsets_format == "offsets" else offs
                return epi_g(x, w.transpose(-1, -2) if op.transpose_rhs else w)
            fns.append(("torch_own[grouped_mm]", grouped))
        return fns
    if kind == "attention":
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        op = spec.op
        bshd = op.layout == "bshd"
        causal = bool(op.causal)
        scale = op.scale

        def sdpa(backend):
            def fn(q, k, v):
                t = (lambda x: x.transpose(1, 2)) if bshd else (lambda x: x)
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=causal, scale=scale,
                                                       enable_gqa=q.shape[2 if bshd else 1] != k.shape[2 if bshd
                                                                                                      else 1])
                return t(o)
            return fn
        return [("torch_own[sdpa_cudnn]", sdpa(SDPBackend.CUDNN_ATTENTION)),
                ("torch_own[sdpa_flash]", sdpa(SDPBackend.FLASH_ATTENTION))]
    return []


def _case(name: str, dry: bool):
    """CASES[name]; the CPU self-check (--dry) runs attention at S = 128, which its float64 reference does quickly."""
    path, fixed, backward, call_sizes = CASES[name]
    if dry and fixed and "S" in fixed:
        fixed = {**fixed, "S": 128}
    if dry and name in DRY_SIZES:
        fixed = {**(fixed or {}), **DRY_SIZES[name]}
    return path, fixed, backward, call_sizes


def _call_order(spec) -> list[str]:
    """The operands a kernel of the spec takes at a call, in order (a grouped matmul's group operand too)."""
    from schedgen import families
    return list(families.of(spec).call_inputs(spec.op))


def _through_jax(torch, kern, args):
    """A Pallas-only step on torch tensors: zero-copy to jax (DLPack), its Pallas function, back to torch."""
    import jax
    res = kern(*[jax.dlpack.from_dlpack(a.contiguous()) for a in args])
    res = res if isinstance(res, (tuple, list)) else (res,)
    return tuple(torch.from_dlpack(r) for r in res)


def _inputs(torch, spec, sizes, plan, device):
    """iid N(0, 1) inputs and upstream gradients as torch tensors of the spec's dtypes (a rowwise take's column
    indices: valid class ids, as torch's peers need; a grouped matmul's inputs and group operand: its family's, the
    weights 8x smaller, skewed group counts with empty groups)."""
    from schedgen.bench.case import to_torch
    from schedgen.reference import shape_of
    from schedgen.runtime.arrays import DTYPES
    rng = np.random.default_rng(0)
    host = {n: rng.standard_normal(shape_of(o, sizes)).astype(np.float32) for n, o in spec.op.inputs.items()}
    up = {n: rng.standard_normal(shape_of(o, sizes)).astype(np.float32) for n, o in spec.op.outputs.items()}
    if spec.op.kind == "rowwise":
        from schedgen.families.rowwise.peers import valid_targets
        host = valid_targets(plan, host)
    x = {n: to_torch(torch, host[n].astype(DTYPES[o.dtype]), o.dtype, device) for n, o in spec.op.inputs.items()}
    if spec.op.kind == "grouped_matmul":
        from schedgen import families
        own = families.of(spec).random_inputs(spec, sizes, rng)
        x = {n: to_torch(torch, own[n], o.dtype, device) for n, o in spec.op.inputs.items()}
        x[spec.op.group_offsets] = to_torch(torch, own[spec.op.group_offsets], "i32", device)
    g = {n: to_torch(torch, up[n].astype(DTYPES[o.dtype]), o.dtype, device) for n, o in spec.op.outputs.items()}
    return x, g


def _forward_data(graph, path, tmp: Path) -> dict:
    """The forward the graph runs: its rewritten one (keeping a value), else the spec as written less backward."""
    if graph.forward is not None:
        return graph.forward
    data = yaml.safe_load((tmp / Path(path).name).read_text())
    data.pop("backward", None)
    return data


def _host64(torch, spec, x: dict, g: dict) -> tuple[dict, dict]:
    """What the device inputs and upstream gradients hold, in float64 (rounded to their dtype): the reference sees
    the same values. A group operand stays int32."""
    from schedgen.bench.case import from_torch
    host64 = {n: from_torch(torch, t, spec.op.inputs[n].dtype).astype(np.float64) if n in spec.op.inputs
              else from_torch(torch, t, "i32") for n, t in x.items()}
    up64 = {n: from_torch(torch, t, spec.op.outputs[n].dtype).astype(np.float64) for n, t in g.items()}
    return host64, up64


def _add_passed_through(graph, grads: dict, upstream: dict) -> None:
    """The gradients the graph passes through (issue 43): the upstream gradient itself, no kernel."""
    from schedgen.autodiff.graph import passed_through
    for w, out in passed_through(graph).items():
        grads[w] = upstream[out] if w not in grads else grads[w] + upstream[out]


def run_case(name, args, torch, tmp: Path) -> dict:
    from schedgen import families
    from schedgen.autodiff.graph import evaluate
    from schedgen.runtime.autograd import sum_back
    from schedgen.bench.case import from_torch
    from schedgen.bench.environment import gpu_state
    from schedgen.bench.timing import Contender, block_for, interleaved
    from schedgen.errors import SourceMap
    from schedgen.frontend.validate import validate_data
    from schedgen.reference import rel_error, tolerance
    path, fixed, backward, call_sizes = _case(name, args.dry)
    spec, src = _load(path, backward, tmp, fixed)
    family = families.of(spec)
    graph, problems = family.backward(spec, src)
    assert not problems, problems
    fwd_data = _forward_data(graph, path, tmp)
    fwd_kernel, fwd_built = _package(fwd_data, tmp, f"{name}_fwd")
    fwd_spec = validate_data(fwd_data, SourceMap("<forward>"))
    steps = {s.name: _package(dict(s.spec), tmp, f"{name}_{s.name}") for s in graph.steps}
    sizes = _sizes(spec, {n: 256 for n in spec.op.sizes} if args.dry else call_sizes)
    device = "cpu" if args.dry else "cuda"
    x, g = _inputs(torch, spec, sizes, fwd_built.plan, device)
    host64, up64 = _host64(torch, spec, x, g)
    # the forward's values feed the backward's references (a matmul's saved `pre` is the gelu step's input): full,
    # never the sampled rows a big matmul's reference gives by default
    def full(s):       # (a grouped matmul's steps too: their gradients are summed and compared whole)
        return {"sample": False} if s.op.kind in ("matmul", "grouped_matmul", "attention") else {}
    ref_out = families.of(fwd_spec).reference(fwd_spec, sizes, host64, **full(fwd_spec))

    def ref_run(step, values):
        s = validate_data(step.spec, SourceMap(step.name))
        return families.of(s).reference(s, sizes, values, **full(s))

    t0 = time.time()
    ref = evaluate(graph, host64, ref_out, up64, ref_run)
    ref_s = time.time() - t0
    fwd_names = list(fwd_spec.op.outputs)

    def ours_forward():
        out = fwd_kernel(*[x[n] for n in _call_order(spec)])
        out = out if isinstance(out, (tuple, list)) else (out,)
        return dict(zip(fwd_names, out))

    cols: dict = {}

    def ours_backward(outs):
        vals: dict = {}
        grads: dict = {}
        for s in graph.steps:
            kern = steps[s.name][0]
            step_spec = steps[s.name][1].spec
            args = []
            for k in _call_order(step_spec):
                kind, _, ref_name = s.inputs[k].partition(":")
                if kind == "arange":          # the column indices a rowwise take() gradient compares with
                    args.append(cols.setdefault(ref_name, torch.arange(int(ref_name), dtype=torch.float32,
                                                                       device="cuda")))
                    continue
                args.append({"in": x, "out": outs, "grad": g, "step": vals}[kind][ref_name])
            res = kern(*args) if (kern.root / "kernel.cubin").is_file() else _through_jax(torch, kern, args)
            res = res if isinstance(res, (tuple, list)) else (res,)
            for k, r in zip(step_spec.op.outputs, res):
                vals[f"{s.name}.{k}"] = r
                tgt = s.outputs[k]
                if tgt.startswith("grad:"):
                    w = tgt[5:]
                    grads[w] = r if w not in grads else grads[w] + r
        _add_passed_through(graph, grads, g)
        return {w: sum_back(t, tuple(x[w].shape), lambda v, d, k: torch.sum(v.float(), dim=d, keepdim=k)).to(x[w].dtype)
                for w, t in grads.items()}

    errors = {}

    def check(label, grads):
        errs = {w: rel_error(from_torch(torch, grads[w].to(x[w].dtype), spec.op.inputs[w].dtype), ref[w])
                for w in graph.grads}
        # a gradient is as precise as the least precise value it flows through (an f32 bias's gradient sums the gelu
        # derivative at the bf16 matmul output): the tolerance of the spec's coarsest dtype, twice (the backward
        # rounds once more)
        tol = 2 * max(tolerance(t.dtype, False) for t in (*spec.op.inputs.values(), *spec.op.outputs.values()))
        ok = all(errs[w] <= tol for w in errs)
        errors[label] = {"rel_error": errs, "verified": ok}
        return ok

    dev = "cpu" if args.dry else "cuda"

    def C(label, call):     # a contender on torch's current stream (the dry run: wall clock)
        if args.dry:
            return Contender(label, call, stream=None, sync=lambda: None)
        return Contender(label, call, stream=torch.cuda.current_stream().cuda_stream)

    contenders = []
    if not args.dry:
        saved = ours_forward()
        got = ours_backward(saved)
        torch.cuda.synchronize()
        check("ours", got)
        # jax launches Pallas-only steps on its own streams: those rows time by CUPTI or the synced wall clock
        cuda_only = all((k.root / "kernel.cubin").is_file() for k, _ in steps.values())
        contenders += [C(n, f) if cuda_only else Contender(n, f, stream=None, sync=torch.cuda.synchronize)
                       for n, f in (("ours_bwd", lambda i: ours_backward(saved)),
                                    ("ours_step", lambda i: ours_backward(ours_forward())))]
    wrt = list(graph.grads)
    _torch_peers(torch, spec, fwd_built.plan, sizes, dev, x, g, wrt, check, contenders, C, errors)
    if not args.dry:
        _autograd_package(name, torch, tmp, spec, x, g, ref, check, contenders, C, wrt, errors)
    before = gpu_state()
    # the dry run calls each contender once under the timer (it checks the timing path; CPU times mean nothing): at
    # --iters' 100 calls, torch's CPU matmuls took minutes, past the test suite's time limit on a loaded machine
    timed = (interleaved(contenders, block=1, rounds=1, warmup=0) if args.dry else
             interleaved(contenders, block=block_for(args.iters), rounds=5))
    after = gpu_state()
    bytes_bwd = sum(t.numel() * t.element_size() for t in list(x.values()) + list(g.values())) * 2
    return {"case": name, "spec": path, "backward": backward, "sizes": sizes, "steps": [s.name for s in graph.steps],
            "notes": list(graph.notes), "errors": errors, "timed": timed, "min_bytes_bwd": bytes_bwd,
            "reference_s": ref_s, "gpu_before": before, "gpu_after": after}


def _torch_peers(torch, spec, plan, sizes, dev, x, g, wrt, check, contenders, C, errors):
    """torch's autograd of the same function (eager, torch.compile) and of torch's own op where it has one: each
    verified first; the verified ones join the contenders (backward alone and forward + backward)."""
    order = _call_order(spec)
    for label, fn in _torch_fn(torch, spec, plan, sizes, dev):
        try:
            xs = {n: t.detach().clone().requires_grad_(n in wrt) for n, t in x.items()}
            outs = fn(*[xs[n] for n in order])
            outs = outs if isinstance(outs, (tuple, list)) else (outs,)
            outs = list(outs)[:len(spec.op.outputs)]
            gs = [g[o] for o in spec.op.outputs]
            res = torch.autograd.grad(outs, [xs[w] for w in wrt], gs, retain_graph=True, allow_unused=True)
            if not check(label, {w: (r if r is not None else torch.zeros_like(x[w])) for w, r in zip(wrt, res)}):
                continue      # not this function (a candidate of another body): recorded, not timed

            def bwd(i, outs=outs, xs=xs, gs=gs):
                torch.autograd.grad(outs, [xs[w] for w in wrt], gs, retain_graph=True, allow_unused=True)

            def step(i, fn=fn, xs=xs, gs=gs):
                o = fn(*[xs[n] for n in order])
                o = list(o if isinstance(o, (tuple, list)) else (o,))[:len(gs)]
                torch.autograd.grad(o, [xs[w] for w in wrt], gs, allow_unused=True)
            contenders += [C(f"{label}_bwd", bwd), C(f"{label}_step", step)]
            if label == "torch":
                cfn = torch.compile(fn)

                def cstep(i, xs=xs, gs=gs, cfn=cfn):
                    o = cfn(*[xs[n] for n in order])
                    o = list(o if isinstance(o, (tuple, list)) else (o,))[:len(gs)]
                    torch.autograd.grad(o, [xs[w] for w in wrt], gs, allow_unused=True)
                o = cfn(*[xs[n] for n in order])
                o = list(o if isinstance(o, (tuple, list)) else (o,))[:len(gs)]
                res = torch.autograd.grad(o, [xs[w] for w in wrt], gs, allow_unused=True)
                check("compile", {w: (r if r is not None else torch.zeros_like(x[w])) for w, r in zip(wrt, res)})
                contenders.append(C("compile_step", cstep))
        except Exception as exc:      # a peer that cannot run is a row with its reason, not a crash
            errors[label] = {"error": f"{type(exc).__name__}: {exc}"[:300]}


def _autograd_package(name, torch, tmp, spec, x, g, ref, check, contenders, C, wrt, errors):
    """The spec built as one package with its backward (what a user imports), called on tensors that require
    grad: torch autograd through the custom op (eager), then torch.compile(fullgraph=True) of a function calling
    it; each verified, and the eager one timed as a training step (forward + backward through autograd)."""
    import importlib
    from schedgen.build import build_spec, package
    src = tmp / f"{name}_user.yaml"
    src.write_text((tmp / Path(CASES[name][0]).name).read_text())
    folder = tmp / f"user_{name}"
    package(build_spec(str(src)), folder)
    sys.path.insert(0, str(folder))
    fn = getattr(importlib.import_module(spec.name), spec.name)
    sys.path.remove(str(folder))
    order = _call_order(spec)
    gs = [g[o] for o in spec.op.outputs]

    def run(f, xs):
        o = f(*[xs[n] for n in order])
        o = list(o if isinstance(o, (tuple, list)) else (o,))
        return torch.autograd.grad(o, [xs[w] for w in wrt], gs, allow_unused=True)

    for label, f in (("autograd", fn), ("autograd_compiled", torch.compile(fn, fullgraph=True))):
        try:
            xs = {n: t.detach().clone().requires_grad_(n in wrt) for n, t in x.items()}
            res = run(f, xs)
            if check(label, {w: (r if r is not None else torch.zeros_like(x[w])) for w, r in zip(wrt, res)}):
                contenders.append(C(f"ours_{label}_step", lambda i, f=f, xs=xs: run(f, xs)))
        except Exception as exc:
            errors[label] = {"error": f"{type(exc).__name__}: {exc}"[:300]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/backward")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--dry", action="store_true", help="on the CPU: build, reference and torch peers at small sizes "
                                                        "(no kernel runs), to check this script")
    args = ap.parse_args(argv)
    import torch
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in args.only or list(CASES):
            t0 = time.time()
            try:
                rows.append(run_case(name, args, torch, Path(d)))
            except Exception as exc:
                import traceback
                rows.append({"case": name, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
            rows[-1]["wall_s"] = time.time() - t0
            (out / "backward.json").write_text(json.dumps(rows, indent=1, default=str))
            print(f"[{name}] {time.time() - t0:.0f}s", rows[-1].get("error", ""), flush=True)
    print(table(rows))
    return 0


def table(rows) -> str:
    lines = ["case | verified (rel err) | ours_bwd ms | torch_bwd | own_bwd | ours_step ms | torch_step | compile_step"
             " | autograd_step | compiled_step"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['case']} | ERROR {r['error'][:150]}")
            continue
        t = r["timed"]

        def ms(k, t=t):
            v = t.get(k, {}).get("time_ms")
            return f"{v:.3f}" if v else "-"

        def ratio(k, ours, t=t):
            a, b = t.get(ours, {}).get("time_ms"), t.get(k, {}).get("time_ms")
            return f"{b / a:.2f}x" if a and b else "-"
        own = [k for k in t if k.startswith("torch_own") and k.endswith("_bwd")]
        ver = ", ".join(f"{k}:{'ok' if v.get('verified') else 'NO'} {max(v.get('rel_error', {0: 0}).values()):.1e}"
                        if "rel_error" in v else f"{k}:{v.get('error', '')[:60]}" for k, v in r["errors"].items()
                        if "error" in v or v.get("verified") or not k.startswith("torch_own"))
        lines.append(f"{r['case']} | {ver} | {ms('ours_bwd')} | {ratio('torch_bwd', 'ours_bwd')} | "
                     f"{ratio(own[0], 'ours_bwd') if own else '-'} | {ms('ours_step')} | "
                     f"{ratio('torch_step', 'ours_step')} | {ratio('compile_step', 'ours_step')} | "
                     f"{ms('ours_autograd_step')} | {ms('ours_autograd_compiled_step')}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
