"""One supervisor for worker processes: run functions in a spawned process with a time limit, so that a kernel that
deadlocks (a barrier that never completes) or kills its process (an illegal instruction) ends as a clear outcome,
not a frozen terminal. The worker is spawned, not forked: a CUDA context does not survive fork.

Every call ends in one of four outcomes (the one vocabulary `verify` and `tune` share):

    ok       the function returned; `value` is its result
    timeout  no answer within the limit; the worker was killed
    crash    the worker process died (its exit code in `detail`)
    error    the function raised; `detail` is "ExceptionType: message"

`Supervisor` keeps one long-lived worker (an optional `setup` runs once in it, say to make a CUDA context) and runs
job after job there; after a timeout, a crash or an error the worker is gone (a CUDA error can leave its context
unusable) and the next call starts a fresh one. `call_with_timeout` is one call in a fresh worker.
Functions and their arguments must pickle (module-level functions). Workers ignore Ctrl-C: the parent stops them,
and a worker whose parent is gone (killed) exits by itself (`exit_with_parent`), whatever it is running.

A job's time limit counts from the worker's "started" signal, sent once it has unpickled the job (which imports the
function's module: seconds on a loaded machine) and is about to call it, so that only the function's own run is
timed; getting there is bounded by the start-up limit, as the worker's own start is.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import pickle
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

OK, TIMEOUT, CRASH, ERROR = "ok", "timeout", "crash", "error"
OUTCOMES = (OK, TIMEOUT, CRASH, ERROR)
READY, STARTED = "ready", "started"     # the worker's signals: set up; has a job and runs it now
MAX_TIMEOUT = 86400.0    # seconds: the longest time limit taken (a day; the OS's wait calls overflow near 1e9 s)


def timeout_problem(timeout: float) -> str:
    """Why `timeout` is not a usable time limit ('' when it is): a finite number of seconds, 0 < t <= MAX_TIMEOUT."""
    try:
        t = float(timeout)
    except (TypeError, ValueError):
        return f"{timeout!r} is not a number of seconds"
    if not math.isfinite(t):
        return f"{timeout!r} is not a finite number of seconds"
    if not 0 < t <= MAX_TIMEOUT:
        return f"{timeout!r} is out of range: give seconds above 0 and at most {MAX_TIMEOUT:g} (a day)"
    return ""


def _checked(timeout: float) -> float:
    why = timeout_problem(timeout)
    if why:
        raise ValueError(f"timeout: {why}")
    return float(timeout)


@dataclass(frozen=True)
class Outcome:
    status: str          # "ok" | "timeout" | "crash" | "error"
    value: Any = None    # the function's result when ok
    detail: str = ""     # what went wrong otherwise

    @property
    def ok(self) -> bool:
        return self.status == OK


def timeout_detail(timeout: float) -> str:
    return (f"did not finish within {timeout:g} s and was stopped (a kernel that never completes: check barrier "
            f"arrival counts and pipeline depth)")


def crash_detail(exitcode: int | None) -> str:
    return f"the worker process died (exit code {exitcode})"


def error_detail(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


PARENT_POLL = 0.5      # seconds between a worker's looks at whether its parent is still there


def exit_with_parent(parent: int, poll: float = PARENT_POLL) -> None:
    """End this process as soon as `parent` (the pid of the process that started it) is no longer its parent: a
    worker left behind by a killed parent would otherwise run its job to the end, or forever (a compile that
    spins). A daemon thread looks every `poll` seconds, so a job that never returns is no obstacle. (Not the Linux
    parent-death signal: that fires when the starting *thread* ends, and pools start workers from any thread.)"""
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        os._exit(1)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _worker(conn, setup, setup_args, env=None, parent: int | None = None) -> None:
    """Set the environment variables `env`, set up once, say "ready", then run jobs until told to stop (None or a
    closed pipe): each job is unpickled, "started" said, then run. After an exception (the unpickling's included) it
    reports it and exits; when the process `parent` ends, it exits at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:
        exit_with_parent(parent)
    os.environ.update(env or {})    # before setup: CUDA reads CUDA_VISIBLE_DEVICES when it initialises there
    try:
        if setup is not None:
            setup(*setup_args)
    except BaseException as exc:  # reported to the parent, whatever it is
        conn.send((ERROR, error_detail(exc)))
        return
    conn.send((READY, None))
    while True:
        try:
            msg = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            job = pickle.loads(msg)
            if job is None:
                return
            fn, args, kwargs = job
            conn.send((STARTED, None))
            value = fn(*args, **kwargs)
        except BaseException as exc:
            conn.send((ERROR, error_detail(exc)))
            return
        conn.send((OK, value))


class Supervisor:
    """One supervised worker process, started on demand and replaced after a timeout, crash or error. `env`:
    environment variables every worker it starts gets (set in the worker before `setup`, so that a pool of them can
    each be pinned to a GPU with CUDA_VISIBLE_DEVICES without touching this process's environment)."""

    def __init__(self, setup: Callable | None = None, setup_args: tuple = (), *, start_timeout: float = 300.0,
                 env: dict[str, str] | None = None):
        self.setup, self.setup_args, self.start_timeout = setup, tuple(setup_args), _checked(start_timeout)
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.proc = None
        self.conn = None
        self.ready = False
        self.starts = 0          # workers started so far

    def start(self) -> None:
        """Spawn the worker if none is alive (returns at once; `call` waits for it to be ready)."""
        if self.proc is not None and self.proc.is_alive():
            return
        self._kill()
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, self.setup, self.setup_args, self.env, os.getpid()),
                                daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.starts += 1

    def started(self, timeout: float | None = None) -> Outcome:
        """Wait until the worker is ready (its setup done): ok, or why it is not (the worker is then gone)."""
        self.start()
        if self.ready:
            return Outcome(OK)
        limit = self.start_timeout if timeout is None else _checked(timeout)
        got = self._answer(limit)
        if got.ok:
            self.ready = True
        return got

    def call(self, fn: Callable, *args: Any, timeout: float, **kwargs: Any) -> Outcome:
        """fn(*args, **kwargs) in the worker, answered within `timeout` seconds of its start (the worker's start-up and
        its taking of the job aside: the start-up limit bounds each of those). A timeout that is not finite, not
        positive or over MAX_TIMEOUT is a ValueError (NaN or a negative one timed out at once, inf or 1e300 overflowed
        the wait)."""
        timeout = _checked(timeout)
        got = self.started()
        if not got.ok:
            return got
        got = self.submit(fn, args, kwargs, self.start_timeout)
        return got if not got.ok else self._answer(timeout)

    def submit(self, fn: Callable, args: tuple, kwargs: dict, limit: float) -> Outcome:
        """Send a job to the ready worker and wait, at most `limit` seconds, for its "started" signal (it has
        unpickled the job, its imports done): ok, or why not (a timeout says what it was waiting for)."""
        try:
            self.conn.send((fn, args, kwargs))
        except (OSError, EOFError):
            return self._crashed()
        got = self._answer(limit)
        if got.status == TIMEOUT:
            return Outcome(TIMEOUT, detail=f"the worker did not start the job within {limit:g} s (unpickling it and "
                                           f"importing its modules)")
        return got

    def _answer(self, timeout: float) -> Outcome:
        """The worker's next message within `timeout` seconds: ok (a result or a signal), or why not."""
        try:
            if not self.conn.poll(max(0.0, timeout)):
                self._kill()
                return Outcome(TIMEOUT, detail=timeout_detail(timeout))
            status, value = self.conn.recv()
        except (EOFError, OSError):
            return self._crashed()
        if status == ERROR:
            self.proc.join(10)
            self._kill()
            return Outcome(ERROR, detail=value)
        return Outcome(OK, value)

    def _crashed(self) -> Outcome:
        self.proc.join(10)
        code = self.proc.exitcode
        self._kill()
        return Outcome(CRASH, detail=crash_detail(code))

    def _kill(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(10)
        if self.conn is not None:
            self.conn.close()
        self.proc, self.conn, self.ready = None, None, False

    def close(self) -> None:
        """Ask the worker to stop (killed if it does not within 5 s)."""
        if self.proc is not None and self.proc.is_alive() and self.conn is not None:
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(5)
        self._kill()

    def __enter__(self) -> "Supervisor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def call_with_timeout(fn: Callable[..., Any], *args: Any, timeout: float, **kwargs: Any) -> Outcome:
    """fn(*args, **kwargs) in a fresh spawned process; its result must pickle. `timeout` bounds the whole call, the
    worker's start and the job's unpickling included. Never raises for the callee's failures (a bad `timeout` is a
    ValueError)."""
    timeout = _checked(timeout)
    t0 = time.monotonic()

    def left() -> float:
        return max(1e-6, timeout - (time.monotonic() - t0))
    with Supervisor(start_timeout=timeout) as sup:
        got = sup.started()
        if got.ok:
            got = sup.submit(fn, args, kwargs, left())
        if got.ok:
            got = sup._answer(left())
        return got if got.status != TIMEOUT else Outcome(TIMEOUT, detail=timeout_detail(timeout))
