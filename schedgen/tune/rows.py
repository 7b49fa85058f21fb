"""The schema of a row read back from the tuning database: every column's type, its sizes bounded, its JSON's
nesting bounded. The database is a file anyone can edit (or a crash can leave half-written), so what comes out of it
is checked here, at one place, before anything reads it: `results_row` (the results table) and `runs_row` (the
runs table) return the row decoded, or raise RowError naming the column and what it must hold (db.py adds the
file and the row).
"""
from __future__ import annotations

import json
import math
from typing import Any, Mapping

MAX_TEXT = 100_000           # characters of a text column (a detail is cut at 2000 when written)
MAX_JSON = 1_000_000         # characters of a JSON column's text
MAX_DEPTH = 32               # nesting of a JSON column (an override's value is a list of lists at most)

STATUSES = ("ok", "hang", "fault", "compile_error", "wrong")   # every status is final for its key

_TEXT = ("key", "config_key", "spec_key", "spec_name", "spec_file", "backend", "gpu", "driver", "toolchain_key",
         "status", "detail", "created")
_OPTIONAL_TEXT = ("kernel",)
_NUMBERS = ("time_ms", "tflops", "gbps")                       # NULL, or a finite number >= 0
_OBJECTS = ("toolchain", "knobs", "overrides")                 # JSON objects with text keys
RUN_TEXT = ("spec_file", "spec_name", "spec_key", "backend", "started", "status")
RUN_COUNTS = ("candidates", "pruned", "measured", "reused", "failed")


class RowError(ValueError):
    """A column that does not hold what the schema says: `column` and the message (what it holds, what is legal)."""

    def __init__(self, column: str, message: str):
        super().__init__(message)
        self.column = column
        self.message = message


def results_row(raw: Mapping[str, Any]) -> dict:
    """A results row (column -> the value sqlite returned) checked and decoded: the JSON columns parsed, `verified`
    as None / True / False. RowError for the first column that does not fit."""
    out = dict(raw)
    for col in _TEXT:
        _text(col, out.get(col))
    for col in _OPTIONAL_TEXT:
        if out.get(col) is not None:
            _text(col, out[col])
    if out["status"] not in STATUSES:
        raise RowError("status", f"{_shown(out['status'])} is not a status; legal: {', '.join(STATUSES)}")
    for col in _NUMBERS:
        _number(col, out.get(col))
    _number("rel_error", out.get("rel_error"), infinite=True)    # a poisoned output's error is inf (reference.py)
    out["verified"] = _verified(out.get("verified"))
    out["shape"] = _shape("shape", out.get("shape"))
    for col in _OBJECTS:
        out[col] = _object(col, out.get(col))
    return out


def runs_row(raw: Mapping[str, Any]) -> dict:
    """A runs row checked and decoded (its shape parsed)."""
    out = dict(raw)
    for col in RUN_TEXT:
        _text(col, out.get(col))
    for col in ("gpu", "finished", "best_key"):
        if out.get(col) is not None:
            _text(col, out[col])
    for col in RUN_COUNTS:
        value = out.get(col)
        if value is not None and (type(value) is not int or value < 0):
            raise RowError(col, f"{_shown(value)} is not a count; legal: NULL or a whole number >= 0")
    _number("wall_s", out.get("wall_s"))
    out["shape"] = _shape("shape", out.get("shape"))
    return out


# ---------------------------------------------------------------------------------------------- columns


def _shown(value: Any) -> str:
    """A column's value as a message shows it: its type, and its text cut short."""
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _text(col: str, value: Any) -> str:
    if not isinstance(value, str):
        raise RowError(col, f"holds {_shown(value)}; legal: text")
    if len(value) > MAX_TEXT:
        raise RowError(col, f"holds {len(value)} characters; legal: text of at most {MAX_TEXT}")
    return value


def _number(col: str, value: Any, infinite: bool = False) -> None:
    if value is None:
        return
    if type(value) not in (int, float) or math.isnan(value) or value < 0 or (math.isinf(value) and not infinite):
        raise RowError(col, f"holds {_shown(value)}; legal: NULL or a {'' if infinite else 'finite '}number >= 0")


def _verified(value: Any) -> bool | None:
    if value is None:
        return None
    if type(value) is not int or value not in (0, 1):
        raise RowError("verified", f"holds {_shown(value)}; legal: NULL (not checked), 1 (matches numpy) or 0 "
                                   f"(does not)")
    return bool(value)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json(col: str, text: Any) -> Any:
    """A JSON column's text parsed: text of at most MAX_JSON characters, plain JSON (no NaN or Infinity), nested at
    most MAX_DEPTH deep."""
    if not isinstance(text, str):
        raise RowError(col, f"holds {_shown(text)}; legal: text (JSON)")
    if len(text) > MAX_JSON:
        raise RowError(col, f"holds {len(text)} characters of JSON; legal: at most {MAX_JSON}")
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise RowError(col, f"holds JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise RowError(col, f"holds text that is not JSON ({str(exc).splitlines()[0][:80]})") from None
    _depth(col, value)
    return value


def _depth(col: str, value: Any) -> None:
    """MAX_DEPTH levels at most (walked without recursion)."""
    level = [value]
    for _ in range(MAX_DEPTH + 1):
        level = [v for node in level for v in (node.values() if isinstance(node, dict) else
                                                node if isinstance(node, list) else ())]
        if not level:
            return
    raise RowError(col, f"holds JSON nested deeper than {MAX_DEPTH} levels")


def _object(col: str, text: Any) -> dict:
    value = _json(col, text)
    if not isinstance(value, dict):
        raise RowError(col, f"holds a JSON {_json_kind(value)}; legal: a JSON object {{name: value}}")
    return value


def _shape(col: str, text: Any) -> dict:
    value = _object(col, text)
    for name, size in value.items():
        if type(size) is not int or size < 0:
            raise RowError(col, f"size {name!r} is {_shown(size)}; legal: a JSON object of sizes {{name: whole "
                                f"number >= 0}}")
    return value


def _json_kind(value: Any) -> str:
    return {list: "list", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)
