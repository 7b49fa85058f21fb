"""Defect group 8 (issue 41): corrupt or odd tuning-database rows gave tracebacks.

A column that is not JSON, a list where an object belongs, text in a numeric column, JSON nested 5000 deep made
`build --tuned`, `explain --tuned` and `tune --export --db-only` raise (JSONDecodeError, TypeError, RecursionError);
`verified = 'no'` counted as verified; a row's unknown override key was reported at a line of the spec file; and
`SCHEDGEN_TUNE_DB_TIMEOUT=inf` waited 0 s. Every row read from the database is now checked against one schema
(schedgen/tune/rows.py): a row that does not fit is one line naming the database, the row and the column, with what
is legal, and exit status 2, for every reader. A wait that is not 0..86400 s is refused the same way.
"""
from __future__ import annotations

import sqlite3

import pytest

from _specs import add_with_tune
from _tune_rows import ADD_DYN, fill, one_db_line, set_column, fake_tuning, run as _run
from schedgen import tune as T
from schedgen.tune import rows as R

SMALL = "tune:\n  params:\n    block_M: [16, 32]\n"
DEEP_LIST = '{"schedule.in_specs.x.block_shape": ' + "[" * 5000 + "]" * 5000 + "}"
DEEP_OBJECT = '{"block_M": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}"

# column, the value written (as sqlite stores it), what the message says is legal
CASES = {
    "overrides_not_json": ("overrides", "{not json", "not JSON"),
    "overrides_list": ("overrides", "[1, 2]", "legal: a JSON object"),
    "overrides_string": ("overrides", '"text"', "legal: a JSON object"),
    "overrides_integer": ("overrides", 7, "holds a JSON number; legal: a JSON object"),   # TEXT affinity: '7'
    "overrides_blob": ("overrides", b"\x00\xff", "legal: text (JSON)"),
    "overrides_nan": ("overrides", '{"M": NaN}', "not JSON"),
    "overrides_deep": ("overrides", DEEP_LIST, "nested deeper than 32"),
    "overrides_huge": ("overrides", '{"M": "' + "x" * (R.MAX_JSON + 1) + '"}', "at most 1000000"),
    "knobs_list": ("knobs", "[]", "legal: a JSON object"),
    "knobs_deep": ("knobs", DEEP_OBJECT, "nested deeper than 32"),
    "knobs_not_json": ("knobs", "block_M=16", "not JSON"),
    "shape_text_size": ("shape", '{"M": "big"}', "legal: a JSON object of sizes"),
    "shape_null": ("shape", "null", "legal: a JSON object"),
    "toolchain_list": ("toolchain", "[1]", "legal: a JSON object"),
    "time_text": ("time_ms", "fast", "legal: NULL or a finite number >= 0"),
    "time_negative": ("time_ms", -1.0, "legal: NULL or a finite number >= 0"),
    "time_inf": ("time_ms", float("inf"), "legal: NULL or a finite number >= 0"),
    "tflops_text": ("tflops", "many", "legal: NULL or a finite number >= 0"),
    "rel_error_blob": ("rel_error", b"\x01", "legal: NULL or a number >= 0"),
    "rel_error_negative": ("rel_error", -0.5, "legal: NULL or a number >= 0"),
    "verified_no": ("verified", "no", "legal: NULL (not checked), 1 (matches numpy) or 0"),
    "verified_two": ("verified", 2, "legal: NULL (not checked), 1"),
    "verified_half": ("verified", 0.5, "legal: NULL (not checked), 1"),
    "gpu_blob": ("gpu", b"\x00", "legal: text"),
    "spec_name_blob": ("spec_name", b"x", "legal: text"),
    "detail_huge": ("detail", "x" * (R.MAX_TEXT + 1), "legal: text of at most"),
    "kernel_blob": ("kernel", b"k", "legal: text"),
}


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    fake_tuning(monkeypatch, tmp_path)


@pytest.mark.parametrize("command", ["export", "build", "tune"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_corrupt_row_is_one_located_line(tmp_path, capsys, command, case):
    spec, db = add_with_tune(tmp_path, SMALL), tmp_path / "t.sqlite"
    fill(db, spec)
    column, value, legal = CASES[case]
    set_column(db, column, value)
    argv = {"export": ["tune", spec, "--export", tmp_path / "w.yaml", "--db-only", "--db", db],
            "build": ["build", spec, "--tuned", "--db", db, "-o", tmp_path / "build"],
            "tune": ["tune", spec, "--db", db]}[command]
    assert _run(argv) == 2
    line = one_db_line(capsys.readouterr().err, db, "results row ", f"column {column}: ", legal)
    assert len(line) < len(str(db)) + 400, line
    assert not (tmp_path / "w.yaml").exists() and not (tmp_path / "build").exists()


@pytest.mark.parametrize("case", ["overrides_list", "knobs_deep", "time_text", "verified_no", "shape_null"])
def test_explain_and_verify_tuned_read_the_same_schema(tmp_path, capsys, case):
    spec, db = tmp_path / "dyn.yaml", tmp_path / "t.sqlite"
    spec.write_text(ADD_DYN)
    for bound in (256, 1024):
        fill(db, spec, {"M": bound})
    column, value, legal = CASES[case]
    set_column(db, column, value)
    for argv in (["explain", spec, "--tuned", "--db", db], ["verify", spec, "--tuned", "--db", db],
                 ["build", spec, "--tuned", "--db", db, "-o", tmp_path / "build"]):
        assert _run(argv) == 2, argv
        one_db_line(capsys.readouterr().err, db, f"column {column}: ", legal)


def test_verified_no_does_not_count_as_verified(tmp_path):
    """One row `verified = 'no'`: refused, not taken as the verified winner; 0 is not verified."""
    spec, db = add_with_tune(tmp_path, SMALL), tmp_path / "t.sqlite"
    fill(db, spec)
    best = T.best_known(spec, db=db)
    set_column(db, "verified", 0, f"key = '{best['key']}'")
    assert T.best_known(spec, db=db)["key"] != best["key"]
    set_column(db, "verified", "no", f"key = '{best['key']}'")
    with pytest.raises(T.TuneDBError, match=r"results row \d+ \(key [0-9a-f]+\), column verified: holds str 'no'"):
        T.best_known(spec, db=db)


def test_an_infinite_error_is_a_wrong_result_not_a_corrupt_row(tmp_path):
    """rel_error is inf for an output with NaN in it (reference.rel_error): a row the tuner writes itself."""
    spec, db = add_with_tune(tmp_path, SMALL), tmp_path / "t.sqlite"
    fill(db, spec)
    with T.TuneDB(db) as d:
        key = d.rows()[0]["key"]
        d.set_verified(key, False, float("inf"), "NaN in the output")
        assert d.get(key)["rel_error"] == float("inf") and d.get(key)["status"] == "wrong"


def test_the_runs_table_is_checked_too(tmp_path):
    db = tmp_path / "t.sqlite"
    with T.TuneDB(db) as d:
        d.start_run(spec_file="f", spec_name="n", spec_key="k", shape={"M": 1}, backend="cuda")
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE runs SET shape = '[['")
    conn.close()
    with T.TuneDB(db) as d, pytest.raises(T.TuneDBError, match=r"runs row 1, column shape: holds text that is not "):
        d.runs()


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "-1", "1e300", "86401", "soon", "0x10"])
def test_an_unusable_lock_wait_is_refused(tmp_path, capsys, monkeypatch, value):
    spec = add_with_tune(tmp_path, SMALL)
    monkeypatch.setenv("SCHEDGEN_TUNE_DB_TIMEOUT", value)
    assert _run(["tune", spec, "--export", tmp_path / "w.yaml", "--db-only", "--db", tmp_path / "t.sqlite"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"schedgen: $SCHEDGEN_TUNE_DB_TIMEOUT={value!r}: not a usable wait; give seconds from 0"), err
    with pytest.raises(T.TuneDBError, match="SCHEDGEN_TUNE_DB_TIMEOUT"):
        T.TuneDB(tmp_path / "t.sqlite")


@pytest.mark.parametrize("value, wait", [("0", 0.0), ("0.25", 0.25), ("86400", 86400.0), ("", 60.0), (None, 60.0)])
def test_a_usable_lock_wait_is_taken(tmp_path, monkeypatch, value, wait):
    if value is None:
        monkeypatch.delenv("SCHEDGEN_TUNE_DB_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("SCHEDGEN_TUNE_DB_TIMEOUT", value)
    with T.TuneDB(tmp_path / "t.sqlite") as d:
        assert d.timeout == wait
