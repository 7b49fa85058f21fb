"""Defect group 8 (issue 14), bench's part: `schedgen bench --json PATH` onto a file that is not a record.

Before: the kernels were built, verified and timed first, then merging into PATH raised out of the CLI (a
JSONDecodeError traceback for invalid JSON, TypeError / KeyError for a JSON list of something other than rows, an
IsADirectoryError for a folder, PermissionError for a file it could not write). Now PATH is checked before
anything runs: one line `schedgen: PATH: what is wrong`, exit status 2, and the file is left as it was.
"""
from __future__ import annotations

import json
import os

import pytest

from conftest import SPECS_DIR
from schedgen import bench, cli

SPEC = str(SPECS_DIR / "add_bf16.yaml")


def _bad(kind: str, tmp_path):
    """(the --json path, what the message must say)"""
    if kind == "invalid_json":
        f = tmp_path / "rec.json"
        f.write_text('[{"spec": "a", "backend": "cuda", "shape": {}},\n oops]\n')
        return f, "invalid JSON"
    if kind == "list_of_numbers":
        f = tmp_path / "rec.json"
        f.write_text("[1, 2, 3]\n")
        return f, "item 0 is a JSON int, not a row"
    if kind == "list_of_other_objects":
        f = tmp_path / "rec.json"
        f.write_text('[{"name": "x"}]\n')
        return f, "item 0 is an object without spec, backend, shape"
    if kind == "object":
        f = tmp_path / "rec.json"
        f.write_text('{"rows": []}\n')
        return f, "a JSON dict"
    if kind == "empty_file":
        f = tmp_path / "rec.json"
        f.write_text("")
        return f, "invalid JSON"
    if kind == "directory":
        d = tmp_path / "adir"
        d.mkdir()
        (d / "keep.txt").write_text("mine\n")
        return d, "is a directory"
    if kind == "folder_is_a_file":
        f = tmp_path / "afile"
        f.write_text("x\n")
        return f / "rec.json", "cannot be created"
    if kind == "unwritable_folder":
        return "/proc/self/bench-record.json", "cannot be created"
    raise AssertionError(kind)


def _snapshot(path):
    from pathlib import Path
    p = Path(path)
    if p.is_dir():
        return {q.name: q.read_bytes() for q in p.iterdir()}
    return p.read_bytes() if p.exists() else None


@pytest.mark.parametrize("kind", ["invalid_json", "list_of_numbers", "list_of_other_objects", "object", "empty_file",
                                  "directory", "folder_is_a_file", "unwritable_folder"])
def test_bench_json_that_is_not_a_record(kind, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    path, says = _bad(kind, tmp_path)
    before = _snapshot(path)
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", SPEC, "--json", str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"schedgen: {path}") and says in err, err
    assert _snapshot(path) == before


def test_bench_json_read_only_record(tmp_path, capsys, monkeypatch):
    """A record the user cannot write (simulated: the tests run as root, for whom every file is writable)."""
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "rec.json"
    f.write_text('[{"spec": "a", "backend": "cuda", "shape": {"M": 1}}]\n')
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(f) and mode & os.W_OK
                        else real(p, mode, **kw))
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", SPEC, "--json", str(f)])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == f"schedgen: {f}: not writable"


def test_bench_json_merges_into_a_record(tmp_path, capsys, monkeypatch):
    """The good case still merges: rows of the same spec/backend/shape replaced, the others kept."""
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "rec.json"
    old = [{"family": "map", "spec": "add_bf16", "backend": "cuda", "shape": {"M": 4096, "N": 4096}, "time_ms": 9.0},
           {"family": "map", "spec": "other", "backend": "cuda", "shape": {"M": 1}, "time_ms": 1.0}]
    f.write_text(json.dumps(old))
    new = {"family": "map", "spec": "add_bf16", "backend": "cuda", "shape": {"M": 4096, "N": 4096}, "dtype": "bf16",
           "time_ms": 0.05, "verified": True, "rel_error": 0.0}
    monkeypatch.setattr(bench, "environment", lambda: {"gpu": None})
    monkeypatch.setattr(bench, "bench_built", lambda built, backends, **kw: [dict(new)])
    assert cli.main(["bench", SPEC, "--json", str(f)]) == 0
    got = json.loads(f.read_text())
    assert [r["spec"] for r in got] == ["other", "add_bf16"] and got[1]["time_ms"] == 0.05
