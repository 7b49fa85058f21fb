"""How fast `schedgen tune` goes (issue 21): a 100-candidate GEMM space (specs/matmul_bf16_4096_tune.yaml with a tune
section of exactly 100 points, none pruned: 128 x 128 tiles, stages 2..6, cluster_m 1/2, tile_width 1..16,
delay_release 0/1) tuned into a fresh database and build cache (cold: everything compiled and measured), then again
(warm: everything found in the database, nothing compiled or measured). Prints candidates per minute and both wall
times as a short table and writes them as JSON. Targets: cold under 60 s on one H200, warm under 2 s.

    python -m bench.tune_rate --out bench/results/raw/tune_rate.json              # one GPU (the first visible)
    python -m bench.tune_rate --gpus all --out ...                                # every GPU of the node
    python -m bench.tune_rate --dry --budget 4 --out /tmp/rate.json               # CPU: real compiles, fake timing

`--dry` replaces the measuring step with a synthetic time (no GPU: the compiles, the database and the bookkeeping
are real); `--budget N` takes a seeded sample of N of the 100 points (a quick check, not the figure).
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from schedgen import tune as T  # noqa: E402

BASE = ROOT / "specs" / "matmul_bf16_4096_tune.yaml"
SPACE = """tune:
  # 5 x 5 x 2 x 2 = 100 points, all of them legal and distinct kernels at 4096^3 (nothing pruned)
  params:
    stages: [2, 3, 4, 5, 6]
    tile_width: [1, 2, 4, 8, 16]
    cluster_m: [1, 2]
    delay_release: [0, 1]
"""
TARGET_COLD_S, TARGET_WARM_S = 60.0, 2.0
DRY_ENV = {"gpu": "dry run (CPU, synthetic times)", "driver": "-"}


def write_spec(folder: Path) -> Path:
    """The 100-point space: the tune spec's schedule (its tiles narrowed to 128 x 128) with SPACE as its tune
    section."""
    text = BASE.read_text().split("\ntune:")[0]
    text = text.replace("b: {block_shape: [64, 256]", "b: {block_shape: [64, 128]")
    text = text.replace("out: {block_shape: [128, 256]}", "out: {block_shape: [128, 128]}")
    path = folder / "matmul_bf16_4096_tune100.yaml"
    path.write_text(text.rstrip() + "\n" + SPACE)
    return path


def dry_measure(built, backend, options):
    """The synthetic time of --dry (runs in the runner's worker): deeper rings and wider bands a little faster."""
    p = built.plan
    return {"time_ms": 0.2 + 0.01 / p.pipeline.stages + 0.001 * p.tiles.tile_width + 0.002 * p.cluster.cluster_m, "detail": "dry"}


def dry_verify(built, backend, options):
    return {"ok": True, "rel_error": 0.0}


def runner_for(args):
    if args.dry:
        return T.WorkerRunner(dry_measure, dry_verify, env=DRY_ENV, start_timeout=300)
    from schedgen.tune.pool import PoolRunner, pick_gpus, visible_gpus
    return PoolRunner(pick_gpus(args.gpus, visible_gpus()), timeout=60)


def one_run(spec: Path, db: Path, cache: Path, args) -> dict:
    t0 = time.monotonic()           # the runner's making included (nvidia-smi); the interpreter's start is not
    runner = runner_for(args)
    try:
        r = T.tune(spec, runner=runner, db=db, cache=cache, budget=args.budget, workers=args.workers)
    finally:
        runner.close()
    wall = time.monotonic() - t0
    return {"wall_s": round(wall, 3), "candidates": len(r.pruning.kept), "measured": r.measured, "reused": r.reused,
            "compiled": r.compiled, "compile_s": round(r.compile_s, 3), "failed": len(r.failed),
            "gpu": runner.env.get("gpu"), "gpus": getattr(runner, "parallel", 1),
            "best": {"knobs": r.best["knobs"], "time_ms": r.best["time_ms"]} if r.best else None}


def table(rec: dict) -> str:
    rows = [("run", "candidates", "measured", "reused", "compile s", "wall s", "candidates/min", "target")]
    for name in ("cold", "warm"):
        r = rec[name]
        rate = f"{rec['candidates_per_min']:.0f}" if name == "cold" else "-"
        target = TARGET_COLD_S if name == "cold" else TARGET_WARM_S
        rows.append((name, str(r["candidates"]), str(r["measured"]), str(r["reused"]), f"{r['compile_s']:.1f}",
                     f"{r['wall_s']:.2f}", rate, f"< {target:g} s {'ok' if r['wall_s'] < target else 'MISSED'}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    head = f"tune rate: {rec['spec']} on {rec['gpu']} x {rec['gpus']}{' (--dry)' if rec['dry'] else ''}"
    return "\n".join([head, *lines])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the JSON record here")
    ap.add_argument("--dry", action="store_true", help="CPU: fake timing (compiles and database are real)")
    ap.add_argument("--gpus", default="1", help="GPUs to measure on: all, N, or 0,2,5 (default 1: one GPU)")
    ap.add_argument("--budget", type=int, help="a seeded sample of N of the 100 points (a quick check)")
    ap.add_argument("--workers", type=int, help="compile processes (default: CPUs - 1)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tune-rate-") as tmp:
        spec = write_spec(Path(tmp))
        db, cache = Path(tmp) / "tune.sqlite", Path(tmp) / "cache"
        cold = one_run(spec, db, cache, args)
        warm = one_run(spec, db, cache, args)
    rec = {"bench": "tune_rate", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": platform.node(), "spec": spec.name, "dry": args.dry, "budget": args.budget,
           "gpu": cold["gpu"], "gpus": cold["gpus"], "cold": cold, "warm": warm,
           "candidates_per_min": cold["measured"] / cold["wall_s"] * 60 if cold["wall_s"] else None,
           "targets": {"cold_s": TARGET_COLD_S, "warm_s": TARGET_WARM_S}}
    print(table(rec))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rec, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
