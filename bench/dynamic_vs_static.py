"""The runtime-extent (dynamic-size) CUDA kernel against the specialized one, at several sizes of each bundled
dynamic spec (GPU). The goal of issue 15: within 2% of the specialized kernel.

    python3 bench/dynamic_vs_static.py [--out DIR] [--iters N] [--sizes M=1,M=4096,...] [specs...]

For each spec (default: every bundled spec with a dynamic size whose family takes them) ONE dynamic package is
built; at each size (default: schedgen.verify.dynamic_points, plus M = 4096 where M is dynamic) a static package of
the spec at that size is built too, both are verified against the reference at that size, and the two cubins are
timed interleaved on the same inputs (schedgen/bench/timing.py: the H200's clocks drift under sustained load, so
the two are timed side by side, never in separate passes). Writes DIR/dynamic_vs_static.json and prints the table
(dynamic / static time: 1.00 is equal, above 1 the runtime-extent kernel is slower).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def dynamic_specs() -> list[str]:
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import common
    out = []
    for path in sorted((ROOT / "specs").glob("*_dynamic.yaml")):
        spec, _ = load_spec(str(path))
        if common.dynamic_ranges(spec.op.sizes):
            out.append(str(path))
    return out


def points(plan, given: list[dict]) -> list[dict]:
    from schedgen.verify import dynamic_points
    if given:
        return given
    pts = dynamic_points(plan)
    extra = {r.name: 4096 for r in plan.dynamic_sizes if r.min <= 4096 <= r.max and 4096 % r.multiple_of == 0}
    if len(extra) == len(plan.dynamic_sizes) and extra not in pts:
        pts.append(extra)
    return pts


def one_size(spec_path: str, dyn_built, dyn_kernel, at: dict, iters: int) -> dict:
    from schedgen.bench.case import our_cuda
    from schedgen.bench.timing import block_for, interleaved, sets_for
    from schedgen.build import build_spec, package
    from schedgen.reference import random_inputs
    from schedgen.runtime.kernel import load_package
    from schedgen.verify import verify_built
    static = build_spec(spec_path, {k: int(v) for k, v in at.items()})
    st_kernel = load_package(package(static, Path(tempfile.mkdtemp(prefix="schedgen-dvs-"))))
    checks = verify_built(dyn_built, ["cuda"], kernel=dyn_kernel, sizes=[at])
    checks += verify_built(static, ["cuda"], kernel=st_kernel)
    plan = static.plan
    host = random_inputs(static.spec, plan.sizes, seed=1)
    sets = sets_for(sum(a.nbytes for a in host.values()))
    c_dyn, keep_d = our_cuda(dyn_kernel, plan, host, sets, sizes=at)
    c_st, keep_s = our_cuda(st_kernel, plan, host, sets)
    timed = interleaved([dataclasses.replace(c_dyn, name="dynamic"), dataclasses.replace(c_st, name="static")],
                        block=block_for(iters), warmup=10)
    del keep_d, keep_s
    d, s = timed["dynamic"].get("time_ms"), timed["static"].get("time_ms")
    return {"spec": dyn_built.plan.name, "sizes": at, "dynamic_ms": d, "static_ms": s,
            "ratio": d / s if d and s else None, "verified": all(c.ok for c in checks),
            "checks": [f"{c.backend} {c.rel_error:.2e} {c.result} {c.note}" for c in checks],
            "errors": {k: v["error"] for k, v in timed.items() if v.get("error")}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--out", default=os.environ.get("OUT", "dvs-out"))
    ap.add_argument("--iters", type=int, default=100, help="launches of each kernel (in 5 rounds)")
    ap.add_argument("--sizes", default="", help="comma-separated NAME=VALUE; one point per NAME=VALUE group "
                                                "separated by ';' (default: min, mid, max and 4096)")
    args = ap.parse_args()
    from schedgen.build import build_spec, package
    from schedgen.runtime.kernel import load_package
    given = [{kv.split("=")[0]: int(kv.split("=")[1]) for kv in grp.split(",") if kv}
             for grp in args.sizes.split(";") if grp]
    rows = []
    for spec_path in args.specs or dynamic_specs():
        built = build_spec(spec_path)
        if "cuda" not in built.plan.backends:
            continue
        kernel = load_package(package(built, Path(tempfile.mkdtemp(prefix="schedgen-dvs-"))))
        for at in points(built.plan, given):
            row = one_size(spec_path, built, kernel, at, args.iters)
            rows.append(row)
            shown = ", ".join(f"{k}={v}" for k, v in at.items())
            ratio = f"{row['ratio']:.3f}" if row["ratio"] else "-"
            print(f"{row['spec']:28} {shown:24} dynamic {row['dynamic_ms'] or float('nan'):9.4f} ms  static "
                  f"{row['static_ms'] or float('nan'):9.4f} ms  ratio {ratio}  verified {row['verified']}",
                  flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dynamic_vs_static.json").write_text(json.dumps(rows, indent=1))
    return 0 if rows and all(r["verified"] and r["ratio"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
