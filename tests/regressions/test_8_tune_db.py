"""Defect group 8 (issue 14): an unusable tuning database gave a traceback.

`--db` pointing at a directory, at a path whose folder cannot be made, at a file that is not sqlite, at a database
another process holds locked, or at a read-only file made sqlite3 raise out of `schedgen tune` and `schedgen build
--tuned` (OperationalError / DatabaseError / FileExistsError tracebacks; the locked case only after a 60 s wait).
Each is now one clear line, `schedgen: PATH: what is wrong`, and exit status 2; the Python API raises TuneDBError.
"""
from __future__ import annotations

import os
import sqlite3

import pytest

from _specs import add_with_tune
from schedgen import cli
from schedgen import tune as T

SMALL = "tune:\n  params:\n    block_M: [16, 32]\n"
GPU = {"gpu": "Fake H200", "driver": "999.1"}


class FakeRunner:
    def __init__(self, *args, **kwargs):
        self.env = dict(GPU)

    def start(self):
        pass

    def measure(self, built, backend):
        return T.Result("ok", 1.0)

    def verify(self, built, backend):
        return T.Result("ok", extra={"ok": True, "rel_error": 1e-3})

    def close(self):
        pass


def _bad_db(kind, tmp_path):
    """(the --db path, what the message must say, something to keep alive while it is used)"""
    if kind == "directory":
        d = tmp_path / "adir"
        d.mkdir()
        return d, "is a directory", None
    if kind == "not_sqlite":
        f = tmp_path / "notes.sqlite"
        f.write_text("these are my notes, not a database\n" * 50)
        return f, "not a sqlite database", None
    if kind == "folder_is_a_file":
        f = tmp_path / "afile"
        f.write_text("x")
        return f / "tune.sqlite", "cannot create its folder", None
    if kind == "unwritable_folder":
        return "/proc/self/tune.sqlite", "cannot open", None
    if kind == "locked":
        f = tmp_path / "locked.sqlite"
        conn = sqlite3.connect(f, isolation_level=None)
        conn.execute("CREATE TABLE t (x)")
        conn.execute("BEGIN EXCLUSIVE")
        return f, "locked by another process", conn
    raise AssertionError(kind)


KINDS = ["directory", "not_sqlite", "folder_is_a_file", "unwritable_folder", "locked"]


@pytest.fixture(autouse=True)
def _short_lock_wait(monkeypatch, tmp_path):
    monkeypatch.setenv("SCHEDGEN_TUNE_DB_TIMEOUT", "0.2")
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))


def _run(argv):
    """cli.main's exit status, whether returned or raised (a usage error raises SystemExit, as argparse does)."""
    try:
        return cli.main(argv)
    except SystemExit as stop:
        return stop.code


def _one_line_error(capsys, path, what):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"schedgen: {path}: ") and what in lines[0], err


@pytest.mark.parametrize("kind", KINDS)
def test_cli_export_db_only_with_an_unusable_db(tmp_path, capsys, kind):
    path = add_with_tune(tmp_path, SMALL)
    db, what, keep = _bad_db(kind, tmp_path)
    rc = _run(["tune", str(path), "--export", str(tmp_path / "w.yaml"), "--db-only", "--db", str(db)])
    assert rc == 2
    _one_line_error(capsys, db, what)


@pytest.mark.parametrize("kind", KINDS)
def test_cli_build_tuned_with_an_unusable_db(tmp_path, capsys, kind):
    path = add_with_tune(tmp_path, SMALL)
    db, what, keep = _bad_db(kind, tmp_path)
    rc = _run(["build", str(path), "--tuned", "--db", str(db), "-o", str(tmp_path / "build")])
    assert rc == 2
    _one_line_error(capsys, db, what)


@pytest.mark.parametrize("kind", KINDS)
def test_cli_tune_with_an_unusable_db(tmp_path, capsys, monkeypatch, kind):
    path = add_with_tune(tmp_path, SMALL)
    db, what, keep = _bad_db(kind, tmp_path)
    monkeypatch.setattr(T, "WorkerRunner", FakeRunner)
    assert _run(["tune", str(path), "--db", str(db)]) == 2
    _one_line_error(capsys, db, what)


def test_read_only_db_is_refused_for_tuning_but_read_for_export(tmp_path, capsys, monkeypatch):
    if os.geteuid() == 0:
        pytest.skip("root writes read-only files")
    path = add_with_tune(tmp_path, SMALL)
    db = tmp_path / "ro.sqlite"
    T.TuneDB(db).close()
    db.chmod(0o444)
    monkeypatch.setattr(T, "WorkerRunner", FakeRunner)
    assert _run(["tune", str(path), "--db", str(db)]) == 2
    _one_line_error(capsys, db, "read-only")
    assert _run(["tune", str(path), "--export", str(tmp_path / "w.yaml"), "--db-only", "--db", str(db)]) == 1
    assert "no verified result" in capsys.readouterr().err


def test_python_api_raises_tunedberror(tmp_path):
    path = add_with_tune(tmp_path, SMALL)
    with pytest.raises(T.TuneDBError, match="is a directory"):
        T.tune(path, runner=FakeRunner(), db=tmp_path)


def test_write_to_a_read_only_database_is_one_line(tmp_path):
    """The read-only case as root too: the connection opened read-only, as sqlite does for a file it cannot write."""
    db = tmp_path / "ro.sqlite"
    d = T.TuneDB(db)
    d.conn.close()
    d.conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert d.runs() == []                                   # reading works
    with pytest.raises(T.TuneDBError) as err:
        d.start_run(spec_file="f", spec_name="n", spec_key="k", shape={"M": 1}, backend="cuda")
    assert str(err.value).startswith(f"{db}: the tuning database is read-only (") and "\n" not in str(err.value)
    d.close()
