"""Benchmark rows: building them, the record file (bench/results/<family>.json) they merge into, Markdown tables.

A record is a JSON list of rows; a row has at least family, spec, backend and shape. `read_record` refuses a
file that is not one (invalid JSON, a list of something else, a directory, a file it could not write back) with
a one-line `RecordError`, before anything is timed, so that the file is left as it was.
"""
from __future__ import annotations

import datetime as _dt
import importlib
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from .. import registry as families
from ..errors import printable, shorten
from ..files import UnreadableFile, existing_mode, read_json, write_file
from ..plan.common import shown_sizes

ROW_KEYS = ("spec", "backend", "shape")
MAX_RECORD_BYTES = 64 << 20     # the largest committed record is about 120 kB


class RecordError(ValueError):
    """A --json path that is not a benchmark record this run can merge into (one line: path, what is wrong)."""


def _key(r: dict) -> tuple:
    return r["spec"], r["backend"], json.dumps(r["shape"], sort_keys=True)


def _writable_dir(path: Path) -> Path | None:
    """The nearest existing folder above `path` when it could be created there, else None."""
    for parent in path.parents:
        if parent.exists():
            return parent if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK) else None
    return None


def read_record(path: Path | str) -> list[dict]:
    """The rows of a record file ([] when it does not exist yet), or RecordError when it is not one or could not
    be written back. The file is read by schedgen.files (a regular file, at most MAX_RECORD_BYTES, JSON nested a
    few levels)."""
    path = Path(path)
    shown = printable(str(path))
    legal = "a benchmark record is a JSON list of rows, each with spec, backend and shape"
    if path.is_dir():
        raise RecordError(f"{shown}: is a directory, not a benchmark record file ({legal})")
    try:
        existing_mode(path)                             # a symlink, FIFO or device: refused before any timing
    except OSError as exc:
        raise RecordError(f"{shown}: {exc.strerror}") from None
    if not path.exists():
        if _writable_dir(path) is None:
            raise RecordError(f"{shown}: cannot be created (its folder is missing or not writable)")
        return []
    try:
        data = read_json(path, MAX_RECORD_BYTES, legal=legal)
    except UnreadableFile as exc:
        raise RecordError(exc.located(path, f"not a benchmark record: {exc}; {legal}" if exc.content else None)) \
            from None
    if not isinstance(data, list):
        raise RecordError(f"{shown}: not a benchmark record: a JSON {type(data).__name__}; {legal}")
    for i, r in enumerate(data):
        if not isinstance(r, dict) or any(k not in r for k in ROW_KEYS) or not isinstance(r["shape"], dict):
            raise RecordError(f"{shown}: not a benchmark record: item {i} is {_what(r)}, not a row; {legal}")
        if (why := row_problem(r)) is not None:
            raise RecordError(f"{shown}: not a benchmark record: item {i}: {why}")
    if not os.access(path, os.W_OK):
        raise RecordError(f"{shown}: not writable")
    return data


# What the tables and the report compute with, and the range a measurement can have: a number far outside (1e308
# ms, a string) is damage, refused when the record is read rather than a traceback when a plot overflows.
MEASURES = {"time_ms": (1e-9, 1e12), "peer_time_ms": (1e-9, 1e12), "flops": (1.0, 1e21), "gbps": (1e-9, 1e9),
            "tflops": (1e-9, 1e9)}
PEER_MEASURES = ("time_ms", "gbps", "tflops")
NAMES = ("spec", "backend", "family", "variant", "peer")


def row_problem(r: dict) -> str | None:
    """Why a row (an object with spec, backend and shape) is not one the tables and the report can use: a name
    that is not a string, a size that is neither a whole number nor a range's text, a measurement that is not a number (or null) in its
    range. None when it is usable."""
    for key in NAMES:
        if r.get(key) is not None and not isinstance(r[key], str):
            return f"{key} is {_kind(r[key])}; a string"
    for name, v in r["shape"].items():
        if not isinstance(v, str) and (type(v) is not int or not 0 <= v < 1 << 63):
            return f"shape.{printable(str(name))} is {_kind(v)}; a whole number from 0 to 2^63 - 1, or a range " \
                   f"such as '1..65536'"
    peers = r.get("peers") if r.get("peers") is not None else {}
    if not isinstance(peers, dict) or not all(isinstance(p, dict) for p in peers.values()):
        return "peers is not an object of objects"
    checks = [(k, r.get(k)) for k in MEASURES] + [(f"peers.{printable(str(n))}.{k}", p.get(k))
                                                     for n, p in peers.items() for k in PEER_MEASURES]
    for key, v in checks:
        lo, hi = MEASURES[key.rsplit(".", 1)[-1]]
        if v is not None and (type(v) not in (int, float) or not (v == 0 or lo <= v <= hi)):
            return f"{key} is {_kind(v)}; a number from {lo:g} to {hi:g}, 0 or null"
    return None


def _kind(v: Any) -> str:
    if isinstance(v, bool) or v is None or type(v) in (int, float):
        return shorten(v)
    return f"a JSON {'string' if isinstance(v, str) else type(v).__name__}"


def _what(r: Any) -> str:
    if isinstance(r, dict):
        missing = [k for k in ROW_KEYS if k not in r]
        return f"an object without {', '.join(missing)}" if missing else "an object whose shape is not an object"
    return f"a JSON {type(r).__name__}"


def merge_rows(path: Path | str, rows: list[dict], old: list[dict] | None = None) -> list[dict]:
    """Replace rows of the same (spec, backend, shape) in a record file (or in `old`, read already), keep the
    others."""
    old = read_record(path) if old is None else old
    keys = {_key(r) for r in rows}
    return [r for r in old if _key(r) not in keys] + rows


def write_record(path: Path | str, rows: list[dict]) -> None:
    """Write a record whole (schedgen.files.write_file: a temporary file renamed over it, so an interrupted write
    leaves the old one, and never through a symbolic link)."""
    write_file(path, json.dumps(rows, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------- comparing runs

MOVED = 0.05        # a time that moved by more than this fraction of the recorded one is flagged


def _compare_key(r: dict) -> tuple:
    return _key(r) + (r.get("variant", "default"),)


def recorded_rows(folder: Path | str) -> list[dict]:
    """Every benchmark row of the record files in a folder (bench/results/*.json); files or items that are not
    rows (the attention record of an earlier driver, for one) are passed over."""
    rows = []
    for f in sorted(Path(folder).glob("*.json")):
        try:
            data = read_json(f, MAX_RECORD_BYTES)
        except UnreadableFile:
            continue
        if isinstance(data, list):
            rows += [r for r in data if isinstance(r, dict) and all(k in r for k in ROW_KEYS)
                     and isinstance(r["shape"], dict)]
    return rows


def compare(recorded: list[dict], new: list[dict], moved: float = MOVED) -> list[dict]:
    """For each new row that the record has too (same spec, backend, shape and variant): the recorded and the new
    time, new / recorded, and whether it moved by more than `moved`."""
    old = {_compare_key(r): r for r in recorded if r.get("time_ms")}
    out = []
    for r in new:
        was = old.get(_compare_key(r))
        if was is None:
            continue
        now = r.get("time_ms")
        ratio = now / was["time_ms"] if now else None
        out.append({"spec": r["spec"], "variant": r.get("variant", "default"), "backend": r["backend"],
                    "shape": r["shape"], "recorded_ms": was["time_ms"], "new_ms": now, "ratio": ratio,
                    "recorded_date": was.get("date"),
                    "moved": ratio is None or abs(ratio - 1.0) > moved})
    return out


def compare_markdown(cmp: list[dict], unmatched: int = 0, moved: float = MOVED) -> str:
    """The comparison as a Markdown table, the rows that moved flagged, a summary line after."""
    lines = ["| spec | variant | backend | shape | recorded (ms) | new (ms) | new / recorded | moved |",
             "|---|---|---|---|---|---|---|---|"]
    for c in cmp:
        shape = " ".join(f"{k}={v}" for k, v in c["shape"].items())
        new = f"{c['new_ms']:.4f}" if c["new_ms"] else "not timed"
        ratio = f"{c['ratio']:.3f}" if c["ratio"] else "-"
        flag = f"MOVED > {moved:.0%}" if c["moved"] else ""
        lines.append(f"| {c['spec']} | {c['variant']} | {c['backend']} | {shape} | {c['recorded_ms']:.4f} | {new} | "
                     f"{ratio} | {flag} |")
    n_moved = sum(c["moved"] for c in cmp)
    tail = (f"\n{len(cmp)} rows compared with the record, {n_moved} moved by more than {moved:.0%}"
            + (f"; {unmatched} new rows have no recorded counterpart" if unmatched else "") + ".\n")
    return "\n".join(lines) + "\n" + tail


# ---------------------------------------------------------------------------------------------- building rows

def base_row(plan, backend: str, check, env: dict, **fields) -> dict[str, Any]:
    """The fields every row has (the family's own fields after them)."""
    row: dict[str, Any] = {
        "family": plan.launch.family, "spec": plan.launch.name, "backend": backend, "kernel": plan.launch.kernel_name,
        "shape": shown_sizes(plan), "dtype": plan.outputs[0].dtype}
    row.update(fields)
    row.update(verified=bool(check and check.ok), rel_error=check.rel_error if check else None,
               date=_dt.date.today().isoformat(), env=env)
    return row


def skip_row(plan, backend: str, reason: str) -> dict[str, Any]:
    """A spec/backend that was not run here (no GPU, ...): printed as SKIP, never merged into a record."""
    return {"family": plan.launch.family, "spec": plan.launch.name, "backend": backend, "shape": shown_sizes(plan),
            "skipped": reason, "verified": False}


def print_skips(rows: list[dict], file=None) -> list[dict]:
    """Print `SKIP spec backend: reason` for each skip row; the rows that did run."""
    for r in rows:
        if r.get("skipped"):
            print(f"SKIP {r['spec']} {r['backend']}: {r['skipped']}", file=file, flush=True)
    return [r for r in rows if not r.get("skipped")]


# ---------------------------------------------------------------------------------------------- Markdown

def family_peers(family) -> ModuleType | None:
    """The family's peers module (imported on first use: it may name torch and jax, imported lazily inside)."""
    return importlib.import_module(family.peers) if family.peers else None


def markdown(rows: list[dict]) -> str:
    """The rows as Markdown: one table per family, in the registry's order (each family's peers module may give
    its own table; the bandwidth table otherwise)."""
    rows = [r for r in rows if not r.get("skipped")]
    kinds = families.kinds()
    order = kinds + sorted({r.get("family") or "" for r in rows} - set(kinds))
    tables = []
    for kind in order:
        mine = [r for r in rows if (r.get("family") or "") == kind]
        if not mine:
            continue
        peers = family_peers(families.get(kind)) if kind in kinds else None
        table = getattr(peers, "markdown", None) or markdown_bandwidth
        tables.append(table(mine))
    return "\n".join(tables)


def markdown_bandwidth(rows: list[dict]) -> str:
    lines = ["| spec | variant | backend | shape | dtype | time (ms) | GB/s or TFLOP/s | peer | peer (ms) | ratio | "
             "verified | rel. error |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        rate = f"{r['gbps']:.0f} GB/s" if r.get("gbps") else (f"{r['tflops']:.0f} TFLOP/s" if r.get("tflops") else "-")
        t = f"{r['time_ms']:.4f}" if r.get("time_ms") else "-"
        pt = f"{r['peer_time_ms']:.4f}" if r.get("peer_time_ms") else "-"
        ratio = f"{r['ratio']:.3f}" if r.get("ratio") else "-"
        err = f"{r['rel_error']:.2e}" if r.get("rel_error") is not None else "-"
        lines.append(f"| {r['spec']} | {r.get('variant', 'default')} | {r['backend']} | {shape} | {r['dtype']} | {t} | "
                     f"{rate} | {r.get('peer', '-')} | {pt} | {ratio} | {'yes' if r['verified'] else 'NO'} | {err} |")
    return "\n".join(lines) + "\n"


_markdown_bandwidth = markdown_bandwidth
