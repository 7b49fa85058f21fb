"""Runtime extents against the specialized kernel, at every bundled shape (GPU; one process, interleaved).

    python -m bench.dynamic_vs_static [--out DIR] [--only NAME...] [--iters N]

For each bundled fixed-size, single-GPU spec: the spec as written (every size constant-folded into the cubin) and
the same spec with every size declared dynamic (`{dynamic: true, max: <the size>, multiple_of: <its largest
power-of-two factor, at most 256>}`: the same legality, so the same schedule; the CUDA kernel takes the sizes as
launch arguments). Both are verified against the float64 reference at the bundled shape first, then timed
interleaved (schedgen/bench/timing.py: rounds of blocks of launches, CUDA events, median) on the same device
buffers. The Pallas backend is specialized by jax per shape in both cases (same kernel), so only the CUDA backend
is compared. Prints a table (ratio = dynamic / static time; the goal is within 2%) and writes DIR/dynamic.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def pow2_factor(v: int, cap: int = 256) -> int:
    f = 1
    while f < cap and v % (2 * f) == 0:
        f *= 2
    return f


def dynamic_copy(path: Path, folder: Path) -> Path | None:
    """The spec with every size dynamic (max = its value), or None when it has no sizes."""
    import yaml
    from schedgen.frontend.load import load_file
    data, _ = load_file(str(path))
    sizes = data.get("op", {}).get("sizes") or {}
    if not sizes or not all(isinstance(v, int) for v in sizes.values()):
        return None
    data["op"]["sizes"] = {n: {"dynamic": True, "max": v, "multiple_of": pow2_factor(v)} for n, v in sizes.items()}
    data["name"] = f"{data['name']}_rt"
    out = folder / f"{path.stem}_rt.yaml"
    out.write_text(yaml.safe_dump(_plain(data), sort_keys=False))
    return out


def _plain(x):
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results/raw/dynamic"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from schedgen import families
    from schedgen.bench.environment import environment
    from schedgen.bench.timing import Contender, block_for, interleaved
    from schedgen.build import build_spec, package
    from schedgen.reference import random_inputs
    from schedgen.runtime import driver
    from schedgen.runtime.kernel import load_package
    from schedgen.verify import _verify_at, device_buffers

    env = environment()
    tmp = Path(tempfile.mkdtemp(prefix="schedgen-rt-"))
    rows = []
    specs = sorted(p for p in (ROOT / "specs").glob("*.yaml") if "_tune" not in p.stem)
    for path in specs:
        if args.only and path.stem not in args.only:
            continue
        try:
            static = build_spec(str(path))
        except Exception as exc:
            rows.append({"spec": path.stem, "error": f"static build: {exc}"})
            continue
        if families.of(static.plan).multi_device or static.plan.launch.dynamic_sizes:
            continue
        if "cuda" not in static.plan.launch.backends:
            continue
        dpath = dynamic_copy(path, tmp)
        if dpath is None:
            continue
        try:
            dyn = build_spec(str(dpath))
        except Exception as exc:
            rows.append({"spec": path.stem, "error": f"dynamic build: {type(exc).__name__}: {exc}"})
            print(f"{path.stem:36} dynamic build failed: {exc}", flush=True)
            continue
        sizes = dict(static.plan.sizes)
        kern_s = load_package(package(static, tmp / "s"))
        kern_d = load_package(package(dyn, tmp / "d"))
        ok = {}
        for label, built, kern in (("static", static, kern_s), ("dynamic", dyn, kern_d)):
            checks = _verify_at(built, kern, ["cuda"], sizes, False, 0)
            ok[label] = all(c.ok for c in checks) and bool(checks)
            if not ok[label]:
                print(f"{path.stem:36} {label} FAILED verification: "
                      f"{[(c.output, c.rel_error, c.note) for c in checks]}", flush=True)
        row = {"spec": path.stem, "sizes": sizes, "verified": ok}
        if all(ok.values()):
            host = random_inputs(static.spec, sizes, 1)
            bins, bouts = device_buffers(static.plan, host)
            ins, outs = [b.ptr for b in bins], [b.ptr for b in bouts]
            go_s = kern_s._launcher(ins, outs, 0)
            call = kern_d.bind([host[o.name].shape for o in static.plan.inputs])
            go_d = kern_d._launcher(ins, outs, 0, sizes=call)
            res = interleaved([Contender("static", lambda i, go=go_s: go(), 0),
                               Contender("dynamic", lambda i, go=go_d: go(), 0)],
                              block=block_for(args.iters), rounds=7)
            driver.synchronize()
            s_ms, d_ms = res["static"]["time_ms"], res["dynamic"]["time_ms"]
            row.update(static_ms=s_ms, dynamic_ms=d_ms, ratio=(d_ms / s_ms) if s_ms and d_ms else None,
                       spread=(res["static"].get("spread"), res["dynamic"].get("spread")))
            del bins, bouts
        rows.append(row)
        print(f"{path.stem:36} static {row.get('static_ms', math.nan):9.4f} ms  dynamic "
              f"{row.get('dynamic_ms', math.nan):9.4f} ms  ratio {row.get('ratio') or math.nan:6.3f}", flush=True)
    (out / "dynamic.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1, default=str))
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    print("\n| spec | static ms | dynamic ms | dynamic / static |\n|---|---:|---:|---:|")
    for r in rows:
        if r.get("ratio"):
            print(f"| {r['spec']} | {r['static_ms']:.4f} | {r['dynamic_ms']:.4f} | {r['ratio']:.3f} |")
        else:
            print(f"| {r['spec']} | - | - | {r.get('error') or 'not verified'} |")
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"\ngeomean dynamic/static {geo:.4f} over {len(ratios)} specs; worst {max(ratios):.4f}; "
              f"within 2%: {sum(x <= 1.02 for x in ratios)}/{len(ratios)}")
    return 0 if all(r.get("ratio") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
