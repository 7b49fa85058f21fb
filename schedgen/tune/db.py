"""The tuning database: one sqlite file of measured candidates, so a rerun measures only what is new.

A measurement is keyed by what decides it: the candidate's resolved spec content (the spec with the
knob values applied, its sizes included, its tune section and description left out), the backend, the GPU's
name, the driver version and the toolchain (NVRTC, cuda-bindings, jax, schedgen and the templates' hash).
Each result is committed as soon as it is measured, so an interrupted run loses at most the candidate it was
on, and the next run resumes with the rest.

The file lives in the build cache's folder (`$SCHEDGEN_CACHE`, else `~/.cache/schedgen`) as `tune.sqlite`;
`$SCHEDGEN_TUNE_DB` or `schedgen tune --db PATH` put it elsewhere. A database another process holds locked is
waited for `$SCHEDGEN_TUNE_DB_TIMEOUT` seconds (default 60). A file that cannot be used (a directory, a folder that
cannot be made, not sqlite, locked, read-only) raises TuneDBError: one line naming the file and what is wrong. Every
row read back is checked against the schema first (rows.py); one that does not fit is a TuneDBError naming the file,
the row and the column.
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import os
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..cache import default_root
from ..files import existing_mode
from .rows import STATUSES, RowError, results_row, runs_row

SCHEMA_VERSION = 1
MAX_LOCK_WAIT = 86_400.0        # seconds $SCHEDGEN_TUNE_DB_TIMEOUT may ask for (a day)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
  key           TEXT PRIMARY KEY,  -- sha256(config_key, backend, gpu, driver, toolchain_key)
  config_key    TEXT NOT NULL,     -- sha256 of the candidate's resolved spec (sizes in, tune and description out)
  spec_key      TEXT NOT NULL,     -- sha256 of the spec without its tune section, sizes and knob fields
  spec_name     TEXT NOT NULL,
  spec_file     TEXT NOT NULL,
  shape         TEXT NOT NULL,     -- JSON of op.sizes, e.g. {"K": 4096, "M": 4096, "N": 4096}
  backend       TEXT NOT NULL,     -- cuda | pallas
  gpu           TEXT NOT NULL,
  driver        TEXT NOT NULL,
  toolchain     TEXT NOT NULL,     -- JSON: nvrtc, cuda_bindings, jax, schedgen, arch, templates
  toolchain_key TEXT NOT NULL,
  knobs         TEXT NOT NULL,     -- JSON {knob name: value}
  overrides     TEXT NOT NULL,     -- JSON {field path: value}: the spec file plus these builds the candidate
  kernel        TEXT,
  status        TEXT NOT NULL,     -- ok | hang | fault | compile_error | wrong
  time_ms       REAL,
  tflops        REAL,
  gbps          REAL,
  verified      INTEGER,           -- NULL: not checked; 1: matches numpy; 0: does not
  rel_error     REAL,
  detail        TEXT NOT NULL DEFAULT '',
  created       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_by_config ON results (config_key, backend);
CREATE INDEX IF NOT EXISTS results_by_shape ON results (spec_key, shape, backend, status, time_ms);
CREATE TABLE IF NOT EXISTS runs (
  id          INTEGER PRIMARY KEY,
  spec_file   TEXT NOT NULL,
  spec_name   TEXT NOT NULL,
  spec_key    TEXT NOT NULL,
  shape       TEXT NOT NULL,
  backend     TEXT NOT NULL,
  gpu         TEXT,
  started     TEXT NOT NULL,
  finished    TEXT,
  status      TEXT NOT NULL,     -- running | done | interrupted | failed
  candidates  INTEGER,           -- the expanded space
  pruned      INTEGER,           -- by constraints, the plan stage, or as duplicates
  measured    INTEGER,           -- run on the GPU in this run
  reused      INTEGER,           -- found in the database
  failed      INTEGER,           -- hangs, faults, compile errors, wrong results
  wall_s      REAL,
  best_key    TEXT
);
"""

RESULT_COLUMNS = ("key", "config_key", "spec_key", "spec_name", "spec_file", "shape", "backend", "gpu", "driver",
                  "toolchain", "toolchain_key", "knobs", "overrides", "kernel", "status", "time_ms", "tflops", "gbps",
                  "verified", "rel_error", "detail", "created")
JSON_COLUMNS = ("shape", "toolchain", "knobs", "overrides")


class TuneDBError(Exception):
    """The tuning database cannot be used; the message is one line, starting with the file's path (and the row and
    column for a row that does not fit the schema), or with $SCHEDGEN_TUNE_DB_TIMEOUT for an unusable wait."""


def lock_timeout() -> float:
    """Seconds to wait for a database another process holds locked ($SCHEDGEN_TUNE_DB_TIMEOUT, default 60; 0: do
    not wait). A value that is not a finite number of seconds in 0..MAX_LOCK_WAIT is a TuneDBError, not a silent
    default (sqlite reads inf as no wait at all)."""
    text = os.environ.get("SCHEDGEN_TUNE_DB_TIMEOUT")
    if text is None or not text.strip():
        return 60.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= MAX_LOCK_WAIT):
        raise TuneDBError(f"$SCHEDGEN_TUNE_DB_TIMEOUT={text[:40]!r}: not a usable wait; give seconds from 0 (do not "
                          f"wait) to {MAX_LOCK_WAIT:g} (a day), or unset it for the default 60")
    return value


def _explain(path: Path, exc: sqlite3.Error, waited: float) -> str:
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return (f"{path}: the tuning database is locked by another process (waited {waited:g} s); let that run finish "
                f"or point --db elsewhere")
    if "readonly" in low or "read-only" in low:
        return (f"{path}: the tuning database is read-only ({msg}); tuning writes to it: make it writable or point "
                f"--db elsewhere")
    if "not a database" in low or "malformed" in low or "encrypted" in low:
        return f"{path}: not a sqlite database ({msg}); move it away or point --db elsewhere"
    if "unable to open" in low or "disk i/o" in low:
        return (f"{path}: cannot open the tuning database ({msg}); check that its folder exists and that the file can "
                f"be written there")
    return f"{path}: the tuning database failed ({msg})"


def _guarded(method):
    """sqlite errors out of a TuneDB method become TuneDBError (one line, naming the file)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise TuneDBError(_explain(self.path, exc, self.timeout)) from None
    return wrapper


def default_path() -> Path:
    env = os.environ.get("SCHEDGEN_TUNE_DB")
    if env:
        return Path(env)
    return default_root() / "tune.sqlite"


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class TuneDB:
    """A thin layer over the sqlite file. Rows come back as plain dicts with the JSON columns decoded."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_path()
        self.timeout = lock_timeout()
        if self.path.is_dir():
            raise TuneDBError(f"{self.path}: is a directory; --db takes the database file's path (e.g. "
                              f"{self.path / 'tune.sqlite'})")
        try:                # sqlite writes through a symbolic link (creating a dangling one's target) or into a FIFO
            existing_mode(self.path)
        except OSError as exc:
            raise TuneDBError(f"{self.path}: {exc.strerror}; --db takes the database file's own path") from None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TuneDBError(f"{self.path}: cannot create its folder {self.path.parent} "
                              f"({exc.strerror or exc})") from None
        self.conn = None
        try:
            self.conn = sqlite3.connect(str(self.path), timeout=self.timeout)
            self.conn.row_factory = sqlite3.Row
            with self.conn:
                self.conn.executescript(SCHEMA)
                got = self.conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                if got is None:
                    self.conn.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
                elif got[0] != str(SCHEMA_VERSION):
                    raise TuneDBError(f"{self.path}: tuning database schema {got[0]}, this schedgen reads "
                                      f"{SCHEMA_VERSION}; move the file away or point --db elsewhere")
        except (sqlite3.Error, TuneDBError) as exc:
            if self.conn is not None:
                self.conn.close()
            if isinstance(exc, TuneDBError):
                raise
            raise TuneDBError(_explain(self.path, exc, self.timeout)) from None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "TuneDB":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ results
    def _decode(self, row: sqlite3.Row, table: str = "results") -> dict:
        """A row as read (selected with its rowid as `_rowid`) checked against the schema (rows.py) and decoded, its
        sqlite rowid as `rowid` (where messages point); a row that does not fit is a TuneDBError naming the file, the
        row and the column."""
        out = dict(row)
        rowid = out.pop("_rowid", None)
        try:
            return {**(results_row(out) if table == "results" else runs_row(out)), "rowid": rowid}
        except RowError as exc:
            raise TuneDBError(f"{self.row_name(table, rowid, out.get('key'))}, column {exc.column}: {exc.message} "
                              f"(delete the row, or point --db elsewhere)") from None

    def row_name(self, table: str, rowid: Any, key: Any = None) -> str:
        """`PATH: results row 7 (key 1a2b...)`: where a row's message points (rowid is sqlite's)."""
        named = f" (key {key[:16]})" if isinstance(key, str) and key.isascii() and key.isprintable() else ""
        return f"{self.path}: {table} row {rowid}{named}"

    @_guarded
    def put(self, row: Mapping[str, Any]) -> None:
        """Insert or replace one result (committed at once)."""
        if row["status"] not in STATUSES:
            raise ValueError(f"unknown status {row['status']!r}")
        values = []
        for col in RESULT_COLUMNS:
            v = row.get(col)
            if col in JSON_COLUMNS and v is not None and not isinstance(v, str):
                v = canonical(v)
            if col == "verified" and v is not None:
                v = int(bool(v))
            if col == "created" and not v:
                v = now()
            if col == "detail" and v is None:
                v = ""
            values.append(v)
        with self.conn:
            self.conn.execute(f"INSERT OR REPLACE INTO results ({', '.join(RESULT_COLUMNS)}) VALUES "
                              f"({', '.join('?' for _ in RESULT_COLUMNS)})", values)

    @_guarded
    def get(self, key: str) -> dict | None:
        row = self.conn.execute("SELECT rowid AS _rowid, * FROM results WHERE key = ?", (key,)).fetchone()
        return self._decode(row) if row else None

    @_guarded
    def lookup(self, keys: Iterable[str]) -> dict[str, dict]:
        keys = list(dict.fromkeys(keys))
        out: dict[str, dict] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            marks = ", ".join("?" for _ in chunk)
            for row in self.conn.execute(f"SELECT rowid AS _rowid, * FROM results WHERE key IN ({marks})", chunk):
                out[row["key"]] = self._decode(row)
        return out

    @_guarded
    def set_verified(self, key: str, ok: bool, rel_error: float | None, detail: str = "") -> None:
        with self.conn:
            if ok:
                self.conn.execute("UPDATE results SET verified = 1, rel_error = ? WHERE key = ?", (rel_error, key))
            else:
                self.conn.execute("UPDATE results SET verified = 0, rel_error = ?, status = 'wrong', "
                                  "detail = ? WHERE key = ?", (rel_error, detail, key))

    @_guarded
    def rows(self, where: str = "", params: Sequence[Any] = ()) -> list[dict]:
        sql = "SELECT rowid AS _rowid, * FROM results" + (f" WHERE {where}" if where else "") + " ORDER BY created, key"
        return [self._decode(r) for r in self.conn.execute(sql, tuple(params))]

    @_guarded
    def best(self, config_keys: Iterable[str], backend: str, *, gpu: str | None = None,
             toolchain_key: str | None = None, verified_only: bool = True) -> dict | None:
        """The fastest ok (and, by default, verified) result among these candidates. Rows measured on `gpu` and
        with `toolchain_key` are preferred when there are any; otherwise any GPU's and toolchain's rows count."""
        keys = list(dict.fromkeys(config_keys))
        rows: list[dict] = []
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            rows += [self._decode(r) for r in self.conn.execute(
                f"SELECT rowid AS _rowid, * FROM results WHERE backend = ? AND status = 'ok' AND time_ms IS NOT NULL "
                f"AND config_key IN ({', '.join('?' for _ in chunk)})", [backend, *chunk])]
        if verified_only:
            rows = [r for r in rows if r["verified"]]
        for field, want in (("gpu", gpu), ("toolchain_key", toolchain_key)):
            if want is not None and any(r[field] == want for r in rows):
                rows = [r for r in rows if r[field] == want]
        return min(rows, key=lambda r: (r["time_ms"], r["key"])) if rows else None

    # ------------------------------------------------------------------ runs
    @_guarded
    def start_run(self, **fields: Any) -> int:
        fields = {"started": now(), "status": "running", **fields}
        if isinstance(fields.get("shape"), dict):
            fields["shape"] = canonical(fields["shape"])
        cols = list(fields)
        with self.conn:
            cur = self.conn.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                                    [fields[c] for c in cols])
        return int(cur.lastrowid)

    @_guarded
    def finish_run(self, run_id: int, **fields: Any) -> None:
        fields = {"finished": now(), **fields}
        with self.conn:
            self.conn.execute(f"UPDATE runs SET {', '.join(f'{c} = ?' for c in fields)} WHERE id = ?",
                              [*fields.values(), run_id])

    @_guarded
    def runs(self) -> list[dict]:
        return [self._decode(r, "runs") for r in self.conn.execute("SELECT rowid AS _rowid, * FROM runs ORDER BY id")]
