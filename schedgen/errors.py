"""Located, user-facing errors.

Every stage (load, validate, plan, build) reports problems as `Problem`s: a field path into the
spec plus a message. `SpecErrors` carries all of them at once; the CLI formats each as
`FILE:LINE:COL: field.path: message` using the position map the loader recorded.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

Path = tuple  # tuple[str | int, ...]

SHOWN_DIGITS = 24  # an integer echoed in a message: in full up to this many digits, else `123456789…(N digits)`
SHOWN_NAME = 64    # a name or key echoed in a message: in full up to this many characters (every legal name fits)
MAX_MESSAGE = 2000  # a located message past this many characters is cut (what each check echoes is clipped first)
MAX_PATH = 4096     # a file name echoed: whole up to PATH_MAX (no longer one can be opened)


def shorten_int(value: int) -> str:
    """An integer as a message shows it: `123456789…(20000 digits)` when long. Never converts a huge integer to
    text in full (str() refuses more than 4,300 digits, and the echo would bury the message)."""
    n = abs(value)
    sign = "-" if value < 0 else ""
    if n.bit_length() <= 64:
        return str(value)
    digits = int(n.bit_length() * math.log10(2))  # the exact count is this or one more
    while 10 ** digits <= n:
        digits += 1
    if digits <= SHOWN_DIGITS:
        return str(value)
    return f"{sign}{n // 10 ** (digits - 9)}…({digits} digits)"


def quoted(text: str, limit: int = SHOWN_NAME) -> str:
    """repr() of a user's text for a message: whole up to `limit` characters (every legal name), else cut with an
    ellipsis and its length."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"…({len(text)} characters)"


def shorten(value: Any, limit: int = 60) -> str:
    """repr() of a value for a message, cut to about `limit` characters; integers as `shorten_int`."""
    if type(value) is int:
        return shorten_int(value)
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit - 3]) + f"…({len(value)} characters)"
    try:
        shown = repr(value)
    except ValueError:  # a container holding an integer over str()'s digit limit
        return f"<{type(value).__name__}>"
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


@dataclass(frozen=True)
class Pos:
    """1-based line and column of a value in its source file."""
    line: int
    col: int


@dataclass(frozen=True)
class Problem:
    path: Path
    message: str
    # Offset inside a string value (expression errors): lines and columns to add to its position.
    inner_line: int = 0
    inner_col: int = 0
    # Where the loader could not even build a path (syntax errors): an explicit position.
    pos: Pos | None = None


def printable(text: str, *, backslash: bool = False) -> str:
    """`text` with its non-printable characters (newlines, tabs, escapes, format controls, lone surrogates) written
    as Python escapes, so that a message stays one line whatever the file or command line held; `backslash`: the
    backslash escaped too (`schedgen.comment`: in C++ a trailing one continues a `//` comment)."""
    if text.isprintable() and not (backslash and "\\" in text):
        return text
    return "".join(repr(c)[1:-1] if not c.isprintable() or (backslash and c == "\\") else c for c in text)


def clip(text: str, limit: int = SHOWN_NAME) -> str:
    """A user's text as a message shows it: one line (`printable`), cut to `limit` characters with an ellipsis and
    its length when longer (`nnnnnnnn…(900000 characters)`): a message never echoes a huge value whole."""
    return printable(text if len(text) <= limit else text[:limit]) + ("" if len(text) <= limit else
                                                                         f"…({len(text)} characters)")


def format_path(path: Sequence) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{shorten_int(part)}]"
        else:
            out += ("." if out else "") + clip(str(part))
    return out or "<file>"


@dataclass
class SourceMap:
    """Positions of the values of one loaded file, keyed by field path."""
    file: str
    positions: Mapping[Path, Pos] = field(default_factory=dict)
    # For string scalars: how the text inside maps to the file (block scalar or quoted/plain).
    string_starts: Mapping[Path, tuple[Pos, bool]] = field(default_factory=dict)
    # Where each mapping key itself stands (an unknown key is reported there, not at its value).
    key_positions: Mapping[Path, Pos] = field(default_factory=dict)

    def locate(self, problem: Problem) -> Pos:
        if problem.pos is not None:
            return problem.pos
        path = tuple(problem.path)
        while path and path not in self.positions:
            path = path[:-1]
        pos = self.positions.get(path, Pos(1, 1))
        start = self.string_starts.get(tuple(problem.path))
        if start is not None and (problem.inner_line or problem.inner_col):
            base, block = start
            if block:  # text begins on the line after the '|' indicator, at base.col
                return Pos(base.line + 1 + problem.inner_line, base.col + problem.inner_col)
            if problem.inner_line == 0:
                return Pos(base.line, base.col + problem.inner_col)
            return Pos(base.line + problem.inner_line, 1 + problem.inner_col)
        return pos

    def format(self, problem: Problem) -> str:
        pos = self.locate(problem)
        return (f"{clip(printable(self.file), MAX_PATH)}:{pos.line}:{pos.col}: {format_path(problem.path)}: "
                f"{clip(problem.message, MAX_MESSAGE)}")


class SpecErrors(Exception):
    """All problems found in one spec, ready to print."""

    def __init__(self, problems: Iterable[Problem], source: SourceMap):
        self.problems = list(problems)
        self.source = source
        super().__init__(self.render())

    def lines(self) -> list[str]:
        located = [(self.source.locate(p), self.source.format(p)) for p in self.problems]
        located.sort(key=lambda item: (item[0].line, item[0].col))
        seen, out = set(), []
        for _, text in located:
            if text not in seen:
                seen.add(text)
                out.append(text)
        return out

    def render(self) -> str:
        return "\n".join(self.lines())


class ToolchainError(RuntimeError):
    """The compiler or driver failed on a spec that passed every check (a bug in the plan stage)."""


EXIT_BROKEN_PIPE = 128 + 13      # the reader went away (`schedgen explain | head`): as if killed by SIGPIPE, quietly


def stop_quietly_on_broken_pipe() -> int:
    """stdout's reader went away (`schedgen explain SPEC | head`): point stdout at /dev/null so nothing more is tried
    (no traceback, no 'Exception ignored' at exit) and give the status of a process killed by SIGPIPE, like
    coreutils."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):   # stdout is not a file (captured): nothing to redirect
        pass
    return EXIT_BROKEN_PIPE
