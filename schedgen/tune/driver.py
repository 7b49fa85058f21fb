"""The tune() loop: prune, compile in a pool while the runner measures what is built, store each result, verify the
winner; and the dry run."""
from __future__ import annotations

import math
import time
from concurrent.futures import Executor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..cache import Cache
from ..errors import SpecErrors, ToolchainError
from .compile import _why, compile_candidate, compile_pool, result_key, toolchain_info
from .db import TuneDB, now
from .measure import Runner, WorkerRunner
from .progress import Progress
from .prune import Pruning, prune
from .space import Candidate, Space, load_space

VERIFY_TOP = 5                  # winners tried in turn until one matches numpy


@dataclass
class TuneResult:
    space: Space
    pruning: Pruning
    rows: list[dict]            # one per kept candidate that has a result (measured now or found), fastest first
    measured: int
    reused: int
    compiled: int
    best: dict | None           # the fastest candidate that matched numpy
    wall_s: float
    compile_s: float            # from the first compile submitted to the last one done
    dry_run: bool = False
    run_id: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.rows if r["status"] != "ok"]


def _rate(plan, time_ms: float | None) -> dict:
    if not time_ms:
        return {"tflops": None, "gbps": None}
    flops = getattr(plan, "flops", None)
    return {"tflops": flops / (time_ms * 1e-3) / 1e12 if flops else None,
            "gbps": plan.bytes_moved / (time_ms * 1e-3) / 1e9}


def _sort_rows(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["status"] != "ok", r.get("verified") is False,
                                       r["time_ms"] if r.get("time_ms") is not None else math.inf, r["key"]))


def tune(spec_path: str | Path, overrides: Mapping[str, Any] | None = None, *, runner: Runner | None = None,
         db: TuneDB | str | Path | None = None, backend: str = "cuda", workers: int | None = None,
         cache: Cache | str | Path | None = None, retry_failed: bool = False, dry_run: bool = False,
         verify: bool = True, verify_top: int = VERIFY_TOP, progress: Progress | None = None,
         pool: Executor | None = None, budget: int | None = None, seed: int = 0) -> TuneResult:
    """Tune one spec at one shape: expand, prune, compile in a process pool while `runner` measures what is built,
    store each result at once, then check the fastest against numpy. A rerun measures only candidates the
    database lacks (with `retry_failed`, also those that hung, faulted or failed). Raises SpecErrors for a bad spec
    or tune section; KeyboardInterrupt passes through after what was measured is saved, so the next run resumes.
    `pool` lends an executor for the compiles (kept open; several tunings in one process then share its workers);
    by default one is made for the run. `budget` tunes a seeded random sample of that many points of a space larger
    than it (load_space: a space over MAX_SPACE points needs one)."""
    t0 = time.monotonic()
    progress = progress or Progress()
    spec_path = str(spec_path)
    space = load_space(spec_path, overrides, budget=budget, seed=seed)
    if backend not in space.spec.schedule.backends:
        raise ValueError(f"{spec_path}: backend '{backend}' is not among the spec's backends "
                         f"({', '.join(space.spec.schedule.backends)})")
    cache_root = str(cache.root if isinstance(cache, Cache) else cache) if cache is not None else None
    if dry_run:
        pruning = prune(space)
        progress.space(space, pruning)
        return _dry_run(space, pruning, workers, cache_root, progress, t0, pool)
    own_runner = runner is None
    runner = runner or WorkerRunner()
    try:
        if not runner.env.get("gpu"):
            raise RuntimeError("no GPU found to measure on (" + str(runner.env.get("note", "nvidia-smi found none"))
                               + "); `schedgen tune --dry-run` expands, prunes and compiles on the CPU")
        dbh = db if isinstance(db, TuneDB) else TuneDB(db)     # an unusable database stops the run before it starts
        try:
            pruning = prune(space)
            progress.space(space, pruning)
            return _tune(space, pruning, runner, dbh, backend=backend, workers=workers, cache_root=cache_root,
                         retry_failed=retry_failed, verify=verify, verify_top=verify_top, progress=progress, t0=t0,
                         pool=pool)
        finally:
            if not isinstance(db, TuneDB):
                dbh.close()
    finally:
        if own_runner:
            runner.close()


def _tune(space: Space, pruning: Pruning, runner: Runner, dbh: TuneDB, *, backend: str, workers: int | None,
          cache_root: str | None, retry_failed: bool, verify: bool, verify_top: int, progress: Progress,
          t0: float, pool: Executor | None = None) -> TuneResult:
    gpu, driver = str(runner.env.get("gpu")), str(runner.env.get("driver"))
    tools, tool_key = toolchain_info()
    for c in pruning.kept:
        c.key = result_key(c.config_key, backend, gpu, driver, tool_key)
    kept_keys = {c.key for c in pruning.kept}
    known = dbh.lookup(kept_keys)
    todo = [c for c in pruning.kept if c.key not in known or (retry_failed and known[c.key]["status"] != "ok")]
    rows = {k: v for k, v in known.items() if k not in {c.key for c in todo}}
    reused = len(rows)
    run_id = dbh.start_run(spec_file=space.path, spec_name=space.spec.name, spec_key=space.spec_key,
                           shape=space.sizes, backend=backend, gpu=gpu, candidates=pruning.total,
                           pruned=pruning.pruned)

    def new_row(c: Candidate, **fields) -> dict:
        return {"key": c.key, "config_key": c.config_key, "spec_key": space.spec_key, "spec_name": space.spec.name,
                "spec_file": space.path, "shape": space.sizes, "backend": backend, "gpu": gpu, "driver": driver,
                "toolchain": tools, "toolchain_key": tool_key, "knobs": c.values, "overrides": c.overrides,
                "kernel": getattr(c.plan, "kernel_name", None), "created": now(), **fields}

    def current_best() -> dict | None:
        ok = [r for r in rows.values() if r["status"] == "ok" and r.get("time_ms") is not None
              and r.get("verified") is not False]
        return min(ok, key=lambda r: (r["time_ms"], r["key"])) if ok else None

    measured = compiled = 0
    compile_s = 0.0
    best = None
    status = "failed"
    try:
        progress.start(len(todo), len(todo), reused, current_best())
        if todo:
            t_c = time.monotonic()
            done_at = [t_c]

            def compiled_cb(f, c):
                done_at[0] = time.monotonic()
                if not f.cancelled():
                    progress.compiled(c, f.exception() is None)
            with _lent(pool) if pool is not None else compile_pool(workers) as ex_:
                futs = {}
                try:
                    for c in todo:
                        f = ex_.submit(compile_candidate, space.path, c.overrides, cache_root)
                        f.add_done_callback(lambda f, c=c: compiled_cb(f, c))
                        futs[f] = c
                    runner.start()              # the worker's start-up overlaps the first compiles
                    for f in as_completed(futs):
                        c = futs[f]
                        try:
                            built, _, _ = f.result()
                        except (SpecErrors, ToolchainError) as exc:   # anything else (a broken pool) stops the run
                            row = new_row(c, status="compile_error", detail=_why(exc)[:2000])
                        else:
                            compiled += 1
                            res = runner.measure(built, backend)
                            measured += 1
                            t = res.time_ms if res.status == "ok" else None
                            row = new_row(c, status=res.status, time_ms=t, detail=res.detail[:2000], **_rate(c.plan, t))
                        dbh.put(row)
                        rows[c.key] = dbh.get(c.key)
                        progress.measured(c, rows[c.key], current_best())
                finally:
                    for f in futs:
                        f.cancel()
            compile_s = done_at[0] - t_c
        if rows:
            best = _verify_winner(space.path, pruning.kept, rows, dbh, runner, backend, cache_root, verify,
                                  verify_top, progress)
        progress.finished(best)
        status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        progress.stop()
        dbh.finish_run(run_id, status=status, measured=measured, reused=reused,
                       failed=sum(1 for r in rows.values() if r["status"] != "ok"), wall_s=time.monotonic() - t0,
                       best_key=best["key"] if best else None)
    final = _sort_rows([r for k, r in rows.items() if k in kept_keys])
    return TuneResult(space, pruning, final, measured, reused, compiled, best, time.monotonic() - t0, compile_s,
                      run_id=run_id)


def _verify_winner(spec_path, kept, rows, dbh: TuneDB, runner, backend, cache_root, verify, verify_top, progress):
    """The fastest candidate that matches numpy: the first few in time order are checked until one does."""
    by_key = {c.key: c for c in kept}
    ok = _sort_rows([r for r in rows.values() if r["status"] == "ok" and r.get("time_ms") is not None
                     and r["key"] in by_key])
    if not verify:
        return ok[0] if ok else None
    from ..build import build_spec
    for r in ok[:verify_top]:
        if r.get("verified") is True:
            return r
        if r.get("verified") is False:
            continue
        progress.verifying(r)
        c = by_key[r["key"]]
        built = build_spec(spec_path, c.overrides, cache=Cache(Path(cache_root)) if cache_root else None)
        res = runner.verify(built, backend)
        good = res.status == "ok" and bool(res.extra.get("ok"))
        detail = res.detail if res.status == "ok" else f"verification {res.status}: {res.detail}"
        dbh.set_verified(r["key"], good, res.extra.get("rel_error"),
                         "" if good else (detail or "does not match the numpy reference"))
        rows[r["key"]] = dbh.get(r["key"])
        if good:
            return rows[r["key"]]
    return None


class _lent:
    """A lent executor as a context manager that leaves it open."""

    def __init__(self, ex_: Executor):
        self.ex_ = ex_

    def __enter__(self) -> Executor:
        return self.ex_

    def __exit__(self, *exc) -> None:
        pass


def _dry_run(space: Space, pruning: Pruning, workers, cache_root, progress: Progress, t0: float,
             pool: Executor | None = None) -> TuneResult:
    """Expand, prune and compile every candidate; nothing is measured or stored."""
    rows = []
    compile_s = 0.0
    progress.start(len(pruning.kept), 0, 0, None)
    try:
        if pruning.kept:
            t_c = time.monotonic()
            with _lent(pool) if pool is not None else compile_pool(workers, measuring=False) as ex_:
                futs = {ex_.submit(compile_candidate, space.path, c.overrides, cache_root): c for c in pruning.kept}
                for f in as_completed(futs):
                    c = futs[f]
                    row = {"key": c.config_key, "config_key": c.config_key, "index": c.index, "knobs": c.values,
                           "overrides": c.overrides, "kernel": c.plan.kernel_name, "time_ms": None, "detail": ""}
                    try:
                        built, pid, secs = f.result()
                        row.update(status="built", pid=pid, compile_s=secs, cache_hit=built.cache_hit)
                    except (SpecErrors, ToolchainError) as exc:
                        row.update(status="compile_error", detail=_why(exc)[:2000])
                    rows.append(row)
                    progress.compiled(c, row["status"] == "built")
            compile_s = time.monotonic() - t_c
    finally:
        progress.stop()
    rows.sort(key=lambda r: r["index"])
    return TuneResult(space, pruning, rows, 0, 0, sum(r["status"] == "built" for r in rows), None,
                      time.monotonic() - t0, compile_s, dry_run=True)
