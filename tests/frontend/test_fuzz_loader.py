"""Fuzzing the loader's input parsers (issue 14 groups 8, 10, 13): `-D NAME=VALUE` strings and YAML / TOML
scalars written into size fields. The promise: a located SpecErrors, or a one-line OverrideError for a `-D`, or
a valid spec; never another exception, never a message line longer than 300 characters.

CI: 150 examples per category (derandomized); --slow: 400; `SCHEDGEN_FUZZ=long`: 5,000, random seeds.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import ROOT, fuzz_examples
from schedgen.errors import SpecErrors
from schedgen.frontend.load import load_toml_text, load_yaml_text
from schedgen.frontend.overrides import OverrideError, apply_overrides, parse_overrides
from schedgen.frontend.validate import validate_data

LONG = os.environ.get("SCHEDGEN_FUZZ", "") == "long"
N = fuzz_examples(150, 400, 5_000)
FUZZ = settings(max_examples=N, deadline=None, derandomize=not LONG,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
YAML = (ROOT / "tests" / "data" / "add_bf16.yaml").read_text()
TOML = (ROOT / "tests" / "data" / "scale_f32.toml").read_text()
BASE, BASE_SRC = load_yaml_text(YAML, "add.yaml")
MAX_LINE = 300

_digits = st.text(st.sampled_from("0123456789"), min_size=1, max_size=30)
_odd_digits = st.sampled_from(["\u0661", "\u00b2", "\uff10", "\u0967", "\U0001d7ce", "\u2460"])
_number = st.one_of(
    st.integers(-10**30, 10**30).map(str), _digits,
    st.builds(lambda p, d: p + d, st.sampled_from(["0x", "0o", "0b", "0", "+", "-", "-0x", "0_"]), _digits),
    st.builds(lambda a, b, c: f"{a}:{b}:{c}", _digits, _digits, _digits),
    st.builds(lambda m, e: f"{m}e{e}", st.sampled_from(["1", "3.4028235", "3.4028236", ".5", "-1.0", "9" * 40]),
              st.integers(-400, 400)),
    st.sampled_from([".inf", "-.inf", ".nan", "1_000", "1__0", "0x_1", "~", "null", "yes", "1e", "0.", "."]),
    st.integers(1, 30_000).map(lambda n: "7" * n), st.integers(1, 30_000).map(lambda n: "0x" + "f" * n),
)
_yamlish = st.one_of(
    _number,
    st.text(st.sampled_from("[]{},:&*!|>-#'\" ab1\\\n\t%@`?"), max_size=40),
    st.integers(1, 4000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 4000).map(lambda n: "{a: " * n + "1" + "}" * n),
    st.just("[" + ",".join(["&a [x,x,x,x,x,x,x,x,x]"] + [f"&{c} [" + ",".join([f"*{p}"] * 9) + "]"
                                                         for p, c in zip("abcdefgh", "bcdefghi")]) + "]"),
    st.text(max_size=30),
)
_key_part = st.one_of(st.sampled_from(["schedule", "op", "sizes", "cluster", "pipeline", "max_concurrent_steps",
                                       "in_specs", "x", "block_shape", "backends", "M", "N", ""]),
                      _digits, _odd_digits, st.text(max_size=6))
_key = st.one_of(
    st.sampled_from(["M", "N", "K"]),
    st.lists(st.builds(lambda name, idx: name + "".join(f"[{i}]" for i in idx), _key_part,
                       st.lists(st.one_of(_digits, _odd_digits, st.text(max_size=3)), max_size=2)),
             min_size=1, max_size=5).map(".".join),
    st.text(max_size=20),
)


def _short_lines(exc: Exception) -> None:
    for line in str(exc).splitlines():
        assert len(line) <= MAX_LINE + 200, line[:400]  # + room for a file path


@FUZZ
@given(key=_key, value=_yamlish)
@example(key="schedule.cluster[\u0661]", value="2")
@example(key="M", value="0x" + "f" * 20_000)
def test_define_strings(key, value):
    try:
        overrides = parse_overrides([f"{key}={value}"])
    except OverrideError as exc:
        assert "\n" not in str(exc) and len(str(exc)) <= MAX_LINE, str(exc)[:400]
        return
    data, problems = apply_overrides(BASE, overrides, BASE_SRC)
    try:
        validate_data(data, BASE_SRC)
    except SpecErrors as exc:
        _short_lines(exc)


@FUZZ
@given(value=_number, field=st.sampled_from(["size", "steps", "constant"]))
def test_yaml_scalars_in_number_fields(value, field):
    old = {"size": "{M: 4096,", "steps": "max_concurrent_steps: 4}", "constant": "  body: o = x + y"}[field]
    new = {"size": f"{{M: {value},", "steps": f"max_concurrent_steps: {value}}}",
           "constant": f"  constants: {{s: {value}}}\n  body: o = x + y * s"}[field]
    try:
        data, src = load_yaml_text(YAML.replace(old, new), "f.yaml")
        validate_data(data, src)
    except SpecErrors as exc:
        _short_lines(exc)


@FUZZ
@given(value=_number, field=st.sampled_from(["size", "steps", "constant"]))
def test_toml_scalars_in_number_fields(value, field):
    old = {"size": "B = 8,", "steps": "max_concurrent_steps = 4", "constant": "scale = 2.5"}[field]
    new = {"size": f"B = {value},", "steps": f"max_concurrent_steps = {value}", "constant": f"scale = {value}"}[field]
    try:
        data, src = load_toml_text(TOML.replace(old, new), "f.toml")
        validate_data(data, src)
    except SpecErrors as exc:
        _short_lines(exc)
