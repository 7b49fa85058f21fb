"""The tune() loop: prune, compile in a pool while the runner measures what is built, store each result, verify the
winner; and the dry run."""
from __future__ import annotations

import itertools
import math
import random
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, as_completed, wait
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
from .trust import check_row

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
    left: int = 0               # candidates the time budget left unmeasured

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
         pool: Executor | None = None, budget: int | None = None, seed: int = 0,
         time_budget: float | None = None) -> TuneResult:
    """Tune one spec at one shape: expand, prune, compile in a process pool while `runner` measures what is built,
    store each result at once, then check the fastest against numpy. A rerun measures only candidates the
    database lacks (with `retry_failed`, also those that hung, faulted or failed). Raises SpecErrors for a bad spec
    or tune section; KeyboardInterrupt passes through after what was measured is saved, so the next run resumes.
    `pool` lends an executor for the compiles (kept open; several tunings in one process then share its workers);
    by default one is made for the run. `budget` tunes a seeded random sample of that many points of a space larger
    than it (load_space: a space over MAX_SPACE points needs one). `time_budget` (seconds from the start): after it
    no new candidate is measured; what was measured is kept and the winner verified (`notes` says how many were
    left). With either budget the candidates are measured in a seeded random order.

    The runner measures one candidate at a time, or `runner.parallel` at once (PoolRunner: a worker per GPU); a
    runner with a `trial` method (the Ray backend) compiles and measures each candidate remotely. Either way this
    thread alone writes the database."""
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
                         pool=pool, time_budget=time_budget)
        finally:
            if not isinstance(db, TuneDB):
                dbh.close()
    finally:
        if own_runner:
            runner.close()


def _tune(space: Space, pruning: Pruning, runner: Runner, dbh: TuneDB, *, backend: str, workers: int | None,
          cache_root: str | None, retry_failed: bool, verify: bool, verify_top: int, progress: Progress,
          t0: float, pool: Executor | None = None, time_budget: float | None = None) -> TuneResult:
    run = _Run(space, dbh, progress, backend, str(runner.env.get("gpu")), str(runner.env.get("driver")))
    for c in pruning.kept:
        c.key = run.key(c.config_key, run.gpu, run.driver)
    kept_keys = {c.key for c in pruning.kept}
    known = dbh.lookup(kept_keys)
    for c in pruning.kept:          # a stored row is exported as it is: it must be its candidate (trust.py)
        if c.key in known:
            check_row(space, known[c.key], dbh, config=c.config_key, expected=c.overrides)
    todo = [c for c in pruning.kept if c.key not in known or (retry_failed and known[c.key]["status"] != "ok")]
    if space.budget is not None or time_budget is not None:
        random.Random(space.seed).shuffle(todo)     # a run that may stop early covers the space evenly
    run.rows.update({k: v for k, v in known.items() if k not in {c.key for c in todo}})
    reused = len(run.rows)
    run_id = dbh.start_run(spec_file=space.path, spec_name=space.spec.name, spec_key=space.spec_key,
                           shape=space.sizes, backend=backend, gpu=run.gpu, candidates=pruning.total,
                           pruned=pruning.pruned)
    best = None
    status = "failed"
    compile_s, left = 0.0, 0
    notes = [runner.note] if getattr(runner, "note", "") else []
    try:
        progress.start(len(todo), len(todo), reused, run.best())
        if todo:
            deadline = t0 + time_budget if time_budget is not None else None
            remote = hasattr(runner, "trial")
            with _lent(pool) if pool is not None or remote else compile_pool(workers) as ex_:
                trials = (_RemoteTrials(runner, space.path, backend, progress) if remote else
                          _LocalTrials(ex_, runner, space.path, cache_root, backend, progress, deadline))
                try:
                    left = _drive(trials, todo, deadline, run)
                finally:
                    trials.close()
                compile_s = trials.compile_s()
        if left:
            notes.append(f"the time budget (--time {time_budget:g} s) ran out: {left} of {len(todo)} candidates "
                         f"left unmeasured (what was measured is kept; a rerun measures the rest)")
        if run.foreign:
            notes.append(f"{run.foreign} candidates were timed on another GPU model than {run.gpu} (stored under "
                         f"that GPU's key; not ranked here)")
        if run.rows:
            best = _verify_winner(space.path, pruning.kept, run.rows, dbh, runner, backend, cache_root, verify,
                                  verify_top, progress)
        progress.finished(best)
        status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        progress.stop()
        dbh.finish_run(run_id, status=status, measured=run.measured, reused=reused,
                       failed=sum(1 for r in run.rows.values() if r["status"] != "ok"), wall_s=time.monotonic() - t0,
                       best_key=best["key"] if best else None)
    final = _sort_rows([r for k, r in run.rows.items() if k in kept_keys])
    return TuneResult(space, pruning, final, run.measured, reused, run.compiled, best, time.monotonic() - t0,
                      compile_s, run_id=run_id, notes=notes, left=left)


@dataclass
class _Run:
    """One run's results as they come in. Lives on the main thread: the database's one writer (and the progress's)."""
    space: Space
    dbh: TuneDB
    progress: Progress
    backend: str
    gpu: str
    driver: str
    rows: dict = field(default_factory=dict)      # key -> row, this run's GPU's
    measured: int = 0
    compiled: int = 0
    foreign: int = 0            # timed on another GPU model (a remote trial on a mixed cluster)

    def __post_init__(self):
        self.tools, self.tool_key = toolchain_info()

    def key(self, config_key: str, gpu: str, driver: str) -> str:
        return result_key(config_key, self.backend, gpu, driver, self.tool_key)

    def best(self) -> dict | None:
        ok = [r for r in self.rows.values() if r["status"] == "ok" and r.get("time_ms") is not None
              and r.get("verified") is not False]
        return min(ok, key=lambda r: (r["time_ms"], r["key"])) if ok else None

    def write(self, c: Candidate, got: Mapping[str, Any]) -> None:
        """Store one trial's outcome: {status, time_ms, detail, compiled} and, from a remote trial, the gpu and driver
        it ran on (a row is keyed by the GPU that timed it)."""
        gpu, driver = str(got.get("gpu") or self.gpu), str(got.get("driver") or self.driver)
        key = self.key(c.config_key, gpu, driver)
        t = got.get("time_ms") if got["status"] == "ok" else None
        self.compiled += bool(got.get("compiled"))
        self.measured += got["status"] != "compile_error"
        s = self.space
        row = {"key": key, "config_key": c.config_key, "spec_key": s.spec_key, "spec_name": s.spec.name,
               "spec_file": s.path, "shape": s.sizes, "backend": self.backend, "gpu": gpu, "driver": driver,
               "toolchain": self.tools, "toolchain_key": self.tool_key, "knobs": c.values, "overrides": c.overrides,
               "kernel": c.plan.launch.kernel_name, "created": now(), "status": got["status"],
               "time_ms": t, "detail": str(got.get("detail") or "")[:2000], **_rate(c.plan, t)}
        self.dbh.put(row)
        if key != c.key:
            self.foreign += 1
            return
        self.rows[key] = self.dbh.get(key)
        self.progress.measured(c, self.rows[key], self.best())


class _LocalTrials:
    """A trial here: compile in the process pool, then measure through the runner on `runner.parallel` threads (one
    for a runner of one worker; PoolRunner: one per GPU). Each future's result is handed to the main thread. A
    measurement queued for a thread that starts after `deadline` measures nothing (the main thread cancels the
    queued ones when the budget runs out, but a thread can take one first: on a loaded machine it did)."""
    capacity = None             # every compile is queued at once (the pool runs them in order)

    def __init__(self, ex_: Executor, runner: Runner, spec_path: str, cache_root: str | None, backend: str,
                 progress: Progress, deadline: float | None = None):
        self.ex_, self.runner, self.spec_path, self.cache_root, self.backend = ex_, runner, spec_path, cache_root, backend
        self.progress, self.deadline = progress, deadline
        self.threads = ThreadPoolExecutor(max(1, int(getattr(runner, "parallel", 1))), thread_name_prefix="measure")
        self.compiling: set[Future] = set()
        self.t_first = self.t_last = time.monotonic()
        self.started = False

    def submit(self, c: Candidate) -> Future:
        f = self.ex_.submit(compile_candidate, self.spec_path, c.overrides, self.cache_root)
        f.add_done_callback(lambda f, c=c: self._compiled(f, c))
        self.compiling.add(f)
        if not self.started:
            self.runner.start()         # the workers' start-up overlaps the first compiles
            self.started = True
        return f

    def _compiled(self, f: Future, c: Candidate) -> None:      # a pool thread
        self.t_last = time.monotonic()
        if not f.cancelled():
            self.progress.compiled(c, f.exception() is None)

    def advance(self, c: Candidate, f: Future, more: bool) -> Future | dict | None:
        """A finished compile: its measurement's future (None when no more may start), or the compile error; a
        finished measurement: its outcome (None when the deadline had passed before it started)."""
        if f not in self.compiling:
            return f.result()
        self.compiling.discard(f)
        try:
            built, _, _ = f.result()
        except (SpecErrors, ToolchainError) as exc:         # anything else (a broken pool) stops the run
            return {"status": "compile_error", "detail": _why(exc)}
        return self.threads.submit(self._measure, built) if more else None

    def _measure(self, built) -> dict | None:                   # a measuring thread
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return None
        res = self.runner.measure(built, self.backend)
        return {"status": res.status, "time_ms": res.time_ms, "detail": res.detail, "compiled": True}

    def cancel(self, f: Future) -> bool:
        return f.cancel()

    def compile_s(self) -> float:
        return self.t_last - self.t_first

    def close(self) -> None:
        for f in self.compiling:
            f.cancel()
        self.threads.shutdown(wait=False, cancel_futures=True)


class _RemoteTrials:
    """A trial on a cluster (the Ray backend, cluster.py): `runner.trial(spec_path, candidate, backend)` compiles and
    measures it on a worker with a GPU and its future gives the outcome; at most `runner.parallel` are in flight (the
    cluster's GPUs), so that a trial submitted is a trial running and the time budget can stop the rest."""

    def __init__(self, runner, spec_path: str, backend: str, progress: Progress):
        self.runner, self.spec_path, self.backend, self.progress = runner, spec_path, backend, progress
        self.capacity = max(1, int(getattr(runner, "parallel", 1)))
        self.t_first = time.monotonic()
        self.t_last = self.t_first

    def submit(self, c: Candidate) -> Future:
        return self.runner.trial(self.spec_path, c, self.backend)

    def advance(self, c: Candidate, f: Future, more: bool) -> dict:
        got = f.result()
        self.t_last = time.monotonic()
        self.progress.compiled(c, got["status"] != "compile_error")
        return got

    def cancel(self, f: Future) -> bool:
        return False                # in flight means running: its measurement finishes

    def compile_s(self) -> float:
        return self.t_last - self.t_first

    def close(self) -> None:
        pass


def _drive(trials, todo: list[Candidate], deadline: float | None, run: _Run) -> int:
    """Run the trials: submit (up to the trials' capacity), hand each finished stage to `trials.advance`, write
    each outcome through `run` (this thread), in the order the stages were started. After `deadline` nothing new
    starts: what is queued is cancelled, what is measuring finishes. Returns how many were left unmeasured."""
    queue = deque(todo)
    pending: dict[Future, tuple[int, Candidate]] = {}
    order = itertools.count()
    left = 0

    def expired() -> bool:
        return deadline is not None and time.monotonic() >= deadline
    try:
        while True:
            while queue and not expired() and (trials.capacity is None or len(pending) < trials.capacity):
                c = queue.popleft()
                pending[trials.submit(c)] = (next(order), c)
            if not pending:
                break
            wait_s = None if deadline is None or expired() else deadline - time.monotonic()
            done, _ = wait(list(pending), timeout=wait_s, return_when=FIRST_COMPLETED)
            for f in sorted(done, key=lambda f: pending[f][0]):
                _, c = pending.pop(f)
                got = trials.advance(c, f, more=not expired())
                if isinstance(got, Future):
                    pending[got] = (next(order), c)
                elif got is None:
                    left += 1
                else:
                    run.write(c, got)
            if expired():
                for f in [f for f in pending if trials.cancel(f)]:
                    del pending[f]
                    left += 1
    finally:
        for f in pending:
            f.cancel()
    return left + len(queue)


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
                           "overrides": c.overrides, "kernel": c.plan.launch.kernel_name, "time_ms": None, "detail": ""}
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
