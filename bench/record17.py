"""The performance record of issue 17 for one family, from ONE process: every bundled spec of the family (at the
suite's sizes where bench/suite.toml gives its unlabelled run some, else the spec's own; a dynamic package at the
call sizes its unlabelled run's `at` gives, else at its sizes' max) plus, for matmul, the shapes users bring (bench/user_shapes/*.yaml, default schedules), each verified
against float64 and timed interleaved with the family's peers (`schedgen.bench.bench_built`: ours and every peer in
rounds of blocks of launches, the median over rounds, the SM clock and power limit read before and after).

    python3 bench/record17.py --family map|matmul|attention [--out DIR] [--iters N] [--budget S] [--set all|bundled|user]
                              [--only NAME...] [--no-compile] [--append [RECORD]] [--no-plot]

Writes DIR/<family>.json (the run's rows, the format bench/plot_*.py and `python -m schedgen.report` read),
DIR/<family>.md (the method, the environment, the family's table, the GPU's clock and power per spec) and, for
matmul and attention, DIR/<family>_tflops.png; prints progress per spec (flushed) and a short table last. DIR is
$OUT when it is set (the device tool brings it back), else bench/results/. `--append [RECORD]` merges into the rows
of RECORD (default DIR/<family>.json): a family split over two calls of the device tool's 10-minute limit, e.g.
`--set bundled`, then `--set user --append bench/results/matmul.json` with the first call's record put there; the
rows say which call made them (their `run` field). Peers: map: a device copy of the same bytes, torch's eager op on the
same tensors; matmul: cuBLAS, JAX's hopper_matmul_mgpu, and for fused epilogues torch eager and torch.compile
(max-autotune-no-cudagraphs; `--no-compile` skips it, saying so); attention: SDPA cuDNN, SDPA flash, JAX
attention_mgpu (best of its sweep).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch, cuBLAS and jax share the GPU

FAMILIES = ("map", "matmul", "attention")
USER_SHAPES = ROOT / "bench" / "user_shapes"


# ---------------------------------------------------------------------------------------------- what runs

def suite_unlabelled() -> dict[str, dict]:
    """spec path (relative to the repo) -> {define: its -D overrides, at: a dynamic package's call sizes} of its
    unlabelled run in bench/suite.toml."""
    import tomllib

    from run_gpu import suite_runs
    out: dict[str, dict] = {}
    for run in suite_runs(tomllib.loads((ROOT / "bench" / "suite.toml").read_text())["run"]):
        if not run.get("label"):
            out.setdefault(run["spec"], {"define": list(run.get("define", [])),
                                         "at": {k: int(v) for k, v in (a.split("=", 1) for a in run.get("at", []))}})
    return out


def planned_runs(family: str, which: str = "all", only: list[str] | None = None) -> list[dict]:
    """The runs of a family: {spec (path relative to the repo), define, source: bundled | user}, bundled first."""
    from run_gpu import family_of
    suite = suite_unlabelled()
    runs = []
    if which in ("all", "bundled"):
        for path in sorted(p for p in (ROOT / "specs").iterdir() if p.suffix in (".yaml", ".yml", ".toml")):
            if family_of(path) == family:
                rel = str(path.relative_to(ROOT))
                got = suite.get(rel, {})
                runs.append({"spec": rel, "define": got.get("define", []), "at": got.get("at", {}),
                             "source": "bundled"})
    if which in ("all", "user") and family == "matmul":
        runs += [{"spec": str(p.relative_to(ROOT)), "define": [], "at": {}, "source": "user"}
                 for p in sorted(USER_SHAPES.glob("*.yaml"))]
    if only:
        runs = [r for r in runs if any(o in Path(r["spec"]).stem for o in only)]
    return runs


# ---------------------------------------------------------------------------------------------- tables

def _ratio(p: dict | None) -> str:
    if not p:
        return "-"
    if p.get("ratio"):
        return f"{p['ratio']:.3f}" + ("" if p.get("verified", True) else "!")
    return "skip" if p.get("skipped") else "-"


def _state(s: dict | None) -> str:
    if not s or "error" in s:
        return "?"
    clock = f"{s['sm_clock_mhz']:.0f}" if s.get("sm_clock_mhz") is not None else "?"
    limit = f"{s['power_limit_w']:.0f}" if s.get("power_limit_w") is not None else "?"
    return f"{clock} MHz/{limit} W"


def short_table(rows: list[dict]) -> str:
    """One line per row: spec, backend, time, rate, each peer's ratio (its time / ours; '!' unverified), clocks."""
    names = list(dict.fromkeys(n for r in rows for n in (r.get("peers") or {})))
    head = f"{'spec':38} {'backend':7} {'ms':>9} {'rate':>10} " + " ".join(f"{n[:13]:>13}" for n in names) + \
        "  verified  SM clock/power limit before -> after"
    lines = [head]
    for r in rows:
        rate = f"{r['tflops']:.0f} TF/s" if r.get("tflops") else (f"{r['gbps']:.0f} GB/s" if r.get("gbps") else "-")
        ms = f"{r['time_ms']:.4f}" if r.get("time_ms") else "-"
        cells = " ".join(f"{_ratio((r.get('peers') or {}).get(n)):>13}" for n in names)
        lines.append(f"{r['spec'][:38]:38} {r['backend']:7} {ms:>9} {rate:>10} {cells}  {str(r['verified']):8}  "
                     f"{_state(r.get('gpu_before'))} -> {_state(r.get('gpu_after'))}" + (f"  {r['error']}" if
                                                                                         r.get("error") else ""))
    return "\n".join(lines)


def geomeans(rows: list[dict]) -> dict[str, dict[str, float]]:
    """backend -> peer -> the geometric mean of its verified ratios (peer time / ours) over the rows."""
    got: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        for n, p in (r.get("peers") or {}).items():
            if p.get("ratio") and p.get("verified", True) and r.get("verified"):
                got.setdefault(r["backend"], {}).setdefault(n, []).append(p["ratio"])
    return {b: {n: math.exp(sum(map(math.log, v)) / len(v)) for n, v in ps.items()} for b, ps in got.items()}


def clock_table(rows: list[dict]) -> str:
    lines = ["| spec | backend | SM clock before (MHz) | SM clock after (MHz) | power limit before (W) | power limit after "
             "(W) | power draw after (W) | temperature after (C) |", "|---|---|---|---|---|---|---|---|"]

    def cell(s: dict | None, key: str) -> str:
        v = (s or {}).get(key)
        return f"{v:.0f}" if isinstance(v, (int, float)) else "?"
    for r in rows:
        b, a = r.get("gpu_before"), r.get("gpu_after")
        lines.append(f"| {r['spec']} | {r['backend']} | {cell(b, 'sm_clock_mhz')} | {cell(a, 'sm_clock_mhz')} | "
                     f"{cell(b, 'power_limit_w')} | {cell(a, 'power_limit_w')} | {cell(a, 'power_draw_w')} | "
                     f"{cell(a, 'temperature_c')} |")
    errors = {(r.get("gpu_before") or {}).get("error") for r in rows} - {None}
    return "\n".join(lines) + ("\n\nGPU state not read: " + "; ".join(sorted(errors)) if errors else "") + "\n"


def record_markdown(family: str, rows: list[dict], env: dict, args) -> str:
    from schedgen.bench import markdown
    means = geomeans(rows)
    lines = [f"# {family}: the issue 17 record ({dt.date.today().isoformat()})", "",
             f"One process (`python3 bench/record17.py --family {family}`): every contender verified against float64 "
             f"first, then timed interleaved ({args.iters} launches of each in 5 rounds of blocks, {args.warmup} "
             "warm-up launches; the median over rounds; CUDA events where the contender launches on a CUDA stream, "
             "CUPTI kernel time where jax launches); iid N(0, 1) inputs (seed 1); ratios are a peer's time / ours from "
             "the same run (above 1: ours is faster). The SM clock and power limit are read just before and just "
             "after each spec's timing.", "",
             f"Environment: {env.get('gpu')}, driver {env.get('driver')}, clocks {env.get('clocks')}, power "
             f"{env.get('power')}, versions {env.get('versions')}, toolchain {env.get('toolchain')}.", "",
             markdown(rows), "Geometric means of the verified ratios (peer time / ours):", ""]
    for backend, ps in means.items():
        lines.append(f"- {backend}: " + ", ".join(f"vs {n} {v:.3f}" for n, v in ps.items()))
    lines += ["", "GPU state per spec:", "", clock_table(rows)]
    return "\n".join(lines)


def write_plot(family: str, rows: list[dict], out: Path) -> str | None:
    """DIR/<family>_tflops.png through bench/plot_<family>.py (matmul, attention), or None; never raises."""
    try:
        if family == "matmul":
            import plot_matmul
            path = out / "matmul_tflops.png"
            plot_matmul.plot(plot_matmul.table(rows), path, "Matmul on the H200 (M x N x K): bundled specs and "
                             "shapes users bring, verified before timing, interleaved")
        elif family == "attention":
            import plot_attention
            path = out / "attention_tflops.png"
            plot_attention.plot(plot_attention.table(rows), path)
        else:
            return None
        return str(path)
    except Exception as exc:  # no matplotlib, a row it cannot read: the record still stands
        print(f"plot not written: {type(exc).__name__}: {exc}", flush=True)
        return None


# ---------------------------------------------------------------------------------------------- the run

def bench_one(run: dict, args, env: dict) -> list[dict]:
    from schedgen.bench import bench_built, print_skips
    from schedgen.build import build_spec
    from schedgen.frontend.overrides import parse_overrides
    built = build_spec(str(ROOT / run["spec"]), parse_overrides(run["define"]))
    rows = print_skips(bench_built(built, [b for b in args.backends.split(",") if b], iters=args.iters,
                                   warmup=args.warmup, env=env, at=run.get("at") or None))
    for r in rows:
        r.update(variant="default", source=run["source"], spec_file=run["spec"], define=run["define"], run=args.run)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=FAMILIES, required=True)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "bench" / "results"))
    ap.add_argument("--iters", type=int, default=30, help="timed launches of each contender (in 5 rounds)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--budget", type=float, default=450.0,
                    help="start no new spec after this many seconds (the one under way then still finishes)")
    ap.add_argument("--set", dest="which", choices=("all", "bundled", "user"), default="all",
                    help="bundled specs, the shapes users bring (matmul), or both")
    ap.add_argument("--only", nargs="*", default=None, help="only specs whose file name contains one of these")
    ap.add_argument("--backends", default="cuda,pallas")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer (matmul)")
    ap.add_argument("--append", nargs="?", const="", default=None, metavar="RECORD",
                    help="merge this run's rows into the rows of RECORD (default DIR/<family>.json): a family split "
                         "over two device calls, the first call's record carried in the tree")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--run", default=None, help="a name for this call in the rows' `run` field (default: a timestamp)")
    args = ap.parse_args(argv)
    args.run = args.run or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from schedgen.bench import environment, merge_rows, read_record, write_record
    if args.no_compile:
        from schedgen.families.matmul import peers as mm_peers
        mm_peers.TORCH_COMPILE_MODE = None
    record = out / f"{args.family}.json"
    # a file that is not a record fails here, before any timing
    old = read_record(Path(args.append) if args.append else record) if args.append is not None else []
    env = environment()
    print("env:", json.dumps(env), flush=True)
    runs = planned_runs(args.family, args.which, args.only)
    print(f"{len(runs)} specs of {args.family}: " + ", ".join(Path(r["spec"]).stem for r in runs), flush=True)
    rows: list[dict] = []
    left: list[str] = []
    for i, run in enumerate(runs, 1):
        name = Path(run["spec"]).stem
        if time.time() - t0 > args.budget:
            left.append(name)
            print(f"[{i}/{len(runs)}] {name}: budget of {args.budget:.0f} s spent, not run", flush=True)
            continue
        ts = time.time()
        at = " ".join(f"{k}={v}" for k, v in (run.get("at") or {}).items())
        print(f"[{i}/{len(runs)}] {name} {' '.join(run['define'])}".rstrip() + (f" at {at}" if at else "") + " ...",
              flush=True)
        try:
            new = bench_one(run, args, env)
        except Exception as exc:  # one spec that does not build or run is reported; the others still run
            print(f"    {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
            continue
        rows += new
        body = short_table(new).split("\n")[1:]
        print("\n".join(body + [f"    ({time.time() - ts:.0f} s; {time.time() - t0:.0f} s in all)"]), flush=True)
        so_far = merge_rows(record, rows, old)     # written after each spec: a run cut short keeps what it timed
        write_record(record, so_far)
        (out / f"{args.family}.md").write_text(record_markdown(args.family, so_far, env, args))
    rows_all = merge_rows(record, rows, old)
    write_record(record, rows_all)
    (out / f"{args.family}.md").write_text(record_markdown(args.family, rows_all, env, args))
    plot = None if args.no_plot or not rows_all else write_plot(args.family, rows_all, out)
    print(f"\nwrote {record}, {out / (args.family + '.md')}" + (f", {plot}" if plot else "") +
          f" ({len(rows)} rows this run, {len(rows_all)} in the record; {time.time() - t0:.0f} s)")
    if left:
        print(f"not run (budget): {', '.join(left)}")
    print()
    print(short_table(rows_all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
