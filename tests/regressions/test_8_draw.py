"""Defect 8, the `--draw` part (issue 14): `explain --draw` on a huge grid, onto an unwritable path, without
matplotlib.

Before the fix the traversal view built one Python object per tile and one pixel per tile of the whole grid, so a
33-million-tile grid (add_bf16 at M = 2^22, N = 2^16) ran for minutes and then needed gigabytes; a `--draw` path
under a regular file died of a NotADirectoryError traceback after the figure had been drawn; and without matplotlib
`--draw` died of an ImportError traceback. Now a grid over `draw.MAX_TILES` tiles is drawn from its first
MAX_TILES tiles in the kernel's order, and the figure's title and stderr say so; the target is checked before
anything is drawn (a one-line error, exit 2); a missing matplotlib is a one-line error naming the extra
(`schedgen[report]`), exit 2.
"""
from __future__ import annotations

import os
import signal
import sys

import pytest

from conftest import SPECS_DIR
from schedgen import cli, draw
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan

ADD = str(SPECS_DIR / "add_bf16.yaml")            # 4096 x 4096 in 32 x 256 blocks: 128 x 16 = 2048 tiles


def _titles(monkeypatch) -> list[str]:
    """Record the tile view's title each time it is drawn."""
    seen, original = [], draw.draw_traversal

    def spy(ax, *args):
        original(ax, *args)
        seen.append(ax.get_title())
    monkeypatch.setattr(draw, "draw_traversal", spy)
    return seen


def test_a_grid_over_the_bound_is_sampled_and_says_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(draw, "MAX_TILES", 500, raising=False)
    titles = _titles(monkeypatch)
    out = tmp_path / "s.png"
    assert cli.main(["explain", ADD, "--draw", str(out)]) == 0
    err = capsys.readouterr().err
    assert "add_bf16 has 2048 tiles; drawing the first 500 in the kernel's order" in err
    assert len(err.strip().splitlines()) == 1
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the figure says so too: 500 row-major tiles of a 16-wide grid cover 32 rows (the last one in part)
    assert "a sample: the first 500 of 2048 tiles drawn (32 x 16 of 128 x 16)" in titles[0]
    assert "2048 tiles over" in titles[0]                # the wave count is the whole grid's


def test_a_grid_under_the_bound_is_drawn_whole(monkeypatch, tmp_path, capsys):
    titles = _titles(monkeypatch)
    assert cli.main(["explain", ADD, "--draw", str(tmp_path / "s.png")]) == 0
    assert "tiles" not in capsys.readouterr().err and "sample" not in titles[0]


@pytest.mark.parametrize("spec, sizes, tiles", [
    ("add_bf16.yaml", {"M": 4194304, "N": 65536}, 33554432),
    ("matmul_bf16_4096.yaml", {"M": 1048576, "N": 1048576}, 33554432),
    ("attention_causal_bf16_4096_dynamic.yaml", {"B": 2048, "S": 262144}, 67108864),
])
def test_a_huge_grid_draws_in_seconds(spec, sizes, tiles, tmp_path):
    spec_, src = load_spec(str(SPECS_DIR / spec), sizes)
    p = plan(spec_, src)
    notes: list[str] = []

    def too_slow(*_):
        raise TimeoutError("--draw of a huge grid is still drawing after 60 s")
    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(60)                                   # the old code ran for minutes here (and then ran out of memory)
    try:
        out = draw.draw(p, tmp_path / "h.png", dpi=30, note=notes.append)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert notes == [f"--draw: {p.launch.name} has {tiles} tiles; drawing the first {draw.MAX_TILES} in the kernel's order "
                     f"(a sample, at most {draw.MAX_TILES})"]
    assert out == tmp_path / "h.png" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _usage_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.main(["explain", ADD, *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_a_path_under_a_file_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "afile").write_text("x")
    drawn = _titles(monkeypatch)
    err = _usage_error(capsys, "--draw", str(tmp_path / "afile" / "s.png"))
    assert err.startswith("schedgen: --draw ") and "afile is not a directory" in err
    assert drawn == []                                 # refused before anything is drawn


def test_an_unwritable_folder_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(os, "access", lambda path, mode: False)    # as a user without write permission
    err = _usage_error(capsys, "--draw", str(tmp_path / "s.png"))
    assert f"cannot write {tmp_path / 's.png'}: permission denied" in err


def test_a_failed_write_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    import matplotlib.figure

    def full(self, *a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    err = _usage_error(capsys, "--draw", str(tmp_path / "s.png"))
    assert f"schedgen: --draw: cannot write {tmp_path / 's.png'}: No space left on device" in err


def test_without_matplotlib_a_one_line_error_names_the_extra(tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # `import matplotlib` raises ImportError
    with pytest.raises(SystemExit) as exc:
        cli.main(["explain", ADD, "--draw", str(tmp_path / "s.png")])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert "kernel" in captured.out                                 # the explain text itself is printed
    err = captured.err.strip()
    assert err == "schedgen: --draw needs matplotlib, which is not installed: pip install 'schedgen[report]'"
    assert not (tmp_path / "s.png").exists()
