"""Defect group 2 (issue 41): a tuning-database row could redefine the op.

`build --tuned`, `tune --export --db-only` (and the bucketed build of explain / verify --tuned, and a tuning run
that reuses the row) applied a row's `overrides` as they were: a row carrying `op.body: "o = x - y"` or
`op.inputs.x.dtype: f32` built, silently, a package that computes something else. A row may now set only its
candidate's fields (its knobs' fields, the planner's picks, the sizes and the user's -D fields), and they must
rebuild the candidate the row was measured as (its config_key); anything else is one line naming the database, the
row and the key, with the legal keys, and exit status 2.
"""
from __future__ import annotations

import json
import sqlite3

import pytest
import yaml

from _specs import add_with_tune
from _tune_rows import ADD_DYN, fill, one_db_line, fake_tuning, run as _run
from schedgen import tune as T

SMALL = "tune:\n  params:\n    block_M: [16, 32]\n"
X_BLOCK = "schedule.in_specs.x.block_shape"


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    fake_tuning(monkeypatch, tmp_path)


def _edit_overrides(db, edit):
    """Apply `edit` to every results row's overrides (a dict, changed in place)."""
    conn = sqlite3.connect(db)
    with conn:
        for key, text in conn.execute("SELECT key, overrides FROM results").fetchall():
            value = json.loads(text)
            edit(value)
            conn.execute("UPDATE results SET overrides = ? WHERE key = ?", (json.dumps(value), key))
    conn.close()


def _commands(tmp_path, spec, db):
    return {"export": ["tune", spec, "--export", tmp_path / "w.yaml", "--db-only", "--db", db],
            "build": ["build", spec, "--tuned", "--db", db, "-o", tmp_path / "build"],
            "tune": ["tune", spec, "--db", db]}


TAMPERS = {
    "body": (lambda o: o.update({"op.body": "o = x - y"}), "'op.body' is not a field this spec's tune space sets"),
    "dtype": (lambda o: o.update({"op.inputs.x.dtype": "f32"}), "'op.inputs.x.dtype' is not a field"),
    "unknown_field": (lambda o: o.update({"schedule.nope": 1}), "'schedule.nope' is not a field"),
    "other_candidate": (lambda o: o.update({X_BLOCK: [64, 256]}), "build another spec than the candidate"),
    "bad_value": (lambda o: o.update({X_BLOCK: "abc"}), "column overrides: schedule.in_specs.x.block_shape"),
    "size": (lambda o: o.update({"M": 2048}), "build another spec than the candidate"),
}


@pytest.mark.parametrize("command", ["export", "build", "tune"])
@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_a_row_that_sets_other_fields_is_refused(tmp_path, capsys, command, tamper):
    spec, db = add_with_tune(tmp_path, SMALL), tmp_path / "t.sqlite"
    fill(db, spec)
    edit, what = TAMPERS[tamper]
    _edit_overrides(db, edit)
    assert _run(_commands(tmp_path, spec, db)[command]) == 2
    line = one_db_line(capsys.readouterr().err, db, "results row ", "column overrides", what)
    assert str(spec) not in line                    # located in the database, not at a line of the spec file
    if tamper in ("body", "dtype", "unknown_field"):
        assert f"({X_BLOCK}, schedule.in_specs.y.block_shape, schedule.out_specs.o.block_shape, M, N)" in line
    assert not (tmp_path / "w.yaml").exists() and not (tmp_path / "build").exists()


def test_a_bucketed_build_refuses_such_a_row(tmp_path, capsys):
    spec, db = tmp_path / "dyn.yaml", tmp_path / "t.sqlite"
    spec.write_text(ADD_DYN)
    for bound in (256, 1024):
        fill(db, spec, {"M": bound})
    _edit_overrides(db, lambda o: o.update({"op.inputs.x.dtype": "f32"}))
    for argv in (["explain", spec, "--tuned", "--db", db], ["build", spec, "--tuned", "--db", db, "-o", tmp_path],
                 ["verify", spec, "--tuned", "--db", db]):
        assert _run(argv) == 2, argv
        one_db_line(capsys.readouterr().err, db, "'op.inputs.x.dtype' is not a field")


def test_the_rows_tune_writes_are_used(tmp_path, capsys):
    """The legal neighbours: the rows as written, rows written with a -D of a size read without it, and the
    reverse."""
    spec = add_with_tune(tmp_path, SMALL)
    plain, sized = tmp_path / "plain.sqlite", tmp_path / "sized.sqlite"
    fill(plain, spec)
    fill(sized, spec, {"M": 1024})                  # the file's own M, given again
    for db, extra in ((plain, []), (sized, []), (plain, ["-D", "M=1024"])):
        out = tmp_path / "w.yaml"
        assert _run(["tune", spec, "--export", out, "--db-only", "--db", db, *extra]) == 0, capsys.readouterr()
        assert "best known: best 1.0000 ms   block_M=16" in capsys.readouterr().out
        written = yaml.safe_load(out.read_text())
        assert written["op"]["body"] == "o = x + y" and written["schedule"]["in_specs"]["x"]["block_shape"] == [16,
                                                                                                               256]
    assert _run(["tune", spec, "--db", plain]) == 0         # every candidate known: nothing to measure
    capsys.readouterr()


def test_python_api_raises_tunedberror(tmp_path):
    spec, db = add_with_tune(tmp_path, SMALL), tmp_path / "t.sqlite"
    fill(db, spec)
    _edit_overrides(db, lambda o: o.update({"op.body": "o = x - y"}))
    with pytest.raises(T.TuneDBError, match="'op.body' is not a field"):
        T.best_known(spec, db=db)


def test_a_row_stored_under_another_candidates_key_is_refused(tmp_path, capsys):
    """A tuning run reuses rows by their key: the row's config_key must be that candidate's too (two rows whose
    config_keys were swapped would otherwise export each other's schedule)."""
    spec, db = add_with_tune(tmp_path, SMALL), tmp_path / "t.sqlite"
    fill(db, spec)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE results SET config_key = 'x' || config_key WHERE rowid = 1")
    conn.close()
    assert _run(["tune", spec, "--db", db, "--export", tmp_path / "w.yaml"]) == 2
    one_db_line(capsys.readouterr().err, db, "results row 1 ", "column config_key: not the key of the candidate")
    assert not (tmp_path / "w.yaml").exists()
