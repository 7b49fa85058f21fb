"""Command-line overrides: `-D M=8192` for a size, `-D schedule.pipeline.max_concurrent_steps=4` or
`-D schedule.cluster[0]=2` for any field.

A value is read by the loader's own YAML reader (`load_yaml_value`), so a command line gets the limits a file
gets: aliases expanded at most MAX_NODES values, nesting at most MAX_DEPTH, plain-data tags, decimal integers of
at most MAX_INT_DIGITS digits. A key is dotted names with `[N]` (or `.N`) list indices written in ASCII digits.
Every problem is one line, `-D NAME: what is wrong; what is legal`, raised as ValueError (the CLI prints it and
exits 2) or, for a path that does not fit the file, a located `Problem`.
"""
from __future__ import annotations

import copy
import re
import unicodedata
from typing import Any, Iterable, Mapping

from ..errors import Problem, SourceMap, SpecErrors, printable
from .load import load_yaml_value

MAX_INDEX_DIGITS = 4  # no list in a schedule has more than a handful of entries
_SHOWN_KEY = 60
_PART = re.compile(r"([^\[\]]*)((?:\[[^\[\]]*\])*)")


class OverrideError(ValueError):
    """A `-D NAME=VALUE` that cannot be read: the message is one line, ready to print."""


def _shown(text: str) -> str:
    """A key or value as a message shows it: one line (control characters escaped), cut when long."""
    cut = text if len(text) <= _SHOWN_KEY else f"{text[:_SHOWN_KEY]}…({len(text)} characters)"
    return printable(cut)


def _index(text: str, key: str) -> int:
    if re.fullmatch(r"[0-9]+", text):
        if len(text) > MAX_INDEX_DIGITS:
            raise OverrideError(f"-D {_shown(key)}: index {_shown(text)} is too large; lists here have a handful "
                                f"of entries")
        return int(text)
    if text and all(unicodedata.digit(ch, None) is not None for ch in text):
        ascii_form = "".join(str(unicodedata.digit(ch)) for ch in text)
        raise OverrideError(f"-D {_shown(key)}: index {_shown(repr(text))} is not written in ASCII digits; write "
                            f"[{ascii_form[:MAX_INDEX_DIGITS + 1]}]")
    raise OverrideError(f"-D {_shown(key)}: index [{_shown(text)}] is not a list index; write [0], [1], ...")


def split_key(key: str) -> list[str | int]:
    """`schedule.in_specs.x.block_shape[0]` (or `...block_shape.0`) -> ['schedule', 'in_specs', 'x',
    'block_shape', 0]. Raises OverrideError for an empty part, unpaired brackets or a non-ASCII index."""
    out: list[str | int] = []
    for part in key.split("."):
        m = _PART.fullmatch(part)
        if not m:
            raise OverrideError(f"-D {_shown(key)}: '[' and ']' must pair around a list index, e.g. "
                                f"schedule.cluster[0]")
        name, brackets = m.group(1), m.group(2)
        if not name and not (brackets and out):
            raise OverrideError(f"-D {_shown(key)}: empty name in the dotted path; write e.g. "
                                f"schedule.pipeline.max_concurrent_steps")
        if name:
            if all(unicodedata.digit(ch, None) is not None for ch in name):  # a `.N` index
                out.append(_index(name, key))
            else:
                out.append(name)
        out.extend(_index(b, key) for b in re.findall(r"\[([^\[\]]*)\]", brackets))
    return out


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """`NAME=VALUE` strings from the command line; values are read as YAML (8192, true, bf16, [1, 2])."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise OverrideError(f"-D {_shown(item)}: expected NAME=VALUE, e.g. -D M=8192")
        key, _, raw = item.partition("=")
        key = key.strip()
        if "." in key or "[" in key or "]" in key:
            split_key(key)  # refuse a malformed path now, before any file is read
        elif not key:
            raise OverrideError(f"-D {_shown(item)}: the name before '=' is empty; e.g. -D M=8192")
        out[key] = parse_value(key, raw)
    return out


def parse_value(key: str, raw: str) -> Any:
    """The value of one `-D`: YAML read with the file loader's limits; text that is not YAML stays a string."""
    if not raw.strip():
        return ""
    try:
        value = load_yaml_value(raw, f"-D {key}")
    except SpecErrors as exc:
        problem = exc.problems[0]
        if problem.message.startswith("YAML syntax error"):
            return raw  # not YAML (e.g. an expression with a ': '): the model checks it as a string
        pos = exc.source.locate(problem)
        where = f" (column {pos.col} of the value)" if pos.line == 1 else f" (line {pos.line} of the value)"
        raise OverrideError(f"-D {_shown(key)}: {problem.message}{where}") from None
    if isinstance(value, dict):
        raise OverrideError(f"-D {_shown(key)}: the value must be a scalar or a [list]; set a mapping's fields one "
                            f"by one (-D {_shown(key)}.FIELD=VALUE)")
    return value


def apply_overrides(data: dict, overrides: Mapping[str, Any], src: SourceMap) -> tuple[dict, list[Problem]]:
    """A copy of `data` with each override set; problems (unknown size, a path that does not fit) located at the
    nearest part of the path that the file has."""
    data = copy.deepcopy(data)
    problems: list[Problem] = []
    for key, value in overrides.items():
        if "." not in key and "[" not in key:
            sizes = data.get("op", {}).get("sizes") if isinstance(data.get("op"), dict) else None
            if not isinstance(sizes, dict) or key not in sizes:
                known = ", ".join(sizes) if isinstance(sizes, dict) and sizes else "none"
                problems.append(Problem(("op", "sizes"), f"-D {_shown(key)}: no size named '{_shown(key)}'; "
                                                         f"sizes are: {known}"))
                continue
            sizes[key] = value
            continue
        try:
            parts = split_key(key)
        except OverrideError as exc:
            problems.append(Problem((), str(exc)))
            continue
        why = _set(data, parts, value)
        if why:
            problems.append(Problem(tuple(parts), f"-D {_shown(key)}: cannot set this path: {why}"))
    return data, problems


def _set(data: Any, parts: list[str | int], value: Any) -> str | None:
    """Set data[parts] = value (missing mappings are created); why not, when it cannot be."""
    node = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(str(p) for p in parts[:depth]) or "the top level"
        if isinstance(part, int):
            if not isinstance(node, list):
                return f"{where} is not a list, so [{part}] does not index it"
            if part >= len(node):
                return f"{where} has {len(node)} entries; [{part}] is past its end"
        elif not isinstance(node, dict):
            return f"{where} is not a mapping, so it has no field '{part}'"
        if last:
            node[part] = value
            return None
        if isinstance(node, dict) and part not in node:
            node[part] = {}
        node = node[part]
    return None
