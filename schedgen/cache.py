"""Content-addressed build cache: key -> a folder of artifacts, written atomically, checked on read.

An entry is written into a unique temporary folder beside its final place and renamed there, so a reader never
sees half an entry and two writers of one key cannot mix their files. Each entry's index records the key and the
SHA-256 of every file; anything that does not check (unreadable or malformed index, a file name that is not one a
builder writes, a missing, extra-large or changed file, a path that is not a folder) is a miss: the entry is moved
aside, removed and rebuilt (the temporaries: schedgen/staging.py, locked while their writer lives). A cache root
that cannot be written (a file, read-only, a full disk) is never fatal: the build goes on uncached and one warning
line goes to stderr. What this defends against and what it does not:
docs/reliability.md, "Issue 14, groups 1, 5 and 11".
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Callable, Collection, Mapping

from .errors import printable
from .registry import template_root
from .staging import clean_stale, held_temp, remove_path, temp_name  # noqa: F401  (build.py, tests)

INDEX = "entry.json"
MAX_INDEX_BYTES = 1 << 20        # an index lists a handful of names and hashes
MAX_FILE_BYTES = 1 << 30         # no artifact comes near this; a larger file is damage, not a kernel
# A file name an entry may hold: one plain path component (no separators, no '..', no leading dot).
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_KEY = re.compile(r"[0-9a-f]{4,64}")

_warned: set[str] = set()        # cache roots already reported unusable by this process


def default_root() -> Path:
    env = os.environ.get("SCHEDGEN_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "schedgen"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key_of(parts: Mapping[str, str]) -> str:
    return digest(json.dumps(dict(parts), sort_keys=True).encode())[:32]


def tree_hash(root: Path) -> str:
    """SHA-256 over every `.py` and `.j2` file under `root` (relative path and bytes, in sorted order)."""
    h = hashlib.sha256()
    root = Path(root)
    files = sorted(p for p in root.rglob("*") if p.suffix in (".py", ".j2") and "__pycache__" not in p.parts)
    for path in files:
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        h.update(b"%d:%s%d:" % (len(rel), rel, len(data)))
        h.update(data)
    return h.hexdigest()


@lru_cache(maxsize=1)
def source_hash() -> str:
    """The hash of this schedgen package's own code and its templates (`templates/`, beside the package in a
    checkout), once per process: part of every cache key, so a change to any planner, renderer, template or the
    packaging can never be served stale code."""
    return digest(f"{tree_hash(Path(__file__).resolve().parent)}:{tree_hash(template_root())}".encode())


def is_plain_name(name: object) -> bool:
    return isinstance(name, str) and name != INDEX and PLAIN_NAME.fullmatch(name) is not None and ".." not in name


class CacheUnusable(OSError):
    """The cache root cannot hold entries (not a folder, read-only, full)."""


def _read_limited(path: Path, limit: int) -> bytes:
    """A regular file's bytes, never through a symlink, at most `limit` (ValueError past it)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not (st.st_mode & 0o170000 == 0o100000):
            raise ValueError(f"{path.name} is not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path.name} is larger than {limit} bytes")
    return data


def write_new(path: Path, data: bytes) -> None:
    """Create `path` (which must not exist yet: O_EXCL, so never through a symlink) holding `data`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _parse_index(raw: bytes, key: str) -> dict[str, str]:
    """The index's {name: sha256}, or ValueError saying what is wrong with it."""
    try:
        index = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise ValueError("the index is nested too deep") from None
    if not isinstance(index, dict) or index.get("key") != key:
        raise ValueError("the index is not this key's")
    files = index.get("files")
    if not isinstance(files, dict) or not files:
        raise ValueError("the index lists no files")
    for name, sha in files.items():
        if not is_plain_name(name):
            raise ValueError(f"the index names {name!r}, not a plain file name")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            raise ValueError(f"the index's hash of {name!r} is not a SHA-256")
    return files


class Cache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else default_root()

    def path(self, key: str) -> Path:
        if not _KEY.fullmatch(key):
            raise ValueError(f"a cache key is lowercase hex, not {key!r}")
        return self.root / key[:2] / key

    def _discard(self, entry: Path) -> None:
        """Move a bad entry aside (one rename: nobody half-reads it while it is removed), then remove it."""
        try:
            if not os.path.lexists(entry):
                return
            with held_temp(entry.parent, entry.name, "old") as aside:
                os.rename(entry, aside / "entry")
        except OSError:
            remove_path(entry)

    def get(self, key: str, names: Collection[str] | None = None,
            check: Callable[[dict[str, bytes]], None] | None = None) -> dict[str, bytes] | None:
        """The entry's files, or None when it is missing or does not check (such an entry is removed).

        names: the exact file names the entry must hold; check: raises ValueError when the files are not usable."""
        entry = self.path(key)
        try:
            index = _parse_index(_read_limited(entry / INDEX, MAX_INDEX_BYTES), key)
            if names is not None and set(index) != set(names):
                raise ValueError(f"the entry holds {sorted(index)}, not {sorted(names)}")
            files = {name: _read_limited(entry / name, MAX_FILE_BYTES) for name in index}
            if any(digest(data) != index[name] for name, data in files.items()):
                raise ValueError("a file does not match its hash")
            if check is not None:
                check(files)
        except FileNotFoundError:
            if os.path.lexists(entry):      # a folder without an index, or a missing file: damage
                self._discard(entry)
            return None
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            self._discard(entry)
            return None
        return files

    def put(self, key: str, files: Mapping[str, bytes]) -> None:
        """Store an entry; raises CacheUnusable when the root cannot hold it. A racing writer's whole entry wins."""
        bad = [n for n in files if not is_plain_name(n)]
        if bad:
            raise ValueError(f"cache entry file names must be plain names, not {bad}")
        entry = self.path(key)
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            clean_stale(entry.parent)
            with held_temp(entry.parent, key) as tmp:
                self._put_from(tmp, key, files)
        except OSError as exc:
            raise CacheUnusable(exc.errno, f"cache {self.root} is not usable ({exc.strerror or exc})") from exc

    def _put_from(self, tmp: Path, key: str, files: Mapping[str, bytes]) -> None:
        """Write the entry into the temporary folder `tmp` and rename it into place."""
        entry = self.path(key)
        for name, data in files.items():
            write_new(tmp / name, bytes(data))
        index = {"key": key, "files": {name: digest(bytes(data)) for name, data in files.items()}}
        write_new(tmp / INDEX, json.dumps(index, indent=1).encode())
        for _ in range(3):
            try:
                os.rename(tmp, entry)
                return
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise
            if self.get(key, names=list(files)) is not None:
                return                              # another writer's whole entry is there: keep it
        # still in the way after discarding it twice: leave it; the next reader checks it

    def get_or_build(self, key: str, build: Callable[[], Mapping[str, bytes]], names: Collection[str] | None = None,
                     check: Callable[[dict[str, bytes]], None] | None = None) -> tuple[dict[str, bytes], bool]:
        """(files, hit). An unusable cache root makes this a plain build, with one warning line on stderr."""
        try:
            files = self.get(key, names, check)
        except (OSError, ValueError):
            files = None
        if files is not None:
            return files, True
        files = dict(build())
        try:
            self.put(key, files)
        except CacheUnusable as exc:
            self._warn(exc)
        return files, False

    def _warn(self, exc: OSError) -> None:
        root = str(self.root)
        if root not in _warned:
            _warned.add(root)
            print(f"schedgen: warning: {printable(exc.strerror)}; building without the cache (set SCHEDGEN_CACHE to a "
                  f"writable folder)", file=sys.stderr)
