"""Running `schedgen` for the loader regression tests (not a test module): in-process, or in a child process
bounded in time and memory (for inputs that made the old code hang or read until MemoryError)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from schedgen import cli

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
YAML = (DATA / "add_bf16.yaml").read_text()
TOML = (DATA / "scale_f32.toml").read_text()

_LIMITS = """
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
sys.argv = ["schedgen", *sys.argv[1:]]
runpy.run_module("schedgen", run_name="__main__")
"""


def run_cli(capsys, *args: str) -> tuple[int, list[str]]:
    """`schedgen ARGS` in this process: (exit status, stderr lines). A usage error's SystemExit counts as its code."""
    try:
        code = cli.main(list(args))
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return code, captured.err.splitlines()


def run_child(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`schedgen ARGS` in a child process with 3 GiB of address space and `timeout` seconds (raises on timeout). The
    limit only stops a child that would never end (a FIFO read): a healthy one takes a few seconds, a minute on a
    loaded machine, so the limit leaves a wide margin over that."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", _LIMITS, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout)


def write(tmp_path: Path, text: str, suffix: str = ".yaml", name: str = "spec") -> Path:
    path = tmp_path / f"{name}{suffix}"
    path.write_text(text, encoding="utf-8")
    return path


def one_located_line(lines: list[str], path: Path, line: int | None = None, col: int | None = None) -> str:
    """The single error line, checked to be `PATH:LINE:COL: ...` (at LINE:COL when given) and short."""
    assert len(lines) == 1, lines
    text = lines[0]
    assert text.startswith(f"{path}:"), text
    rest = text[len(str(path)) + 1:]
    got_line, got_col, _ = rest.split(":", 2)
    assert got_line.isascii() and got_line.isdigit() and got_col.isascii() and got_col.isdigit(), text
    if line is not None:
        assert (int(got_line), int(got_col)) == (line, col), text
    assert len(text) < len(str(path)) + 300, f"{len(text)} characters: {text[:400]}"
    return text
