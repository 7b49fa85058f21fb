"""Defect 6 (issue 14): spec files were read without bounds.

`Path.read_bytes()` on a spec path that is /dev/zero read until MemoryError; on a FIFO it blocked forever, even
under `verify --timeout`, since the spec is read before the watchdog starts. Every reader of a spec file (the
loader, and build's hashing of the file) now goes through `read_spec_bytes`: a regular file only (checked with
stat before the open and with fstat on the descriptor, opened O_NONBLOCK so a FIFO swapped in cannot block), at
most MAX_BYTES + 1 bytes read. Each case runs in a child process bounded in time and memory, so the old code
fails (times out or dies) instead of hanging the suite.
"""
from __future__ import annotations

import ast
import os

import pytest

from _cli import ROOT, YAML, one_located_line, run_child, write
from schedgen.errors import SpecErrors
from schedgen.frontend.load import MAX_BYTES, read_spec_bytes


def test_dev_zero_named_yaml_is_refused(tmp_path):
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    res = run_child("validate", str(link))
    assert res.returncode == 2, res.stderr[-2000:]
    line = one_located_line(res.stderr.splitlines(), link, 1, 1)
    assert "character device" in line and "regular" in line


@pytest.mark.parametrize("command", [["validate"], ["verify", "--timeout", "5"], ["build"]])
def test_fifo_is_refused_not_waited_on(tmp_path, command):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    res = run_child(*command, str(fifo))
    assert res.returncode == 2, res.stderr[-2000:]
    assert "FIFO" in res.stderr and "Traceback" not in res.stderr


def test_directory_is_refused(tmp_path):
    d = tmp_path / "dir.yaml"
    d.mkdir()
    with pytest.raises(SpecErrors) as exc:
        read_spec_bytes(d)
    assert exc.value.lines() == [f"{d}:1:1: <file>: cannot read file: it is a directory; a spec must be a "
                                 "regular .yaml, .yml or .toml file"]


def test_oversized_file_is_refused_after_limit_plus_one_bytes(tmp_path):
    path = write(tmp_path, YAML + "#" * MAX_BYTES)
    with pytest.raises(SpecErrors, match=f"file is over {MAX_BYTES} bytes"):
        read_spec_bytes(path)
    exact = write(tmp_path, "#" * MAX_BYTES, name="exact")
    assert len(read_spec_bytes(exact)) == MAX_BYTES


def _reads_files(tree: ast.AST) -> list[int]:
    """Lines that call .read_bytes() / .read_text() / open() (ways to read a spec file around read_spec_bytes)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr in ("read_bytes", "read_text")) or \
                    (isinstance(f, ast.Name) and f.id == "open" and _reading_mode(node)):
                out.append(node.lineno)
    return out


def _reading_mode(call: ast.Call) -> bool:
    """Whether an open() call may read: no mode, a mode that is not a literal, or a literal one that reads."""
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    if not isinstance(mode, ast.Constant) or not isinstance(mode.value, str):
        return True
    return "r" in mode.value or "+" in mode.value


def test_spec_readers_go_through_read_spec_bytes():
    """build (hashing the file), verify, tune and the frontend take a spec path: none may read it directly."""
    files = [ROOT / "schedgen" / "build.py", ROOT / "schedgen" / "verify.py", ROOT / "schedgen" / "supervise.py",
             *sorted((ROOT / "schedgen" / "tune").glob("*.py")),
             *[p for p in sorted((ROOT / "schedgen" / "frontend").glob("*.py")) if p.name != "load.py"]]
    found = {str(p.relative_to(ROOT)): lines for p in files if (lines := _reads_files(ast.parse(p.read_text())))}
    assert found == {}, f"direct file reads (use schedgen.frontend.load.read_spec_bytes): {found}"
