"""Schedule variants of one spec, each verified against float64, then all timed together with the family's peers in
one interleaved run (rounds of blocks of launches of every contender; the median over rounds). For exploring
schedules by hand before a choice becomes a default or a tune knob.

    python -m bench.sweep SPEC [-D FIELD=VALUE ...] [--variant NAME:FIELD=VALUE;FIELD=VALUE ...] [--iters N]
                           [--out FILE.json]

A variant is a set of -D overrides (`schedule.pipeline.max_concurrent_steps=8;schedule.cluster=[2,1]`); the spec as
written is the variant `spec`; -D overrides (the sizes) apply to every variant. Builds run first in parallel worker processes (they fill the build cache), then
this process loads each package. A variant that does not build or verify is reported and left out of the timing.
Prints one line per contender: time (the primary clock), TFLOP/s (or GB/s), and the ratio to the family's flat peer
(cuBLAS for a matmul) on kernel time where both have CUPTI (schedgen.bench.ratio_of); the JSON keeps both clocks.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, rest = text.partition(":")
    return name, [d.strip() for d in rest.split(";") if d.strip()]


def _build(spec: str, defines: list[str]) -> str | None:
    """Build one variant (in a worker: fills the build cache); None, or why it failed."""
    from schedgen.build import build_spec
    from schedgen.frontend.validate import parse_overrides
    try:
        build_spec(spec, parse_overrides(defines))
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("-D", dest="define", action="append", default=[], help="an override of every variant (sizes)")
    args = ap.parse_args()
    variants = [("spec", list(args.define))] + [(n, list(args.define) + d) for n, d in map(parse_variant, args.variant)]

    with cf.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        failed = dict(zip([n for n, _ in variants], pool.map(_build, [args.spec] * len(variants),
                                                             [d for _, d in variants])))

    from schedgen import families
    from schedgen.bench.case import Case, our_cuda
    from schedgen.bench.environment import environment
    from schedgen.bench.run import default_rates, family_peers, in_bytes, sets_for, _hook
    from schedgen.bench.timing import Contender, block_for, interleaved, ratio_of
    from schedgen.build import build_spec, package
    from schedgen.frontend.validate import parse_overrides
    from schedgen.reference import random_inputs
    from schedgen.runtime.kernel import load_package
    from schedgen.verify import verify_built

    env = environment()
    print("env:", json.dumps(env), flush=True)
    contenders, keep, plans, peers, base = [], [], {}, {}, None
    for name, defines in variants:
        if failed[name]:
            print(f"{name:28} build failed: {failed[name]}", flush=True)
            continue
        built = build_spec(args.spec, parse_overrides(defines))
        kernel = load_package(package(built, tempfile.mkdtemp(prefix="schedgen-sweep-")))
        checks = verify_built(built, ["cuda"], kernel=kernel, count=1)
        bad = [c for c in checks if not c.ok and not c.skipped]
        if bad:
            print(f"{name:28} verify FAILED: {bad[0].note} err {bad[0].rel_error:.2e}", flush=True)
            continue
        plan = built.plan
        if base is not None and plan.sizes != base.plan.sizes:
            print(f"{name:28} left out: sizes {plan.sizes} differ from the first variant's (use -D for sizes)")
            continue
        if base is None:
            base = built
            mod = family_peers(families.of(plan))
            case = Case(built, random_inputs(built.spec, plan.sizes, seed=1), 0, args.iters, 10)
            case.sets = _hook(mod, "sets", sets_for)(in_bytes(plan))
            peers = _hook(mod, "peers", lambda c: {})(case)
        c, held = our_cuda(kernel, plan, case.host, case.sets)
        contenders.append(Contender(name, c.call, stream=c.stream))
        keep.append((kernel, held))
        plans[name] = (plan, defines)
        print(f"{name:28} built + verified: {plan.launch.kernel_name}", flush=True)
    if base is None:
        return 1
    contenders += [p.contender for p in peers.values() if p.contender is not None]
    timed = interleaved(contenders, block=block_for(args.iters), warmup=10)
    rates = _hook(mod, "rates", None) or default_rates(families.of(base.plan).metric)
    flat = _hook(mod, "FLAT_PEER") or next(iter(peers), None)
    rows = []
    for c in contenders:
        t = timed.get(c.name, {})
        ms = t.get("time_ms")
        rate = rates(base.plan, ms) if rates and ms else {}
        ratio, basis = ratio_of(t, timed.get(flat, {})) if flat and ms else (None, "")
        row = {"name": c.name, "defines": plans.get(c.name, (None, []))[1], "time_ms": ms,
               "events_ms": t.get("events_ms"), "cupti_ms": t.get("cupti_ms"), "spread": t.get("spread"), **rate,
               "ratio_to_" + (flat or "peer"): ratio, "ratio_basis": basis,
               "kernel": plans[c.name][0].kernel_name if c.name in plans else None, "error": t.get("error")}
        rows.append(row)
    for name, p in peers.items():
        if p.contender is None:
            print(f"{name:28} skipped: {p.info.get('skipped')}")
    unit = "TFLOP/s" if any(r.get("tflops") for r in rows) else "GB/s"
    print(f"\n{'variant':28} {'ms':>9} {'kernel ms':>9} {unit:>8} {'x ' + (flat or 'peer'):>10} {'spread':>7}  defines")
    for r in rows:
        tf = r.get("tflops") or r.get("gbps") or 0
        ratio = r.get("ratio_to_" + (flat or "peer"))
        print(f"{r['name']:28} {r['time_ms'] or 0:9.4f} {r['cupti_ms'] or 0:9.4f} {tf:8.1f} {ratio or 0:10.3f} {r.get('spread') or 0:7.3f}  "
              f"{' '.join(r['defines'])}{' ' + r['error'] if r.get('error') else ''}")
    if args.out:
        Path(args.out).write_text(json.dumps({"spec": args.spec, "env": env, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
