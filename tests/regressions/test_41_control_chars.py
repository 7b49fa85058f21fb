"""Defect group 12 (issue 41): control characters from outside were printed raw.

A spec path holding a newline made `validate` print what looked like a second file's "ok" line; ESC sequences in a
path, in $SCHEDGEN_CACHE or in the tuning database's `gpu` column reached the terminal as they were (clearing the
screen, retitling the window, hiding text). Everything from outside that the CLI prints (paths, the cache root,
database text, usage errors that quote them, spec error locations) now goes through `errors.printable`: control
characters (C0, C1, ESC, line breaks) and lone surrogates are written as Python escapes, so each message stays one
line and says what the text was. Ordinary text is unchanged.
"""
from __future__ import annotations

import os
import shutil

import pytest

from _specs import ADD, add_with_tune
from schedgen import cli
from schedgen import tune as T

EVIL = "\x1b]0;pwned\x07\x1b[2J\nADD.yaml: ok (map 'add_bf16')\x9b31m"
ESCAPED = "\\x1b]0;pwned\\x07\\x1b[2J\\nADD.yaml: ok (map 'add_bf16')\\x9b31m"


def _run(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as stop:
        code = stop.code
    out = capsys.readouterr()
    for text in (out.out, out.err):
        assert "Traceback" not in text
        assert not any(c in text for c in "\x1b\x07\x9b"), repr(text)
    return code, out.out, out.err


def test_validate_prints_one_line_per_file(tmp_path, capsys):
    evil = tmp_path / f"a{EVIL}.yaml"
    shutil.copy(ADD, evil)
    code, out, _ = _run(capsys, "validate", str(evil), str(ADD))
    assert code == 0
    assert out.splitlines() == [f"{tmp_path}/a{ESCAPED}.yaml: ok (map 'add_bf16')", f"{ADD}: ok (map 'add_bf16')"]


def test_a_spec_error_in_such_a_path_is_one_escaped_line(tmp_path, capsys):
    evil = tmp_path / f"b{EVIL}.yaml"
    evil.write_text("name: [\n")
    code, _, err = _run(capsys, "validate", str(evil))
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith(f"{tmp_path}/b{ESCAPED}.yaml:2:1: "), err


def test_usage_errors_and_output_lines_escape_paths(tmp_path, capsys):
    out = tmp_path / f"c{EVIL}.yaml"
    code, stdout, _ = _run(capsys, "new", "map", "-o", str(out))
    assert code == 0 and stdout == (f"wrote {tmp_path}/c{ESCAPED}.yaml (map family; next: schedgen explain "
                                    f"{tmp_path}/c{ESCAPED}.yaml)\n")
    code, _, err = _run(capsys, "new", "map", "-o", str(out))
    assert code == 2 and err == f"schedgen: -o {tmp_path}/c{ESCAPED}.yaml: the file exists; give another name or " \
                                "--force to overwrite it\n"
    code, _, err = _run(capsys, "build", str(ADD), "-o", str(out / "sub"))
    assert code == 2 and len(err.splitlines()) == 1 and ESCAPED in err


def test_the_cache_warning_escapes_schedgen_cache(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("SCHEDGEN_CACHE", str(blocker / f"cache{EVIL}"))
    code, _, err = _run(capsys, "build", str(ADD), "-D", "M=64", "-D", "N=512", "-o", str(tmp_path / "out"))
    assert code == 0
    assert f"warning: cache {blocker}/cache{ESCAPED} is not usable" in err and len(err.splitlines()) == 1, err


class _EvilGPU:
    """A runner whose GPU name (what the database's gpu column records) holds escape sequences and a newline."""

    def __init__(self, *args, **kwargs):
        self.env = {"gpu": f"H200{EVIL}", "driver": "999.1"}

    def start(self):
        pass

    def measure(self, built, backend):
        return T.Result("ok", 1.0)

    def verify(self, built, backend):
        return T.Result("ok", extra={"ok": True, "rel_error": 1e-3})

    def close(self):
        pass


def test_the_database_gpu_column_is_printed_escaped(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(T, "WorkerRunner", _EvilGPU)
    path = add_with_tune(tmp_path, "tune:\n  params:\n    block_M: [16, 32]\n")
    db = str(tmp_path / "db.sqlite")
    code, _, _ = _run(capsys, "tune", str(path), "--db", db, "--workers", "1")
    assert code == 0
    code, out, _ = _run(capsys, "tune", str(path), "--db", db, "--db-only", "--export", str(tmp_path / "w.yaml"))
    assert code == 0
    assert out.splitlines()[0].startswith("best known: best 1.0000 ms") and out.splitlines()[0].endswith(
        f"on H200{ESCAPED}"), out


def test_a_suffix_with_escapes_is_escaped(tmp_path, capsys):
    path = tmp_path / "s.\x1b[31m"
    shutil.copy(ADD, path)
    code, _, err = _run(capsys, "validate", str(path))
    assert code == 2 and err == f"{tmp_path}/s.\\x1b[31m:1:1: <file>: unknown file type '.\\x1b[31m'; use .yaml, " \
                                ".yml or .toml\n"


@pytest.mark.parametrize("command", [["explain"], ["build", "-o", "OUT"], ["explain", "--draw", "OUT/x.png"]])
def test_commands_on_a_path_that_is_not_utf8_and_holds_escapes(tmp_path, capsys, monkeypatch, command):
    """No traceback (a lone surrogate cannot be printed as UTF-8) and nothing raw on the terminal."""
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    folder = os.fsdecode(os.fsencode(str(tmp_path)) + b"/d\xff\x1b[31m\n")
    os.mkdir(folder)
    path = os.path.join(folder, "add.yaml")
    shutil.copy(ADD, path)
    argv = [a.replace("OUT", folder) for a in command]
    code, out, err = _run(capsys, *argv, path, "-D", "M=64", "-D", "N=512")
    assert code == 0, err
    assert "d\\udcff\\x1b[31m\\n" in out + err or command == ["explain"]
