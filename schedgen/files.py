"""Files a user names (a spec, a bench record, an output of `new`, `schema`, `explain --draw`, `tune --export`, ...):
read with bounds, written without following links.

`read_bytes`: a regular file only (a FIFO, a device such as /dev/zero, a socket or a folder is refused before it
is read: it could block forever or never end), opened non-blocking and checked again on the open descriptor, and at
most `limit` bytes read. `read_json` adds a nesting-depth cap and refuses numbers too large for any field (an
integer of more than MAX_INT_DIGITS digits, a number that overflows a double). Both raise `UnreadableFile` (a
ValueError) whose text says what is wrong, without the path: the caller prefixes the path its own way.

`write_file`: the text goes into a fresh temporary file in the same folder, which is then renamed onto the path,
so an interrupted write leaves the old file and nothing is ever written through a symbolic link (rename replaces
a directory entry; it never follows one). A symbolic link, a FIFO, a device, a socket or a folder at the path is
refused with an OSError (`NotARegularFile`) instead: writing would follow the link, block on the FIFO, or
replace something that is not the user's file. Symbolic links above the last component (a linked folder) are
followed as usual.
"""
from __future__ import annotations

import errno
import io
import json
import math
import os
import re
import stat
import tempfile
from itertools import accumulate
from pathlib import Path

from .errors import printable

MAX_JSON_DEPTH = 64             # a benchmark record nests a few levels (list, row, shape / env)
MAX_INT_DIGITS = 19             # as the spec loader: no field takes more (2**63 - 1 has 19)
TEMP_PREFIX = ".schedgen-tmp-"
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")
_UMASK = os.umask(0o022)
os.umask(_UMASK)


class UnreadableFile(ValueError):
    """A file that could not be read: the message says why (without the path); `where`: (line, column) in the
    file when the place is known; `content`: the file was read, and what it holds is wrong (not UTF-8 or JSON);
    `too_large`: a regular file over the size cap."""

    def __init__(self, message: str, where: tuple[int, int] | None = None, *, content: bool = False,
                 too_large: bool = False):
        super().__init__(message)
        self.where = where
        self.content = content or where is not None
        self.too_large = too_large

    def located(self, path: str | os.PathLike, message: str | None = None) -> str:
        """`PATH:LINE:COL: message`, or `PATH: message` (the path's control characters escaped); `message`
        instead of the exception's own."""
        at = f":{self.where[0]}:{self.where[1]}" if self.where else ""
        return f"{printable(os.fsdecode(path))}{at}: {self if message is None else message}"


class NotARegularFile(OSError):
    """A path that is not written: a symbolic link, FIFO, device, socket or folder is there."""


def kind_of(mode: int) -> str | None:
    """What a file of this mode is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a regular file")


# ---------------------------------------------------------------------------------------------- reading

def read_bytes(path: str | os.PathLike, limit: int, *, legal: str = "give the path of a regular file") -> bytes:
    """At most `limit` bytes of the regular file at `path`; UnreadableFile otherwise (`legal`: what is wanted,
    for the message about a FIFO, a device or a folder)."""
    try:
        _check_regular(os.stat(path).st_mode, legal)
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        raise UnreadableFile(f"cannot read file: {exc.strerror or exc}") from None
    try:
        _check_regular(os.fstat(fd).st_mode, legal)     # it may have been swapped since the stat
        raw = _read_fd(fd, limit + 1)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            raise UnreadableFile("cannot read file: it would block (not a regular file?)") from None
        raise UnreadableFile(f"cannot read file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise UnreadableFile(f"file is over {limit} bytes; at most {limit} are accepted", too_large=True)
    return raw


def _check_regular(mode: int, legal: str) -> None:
    what = kind_of(mode)
    if what is not None:
        raise UnreadableFile(f"cannot read file: it is {what}; {legal}")


def _read_fd(fd: int, most: int) -> bytes:
    chunks, left = [], most
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_json(path: str | os.PathLike, limit: int, *, legal: str = "give the path of a regular file") -> object:
    """The JSON value of a file read by `read_bytes`: UTF-8, nested at most MAX_JSON_DEPTH levels, integers of at
    most MAX_INT_DIGITS digits. UnreadableFile (located where the place is known) otherwise."""
    try:
        text = read_bytes(path, limit, legal=legal).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(f"not UTF-8 text ({exc.reason} at byte {exc.start})", content=True) from None
    return parse_json(text)


def parse_json(text: str) -> object:
    """`json.loads` with the depth and integer limits of `read_json`."""
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise UnreadableFile(f"invalid JSON: nested {depth} levels deep; at most {MAX_JSON_DEPTH}", content=True)
    try:
        return json.loads(text, parse_int=_int, parse_float=_float)
    except json.JSONDecodeError as exc:
        raise UnreadableFile(f"invalid JSON ({exc.msg})", (exc.lineno, exc.colno)) from None
    except _TooLarge as exc:
        number = exc.args[0]
        at = text.find(number)
        where = (text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)) if at >= 0 else None
        shown = number if len(number) <= 24 else f"{number[:9]}…({len(number)} characters)"
        raise UnreadableFile(f"invalid JSON: the number {shown} is too large (integers: at most {MAX_INT_DIGITS} "
                             f"digits; numbers: finite in double precision)", where, content=True) from None
    except RecursionError:                  # not reached under the depth cap; kept as a last guard
        raise UnreadableFile(f"invalid JSON: nested too deep; at most {MAX_JSON_DEPTH} levels", content=True) from None


class _TooLarge(Exception):
    """A number's text that no record field takes (args[0]: the text)."""


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _TooLarge(text)
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):              # 1e999: written as a number, read as infinity
        raise _TooLarge(text)
    return value


def json_depth(text: str) -> int:
    """How deep the brackets of a JSON text nest (strings left out), without parsing it."""
    brackets = _BRACKETS.findall(_STRINGS.sub("", text))
    return max(accumulate(1 if c in "[{" else -1 for c in brackets), default=0)


# ---------------------------------------------------------------------------------------------- writing

def write_file(path: str | os.PathLike, data: bytes | str) -> Path:
    """Create or replace the regular file `path` with `data` (str: UTF-8), atomically, never through a symbolic
    link; its folders are made. NotARegularFile when something else is at `path`; other OSErrors as the system
    says (read-only, full, a file where a folder must be)."""
    path = Path(path)
    mode = existing_mode(path)
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return path


def existing_mode(path: Path) -> int:
    """The permission bits a write to `path` gives its file: the existing file's, else 0o666 less the umask.
    NotARegularFile when a symbolic link, FIFO, device, socket or folder is at `path`."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0o666 & ~_UMASK
    except NotADirectoryError:
        return 0o666 & ~_UMASK            # a file where a folder must be: the mkdir says so
    what = kind_of(st.st_mode)
    if what is not None:
        raise NotARegularFile(errno.EINVAL, f"it is {what}, not a regular file; give the path of a regular file "
                                            f"(a symbolic link is not followed)", str(path))
    return stat.S_IMODE(st.st_mode) & 0o777


def save_figure(fig, path: str | os.PathLike, **savefig) -> Path:
    """A matplotlib figure written by `write_file` (in the format its suffix names): `fig.savefig(path)` would
    write through a symbolic link, or block on a FIFO."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix[1:].lower() or "png", **savefig)
    return write_file(path, buf.getvalue())
