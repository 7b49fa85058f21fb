"""Temporary folders and files beside their final place (a package's staging, a cache entry being written, an old
one moved aside), and the reaper of those whose writer died.

Each is made locked: an exclusive flock held by the writer until it is done (`held_temp`). The reaper
(`clean_stale`) removes one whose lock it can take, and never one whose lock is held: a flock holds across PID
namespaces (containers, sandboxes, `unshare -p`) and hosts sharing the file system, where the pid in the name
says nothing (another namespace's live writer is no process here; a process here may have its number). Where the
file system has no flock, the age alone decides (older than STALE_SECONDS).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

STALE_SECONDS = 3600             # temporaries that cannot be locked (no flock) are removed past this age


def remove_path(path: Path) -> None:
    """Remove a file, a symlink (never what it points at) or a folder tree; missing is fine."""
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)
    except FileNotFoundError:
        pass
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


def host_tag() -> str:
    """8 hex digits naming this host (part of a temporary name, for whoever reads a listing)."""
    return hashlib.sha256(os.uname().nodename.encode()).hexdigest()[:8]


_TEMP = re.compile(r"\.(?P<what>.+)\.(?P<kind>tmp|old|new)-(?P<host>[0-9a-f]{8})-(?P<pid>\d{1,10})-[A-Za-z0-9_]+")


def clean_stale(folder: Path, max_age: float = STALE_SECONDS) -> None:
    """Remove temporary folders and files (`.<what>.tmp-<host>-<pid>-<random>`, `.<what>.old-...`) left by writers
    that died: those whose lock (`held_temp`) can be taken. Liveness is the lock, never the pid in the name, so a
    writer in another PID namespace (a container, a sandbox) or on another host is never taken for dead. Where the
    file system has no flock, only those older than `max_age` seconds; a `.new-` one (a writer killed between
    creating and locking it) once older than `max_age`. Never fails."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        m = _TEMP.fullmatch(entry.name)
        if not m:
            continue
        try:
            old = now - entry.stat(follow_symlinks=False).st_mtime > max_age
        except OSError:
            continue
        if m["kind"] == "new":
            if old:
                remove_path(Path(entry.path))
            continue
        _remove_if_dead(Path(entry.path), old)


def _lock(path: Path, wait: bool) -> int | None:
    """An fd of `path` (never through a symlink) holding an exclusive flock on it; None where it cannot be locked
    (no flock on this file system, not readable, a symlink). BlockingIOError: another holds it (and not `wait`)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError:
        os.close(fd)
        return None
    return fd


def _remove_if_dead(path: Path, old: bool) -> None:
    """Remove a temporary whose lock nobody holds (holding it meanwhile); one that cannot be locked when `old`."""
    try:
        fd = _lock(path, wait=False)
    except BlockingIOError:
        return                                   # a live writer's
    try:
        if fd is not None or old:
            remove_path(path)
    finally:
        if fd is not None:
            os.close(fd)


def temp_name(what: str, kind: str = "tmp") -> str:
    """The prefix of a temporary folder `clean_stale` can recognise (mkdtemp adds the random tail)."""
    return f".{what}.{kind}-{host_tag()}-{os.getpid()}-"


@contextmanager
def held_temp(parent: Path, what: str, kind: str = "tmp", folder: bool = True) -> Iterator[Path]:
    """A fresh empty temporary folder (or file) in `parent`, `.<what>.<kind>-<host>-<pid>-<random>`, locked by
    this process (flock, which holds across PID namespaces and hosts sharing the file system) for the block;
    removed at its end if it is still there. It is made as `.<what>.new-...` and renamed once locked, so a
    `.tmp-` / `.old-` one whose lock is free is dead (clean_stale)."""
    prefix = temp_name(what, "new")
    if folder:
        fresh = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    else:
        fd, name = tempfile.mkstemp(prefix=prefix, dir=parent)
        os.close(fd)
        fresh = Path(name)
    path, lock = fresh, None
    try:
        lock = _lock(fresh, wait=True)
        path = fresh.with_name(temp_name(what, kind) + fresh.name[len(prefix):])
        os.rename(fresh, path)
        yield path
    finally:
        for p in {fresh, path}:
            if os.path.lexists(p):
                remove_path(p)
        if lock is not None:
            os.close(lock)
