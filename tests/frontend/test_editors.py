"""The schema in the editors it is written for: the YAML language server (VS Code's YAML extension) and taplo (Even
Better TOML), run on every bundled spec and every error file that the models reject at validation.

Needs node and the tools in .venv/editor-tools (`bash scripts/editor_tools.sh` installs them from npm; they are not
dependencies of schedgen); skipped, saying so, without them. Where schedgen and the editor both report a problem
they must agree on the place: the YAML language server's line and column are schedgen's (a missing key aside:
it marks the mapping that lacks it), taplo's lines include schedgen's (it marks the value, and an unknown key's
whole table); a file schedgen accepts shows no problem in either.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, spec_files
from schedgen.errors import SpecErrors
from schedgen.frontend.load import load_file
from schedgen.frontend.validate import validate_data

TOOLS = ROOT / ".venv" / "editor-tools" / "node_modules"
YLS = ROOT / "tests" / "frontend" / "editors.js"
TAPLO = TOOLS / "@taplo" / "cli" / "dist" / "cli.js"
SCHEMA = ROOT / "schemas" / "schedgen.schema.json"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    NODE is None or not (TOOLS / "yaml-language-server").is_dir() or not TAPLO.is_file(),
    reason="the editor tools are not installed: bash scripts/editor_tools.sh (needs node and npm)")

# JSON numbers have no int/float distinction (see test_schema.KNOWN_GAPS)
KNOWN_GAPS = {"float_for_int.yaml"}


def _rejected_at_validation():
    """Error files the loader reads and the models reject: (path, {(line, col)} of schedgen's problems, bom)."""
    out = []
    for path in sorted((ROOT / "tests" / "errors").iterdir()):
        if path.suffix not in (".yaml", ".toml") or path.name in KNOWN_GAPS:
            continue
        try:
            data, src = load_file(str(path))
        except SpecErrors:
            continue          # a load error: the editor's own parser reports those
        try:
            validate_data(data, src)
        except SpecErrors as exc:
            where = {(src.locate(p).line, src.locate(p).col): p.message for p in exc.problems}
            out.append((path, where, path.read_bytes().startswith(b"\xef\xbb\xbf")))
    return out


def yaml_ls(files, associate: bool) -> dict[str, list[dict]]:
    """The YAML language server's problems per file; `associate`: the schema given as a setting, else only the
    file's modeline names it."""
    run = subprocess.run([NODE, str(YLS), str(TOOLS), str(SCHEMA) if associate else "-", *map(str, files)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return {r["file"]: r["problems"] for r in map(json.loads, run.stdout.splitlines())}


def taplo(path, schema: bool = True) -> tuple[int, set[int], str]:
    args = ["lint", "--no-auto-config"] + (["--schema", SCHEMA.as_uri()] if schema else []) + [str(path)]
    run = subprocess.run([NODE, str(TAPLO), *args], capture_output=True, text=True, timeout=300)
    text = run.stdout + run.stderr
    return run.returncode, {int(n) for n in re.findall(r"┌─ .*?:(\d+):\d+", text)}, text


@pytest.fixture(scope="module")
def yaml_errors():
    """The language server's problems for every YAML error file, in one run (a node start is a second)."""
    return yaml_ls([c[0] for c in CASES if c[0].suffix == ".yaml"], associate=True)


CASES = _rejected_at_validation() if not pytestmark.args[0] else []


def test_bundled_yaml_specs_are_clean_through_their_modeline(tmp_path):
    specs = [p for p in spec_files() if p.suffix == ".yaml"]
    problems = yaml_ls(specs, associate=False)
    assert {f: p for f, p in problems.items() if p} == {}
    # and the modeline is what brought the schema in: the same file with a bad dtype, beside a copy of the schema
    (tmp_path / "schemas").mkdir()
    shutil.copy(SCHEMA, tmp_path / "schemas" / SCHEMA.name)
    (tmp_path / "specs").mkdir()
    bad = tmp_path / "specs" / "add_bf16.yaml"
    text = (ROOT / "specs" / "add_bf16.yaml").read_text()
    bad.write_text(text.replace("dtype: bf16}", "dtype: bf32}", 1))
    line = next(i for i, t in enumerate(bad.read_text().splitlines(), 1) if "bf32" in t)
    (found,) = yaml_ls([bad], associate=False).values()
    assert [(p["line"], p["message"][:22]) for p in found] == [(line, "Value is not accepted.")]


def test_bundled_toml_specs_are_clean_through_their_schema_line(tmp_path):
    for path in (p for p in spec_files() if p.suffix == ".toml"):
        code, _, text = taplo(path, schema=False)     # the #:schema line names it
        assert code == 0, text
        bad = tmp_path / path.name
        bad.write_text(path.read_text().replace('dtype = "f32"', 'dtype = "f33"', 1).replace(
            "#:schema ../schemas/", f"#:schema {SCHEMA.parent.as_uri()}/"))
        code, lines, text = taplo(bad, schema=False)
        assert code != 0 and "is not one of" in text, text


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].name)
def test_error_files_are_marked_where_schedgen_reports_them(case, yaml_errors):
    path, ours, bom = case
    if path.suffix == ".yaml":
        theirs = yaml_errors[str(path)]
        missing = [p for p in theirs if p["message"].startswith("Missing property")]
        placed = {(p["line"], p["col"]) for p in theirs if p not in missing}
        expected = {pos for pos, message in ours.items() if message != "required key is missing"}
        assert len(missing) == len(ours) - len(expected)
        if bom:     # the language server counts the byte-order mark as a column
            placed = {(line, col - (line == 1)) for line, col in placed}
        assert placed == expected, (theirs, ours)
    else:
        code, lines, text = taplo(path)
        assert code != 0, text
        if not bom:   # taplo puts a BOM file's problems on line 1
            assert {line for line, _ in ours} <= lines, text


def test_files_schedgen_accepts_are_clean_in_both():
    accepted = []
    for path in sorted((ROOT / "tests" / "errors").iterdir()):
        if path.suffix not in (".yaml", ".toml"):
            continue
        try:
            validate_data(*load_file(str(path)))
        except SpecErrors:
            continue
        accepted.append(path)      # schedgen's problems come from the planner: no schema can see them
    assert len(accepted) >= 20 and len(CASES) >= 15
    yaml_files = [p for p in accepted if p.suffix == ".yaml"]
    assert {f: p for f, p in yaml_ls(yaml_files, associate=True).items() if p} == {}
    for path in (p for p in accepted if p.suffix == ".toml"):
        code, _, text = taplo(path)
        assert code == 0, text
