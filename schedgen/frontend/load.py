"""Read YAML and TOML specs into plain data plus a map of where each value stands.

Only plain data comes out (dicts, lists, str, int, float, bool): YAML tags beyond the core schema,
and aliases that would blow up, are refused. Syntax errors become located `Problem`s.

Every reader of a spec file goes through `read_spec_bytes` (regular files only, at most MAX_BYTES), and every
YAML text, a file's or a `-D` value's, through the same composer and walker (node, depth and alias limits).
Integers are decimal and at most MAX_INT_DIGITS digits: YAML 1.1's base-60 (`1:08:16` is 4096), octal (`010`
is 8), hex and binary forms are refused with a located error, as is any integer too large for a field.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path as FsPath
from typing import Any

import yaml

from ..files import UnreadableFile, read_bytes
from ..errors import Pos, Problem, SourceMap, SpecErrors, clip, printable, quoted, shorten_int

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_BYTES = 1 << 20
MAX_NODES = 100_000
MAX_DEPTH = 100  # nesting of mappings and lists; also stops recursive aliases (&a [*a])
MAX_INT_DIGITS = 19  # no field takes an integer of more than 19 digits (2**63 - 1 has 19)
MAX_INT = 2**63 - 1
_TOO_DEEP = f"values are nested more than {MAX_DEPTH} levels deep; a spec needs a handful"
_BOM = "\ufeff"
_LEGAL = "a spec must be a regular .yaml, .yml or .toml file"


def _file_error(name: str, message: str) -> SpecErrors:
    return SpecErrors([Problem((), message, pos=Pos(1, 1))], SourceMap(name))


def read_spec_bytes(path: str | FsPath) -> bytes:
    """The bytes of a spec file: a regular file only, at most MAX_BYTES of it (schedgen.files.read_bytes: a FIFO,
    a device, a socket or a directory is refused before it is read). Raises a located SpecErrors."""
    try:
        return read_bytes(path, MAX_BYTES, legal=_LEGAL)
    except UnreadableFile as exc:
        raise _file_error(str(path), str(exc)) from None


def load_file(path: str | FsPath, data: bytes | None = None) -> tuple[dict, SourceMap]:
    """Load a spec by its suffix (.yaml/.yml or .toml); `data`: its bytes, when the caller read them."""
    path = FsPath(path)
    name = str(path)
    src = SourceMap(name)
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise SpecErrors([Problem((), f"unknown file type '{printable(suffix)}'; use .yaml, .yml or .toml",
                                  pos=Pos(1, 1))], src)
    raw = read_spec_bytes(path) if data is None else data
    if len(raw) > MAX_BYTES:
        raise _file_error(name, f"file is over {MAX_BYTES} bytes; at most {MAX_BYTES} are accepted")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecErrors([Problem((), f"file is not UTF-8 ({exc.reason} at byte {exc.start})", pos=Pos(1, 1))], src) from None
    if suffix in (".yaml", ".yml"):
        return load_yaml_text(text, name)
    return load_toml_text(text, name)


# --------------------------------------------------------------------------- YAML

class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e3` and `3.4028235e38` as floats (YAML 1.2; PyYAML's 1.1 rules want a dot and
    a signed exponent, and read them as strings)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))

_DECIMAL = re.compile(r"[-+]?(?:0|[1-9](?:_?[0-9])*)")
_WRITE_DECIMAL = "write a decimal integer"


def _int_text_problem(text: str) -> str | None:
    """Why the text of a YAML integer is refused (None when it is a plain decimal integer of sane length)."""
    if _DECIMAL.fullmatch(text):
        digits = len(text.lstrip("+-").replace("_", ""))
        if digits > MAX_INT_DIGITS or abs(int(text.replace("_", ""))) > MAX_INT:
            return (f"integer {_shown_digits(text)} is too large; no field takes more than {MAX_INT_DIGITS} digits "
                    f"(at most {MAX_INT})")
        return None
    body = text.lstrip("+-").lower().replace("_", "")
    if not body:                                # `!!int` on nothing, or on a lone sign
        return f"{text!r} is not a valid !!int value; {_WRITE_DECIMAL} (or drop the tag)"
    if len(body) > 2 * MAX_INT_DIGITS:
        return f"{_shown_digits(text)} is not a decimal integer (and is too large); {_WRITE_DECIMAL}"
    try:
        value = yaml.SafeLoader("").construct_yaml_int(yaml.ScalarNode("tag:yaml.org,2002:int", text))
    except (ValueError, yaml.YAMLError):
        value = None
    is_value = "" if value is None else f" (read as {value})"
    if ":" in body:
        what = "a YAML 1.1 base-60 number"
    elif body.startswith("0x"):
        what = "a hexadecimal integer"
    elif body.startswith("0b"):
        what = "a binary integer"
    elif body.startswith("0") and len(body) > 1:
        what = "an octal integer (a leading 0)"
    else:
        what = "not a decimal integer"
    hint = f", e.g. {value}" if value is not None else ""
    return f"{text!r} is {what}{is_value}; {_WRITE_DECIMAL}{hint}, or quote it for a string"


def _shown_digits(text: str) -> str:
    """`123456789…(20000 digits)` for an overlong number's text; the text itself when short."""
    if len(text) <= 24:
        return text
    return f"{text[:9]}…({len(text)} digits)"


class _Walker:
    def __init__(self, src: SourceMap, name: str):
        self.src = src
        self.name = name
        self.nodes = 0
        self.problems: list[Problem] = []
        self.constructor = _Loader("")

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
                    self.problems.append(Problem(path + (key,), f"duplicate key '{clip(str(key))}'", pos=self.pos(key_node)))
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
            if kind == "int" and (why := _int_text_problem(node.value.strip())) is not None:
                self.problems.append(Problem(path, why, pos=self.pos(node)))
                return None
            if kind == "float" and ":" in node.value:
                self.problems.append(Problem(path, f"{quoted(node.value)} is a YAML 1.1 base-60 number; write a decimal "
                                                   f"number, or quote it for a string", pos=self.pos(node)))
                return None
            try:
                return self.constructor.construct_object(node, deep=True)
            except (ValueError, KeyError, IndexError, TypeError, yaml.YAMLError):
                # an explicit tag on text it cannot read: `!!int abc`, `!!bool maybe`, `!!float ''`
                self.problems.append(Problem(path, f"{_short_text(node.value)!r} is not a valid !!{kind} value; write a plain "
                                                   f"{kind} (or drop the tag)", pos=self.pos(node)))
                return None
        self.problems.append(Problem(path, f"YAML tag '{clip(tag)}' is not allowed; use plain values", pos=self.pos(node)))
        return None


def _short_text(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…({len(text)} characters)"


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


def _compose(text: str, src: SourceMap):
    """The YAML node tree of one document, with syntax errors and runaway nesting as located problems."""
    try:
        return yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = Pos(mark.line + 1, mark.column + 1) if mark else Pos(1, 1)
        msg = (exc.problem or exc.context or "invalid YAML").strip()
        raise SpecErrors([Problem((), f"YAML syntax error: {msg}", pos=pos)], src) from None
    except yaml.reader.ReaderError as exc:  # a control character: located, one line (str(exc) has two)
        before = text[:exc.position]
        pos = Pos(before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1)
        char = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        raise SpecErrors([Problem((), f"YAML syntax error: the character {char} is not allowed ({exc.reason}); "
                                      f"remove it or write it as an escape in a double-quoted string", pos=pos)],
                         src) from None
    except yaml.YAMLError as exc:
        raise SpecErrors([Problem((), f"YAML error: {' '.join(str(exc).split())}", pos=Pos(1, 1))], src) from None
    except RecursionError:  # PyYAML's composer recurses once per nesting level
        raise SpecErrors([Problem((), _TOO_DEEP, pos=Pos(1, 1))], src) from None


def _strip_bom(text: str) -> str:
    """A leading UTF-8 byte order mark is not part of the text (editors do not show it): columns count without."""
    return text[1:] if text.startswith(_BOM) else text


def load_yaml_text(text: str, name: str = "<string>") -> tuple[dict, SourceMap]:
    src = SourceMap(name)
    node = _compose(_strip_bom(text), src)
    if node is None:
        raise SpecErrors([Problem((), "file is empty", pos=Pos(1, 1))], src)
    walker = _Walker(src, name)
    data = walker.walk(node, ())
    if walker.problems:
        raise SpecErrors(walker.problems, src)
    if not isinstance(data, dict):
        raise SpecErrors([Problem((), "the top level must be a mapping with keys name, op, schedule", pos=Pos(1, 1))], src)
    return data, src


def load_yaml_value(text: str, name: str = "<value>") -> Any:
    """One YAML value (a `-D NAME=VALUE` value) read with the same limits as a file: node count (aliases
    expanded), nesting depth, size, plain-data tags only, decimal integers. Raises SpecErrors located in `text`;
    None for an empty document."""
    src = SourceMap(name)
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise SpecErrors([Problem((), f"the value is over {MAX_BYTES} bytes", pos=Pos(1, 1))], src)
    node = _compose(text, src)
    if node is None:
        return None
    walker = _Walker(src, name)
    data = walker.walk(node, ())
    if walker.problems:
        raise SpecErrors(walker.problems, src)
    return data


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


_LONG_INT = re.compile(r"(?<![A-Za-z0-9_.\"'])[-+]?[0-9][0-9_]{%d,}" % (MAX_INT_DIGITS - 1))


def load_toml_text(text: str, name: str = "<string>") -> tuple[dict, SourceMap]:
    src = SourceMap(name)
    text = _strip_bom(text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_ERR.search(str(exc))
        pos = Pos(int(m.group(1)), int(m.group(2))) if m else Pos(1, 1)
        msg = _TOML_ERR.sub("", str(exc)).strip()
        raise SpecErrors([Problem((), f"TOML syntax error: {msg}", pos=pos)], src) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise SpecErrors([Problem((), _TOO_DEEP, pos=Pos(1, 1))], src) from None
    except ValueError:  # int() refused a decimal integer over Python's 4,300-digit limit inside tomllib
        raise SpecErrors([_long_int_in_text(text)], src) from None
    _locate_toml(text, data, src)
    problems: list[Problem] = []
    _check_toml_ints(data, (), problems)
    if problems:
        raise SpecErrors(problems, src)
    return data, src


def _long_int_in_text(text: str) -> Problem:
    """Where the first overlong integer literal of a TOML text stands (tomllib's ValueError carries no position)."""
    for lineno, line in enumerate(text.split("\n"), start=1):
        m = _LONG_INT.search(line)
        if m:
            return Problem((), f"integer {_shown_digits(m.group())} is too large; no field takes more than "
                               f"{MAX_INT_DIGITS} digits (at most {MAX_INT})", pos=Pos(lineno, m.start() + 1))
    return Problem((), f"an integer is too large; no field takes more than {MAX_INT_DIGITS} digits", pos=Pos(1, 1))


def _check_toml_ints(value: Any, path: tuple, problems: list[Problem]) -> None:
    """TOML integers (decimal, or TOML's explicit 0x / 0o / 0b forms) must fit the fields: |n| <= MAX_INT."""
    if isinstance(value, dict):
        for key, sub in value.items():
            _check_toml_ints(sub, path + (key,), problems)
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            _check_toml_ints(sub, path + (i,), problems)
    elif type(value) is int and abs(value) > MAX_INT:
        problems.append(Problem(path, f"integer {shorten_int(value)} is too large; no field takes more than "
                                      f"{MAX_INT_DIGITS} digits (at most {MAX_INT})"))


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
