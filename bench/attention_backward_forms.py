"""The attention backward's two Pallas forms on the GPU, side by side (issue 19's target: >= 550 TFLOP/s and >= 1.05x
SDPA cuDNN at D128, S >= 4k): the two-kernel form (`pipeline.kind: emit_pipeline`: dK/dV kernel + dQ kernel) and the
one-kernel FlashAttention-3 form (`warp_specialized`: dQ by TMA reduce-add), with the family's peers (torch SDPA
backward on cuDNN and on flash, JAX attention_mgpu's backward), in one interleaved timing. Each contender is checked
against one float64 reference first (an unverified one is reported and not timed).

    python3 bench/attention_backward_forms.py [--spec FILE ...] [-D NAME=VALUE ...] [--wgs 1 2] [--out FILE]

Defaults: the two bundled D128 S4096 specs (non-causal and causal) at B=1 (H=16), the one-kernel form with 2
consumer warpgroups. --dry (on the CPU): build and plan every form, time nothing. Rows: DIR/forms.json, a table last.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPECS = ["specs/attention_backward_bf16_4096.yaml", "specs/attention_backward_causal_bf16_4096.yaml"]
PALLAS = {"schedule.backends": ["pallas"]}


def forms(wgs: list[int]) -> dict[str, dict]:
    """label -> schedule overrides of each form timed."""
    out = {"pallas_two_kernels": {**PALLAS, "schedule.pipeline.kind": "emit_pipeline"}}
    for n in wgs:
        out[f"pallas_fa3_wg{n}"] = {**PALLAS, "schedule.pipeline.kind": "warp_specialized",
                                    "schedule.pipeline.num_compute_wgs": n}
    return out


def _sizes(spec_path: str, defines: dict) -> dict:
    import yaml
    sizes = dict(yaml.safe_load((ROOT / spec_path).read_text())["op"]["sizes"])
    sizes.update(defines)
    return {"op.sizes": sizes}


def run_spec(spec_path: str, args, tmp: Path) -> dict:
    import jax
    from schedgen.bench.case import Case, in_bytes, why
    from schedgen.bench.environment import gpu_state
    from schedgen.bench.timing import block_for, interleaved, jax_contender
    from schedgen.build import build_spec, package
    from schedgen.families.attention_backward import peers as P
    from schedgen.reference import random_inputs
    from schedgen.runtime.kernel import load_package
    sizes = _sizes(spec_path, args.define)
    builts = {label: build_spec(str(ROOT / spec_path), {**sizes, **ov}) for label, ov in forms(args.wgs).items()}
    first = next(iter(builts.values()))
    plan = first.plan
    row = {"spec": spec_path, "sizes": plan.sizes, "causal": plan.causal, "flops": plan.flops,
           "forms": {k: {"kernel": b.plan.kernel_name, "fused": b.plan.fused, "consumers": b.plan.consumers}
                     for k, b in builts.items()}}
    if args.dry:
        return row
    case = Case(first, random_inputs(first.spec, plan.sizes, seed=1), P.sets(in_bytes(plan)), args.iters, 10)
    ref = P._reference(case)
    contenders, errors, keep = [], {}, []
    for label, built in builts.items():
        try:
            mod = load_package(package(built, tmp / label)).pallas_module()
            fn = jax.jit(mod.make())
            base = [jax.device_put(case.host[o.name]) for o in plan.inputs]
            outs = jax.block_until_ready(fn(*base))
            err = P._errors(plan, outs, ref())
            errors[label] = {"rel_error": err, "verified": P._ok(err, plan)}
            if errors[label]["verified"]:
                sets = [base] + [[jax.numpy.array(x, copy=True) for x in base] for _ in range(case.sets - 1)]
                keep.append(sets)
                contenders.append(jax_contender(label, fn, sets))
        except Exception as exc:
            errors[label] = {"error": why(exc)}
    peers = P.peers(case)
    for name, peer in peers.items():
        errors[name] = {k: v for k, v in peer.info.items() if k in ("rel_error", "verified", "skipped", "note")}
        if peer.contender is not None:
            contenders.append(dataclasses.replace(peer.contender, name=name))
    before = gpu_state()
    try:
        timed = interleaved(contenders, block=block_for(args.iters), rounds=5, warmup=10) if contenders else {}
    finally:
        for p in peers.values():
            if p.close is not None:
                p.close()
    row.update(errors=errors, timed=timed, gpu_before=before, gpu_after=gpu_state())
    for t in timed.values():
        if t.get("time_ms"):
            t["tflops"] = plan.flops / (t["time_ms"] * 1e-3) / 1e12
    return row


def table(rows: list[dict]) -> str:
    lines = ["spec | contender | verified (rel err) | ms | TFLOP/s | x SDPA cuDNN | x JAX attention_mgpu"]
    for r in rows:
        if "error" in r or "timed" not in r:
            lines.append(f"{r['spec']} | {r.get('error', 'dry: planned ' + ', '.join(r.get('forms', {})))}")
            continue
        t = r["timed"]
        cudnn, jaxp = t.get("sdpa_cudnn", {}).get("time_ms"), t.get("jax_pallas", {}).get("time_ms")
        for name, e in r["errors"].items():
            ms = t.get(name, {}).get("time_ms")
            ver = e.get("error") or e.get("skipped") or f"{'ok' if e.get('verified') else 'NO'} {e.get('rel_error', 0):.1e}"
            lines.append(f"{Path(r['spec']).stem} | {name} | {ver} | {f'{ms:.3f}' if ms else '-'} | "
                         f"{t.get(name, {}).get('tflops', 0):.0f} | {f'{cudnn / ms:.2f}' if ms and cudnn else '-'} | "
                         f"{f'{jaxp / ms:.2f}' if ms and jaxp else '-'}")
    return "\n".join(lines)


def _define(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    return name, int(value)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", nargs="*", default=SPECS)
    ap.add_argument("-D", dest="define", action="append", type=_define, default=[], metavar="NAME=VALUE",
                    help="a size of the specs (default B=1)")
    ap.add_argument("--wgs", nargs="*", type=int, default=[2], help="consumer warpgroups of the one-kernel form(s)")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--out", default="/tmp/attention_backward_forms")
    ap.add_argument("--dry", action="store_true", help="on the CPU: build and plan every form, time nothing")
    args = ap.parse_args(argv)
    args.define = {"B": 1, **dict(args.define)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for path in args.spec:
            t0 = time.time()
            try:
                rows.append(run_spec(path, args, Path(d)))
            except Exception as exc:
                import traceback
                rows.append({"spec": path, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
            rows[-1]["wall_s"] = time.time() - t0
            (out / "forms.json").write_text(json.dumps(rows, indent=1, default=str))
            print(f"[{path}] {time.time() - t0:.0f}s {rows[-1].get('error', '')}", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
