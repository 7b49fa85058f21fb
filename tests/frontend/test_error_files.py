"""Error cases as data files: every tests/errors/*.yaml / *.toml is a small spec whose offending lines carry
the expected problem in a comment beside them:

    sizes: {M: 0, N: 4096}  # error @14: op.sizes.M: Input should be greater than or equal to 1

`# error @COL: FIELD: TEXT` (`@COL` optional; several may share a line) says: `schedgen validate` reports a problem
at this line (and column COL), for FIELD, whose message contains TEXT. A file is run with `schedgen validate`
in-process; exactly the commented problems must be reported (each once, nothing else), with exit status 2; a
file with no error comment must validate (exit 0). `# define: NAME=VALUE` anywhere passes `-D NAME=VALUE`.
A comment cannot sit inside a YAML block scalar or a TOML multi-line string: those cases stay in
test_spec_errors.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT
from schedgen import cli

ERRORS_DIR = ROOT / "tests" / "errors"
FILES = sorted(p for p in ERRORS_DIR.iterdir() if p.suffix in (".yaml", ".toml"))
_MARK = re.compile(r"#\s*error(?:\s*@(\d+))?:\s*(\S+):\s*(.*?)\s*(?=#\s*error\b|$)")
_DEFINE = re.compile(r"^#\s*define:\s*(\S+=.*?)\s*$")
_REPORTED = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+): (?P<field>\S+): (?P<msg>.*)$")


@dataclass
class Expected:
    line: int
    col: int | None
    field: str
    text: str
    code_end: int  # the column just past the code of the line (before its comments)


def expectations(path: Path) -> tuple[list[Expected], list[str]]:
    out, defines = [], []
    for lineno, line in enumerate(path.read_text(encoding="utf-8-sig").split("\n"), start=1):
        if m := _DEFINE.match(line):
            defines += ["-D", m.group(1)]
            continue
        first = line.find("# error")
        for m in _MARK.finditer(line):
            out.append(Expected(lineno, int(m.group(1)) if m.group(1) else None, m.group(2), m.group(3),
                                len(line[:first].rstrip()) + 1))
    return out, defines


def validate(path: Path, defines: list[str], capsys) -> tuple[int, list[re.Match]]:
    code = cli.main(["validate", str(path), *defines])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    reported = []
    for text in captured.err.splitlines():
        m = _REPORTED.match(text)
        assert m and m["file"] == str(path), f"not a located line for {path.name}: {text!r}"
        reported.append(m)
    return code, reported


def test_there_are_enough_cases():
    with_errors = [p for p in FILES if expectations(p)[0]]
    assert len(with_errors) >= 40 and any(p.suffix == ".toml" for p in with_errors)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_error_file(path, capsys):
    expected, defines = expectations(path)
    code, reported = validate(path, defines, capsys)
    if not expected:
        assert code == 0 and reported == [], [m.group(0) for m in reported]
        return
    assert code == 2
    left = list(reported)
    for want in expected:
        match = next((m for m in left if int(m["line"]) == want.line and m["field"] == want.field
                      and want.text in m["msg"]), None)
        assert match is not None, (f"{path.name}:{want.line}: expected {want.field}: ...{want.text}...; reported:\n"
                                   + "\n".join(m.group(0) for m in reported))
        col = int(match["col"])
        if want.col is not None:
            assert col == want.col, match.group(0)
        else:
            assert 1 <= col <= want.code_end, match.group(0)
        left.remove(match)
    assert left == [], "reported but not commented:\n" + "\n".join(m.group(0) for m in left)


def test_a_wrong_comment_fails(tmp_path, capsys):
    """The checker itself: a comment on the wrong line, or naming another field, is caught."""
    good = ERRORS_DIR / "zero_size.yaml"
    moved = tmp_path / "moved.yaml"
    lines = good.read_text().split("\n")
    marked = next(i for i, line in enumerate(lines) if "# error" in line)
    code_part, comment = lines[marked].split("  # error", 1)
    lines[marked] = code_part
    lines[marked + 1] += "  # error" + comment
    moved.write_text("\n".join(lines))
    with pytest.raises(AssertionError, match="expected op.sizes.M"):
        test_error_file(moved, capsys)
