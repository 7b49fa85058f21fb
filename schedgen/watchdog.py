"""Run a function in a fresh worker process with a time limit, so that a kernel that deadlocks (a barrier
that never completes) or kills its process (an illegal instruction) ends as a clear result, not a frozen
terminal. The worker is spawned, not forked: a CUDA context does not survive fork.
"""
from __future__ import annotations

import multiprocessing
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Outcome:
    status: str          # "ok" | "error" | "timeout" | "crash"
    value: Any = None    # the function's result when ok
    detail: str = ""     # what went wrong otherwise

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _child(conn, fn, args, kwargs) -> None:
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:  # reported to the parent, whatever it is
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    else:
        conn.send(("ok", value))
    finally:
        conn.close()


def call_with_timeout(fn: Callable[..., Any], *args: Any, timeout: float, **kwargs: Any) -> Outcome:
    """fn(*args, **kwargs) in a spawned process; its result must pickle. Never raises for the callee's failures."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args, kwargs), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout):
            proc.kill()
            proc.join()
            return Outcome("timeout", detail=f"did not finish within {timeout:g} s and was stopped (a kernel that never "
                                             f"completes: check barrier arrival counts and pipeline depth)")
        try:
            status, value = parent.recv()
        except EOFError:
            proc.join()
            return Outcome("crash", detail=f"the worker process died (exit code {proc.exitcode})")
        proc.join(10)
        if status == "ok":
            return Outcome("ok", value)
        return Outcome("error", detail=value)
    finally:
        parent.close()
        if proc.is_alive():
            proc.kill()
            proc.join()
