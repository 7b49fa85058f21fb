"""Defect 11, second half (issue 14): `explain --draw DIR` wrote `DIR.png` but said "wrote DIR".

matplotlib appends `.png` to a name without a suffix, so `--draw DIR` (an existing directory) and `--draw sched`
both wrote `<name>.png` beside it while the CLI printed the name it was given. Decided: a directory (an existing
one, or any path ending in a separator) gets `DIR/<spec name>.png`; a name without a suffix gets `.png`; an
unknown suffix is refused before anything is drawn; and the message names the file actually written
(`draw.target` resolves it, `draw.draw` returns it).
"""
from __future__ import annotations

import os

import pytest

from conftest import SPECS_DIR
from schedgen import cli, draw

ADD = str(SPECS_DIR / "add_bf16.yaml")
PNG = b"\x89PNG\r\n\x1a\n"


def _draw(capsys, *argv) -> str:
    assert cli.main(["explain", ADD, *argv]) == 0
    return capsys.readouterr().out


def test_an_existing_directory_gets_the_spec_named_png_inside(tmp_path, capsys):
    d = tmp_path / "pictures"
    d.mkdir()
    out = _draw(capsys, "--draw", str(d))
    assert (d / "add_bf16.png").read_bytes()[:8] == PNG
    assert not (tmp_path / "pictures.png").exists()
    assert out.splitlines()[-1] == f"wrote {d / 'add_bf16.png'}"


def test_a_path_ending_in_a_separator_is_a_directory(tmp_path):
    d = tmp_path / "new" / "pictures"
    assert draw.target(str(d) + os.sep, "add_bf16") == d / "add_bf16.png"      # made when the picture is saved
    assert draw.target(str(tmp_path), "add_bf16") == tmp_path / "add_bf16.png"
    assert draw.target(str(tmp_path / "a.png"), "add_bf16") == tmp_path / "a.png"
    assert draw.target(str(tmp_path / "a.svg"), "add_bf16", ("png", "svg")) == tmp_path / "a.svg"


def test_a_name_without_a_suffix_says_the_png_it_wrote(tmp_path, capsys):
    out = _draw(capsys, "--draw", str(tmp_path / "sched"))
    assert (tmp_path / "sched.png").read_bytes()[:8] == PNG and not (tmp_path / "sched").exists()
    assert out.splitlines()[-1] == f"wrote {tmp_path / 'sched.png'}"


def test_an_unknown_picture_format_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["explain", ADD, "--draw", str(tmp_path / "sched.pgn")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"schedgen: --draw {tmp_path / 'sched.pgn'}: unknown picture format '.pgn' (legal: ")
    assert ".png" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
