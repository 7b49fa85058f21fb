"""Defect 8, loader half (issue 14): tracebacks where a located line and exit status 2 are promised.

- a TOML integer over Python's 4,300-digit int-str limit: tomllib raised ValueError (not TOMLDecodeError);
- a 20,000-digit hex size (YAML, TOML or -D) loaded, then repr() of it in the error message raised ValueError;
- a -D value nested thousands deep: RecursionError in yaml.safe_load;
- a -D index in non-ASCII digits: str.isdigit() accepted '²' and int() raised (and '١' was silently index 1).
Each now gives one located, short line and exit status 2.
"""
from __future__ import annotations

import pytest

from _cli import DATA, TOML, YAML, one_located_line, run_cli, write

HEX = "0x" + "f" * 20_000
DEC = "1" * 5_000


def test_toml_integer_over_int_str_limit(tmp_path, capsys):
    path = write(tmp_path, TOML.replace("B = 8,", f"B = {DEC},"), ".toml")
    code, lines = run_cli(capsys, "validate", str(path))
    assert code == 2
    line = one_located_line(lines, path, 7, 15)
    assert "integer 111111111…(5000 digits) is too large" in line


@pytest.mark.parametrize("suffix,text,where", [
    (".yaml", YAML.replace("{M: 4096,", f"{{M: {HEX},"), (6, 14)),
    (".toml", TOML.replace("B = 8,", f"B = {HEX},"), (7, 11)),
], ids=["yaml", "toml"])
def test_huge_hex_size(tmp_path, capsys, suffix, text, where):
    path = write(tmp_path, text, suffix)
    code, lines = run_cli(capsys, "validate", str(path))
    assert code == 2
    line = one_located_line(lines, path, *where)
    assert "digits)" in line and "too large" in line


def test_huge_hex_size_on_the_command_line(capsys):
    code, lines = run_cli(capsys, "validate", str(DATA / "add_bf16.yaml"), "-D", f"M={HEX}")
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 300, lines
    assert lines[0].startswith("schedgen: -D M: ") and "(20002 digits)" in lines[0]


@pytest.mark.parametrize("value", ["[" * 5000 + "]" * 5000, "{a: " * 3000 + "1" + "}" * 3000, "[" * 5000],
                         ids=["lists", "mappings", "unclosed"])
def test_deeply_nested_override(capsys, value):
    code, lines = run_cli(capsys, "validate", str(DATA / "add_bf16.yaml"), "-D", f"schedule.backends={value}")
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 300, lines
    assert lines[0].startswith("schedgen: -D schedule.backends: ")
    assert "nested more than 100 levels" in lines[0] or "YAML syntax error" in lines[0], lines


@pytest.mark.parametrize("key,ascii_form", [("schedule.cluster.\u00b2", "2"), ("schedule.cluster[\u0661]", "1"),
                                            ("schedule.cluster.\u0661", "1"), ("schedule.cluster[\uff10]", "0")],
                         ids=["superscript-two", "arabic-indic-bracket", "arabic-indic-dot", "fullwidth-zero"])
def test_override_index_in_non_ascii_digits(capsys, key, ascii_form):
    code, lines = run_cli(capsys, "validate", str(DATA / "add_bf16.yaml"), "-D", f"{key}=2")
    assert code == 2
    assert lines == [f"schedgen: -D {key}: index {key[-2] if key.endswith(']') else key[-1]!r} is not written in "
                     f"ASCII digits; write [{ascii_form}]"]


def test_override_index_too_large_is_one_line(capsys):
    code, lines = run_cli(capsys, "validate", str(DATA / "add_bf16.yaml"), "-D", f"schedule.cluster[{DEC}]=2")
    assert code == 2 and len(lines) == 1 and len(lines[0]) < 300, lines
    assert "is too large" in lines[0]


def test_ascii_index_still_sets_the_entry(capsys):
    for key in ("schedule.in_specs.x.block_shape[0]", "schedule.in_specs.x.block_shape.0"):
        code, lines = run_cli(capsys, "validate", str(DATA / "add_bf16.yaml"), "-D", f"{key}=0")
        assert code == 2
        assert lines == [f"{DATA / 'add_bf16.yaml'}:16:23: schedule.in_specs.x.block_shape[0]: Input should be "
                         "greater than or equal to 1 (got 0)"]
