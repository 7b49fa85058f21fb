"""Read YAML and TOML schedule files into plain data plus a map of where each value stands.

Only plain data comes out (dicts, lists, str, int, float, bool): YAML tags beyond the core schema,
and aliases that would blow up, are refused. Syntax errors become located `Problem`s.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path as FsPath
from typing import Any

import yaml

from ..errors import Pos, Problem, SourceMap, SpecErrors

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_BYTES = 1 << 20
MAX_NODES = 100_000
MAX_DEPTH = 100  # nesting of mappings and lists; also stops recursive aliases (&a [*a])
_TOO_DEEP = f"values are nested more than {MAX_DEPTH} levels deep; a schedule file needs a handful"


def load_file(path: str | FsPath, data: bytes | None = None) -> tuple[dict, SourceMap]:
    """Load a schedule file by its suffix (.yaml/.yml or .toml); `data`: its bytes, when the caller read them."""
    path = FsPath(path)
    name = str(path)
    src = SourceMap(name)
    try:
        raw = path.read_bytes() if data is None else data
    except OSError as exc:
        raise SpecErrors([Problem((), f"cannot read file: {exc.strerror or exc}", pos=Pos(1, 1))], src)
    if len(raw) > MAX_BYTES:
        raise SpecErrors([Problem((), f"file is {len(raw)} bytes; at most {MAX_BYTES} are accepted", pos=Pos(1, 1))], src)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecErrors([Problem((), f"file is not UTF-8 ({exc.reason} at byte {exc.start})", pos=Pos(1, 1))], src)
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return load_yaml_text(text, name)
    if suffix == ".toml":
        return load_toml_text(text, name)
    raise SpecErrors([Problem((), f"unknown file type '{suffix}'; use .yaml, .yml or .toml", pos=Pos(1, 1))], src)


# --------------------------------------------------------------------------- YAML

class _Walker:
    def __init__(self, src: SourceMap, name: str):
        self.src = src
        self.name = name
        self.nodes = 0
        self.problems: list[Problem] = []
        self.constructor = yaml.SafeLoader("")

    def pos(self, node) -> Pos:
        return Pos(node.start_mark.line + 1, node.start_mark.column + 1)

    def walk(self, node, path: tuple) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise SpecErrors([Problem(path, f"document has more than {MAX_NODES} values (alias bomb?)")], self.src)
        if len(path) > MAX_DEPTH:
            raise SpecErrors([Problem((), f"{_TOO_DEEP} (an alias that contains itself?)", pos=self.pos(node))],
                             self.src)
        self.src.positions[path] = self.pos(node)
        if isinstance(node, yaml.MappingNode):
            out: dict = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    self.problems.append(Problem(path, "mapping keys must be plain names", pos=self.pos(key_node)))
                    continue
                key = self.scalar(key_node, path)
                if not isinstance(key, str):
                    key = str(key)
                if key in out:
                    self.problems.append(Problem(path + (key,), f"duplicate key '{key}'", pos=self.pos(key_node)))
                    continue
                self.src.key_positions[path + (key,)] = self.pos(key_node)
                out[key] = self.walk(value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.walk(item, path + (i,)) for i, item in enumerate(node.value)]
        value = self.scalar(node, path)
        one_line = node.start_mark.line == node.end_mark.line
        if isinstance(value, str) and (node.style == "|" or (node.style != ">" and one_line)):
            # Offsets inside the text map back to the file only for literal blocks and one-line scalars;
            # folded ('>') and multi-line plain or quoted scalars are reported at the value's start.
            block = node.style == "|"
            start = self.pos(node)
            if node.style in ("'", '"'):
                start = Pos(start.line, start.col + 1)
            if block:
                # Block scalar text starts on the next line, at the content's indentation.
                indent = _block_indent(node)
                start = Pos(start.line, indent + 1)
            self.src.string_starts[path] = (start, block)
        return value

    def scalar(self, node, path: tuple) -> Any:
        tag = node.tag
        kind = tag.rsplit(":", 1)[-1]
        if tag.startswith("tag:yaml.org,2002:") and kind in ("str", "int", "float", "bool", "null"):
            try:
                return self.constructor.construct_object(node, deep=True)
            except (ValueError, KeyError, IndexError, TypeError, yaml.YAMLError):
                # an explicit tag on text it cannot read: `!!int abc`, `!!bool maybe`, `!!float ''`
                self.problems.append(Problem(path, f"{node.value!r} is not a valid !!{kind} value; write a plain "
                                                   f"{kind} (or drop the tag)", pos=self.pos(node)))
                return None
        self.problems.append(Problem(path, f"YAML tag '{tag}' is not allowed; use plain values", pos=self.pos(node)))
        return None


def _block_indent(node) -> int:
    buf = node.start_mark.buffer
    if buf is None:
        return node.start_mark.column
    idx = node.start_mark.index
    nl = buf.find("\n", idx)
    if nl < 0:
        return node.start_mark.column
    j = nl + 1
    while j < len(buf) and buf[j] == "\n":
        j += 1
    k = j
    while k < len(buf) and buf[k] == " ":
        k += 1
    return k - j


def load_yaml_text(text: str, name: str = "<string>") -> tuple[dict, SourceMap]:
    src = SourceMap(name)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = Pos(mark.line + 1, mark.column + 1) if mark else Pos(1, 1)
        msg = (exc.problem or exc.context or "invalid YAML").strip()
        raise SpecErrors([Problem((), f"YAML syntax error: {msg}", pos=pos)], src)
    except yaml.YAMLError as exc:
        raise SpecErrors([Problem((), f"YAML error: {exc}", pos=Pos(1, 1))], src)
    except RecursionError:  # PyYAML's composer recurses once per nesting level
        raise SpecErrors([Problem((), _TOO_DEEP, pos=Pos(1, 1))], src) from None
    if node is None:
        raise SpecErrors([Problem((), "file is empty", pos=Pos(1, 1))], src)
    walker = _Walker(src, name)
    data = walker.walk(node, ())
    if walker.problems:
        raise SpecErrors(walker.problems, src)
    if not isinstance(data, dict):
        raise SpecErrors([Problem((), "the top level must be a mapping with keys name, op, schedule", pos=Pos(1, 1))], src)
    return data, src


# --------------------------------------------------------------------------- TOML

_TOML_ERR = re.compile(r"\(at line (\d+), column (\d+)\)")
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r'\s*([A-Za-z0-9_\-]+|"[^"]*"|\'[^\']*\')\s*')


def _split_dotted(text: str) -> list[str] | None:
    parts, pos = [], 0
    while True:
        m = _KEY.match(text, pos)
        if not m:
            return None
        parts.append(m.group(1).strip("\"'"))
        pos = m.end()
        if pos < len(text) and text[pos] == ".":
            pos += 1
            continue
        return parts if pos == len(text) else None


def load_toml_text(text: str, name: str = "<string>") -> tuple[dict, SourceMap]:
    src = SourceMap(name)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_ERR.search(str(exc))
        pos = Pos(int(m.group(1)), int(m.group(2))) if m else Pos(1, 1)
        msg = _TOML_ERR.sub("", str(exc)).strip()
        raise SpecErrors([Problem((), f"TOML syntax error: {msg}", pos=pos)], src)
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise SpecErrors([Problem((), _TOO_DEEP, pos=Pos(1, 1))], src) from None
    _locate_toml(text, data, src)
    return data, src


def _locate_toml(text: str, data: dict, src: SourceMap) -> None:
    """Best-effort positions for TOML keys: table headers, `key = value` lines and inline tables."""
    table: tuple = ()
    counters: dict[tuple, int] = {}
    src.positions[()] = Pos(1, 1)
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _HEADER.match(line)
        if m and not line.lstrip().startswith("#"):
            keys = _split_dotted(m.group(2)) or []
            table = tuple(keys)
            if m.group(1) == "[[":
                idx = counters.get(table, -1) + 1
                counters[table] = idx
                table = table + (idx,)
            src.positions.setdefault(table, Pos(i + 1, line.index("[") + 1))
            i += 1
            continue
        eq = _assignment(line)
        if eq is not None:
            key_text, col = eq
            keys = _split_dotted(key_text)
            if keys:
                path = table + tuple(keys)
                src.positions.setdefault(path, Pos(i + 1, col + 1))
                value_col = line.index("=", col) + 1
                while value_col < len(line) and line[value_col] == " ":
                    value_col += 1
                value = _get(data, path)
                if isinstance(value, str):
                    triple = line[value_col:value_col + 3] in ('"""', "'''")
                    if triple and line[value_col + 3:].strip():
                        src.string_starts[path] = (Pos(i + 1, value_col + 4), False)  # text starts after the quotes
                    elif triple:
                        src.string_starts[path] = (Pos(i + 1, 1), True)
                    else:
                        src.string_starts[path] = (Pos(i + 1, value_col + 2), False)
                _locate_inline(line, value_col, path, value, i + 1, src)
        i += 1


def _assignment(line: str) -> tuple[str, int] | None:
    stripped = line.lstrip()
    if not stripped or stripped[0] in "#[":
        return None
    col = len(line) - len(stripped)
    depth_quote = None
    for j, ch in enumerate(line[col:], start=col):
        if depth_quote:
            if ch == depth_quote:
                depth_quote = None
        elif ch in "\"'":
            depth_quote = ch
        elif ch == "=":
            return line[col:j].strip(), col
    return None


def _get(data: Any, path: tuple) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _locate_inline(line: str, start: int, path: tuple, value: Any, lineno: int, src: SourceMap) -> None:
    """Positions for keys of inline tables / items of inline arrays on one line."""
    if isinstance(value, dict):
        pos = start
        for key, sub in value.items():
            m = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(key) + r"\s*=").search(line, pos)
            if not m:
                continue
            src.positions.setdefault(path + (key,), Pos(lineno, m.start() + 1))
            vcol = m.end()
            while vcol < len(line) and line[vcol] == " ":
                vcol += 1
            if isinstance(sub, str):
                src.string_starts[path + (key,)] = (Pos(lineno, vcol + 2), False)
            _locate_inline(line, vcol, path + (key,), sub, lineno, src)
            pos = vcol
    elif isinstance(value, list):
        src.positions.setdefault(path, Pos(lineno, start + 1))
