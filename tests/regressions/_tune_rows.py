"""A tuning database written without a GPU or a compile, for the database regression tests (not a test module): every
candidate of a spec's space stored as a verified result on a fake GPU, keyed as `schedgen tune` keys it, and a way
to edit a column as anyone can edit the file."""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Mapping

from schedgen import tune as T
from schedgen.tune.prune import _spec_of

GPU = {"gpu": "Fake H200", "driver": "999.1"}

ADD_DYN = """name: add_dyn
op:
  kind: map
  sizes:
    M: {dynamic: true, max: 1024, multiple_of: 32}
    N: 256
  inputs:
    x: {shape: [M, N], dtype: bf16}
    y: {shape: [M, N], dtype: bf16}
  outputs:
    o: {shape: [M, N], dtype: bf16}
  body: o = x + y
schedule:
  in_specs:
    x: {block_shape: [32, 256], out_of_bounds: zero}
    y: {block_shape: [32, 256], out_of_bounds: zero}
  out_specs:
    o: {block_shape: [32, 256], out_of_bounds: zero}
  pipeline: {kind: emit_pipeline, max_concurrent_steps: 2}
tune:
  params:
    block_M: [32, 64]
  buckets:
    M: [256, 1024]
"""


class FakeRunner:
    """Measures nothing: a tuning run over a database that knows every candidate needs no runner at all."""

    def __init__(self, *args, **kwargs):
        self.env = dict(GPU)

    def start(self):
        pass

    def measure(self, built, backend):
        return T.Result("ok", 1.0)

    def verify(self, built, backend):
        return T.Result("ok", extra={"ok": True, "rel_error": 1e-3})

    def close(self):
        pass


def fill(db: Path, spec: Path, overrides: Mapping[str, Any] | None = None) -> None:
    """Every candidate of the spec's space at this shape stored as verified, the first fastest."""
    space = T.load_space(spec, overrides)
    _, tool_key = T.toolchain_info()
    with T.TuneDB(db) as d:
        for i, c in enumerate(T.expand(space)):
            ck = T.config_key(_spec_of(space, c))
            d.put({"key": T.result_key(ck, "cuda", GPU["gpu"], GPU["driver"], tool_key), "config_key": ck,
                   "spec_key": space.spec_key, "spec_name": space.spec.name, "spec_file": str(spec),
                   "shape": space.sizes, "backend": "cuda", **GPU, "toolchain": {}, "toolchain_key": tool_key,
                   "knobs": c.values, "overrides": c.overrides, "status": "ok", "time_ms": 1.0 + i,
                   "verified": True})


def set_column(db: Path, column: str, value: Any, where: str = "") -> None:
    """Write `value` into `column` of every results row (or those `where` selects), as sqlite stores it."""
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(f"UPDATE results SET {column} = ?" + (f" WHERE {where}" if where else ""), (value,))
    conn.close()


def one_db_line(err: str, db: Path, *parts: str) -> str:
    """The one error line, last: `schedgen: DB: ...` holding every part, no traceback (a tuning run shows its space
    before it reads the database)."""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("schedgen:")]
    assert len(lines) == 1 and err.rstrip().endswith(lines[0]) and lines[0].startswith(f"schedgen: {db}: "), err
    for part in parts:
        assert part in lines[0], (part, lines[0])
    return lines[0]


def fake_tuning(monkeypatch, tmp_path) -> None:
    """A tuning run on the CPU: its own cache, no GPU named, the fake runner measuring."""
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(T, "current_gpu", lambda: None)
    monkeypatch.setattr(T, "WorkerRunner", FakeRunner)


def run(argv) -> int | str | None:
    """`schedgen ARGV` in this process: its exit status (a usage error's SystemExit code included)."""
    from schedgen import cli
    try:
        return cli.main([str(a) for a in argv])
    except SystemExit as stop:
        return stop.code
