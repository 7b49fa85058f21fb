"""Defect group 7 (issue 41): `schedgen new` wrote unvalidated text into the starter spec.

`--name` was pasted as is after `name: `, so a newline in it added YAML of its choosing (a `backward:` section the
user never asked for), and a name that is not an identifier (or is reserved, or too long) was written and failed
only at the next command; the `-o` path was pasted into the header comments, so a newline in it ended a comment
and the rest was read as YAML; a path that is not UTF-8 (a lone surrogate from the command line) was a
UnicodeEncodeError traceback. Now `--name` is checked as the schema checks a spec's name (a usage error, nothing
written), and the path goes into the comments shell-quoted and through `comment_text` (one line, escaped).
"""
from __future__ import annotations

import os

import pytest
import yaml

from schedgen import cli
from schedgen.frontend.validate import load_spec


def _run(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as stop:
        code = stop.code
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


@pytest.mark.parametrize("name, says", [
    ("x\nbackward:\n  grads: [x]", "is not a legal name"),
    ("my-kernel", "is not a legal name"),
    ("1st", "is not a legal name"),
    ("a" * 64, "is not a legal name"),
    ("min", "is reserved"),
    ("sg_add", "is reserved"),
    ("café", "ASCII"),
])
def test_a_name_that_is_not_a_spec_name_is_a_usage_error(tmp_path, capsys, name, says):
    out = tmp_path / "s.yaml"
    for argv in (["new", "map", "--name", name], ["new", "map", "--name", name, "-o", str(out)]):
        code, stdout, err = _run(capsys, *argv)
        assert code == 2 and stdout == "", stdout
        assert err.startswith("schedgen: --name: ") and says in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_a_legal_name_is_written(tmp_path, capsys):
    out = tmp_path / "s.yaml"
    code, stdout, _ = _run(capsys, "new", "map", "--name", "a" * 63, "-o", str(out))
    assert code == 0
    assert load_spec(str(out))[0].name == "a" * 63


def test_a_stem_that_is_not_a_spec_name_gives_the_default(tmp_path, capsys):
    for stem in ("min", "a" * 64, "sg_x"):
        out = tmp_path / f"{stem}.yaml"
        assert _run(capsys, "new", "map", "-o", str(out))[0] == 0
        assert load_spec(str(out))[0].name == "my_map"


def test_a_newline_in_the_path_stays_in_the_comments(tmp_path, capsys):
    plain = tmp_path / "plain.yaml"
    evil = tmp_path / "a\nbackward:\n  grads: [x]\n#.yaml"
    for path in (plain, evil):
        assert _run(capsys, "new", "map", "-o", str(path))[0] == 0
    got, want = evil.read_text(), plain.read_text()
    assert yaml.safe_load(got) == dict(yaml.safe_load(want), name="my_map")   # the same spec, only comments differ
    assert len(got.splitlines()) == len(want.splitlines())
    assert "'" + str(evil).replace("\n", "\\n") + "'" in got
    assert load_spec(str(evil))[0].backward is None


def test_a_path_that_is_not_utf8(tmp_path, capsys):
    path = os.fsdecode(os.fsencode(str(tmp_path)) + b"/\xff\x1b[31m.yaml")
    code, stdout, err = _run(capsys, "new", "map", "-o", path)
    assert code == 0, err
    assert stdout.rstrip("\n").isprintable(), repr(stdout)
    assert "\\udcff\\x1b[31m.yaml" in stdout
    text = (tmp_path / os.fsdecode(b"\xff\x1b[31m.yaml")).read_text()
    assert "\\udcff\\x1b[31m.yaml" in text and "\x1b" not in text
    assert load_spec(path)[0].name == "my_map"
