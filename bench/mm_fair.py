"""Every bundled matmul spec against its peers, all four contenders (our CUDA and Pallas kernels, cuBLAS, JAX's
Pallas Hopper matmul at the same tuning) timed side by side, as `schedgen bench` times them.

    python3 bench/mm_fair.py [--out DIR] [--iters N] [specs...]

A thin driver: `schedgen.bench.bench_built` verifies each backend, builds the family's peers
(schedgen/families/matmul/peers.py) and times everything in interleaved rounds (schedgen/bench/timing.py: the
H200 lowers its clocks under sustained matrix load, so contenders timed in separate passes differ by up to 10%
from the clock state alone). Writes DIR/fair.json, one row per spec with every contender's time (the format
bench/plot_matmul.py --fair reads), and prints the table.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
NAMES = ["cuda", "pallas", "cublas", "jax_pallas"]


def fair_row(rows: list[dict]) -> dict:
    """bench_built's rows of one spec as one row: every contender's time, TFLOP/s and spread."""
    first = rows[0]
    ms, tflops, notes, spread, kernel_ms = {}, {}, [], {}, {}
    for r in rows:
        if r.get("time_ms"):
            ms[r["backend"]], tflops[r["backend"]], spread[r["backend"]] = r["time_ms"], r["tflops"], r.get("spread")
            kernel_ms[r["backend"]] = r.get("cupti_ms")
        elif r.get("error"):
            notes.append(f"{r['backend']}: {r['error']}")
        for name, p in (r.get("peers") or {}).items():
            if p.get("time_ms"):
                ms.setdefault(name, p["time_ms"])
                kernel_ms.setdefault(name, p.get("cupti_ms"))
                tflops.setdefault(name, p["tflops"])
                spread.setdefault(name, p.get("spread"))
            elif p.get("skipped") and f"{name}: {p['skipped']}" not in notes:
                notes.append(f"{name}: {p['skipped']}")
    s = first["shape"]
    return {"spec": first["spec"], "kernel": first.get("kernel"), "M": s.get("M"), "N": s.get("N"), "K": s.get("K"),
            "dtype": first["dtype"], "timing": first.get("timing"), "sets": first.get("sets"), "ms": ms,
            "kernel_ms": kernel_ms,
            "tflops": tflops, "spread": spread, "notes": notes,
            "verified": {r["backend"]: r["verified"] for r in rows}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--out", default=os.environ.get("OUT", "fair-out"))
    ap.add_argument("--iters", type=int, default=45, help="launches of each contender (in 5 rounds)")
    ap.add_argument("--backends", default="cuda,pallas", help="our backends to time (comma-separated)")
    args = ap.parse_args()
    from schedgen.bench import bench_built, environment, print_skips
    from schedgen.build import build_spec

    specs = args.specs or sorted(str(p) for p in (ROOT / "specs").glob("matmul_*.yaml"))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = environment()
    rows = []
    for spec in specs:
        try:
            built = build_spec(spec)
        except Exception as exc:  # one spec that does not build is reported; the others still run
            print(f"{spec}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
            continue
        got = print_skips(bench_built(built, args.backends.split(","), iters=args.iters, env=env))
        if not got:
            continue
        rows.append(fair_row(got))
        print(json.dumps({k: rows[-1][k] for k in ("spec", "tflops")}), flush=True)
    (out_dir / "fair.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'spec':30} " + " ".join(f"{n:>10}" for n in NAMES) + "  cuda/cublas pallas/jax")
    nan = float("nan")
    for r in rows:
        t = r["tflops"]
        cells = " ".join(f"{t.get(n, nan):10.1f}" for n in NAMES)
        rc = t["cuda"] / t["cublas"] if t.get("cuda") and t.get("cublas") else nan
        rp = t["pallas"] / t["jax_pallas"] if t.get("pallas") and t.get("jax_pallas") else nan
        print(f"{r['spec']:30} {cells}  {rc:10.3f} {rp:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
