"""Defect group 11 (issue 41): long values.

Before: a 5000-digit `--buckets` bound was a traceback (int() refuses more than 4300 digits: ValueError), and so
were other whole numbers of the command line (`--budget`, `--seed`: argparse's "invalid int value" echoing all
5000 digits; `--gpus`: "Exceeds the limit (4300 digits)"); a 900 KB spec name, op.kind or unknown key was echoed
whole in its error line (twice for a key: in the field path and in the message), as was a 100 KB command-line
argument in argparse's own errors.

Now numbers are read with bounds before int(), and every message cuts what it echoes:
`'nnnn…'…(900000 characters)`; a located line also cuts its field path's names and, as a backstop, its message.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from _cli import TOML, YAML, run_cli, write
from schedgen.errors import SourceMap, SpecErrors
from schedgen.frontend.validate import validate_data
from schedgen.tune.pool import Gpu, pick_gpus

ROOT = Path(__file__).resolve().parents[2]
BUCKETS = ROOT / "specs" / "matmul_bf16_dynamic_buckets.yaml"
DIGITS = "9" * 5000
HUGE = "n" * 900_000


def _short(lines: list[str], limit: int = 700) -> str:
    """The error line (argparse prints its usage lines first), every line under `limit` characters."""
    assert lines and all(len(line) < limit for line in lines), [f"{len(line)}: {line[:300]}" for line in lines]
    assert lines[-1].startswith("schedgen") or len(lines) == 1, lines
    return lines[-1]


@pytest.mark.parametrize("argv, said", [
    (["build", str(BUCKETS), "--tuned", "--buckets", f"M={DIGITS}", "-o", "OUT"], "--buckets M: bound 999999999…"),
    (["explain", str(BUCKETS), "--tuned", "--buckets", f"M=64,{DIGITS}"], "(5000 digits) is too large"),
    (["tune", str(BUCKETS), "--buckets", f"M={DIGITS}", "--dry-run"], "(5000 digits) is too large"),
    (["tune", str(BUCKETS), "--budget", DIGITS], "(5000 characters) is too large: give a whole number >= 1"),
    (["tune", str(BUCKETS), "--seed", DIGITS], "(5000 characters) is too large"),
    (["verify", str(BUCKETS), "--seed", DIGITS], "(5000 characters) is too large"),
    (["tune", str(BUCKETS), "--workers", DIGITS], "(5000 characters) is too large"),
    (["bench", str(BUCKETS), "--at", f"M={DIGITS}"], "at most 19 digits"),
    (["verify", str(BUCKETS), "--timeout", DIGITS], "(5000 characters): give seconds"),
    (["tune", str(BUCKETS), "--buckets", f"{'x' * 100_000}=64", "--dry-run"], "no size named 'xxxxxxxx"),
    (["x" * 100_000], "invalid choice: 'xxxxxxxx"),
    (["validate", str(BUCKETS), "--" + "x" * 100_000], "unrecognized arguments: --xxxxxxxx"),
    (["bench", str(BUCKETS), "--backend", "x" * 100_000], "(choose from 'cuda', 'pallas', 'all')"),
])
def test_huge_command_line_values_are_usage_errors_cut_short(tmp_path, capsys, argv, said):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    code, lines = run_cli(capsys, *argv)
    assert code == 2
    line = _short(lines)
    assert said in line, line[:300]


def test_negative_seed_is_a_usage_error(capsys):
    code, lines = run_cli(capsys, "verify", str(BUCKETS), "--seed", "-1")
    assert code == 2 and "'-1': give a whole number >= 0" in _short(lines)


def test_gpus_with_thousands_of_digits():
    gpus = [Gpu("0", "NVIDIA H200")]
    with pytest.raises(ValueError) as exc:
        pick_gpus(DIGITS, gpus)
    assert len(str(exc.value)) < 400 and "(5000 characters)" in str(exc.value)
    with pytest.raises(ValueError) as exc:
        pick_gpus("0," + DIGITS, gpus)
    assert len(str(exc.value)) < 400 and "is not a visible device" in str(exc.value)


@pytest.mark.parametrize("old, new, where", [
    ("name: add_bf16", f"name: {HUGE}", "name: '" + "n" * 64 + "'…(900000 characters) is not a legal name"),
    ("kind: map", f"kind: {HUGE}", "op.kind: unknown kind 'nnnn"),
    ("  body: o = x + y", f"  body: o = x + y\n  {HUGE[:1000]}: 1", "op.nnnn"),
])
def test_huge_spec_values_are_cut_in_their_error_line(tmp_path, capsys, old, new, where):
    assert old in YAML
    path = write(tmp_path, YAML.replace(old, new, 1))
    code, lines = run_cli(capsys, "validate", str(path))
    assert code == 2
    line = _short(lines, 2500)
    assert where in line and line.startswith(f"{path}:"), line[:300]


@pytest.mark.parametrize("key", ["unknown", "input", "size"])
def test_huge_keys_are_cut_in_the_field_path_and_the_message(tmp_path, capsys, key):
    """TOML keys may be any length: a 900 KB one is cut in the path (`op.inputs.nnnn…(900000 characters)`) and in
    what the message says of it."""
    text = {"unknown": TOML.replace('[op]\n', f'"{HUGE}" = 1\n\n[op]\n', 1),
            "input": TOML.replace("x = { shape", f'{HUGE} = {{ shape = ["B", "M", "N"], dtype = "f32" }}\nx = {{ shape', 1),
            "size": TOML.replace("sizes = { B = 8", f"sizes = {{ {HUGE} = 2, B = 8", 1)}[key]
    assert text != TOML
    path = write(tmp_path, text, ".toml")
    code, lines = run_cli(capsys, "validate", str(path))
    assert code == 2
    assert lines and all(len(line) < 1200 for line in lines), [len(line) for line in lines]
    assert any("…(900000 characters)" in line for line in lines), [line[:300] for line in lines]


def test_every_located_line_is_bounded():
    """The backstop: whatever a check echoes, a located line's path names and message are cut."""
    from schedgen.errors import Problem
    src = SourceMap("spec.yaml")
    line = src.format(Problem(("op", "inputs", HUGE), "bad: " + HUGE))
    assert len(line) < 2300 and line.count("…(900000 characters)") == 1 and "…(900005 characters)" in line
    with pytest.raises(SpecErrors) as exc:
        validate_data({"name": HUGE, "op": {"kind": HUGE}}, src)
    assert all(len(text) < 1500 for text in exc.value.lines())
