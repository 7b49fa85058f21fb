"""One call on the GPU machine: GPU tests, verify every bundled spec, benchmark the suite, print a table.

    python3 bench/run_gpu.py [--out DIR] [--budget SECONDS] [--only LABEL...] [--family map|matmul|attention]
                             [--skip-tests] [--skip-verify] [--compare DIR | --no-compare]

Writes DIR/pytest_gpu.log, DIR/verify.txt, DIR/<family>.json (benchmark rows: map.json, matmul.json, attention.json) and
DIR/bench.md; the last thing printed is the short table. `--family` limits verify and the suite to one family
(to split the work over several calls of the device tool's 10-minute limit). Run it through the device tool
(see README). Last, `--compare` (default bench/results/) prints for each benchmarked row that the committed record
has too the recorded and the new time and their ratio, rows that moved by more than 5% flagged: "the numbers did
not move" is that table with nothing flagged.
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
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch, cuBLAS and jax share the GPU


def single_device_kinds() -> list[str]:
    from schedgen import families
    return [f.kind for f in families.all_families() if not f.multi_device]


def family_of(path: Path) -> str:
    """A spec's op kind, read without building it (matmul_*.yaml files are matmuls; others are read)."""
    from schedgen.frontend.validate import load_spec
    try:
        return load_spec(str(path))[0].op.kind
    except Exception:
        return "matmul" if path.name.startswith("matmul_") else "map"


def suite_runs(suite: list[dict]) -> list[dict]:
    """The suite's runs, each `glob` entry expanded into one run per matching spec file (sorted)."""
    runs = []
    for run in suite:
        if "glob" in run:
            for path in sorted(ROOT.glob(run["glob"])):
                runs.append({k: v for k, v in run.items() if k != "glob"} | {"spec": str(path.relative_to(ROOT))})
        else:
            runs.append(run)
    return runs


def verify_pass(specs: list[Path], out: Path, t0: float) -> None:
    """`verify` of every spec on both backends: OUT/verify.txt and the lines printed."""
    from schedgen.verify import verify_file
    lines = []
    for spec in specs:
        try:
            checks = verify_file(str(spec), ["cuda", "pallas"])
        except Exception as exc:  # a spec that does not build is reported, the others still run
            lines.append(f"{spec.stem:22} ERROR {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        for c in checks:
            lines.append(f"{c.spec:22} {c.backend:7} {c.output:4} {c.dtype:5} err {c.rel_error:.2e} tol {c.tolerance:.0e} "
                         f"{'ok' if c.ok else ('SKIP ' if c.skipped else 'FAIL ') + c.note}"
                         f"{'  (' + c.note + ')' if c.ok and c.note else ''}")
    (out / "verify.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), f"\n({time.time() - t0:.0f}s)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--budget", type=float, default=540.0, help="stop starting new runs after this many seconds")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--quick-tests", action="store_true", help="run only tests/test_gpu.py of the GPU tests")
    ap.add_argument("--only", nargs="*", default=None, help="run only suite entries with these labels")
    ap.add_argument("--main", action="store_true", help="run only the suite entries without a label")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--family", choices=single_device_kinds(), default=None, help="verify and bench only this family")
    ap.add_argument("--skip-verify", action="store_true", help="skip the verify pass (bench verifies what it times)")
    ap.add_argument("--compare", default=str(ROOT / "bench" / "results"), metavar="DIR",
                    help="compare the new rows' times with the record in DIR (default bench/results/)")
    ap.add_argument("--no-compare", action="store_true", help="skip the comparison with the record")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    import tomllib
    from schedgen.bench import bench_built, compare, compare_markdown, environment, markdown, print_skips, recorded_rows
    from schedgen.build import build_spec
    from schedgen.frontend.validate import parse_overrides

    env = environment()
    print("env:", json.dumps(env), flush=True)
    if not args.skip_tests:
        log = out / "pytest_gpu.log"
        # every test marked gpu (map and matmul runtime, Pallas matmul/attention at full size, the tuner's runner
        # and its 3-minute figure), or only tests/test_gpu.py with --quick-tests
        target = ["tests/test_gpu.py"] if args.quick_tests else ["tests"]
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-m", "gpu", *target, "-p",
                            "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
        log.write_text(r.stdout + r.stderr)
        print("gpu tests:", (r.stdout.strip().splitlines() or ["?"])[-1], f"({time.time() - t0:.0f}s)", flush=True)

    specs = [p for p in sorted(ROOT.glob("specs/*")) if args.family is None or family_of(p) == args.family]
    verify_pass([] if args.skip_verify else specs, out, t0)

    suite = suite_runs(tomllib.loads((ROOT / "bench/suite.toml").read_text())["run"])
    rows = []
    for run in suite:
        label = run.get("label", "")
        if (args.only is not None and label not in args.only) or (args.main and label):
            continue
        if args.family is not None and family_of(ROOT / run["spec"]) != args.family:
            continue
        if time.time() - t0 > args.budget:
            print(f"budget spent: skipping {run['spec']} {label}", flush=True)
            continue
        try:
            built = build_spec(str(ROOT / run["spec"]), parse_overrides(run.get("define", [])))
            new = print_skips(bench_built(built, ["cuda", "pallas"], iters=args.iters, env=env))
        except Exception as exc:
            print(f"{run['spec']} {label}: {type(exc).__name__}: {exc}", flush=True)
            continue
        for r in new:
            r["variant"] = label or "default"
        rows += new
        for fam in sorted({r["family"] for r in rows}):
            (out / f"{fam}.json").write_text(json.dumps([r for r in rows if r["family"] == fam], indent=1) + "\n")
        for r in new:
            if r.get("peers"):
                peers = " ".join(f"{n} {p['ratio']:.2f}x" if p.get("ratio") else f"{n} {'skipped' if p.get('skipped') else '-'}"
                                 for n, p in (r.get("peers") or {}).items())
                print(f"  {r['spec']:20} {r['variant']:16} {r['backend']:6} {r.get('time_ms') or 0:.4f} ms "
                      f"{r.get('tflops') or 0:5.0f} TFLOP/s {r.get('pct_peak') or 0:4.1f}% peak  vs {peers}  "
                      f"verified {r['verified']} {r.get('error', '')}", flush=True)
                continue
            print(f"  {r['spec']:20} {r['variant']:16} {r['backend']:6} {r.get('time_ms') or 0:.4f} ms "
                  f"{r.get('gbps') or 0:7.0f} GB/s ratio {r.get('ratio') or 0:.3f} verified {r['verified']} "
                  f"{r.get('error', '')}", flush=True)
    (out / "bench.md").write_text(markdown(rows))
    print(f"\nTOTAL {time.time() - t0:.0f}s")
    print(markdown(rows))
    if not args.no_compare:
        cmp = compare(recorded_rows(args.compare), rows)
        (out / "compare.json").write_text(json.dumps(cmp, indent=1) + "\n")
        print(f"\nagainst the record in {args.compare}:")
        print(compare_markdown(cmp, unmatched=len(rows) - len(cmp)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
