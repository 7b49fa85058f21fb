"""Defect 13 (issue 14): input quirks.

- YAML 1.1 reads `1:08:16` as 4096 (base 60), `010` as 8 (octal), `0x1000` as 4096: accepted silently as
  sizes. Now refused with a located error that says to write a decimal integer.
- A TOML file starting with a UTF-8 byte order mark got "Invalid statement" at 1:1. The BOM is now stripped
  (TOML and YAML), and columns on line 1 count without it.
- `3.4028235e38`, FLT_MAX as float32 prints it, was over FLT_MAX as a double and refused; in YAML it was not
  even a float (PyYAML wants `3.4028235e+38`). The range is now checked after rounding to float32, and YAML
  reads `1e3`-style exponents as floats.
- An overlong integer was echoed in full in its error (20,000 digits on one line): now `123456789…(N digits)`.
"""
from __future__ import annotations

import pytest

from _cli import DATA, TOML, YAML, one_located_line, run_cli, write
from schedgen.frontend.load import load_toml_text, load_yaml_text
from schedgen.frontend.validate import validate_data
from schedgen.plan import plan
from schedgen.render import render


@pytest.mark.parametrize("text,shown", [("1:08:16", "'1:08:16' is a YAML 1.1 base-60 number (read as 4096)"),
                                        ("010", "'010' is an octal integer (a leading 0) (read as 8)"),
                                        ("0x1000", "'0x1000' is a hexadecimal integer (read as 4096)"),
                                        ("0b1", "'0b1' is a binary integer (read as 1)"),
                                        ("1__0", "'1__0' is not a decimal integer (read as 10)")])
def test_yaml_non_decimal_size_is_refused(tmp_path, capsys, text, shown):
    path = write(tmp_path, YAML.replace("{M: 4096,", f"{{M: {text},"))
    code, lines = run_cli(capsys, "validate", str(path))
    assert code == 2
    line = one_located_line(lines, path, 6, 14)
    assert line.startswith(f"{path}:6:14: op.sizes.M: {shown}") and "write a decimal integer" in line, line


def test_yaml_base_60_float_is_refused(tmp_path):
    with pytest.raises(Exception, match="base-60"):
        load_yaml_text("a: 1:30.5\n")


@pytest.mark.parametrize("suffix,base", [(".toml", TOML), (".yaml", YAML)])
def test_bom_is_accepted_and_columns_stay_right(tmp_path, capsys, suffix, base):
    path = write(tmp_path, "\ufeff" + base, suffix)
    assert run_cli(capsys, "validate", str(path))[0] == 0
    # an error on line 2 (the name) is reported where it is without the BOM
    first = base.splitlines()[1]
    bad = first.replace("scale_f32", "1abc").replace("add_bf16", "1abc")
    plain = write(tmp_path, base.replace(first, bad), suffix, "plain")
    with_bom = write(tmp_path, "\ufeff" + base.replace(first, bad), suffix, "bom")
    want = [line.replace(str(plain), str(with_bom)) for line in run_cli(capsys, "validate", str(plain))[1]]
    assert len(want) == 1 and run_cli(capsys, "validate", str(with_bom))[1] == want


def test_bom_then_error_on_line_1_keeps_its_column():
    with pytest.raises(Exception) as exc:
        load_toml_text('\ufeffname = "x" x')
    assert exc.value.lines() == ["<string>:1:12: <file>: TOML syntax error: Expected newline or end of document after "
                                 "a statement"]


@pytest.mark.parametrize("suffix,base,old,new", [
    (".toml", TOML, "scale = 2.5", "scale = 3.4028235e38"),
    (".toml", TOML, "scale = 2.5", "scale = -3.4028235e38"),
    (".yaml", YAML, "  body: o = x + y", "  constants: {s: 3.4028235e38}\n  body: o = x + y * s"),
    (".yaml", YAML, "  body: o = x + y", "  body: o = x + y * 3.4028235e38"),
], ids=["toml-constant", "toml-negative", "yaml-constant", "body-literal"])
def test_flt_max_as_printed_is_accepted_and_renders(suffix, base, old, new):
    assert old in base
    loader = load_toml_text if suffix == ".toml" else load_yaml_text
    data, src = loader(base.replace(old, new), "f" + suffix)
    p = plan(validate_data(data, src), src)
    cuda = render(p, "cuda")
    assert "3.4028235e+38f" not in cuda  # never a float literal past FLT_MAX in C++
    render(p, "pallas")


@pytest.mark.parametrize("value", ["3.4028236e38", "3.5e38", "1e39"])
def test_past_flt_max_after_rounding_is_still_refused(tmp_path, capsys, value):
    path = write(tmp_path, TOML.replace("scale = 2.5", f"scale = {value}"), ".toml")
    code, lines = run_cli(capsys, "validate", str(path))
    assert code == 2
    assert "is out of float32 range (largest is 3.4028235e38)" in one_located_line(lines, path)


@pytest.mark.parametrize("suffix,text,where", [
    (".yaml", YAML.replace("{M: 4096,", "{M: " + "123456789" * 2222 + ","), (6, 14)),
    (".yaml", YAML.replace("max_concurrent_steps: 4", "max_concurrent_steps: " + "9" * 30), (21, 57)),
    (".toml", TOML.replace("B = 8,", "B = " + "123456789" * 2222 + ","), (7, 15)),
], ids=["yaml-20k-digits", "yaml-30-digits", "toml-20k-digits"])
def test_overlong_integer_is_shortened_in_its_error(tmp_path, capsys, suffix, text, where):
    path = write(tmp_path, text, suffix)
    code, lines = run_cli(capsys, "validate", str(path))
    assert code == 2
    line = one_located_line(lines, path, *where)
    assert "digits)" in line and "is too large" in line


def test_overlong_integer_override_is_shortened(capsys):
    code, lines = run_cli(capsys, "validate", str(DATA / "add_bf16.yaml"), "-D", "M=" + "7" * 20_000)
    assert code == 2
    assert lines == ["schedgen: -D M: integer 777777777…(20000 digits) is too large; no field takes more than 19 "
                     "digits (at most 9223372036854775807) (column 1 of the value)"]


@pytest.mark.parametrize("text", ["!!int ''", "!!int +", "!!int _", "!!int -_"])
def test_yaml_int_tag_on_no_digits_is_a_located_error(tmp_path, capsys, text):
    """`!!int` on an empty value (found by the long fuzz campaign): PyYAML's own reader raised IndexError, a
    traceback out of `schedgen validate`; now a located error."""
    path = write(tmp_path, YAML.replace("{M: 4096,", f"{{M: {text},"))
    code, lines = run_cli(capsys, "validate", str(path))
    assert code == 2
    line = one_located_line(lines, path, 6, 14)
    assert line.startswith(f"{path}:6:14: op.sizes.M: ") and "is not a valid !!int value" in line, line
