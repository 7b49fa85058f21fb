"""Content-addressed build cache: key -> a folder of artifacts, written atomically, checked on read.

An entry is written into a temporary folder beside the cache and renamed into place, so a reader
never sees half an entry and two builds of one spec at once cannot corrupt each other. Each entry
records the SHA-256 of its files; an entry whose files do not match is removed and rebuilt.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Mapping

INDEX = "entry.json"


def default_root() -> Path:
    env = os.environ.get("SCHEDGEN_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "schedgen"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key_of(parts: Mapping[str, str]) -> str:
    return digest(json.dumps(dict(parts), sort_keys=True).encode())[:32]


class Cache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root else default_root()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> dict[str, bytes] | None:
        """The entry's files, or None when missing or corrupt (a corrupt entry is removed)."""
        entry = self.path(key)
        try:
            index = json.loads((entry / INDEX).read_text())
            files = {name: (entry / name).read_bytes() for name in index["files"]}
        except (OSError, ValueError, KeyError, TypeError):
            if entry.exists():
                shutil.rmtree(entry, ignore_errors=True)
            return None
        if any(digest(data) != index["files"][name] for name, data in files.items()):
            shutil.rmtree(entry, ignore_errors=True)
            return None
        return files

    def put(self, key: str, files: Mapping[str, bytes]) -> None:
        entry = self.path(key)
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=entry.parent))
        try:
            for name, data in files.items():
                (tmp / name).write_bytes(data)
            index = {"key": key, "files": {name: digest(data) for name, data in files.items()}}
            (tmp / INDEX).write_text(json.dumps(index, indent=1))
            try:
                os.rename(tmp, entry)
            except OSError:
                if self.get(key) is None:  # a corrupt entry is in the way: replace it
                    shutil.rmtree(entry, ignore_errors=True)
                    os.rename(tmp, entry)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def get_or_build(self, key: str, build: Callable[[], Mapping[str, bytes]]) -> tuple[dict[str, bytes], bool]:
        """(files, hit)."""
        files = self.get(key)
        if files is not None:
            return files, True
        files = dict(build())
        self.put(key, files)
        return files, False
