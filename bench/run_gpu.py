"""One call on the GPU machine: GPU tests, verify every bundled spec, benchmark the suite, print a table.

    python3 bench/run_gpu.py [--out DIR] [--budget SECONDS] [--only LABEL...] [--skip-tests]

Writes DIR/pytest_gpu.log, DIR/verify.txt, DIR/map.json (benchmark rows) and DIR/bench.md; the last
thing printed is the short table. Run it through the device tool (see README).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--budget", type=float, default=540.0, help="stop starting new runs after this many seconds")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--only", nargs="*", default=None, help="run only suite entries with these labels")
    ap.add_argument("--main", action="store_true", help="run only the suite entries without a label")
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    import tomllib
    from schedgen.bench import bench_built, environment, markdown
    from schedgen.build import build_spec
    from schedgen.spec.validate import parse_overrides
    from schedgen.verify import verify_file

    env = environment()
    print("env:", json.dumps(env), flush=True)
    if not args.skip_tests:
        log = out / "pytest_gpu.log"
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/test_gpu.py", "-x", "-p",
                            "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
        log.write_text(r.stdout + r.stderr)
        print("gpu tests:", (r.stdout.strip().splitlines() or ["?"])[-1], f"({time.time() - t0:.0f}s)", flush=True)

    lines = []
    for spec in sorted(ROOT.glob("specs/*")):
        for c in verify_file(str(spec), ["cuda", "pallas"]):
            lines.append(f"{c.spec:22} {c.backend:7} {c.output:4} {c.dtype:5} err {c.rel_error:.2e} tol {c.tolerance:.0e} "
                         f"{'ok' if c.ok else 'FAIL ' + c.note}")
    (out / "verify.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), f"\n({time.time() - t0:.0f}s)", flush=True)

    suite = tomllib.loads((ROOT / "bench/suite.toml").read_text())["run"]
    rows = []
    for run in suite:
        label = run.get("label", "")
        if (args.only is not None and label not in args.only) or (args.main and label):
            continue
        if time.time() - t0 > args.budget:
            print(f"budget spent: skipping {run['spec']} {label}", flush=True)
            continue
        try:
            built = build_spec(str(ROOT / run["spec"]), parse_overrides(run.get("define", [])))
            new = bench_built(built, ["cuda", "pallas"], iters=args.iters, env=env)
        except Exception as exc:
            print(f"{run['spec']} {label}: {type(exc).__name__}: {exc}", flush=True)
            continue
        for r in new:
            r["variant"] = label or "default"
        rows += new
        (out / "map.json").write_text(json.dumps(rows, indent=1) + "\n")
        for r in new:
            print(f"  {r['spec']:20} {r['variant']:16} {r['backend']:6} {r.get('time_ms') or 0:.4f} ms "
                  f"{r.get('gbps') or 0:7.0f} GB/s ratio {r.get('ratio') or 0:.3f} verified {r['verified']} "
                  f"{r.get('error', '')}", flush=True)
    (out / "bench.md").write_text(markdown(rows))
    print(f"\nTOTAL {time.time() - t0:.0f}s")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
