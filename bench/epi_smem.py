"""Issue 17's fused-epilogue target both ways (schedule.epilogue.operands): a fused matmul spec as written (its row
and column operands read from global memory), with operands: smem (staged in SMEM by a producer warp while the
k-loop runs), and the same schedule without the epilogue (bare: only lhs and rhs, `out = acc`), each verified
against float64 and all three timed in one interleaved run (schedgen.bench.timing: rounds of blocks of launches, the
median over rounds, CUPTI kernel time where there). Prints each one's time and its ratio to bare (the target: fused
within 3% of bare, a ratio <= 1.03).

    python3 bench/epi_smem.py SPEC [-D FIELD=VALUE ...] [--iters N] [--out FILE.json]

-D overrides (e.g. the sizes: -D op.sizes.K=1024) apply to all three; every build is the CUDA backend's.
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
sys.path.insert(0, str(ROOT))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from sweep import _build  # noqa: E402  (bench/sweep.py: one build in a worker, filling the cache)

CUDA = "schedule.backends=[cuda]"


def bare_spec(spec: str, where: Path) -> str:
    """The spec without its epilogue: lhs and rhs only, `<out> = acc`, the same schedule (a file in `where`)."""
    import yaml
    data = yaml.safe_load(Path(spec).read_text())
    op = data["op"]
    lhs, rhs = op.get("lhs") or list(op["inputs"])[0], op.get("rhs") or list(op["inputs"])[1]
    op["inputs"] = {k: v for k, v in op["inputs"].items() if k in (lhs, rhs)}
    op["epilogue"] = f"{next(iter(op['outputs']))} = acc"
    data["name"] = f"{data['name']}_bare"
    out = where / f"{Path(spec).stem}_bare.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--out", default=None)
    ap.add_argument("-D", dest="define", action="append", default=[], help="an override of all three (sizes)")
    args = ap.parse_args()
    d = [CUDA] + list(args.define)
    bare = bare_spec(args.spec, Path(tempfile.mkdtemp(prefix="schedgen-epi-")))
    variants = [("bare", bare, d), ("global", args.spec, d + ["schedule.epilogue.operands=global"]),
                ("smem", args.spec, d + ["schedule.epilogue.operands=smem"])]
    with cf.ProcessPoolExecutor(max_workers=3) as pool:
        failed = dict(zip([n for n, _, _ in variants], pool.map(_build, [s for _, s, _ in variants],
                                                                 [v for _, _, v in variants])))

    from schedgen.bench.case import Case, our_cuda
    from schedgen.bench.environment import environment
    from schedgen.bench.timing import Contender, block_for, interleaved, matmul_sets
    from schedgen.bench.case import in_bytes
    from schedgen.build import build_spec, package
    from schedgen.frontend.validate import parse_overrides
    from schedgen.reference import random_inputs
    from schedgen.runtime.kernel import load_package
    from schedgen.verify import verify_built

    env = environment()
    print("env:", json.dumps(env), flush=True)
    contenders, keep, kernels = [], [], {}
    for name, spec, defines in variants:
        if failed[name]:
            print(f"{name:8} build failed: {failed[name]}", flush=True)
            continue
        built = build_spec(spec, parse_overrides(defines))
        kernel = load_package(package(built, tempfile.mkdtemp(prefix="schedgen-epi-")))
        bad = [c for c in verify_built(built, ["cuda"], kernel=kernel, count=1) if not c.ok and not c.skipped]
        if bad:
            print(f"{name:8} verify FAILED: {bad[0].note} err {bad[0].rel_error:.2e}", flush=True)
            continue
        plan = built.plan
        case = Case(built, random_inputs(built.spec, plan.sizes, seed=1), matmul_sets(in_bytes(plan)), args.iters, 10)
        c, held = our_cuda(kernel, plan, case.host, case.sets)
        contenders.append(Contender(name, c.call, stream=c.stream))
        keep.append((kernel, held))
        kernels[name] = plan.kernel_name
        print(f"{name:8} built + verified: {plan.kernel_name} {plan.sizes}", flush=True)
    if not contenders:
        return 1
    timed = interleaved(contenders, block=block_for(args.iters), warmup=10)
    base = timed.get("bare", {}).get("time_ms")
    rows = []
    print(f"\n{'variant':8} {'ms':>9} {'kernel ms':>9} {'x bare':>7}  kernel")
    for name, t in timed.items():
        ms = t.get("time_ms")
        ratio = ms / base if ms and base else None
        rows.append({"name": name, "time_ms": ms, "cupti_ms": t.get("cupti_ms"), "events_ms": t.get("events_ms"),
                     "spread": t.get("spread"), "over_bare": ratio, "kernel": kernels.get(name),
                     "error": t.get("error")})
        print(f"{name:8} {ms or 0:9.4f} {t.get('cupti_ms') or 0:9.4f} {ratio or 0:7.3f}  {kernels.get(name)}"
              f"{' ' + t['error'] if t.get('error') else ''}")
    if args.out:
        Path(args.out).write_text(json.dumps({"spec": args.spec, "defines": args.define, "env": env, "rows": rows},
                                             indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
