"""The Ray backend's overhead per trial, on the CPU (issue 21): a local Ray instance with two logical GPUs, trials of
bench/tune_rate.py's GEMM space with its --dry measuring step (a synthetic time: no GPU), submitted as the tuner
does (at most one per GPU in flight). Per trial, the overhead is the driver's wall time from submitting the task to
holding its result, less the time spent inside the task (building the candidate, measuring it). Two passes over
the same candidates: cold (fresh Ray workers: their start, the supervised measuring process's start, NVRTC
compiles) and warm (the workers, their measuring processes and build caches reused: what a long tuning run sees).

    python -m bench.ray_overhead [--trials 16] [--out bench/results/raw/ray_overhead.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import tune_rate  # noqa: E402  (its dry functions: importable by the Ray workers through PYTHONPATH)

from schedgen import tune as T  # noqa: E402


def one_pass(runner, spec: Path, cands) -> dict:
    queue, pending, rows = deque(cands), {}, []
    t0 = time.monotonic()
    while queue or pending:
        while queue and len(pending) < runner.parallel:
            c = queue.popleft()
            pending[runner.trial(str(spec), c, "cuda")] = time.monotonic()
        done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        now = time.monotonic()
        for f in done:
            got = f.result()
            assert got["status"] == "ok", got
            latency = now - pending.pop(f)
            rows.append({"latency_s": latency, "task_s": got["task_s"], "overhead_s": latency - got["task_s"]})
    wall = time.monotonic() - t0
    med = {k: statistics.median(r[k] for r in rows) for k in ("latency_s", "task_s", "overhead_s")}
    return {"trials": len(rows), "wall_s": wall, "trials_per_min": len(rows) / wall * 60,
            **{f"median_{k}": v for k, v in med.items()}, "max_overhead_s": max(r["overhead_s"] for r in rows)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import ray
    from schedgen.tune.cluster import RayRunner
    with tempfile.TemporaryDirectory(prefix="ray-overhead-") as tmp:
        os.environ["PYTHONPATH"] = str(ROOT)
        os.environ["SCHEDGEN_CACHE"] = str(Path(tmp) / "cache")
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        spec = tune_rate.write_spec(Path(tmp))
        cands = T.prune(T.load_space(spec, budget=args.trials, seed=1)).kept
        t0 = time.monotonic()
        ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
        init_s = time.monotonic() - t0
        runner = RayRunner("auto", tune_rate.dry_measure, tune_rate.dry_verify, env=tune_rate.DRY_ENV)
        try:
            cold = one_pass(runner, spec, cands)
            warm = one_pass(runner, spec, cands)
        finally:
            runner.close()
            ray.shutdown()
    rec = {"bench": "ray_overhead", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.node()}: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}",
           "ray": ray.__version__, "ray_init_s": init_s, "logical_gpus": 2, "cold": cold, "warm": warm}
    print(f"Ray {ray.__version__} on {rec['machine']} (2 logical GPUs; ray.init {init_s:.1f} s)")
    print(f"{'pass':5} {'trials':>6} {'wall s':>7} {'trials/min':>10} {'median in-task s':>16} "
          f"{'median overhead s':>17} {'max overhead s':>14}")
    for name, r in (("cold", cold), ("warm", warm)):
        print(f"{name:5} {r['trials']:>6} {r['wall_s']:>7.2f} {r['trials_per_min']:>10.0f} {r['median_task_s']:>16.3f} "
              f"{r['median_overhead_s']:>17.3f} {r['max_overhead_s']:>14.3f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rec, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
