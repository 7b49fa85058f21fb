"""Defect 9 (issue 14): text from the spec went through rich markup.

`schedgen tune` printed the space (knob values, constraint texts), the progress bar's "best" field, each failure's
detail and the final table's cells as rich markup, so a constraint whose comment held `[/bold]`, or a string knob
value `[/bold]`, crashed the run with rich's MarkupError (a traceback), and `[link=...]` in a value became a
terminal hyperlink. Everything from the spec is now escaped (or passed as Text) wherever tune and the CLI print
through rich.
"""
from __future__ import annotations

import io

from _specs import add_with_tune
from schedgen import cli
from schedgen import tune as T

LINK = "[link=https://example.com/x]click[/link]"
EVIL = f"""tune:
  params:
    block_M: [16, 32]
    tile_order: ["[/bold]", "{LINK}", "[bold red]loud"]
  constraints:
    - "block_M * 8 <= 192  # [/bold] {LINK}"
"""


def test_cli_tune_prints_spec_text_literally(tmp_path, capsys):
    path = add_with_tune(tmp_path, EVIL)
    assert cli.main(["tune", str(path), "--dry-run", "--workers", "1"]) == 0    # every point is pruned
    captured = capsys.readouterr()
    text = " ".join((captured.err + captured.out).split())          # rich wraps long lines
    assert "Traceback" not in text
    assert "tile_order ['[/bold]', '[link=https://example.com/x]click[/link]', '[bold red]loud']" in text, text
    assert f"3 x tune.constraints[0]: block_M * 8 <= 192 # [/bold] {LINK} is false" in text, text
    assert f"(got '{LINK}')" in text and "(got '[/bold]')" in text


def _console():
    out = io.StringIO()
    return out, __import__("rich.console").console.Console(file=out, width=250, force_terminal=True,
                                                             color_system="truecolor")


def _row(key, status, knobs, detail="", time_ms=None):
    return {"key": key, "status": status, "knobs": knobs, "detail": detail, "time_ms": time_ms, "gbps": 100.0,
            "tflops": None, "verified": True if status == "ok" else None, "rel_error": 1e-3, "gpu": "Fake"}


def test_progress_and_summary_escape_values_and_details(tmp_path):
    path = add_with_tune(tmp_path, EVIL)
    space = T.load_space(path)
    pruning = T.prune(space)
    knobs = {"block_M": 16, "tile_order": LINK}
    good = _row("a", "ok", knobs, time_ms=1.5)
    bad = _row("b", "fault", {"block_M": 32, "tile_order": "[/bold]"}, detail="RuntimeError: [/bold] " + LINK)
    out, console = _console()
    progress = T.RichProgress(console)
    progress.space(space, pruning)
    progress.start(2, 2, 0, good)
    cand = T.Candidate(3, {"block_M": 32, "tile_order": "[/bold]"}, {})
    progress.measured(cand, bad, good)
    progress.verifying(good)
    progress.finished(good)
    progress.stop()
    result = T.TuneResult(space, pruning, [good, bad], 2, 0, 2, good, 1.0, 0.5)
    console.print(T.summary(result, top=5))
    text = out.getvalue()
    assert "\x1b]8;" not in text                     # no OSC 8 terminal hyperlink
    assert text.count(LINK) >= 4 and "[/bold]" in text and "[bold red]loud" in text
