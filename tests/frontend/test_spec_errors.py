"""Accept/reject tables for specs: every problem is one located line `FILE:LINE:COL: path: message`.

The files are text edits of tests/data/add_bf16.yaml and tests/data/scale_f32.toml (copies of bundled specs) written into tmp_path; each rejected
case asserts the exact lines (position, field path and message), so a drifting column or a reworded hint fails.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, SPECS_DIR
from schedgen.errors import SpecErrors
from schedgen.plan import plan
from schedgen.frontend.validate import load_spec, parse_overrides

# Frozen copies of two bundled specs, so that editing specs/ never moves the lines these tests expect.
DATA_DIR = ROOT / "tests" / "data"
YAML = (DATA_DIR / "add_bf16.yaml").read_text()
TOML = (DATA_DIR / "scale_f32.toml").read_text()

# Frequently edited lines of add_bf16.yaml (line numbers below refer to that file).
X_SPEC = 'x: {block_shape: [32, 256], index_map: "(i, j)"}'            # line 16
PIPE = "max_concurrent_steps: 4"                                         # line 21
BODY = "  body: o = x + y"                                               # line 12
OOB = ('index_map: "(i, j)"}', 'index_map: "(i, j)", out_of_bounds: zero}')


def edit(text: str, *pairs: tuple[str, str], every: bool = False) -> str:
    """Apply literal replacements; each `old` must occur (exactly once unless every=True)."""
    for old, new in pairs:
        n = text.count(old)
        assert n >= 1 and (every or n == 1), f"{old!r} occurs {n} times in the base file"
        text = text.replace(old, new)
    return text


def problems(tmp_path, text: str, suffix: str = ".yaml", overrides=None) -> list[str]:
    """Load, validate and plan one file; the located lines with the file name replaced by F ([] if accepted)."""
    path = tmp_path / f"spec{suffix}"
    path.write_text(text, encoding="utf-8")
    try:
        spec, src = load_spec(str(path), overrides)
        plan(spec, src)
    except SpecErrors as exc:
        lines = exc.lines()
        assert all(line.startswith(f"{path}:") for line in lines), lines
        return ["F" + line[len(str(path)):] for line in lines]
    return []


# --------------------------------------------------------------------------------------------- accepted files

ACCEPT = [
    ("yaml-as-committed", YAML, ".yaml"),
    ("toml-as-committed", TOML, ".toml"),
    # (the CUDA kernel's: the Pallas one reads a swizzled block only in 64-row groups, tests/build/test_pallas_lowers)
    ("swizzle-128-on-512B-rows", edit(YAML, (X_SPEC, X_SPEC[:-1] + ", transforms: {swizzle: 128}}"),
                                      ("num_warpgroups: 2", "num_warpgroups: 2\n  backends: [cuda]")), ".yaml"),
    ("non-divisible-with-oob-zero", edit(YAML, ("M: 4096,", "M: 4100,"), OOB, every=True), ".yaml"),
    ("no-pipeline", edit(YAML, ("kind: emit_pipeline, max_concurrent_steps: 4", "kind: none")), ".yaml"),
    ("block-body", edit(YAML, (BODY, "  body: |\n    h = x * y\n    o = h + x")), ".yaml"),
    ("toml-multiline-body", edit(TOML, ('body = "o = x * scale"', 'body = """\nh = x * scale\no = h + x"""')), ".toml"),
]


@pytest.mark.parametrize("text,suffix", [a[1:] for a in ACCEPT], ids=[a[0] for a in ACCEPT])
def test_accepted(tmp_path, text, suffix):
    assert problems(tmp_path, text, suffix) == []


# --------------------------------------------------------------------------------------------- rejected files

NOT_DIV = ("F:{line}:23: schedule.{where}.block_shape[0]: dimension 0 of '{n}' (4100) is not a multiple of the block "
           "(32); use a divisor of 4100, or set out_of_bounds: zero to let TMA pad the last block")
MINOR16 = ("F:{line}:27: schedule.{where}.block_shape[1]: the minor block dimension is 4 x 2 B = 8 B; TMA needs a "
           "multiple of 16 B (use a multiple of 8 elements)")
OPERANDS = [(16, "in_specs.x", "x"), (17, "in_specs.y", "y"), (19, "out_specs.o", "o")]
IDENT_RULE = "names are 1-63 ASCII letters, digits or '_', starting with a letter"
PIPE_KEYS = "kind, max_concurrent_steps, data_path"      # a map spec's pipeline (the core fields and the map's own)

# Most rejected cases are data files now: tests/errors/*.yaml|toml, the expected problem in a comment beside the
# offending line (tests/frontend/test_error_files.py). The ones left here cannot carry a comment on their line
# (syntax errors reported elsewhere, block scalars, multi-line strings, whole-file problems).
REJECT = [
    # ---- syntax
    ("yaml-syntax", ".yaml", edit(YAML, (BODY, "  body: [o = x + y")),
     ["F:13:9: <file>: YAML syntax error: expected ',' or ']', but got ':'"]),
    ("yaml-unclosed-flow-map", ".yaml", edit(YAML, ("x: {shape: [M, N], dtype: bf16}", "x: {shape: [M, N], dtype: bf16")),
     ["F:9:6: <file>: YAML syntax error: expected ',' or '}', but got ':'"]),
    ("yaml-tab-indent", ".yaml", edit(YAML, (BODY, "\tbody: o = x + y")),
     ["F:12:1: <file>: YAML syntax error: found character '\\t' that cannot start any token"]),
    ("yaml-empty", ".yaml", "# nothing\n", ["F:1:1: <file>: file is empty"]),
    ("yaml-top-level-list", ".yaml", "- 1\n- 2\n",
     ["F:1:1: <file>: the top level must be a mapping with keys name, op, schedule"]),
    ("toml-syntax", ".toml", edit(TOML, ('kind = "map"', 'kind = "map')),
     ["F:6:12: <file>: TOML syntax error: Illegal character '\\n'"]),
    ("toml-duplicate-key", ".toml", edit(TOML, ('kind = "map"', 'kind = "map"\nkind = "map"')),
     ["F:7:13: <file>: TOML syntax error: Cannot overwrite a value"]),
    # ---- body expressions: the column is the offending token's, inside the string
    ("body-block", ".yaml", edit(YAML, (BODY, "  body: |\n    h = x * y\n    o = h + qq")),
     ["F:14:13: op.body: unknown name 'qq'; inputs are: x, y; constants are: (none); assigned so far: h"]),
    ("body-block-strip", ".yaml", edit(YAML, (BODY, "  body: |-\n    h = x * y\n    o = h + qq")),
     ["F:14:13: op.body: unknown name 'qq'; inputs are: x, y; constants are: (none); assigned so far: h"]),
    ("body-block-blank-line", ".yaml", edit(YAML, (BODY, "  body: |\n    h = x * y\n\n    o = h +* y")),
     ["F:15:12: op.body: syntax error: invalid syntax"]),
    ("body-block-crlf", ".yaml", edit(YAML, (BODY, "  body: |\n    h = x * y\n    o = h + qq")).replace("\n", "\r\n"),
     ["F:14:13: op.body: unknown name 'qq'; inputs are: x, y; constants are: (none); assigned so far: h"]),
    ("toml-body-multiline", ".toml", edit(TOML, ('body = "o = x * scale"', 'body = """\nh = x * scale\no = h + zz"""')),
     ["F:11:9: op.body: unknown name 'zz'; inputs are: x; constants are: scale; assigned so far: h"]),
    # ---- plan stage: hardware rules
    ("minor-not-16B", ".yaml", edit(YAML, ("[32, 256]", "[32, 4]"), every=True),
     [MINOR16.format(line=l, where=w) for l, w, _ in OPERANDS]
     + ["F:19:27: schedule.out_specs.o.block_shape[1]: each thread moves 8 elements (16 B of the narrowest dtype); "
        "the minor block dimension 4 must be a multiple of 8"]),
    ("not-divisible-one-operand-zero", ".yaml", edit(YAML, ("M: 4096,", "M: 4100,"), (X_SPEC, X_SPEC[:-1] + ", out_of_bounds: zero}")),
     [NOT_DIV.format(line=l, where=w, n=n) for l, w, n in OPERANDS[1:]]),
]


@pytest.mark.parametrize("suffix,text,expected", [r[1:] for r in REJECT], ids=[r[0] for r in REJECT])
def test_rejected(tmp_path, suffix, text, expected):
    assert problems(tmp_path, text, suffix) == expected


def test_unknown_key_message_has_hint_and_allowed_keys(tmp_path):
    lines = problems(tmp_path, edit(YAML, (PIPE, "max_concurent_steps: 4")))
    assert len(lines) == 1
    assert lines[0].startswith("F:21:")
    assert lines[0].endswith("schedule.pipeline.max_concurent_steps: unknown key 'max_concurent_steps' (did you mean "
                             f"'max_concurrent_steps'?); allowed keys: {PIPE_KEYS}")


def test_unknown_key_without_close_match_lists_allowed_keys(tmp_path):
    lines = problems(tmp_path, edit(YAML, (BODY, BODY + "\n  flavour: 3")))
    assert lines == ["F:13:3: op.flavour: unknown key 'flavour'; allowed keys: kind, sizes, constants, inputs, "
                     "outputs, body"]


# --------------------------------------------------------------------------------------------- known bugs

def test_unknown_yaml_key_located_at_the_key(tmp_path):
    # line 21: '  pipeline: {kind: emit_pipeline, max_concurent_steps: 4}' -- the key starts at column 35
    lines = problems(tmp_path, edit(YAML, (PIPE, "max_concurent_steps: 4")))
    assert [line.split(": ")[0] for line in lines] == ["F:21:35"]


def test_unknown_size_in_shape_is_one_error(tmp_path):
    lines = problems(tmp_path, edit(YAML, ("x: {shape: [M, N], dtype: bf16}", "x: {shape: [M, K], dtype: bf16}")))
    assert lines == ["F:8:20: op.inputs.x.shape[1]: unknown size 'K'; declare it under op.sizes (sizes: M, N)"]


def test_unknown_size_in_shape_is_located(tmp_path):
    lines = problems(tmp_path, edit(YAML, ("x: {shape: [M, N], dtype: bf16}", "x: {shape: [M, K], dtype: bf16}")))
    assert lines[0] == "F:8:20: op.inputs.x.shape[1]: unknown size 'K'; declare it under op.sizes (sizes: M, N)"


def test_swizzle_too_wide_for_minor_dim_is_one_error(tmp_path):
    text = edit(YAML, ("[32, 256]", "[32, 8]"), every=True).replace(
        'x: {block_shape: [32, 8], index_map: "(i, j)"}',
        'x: {block_shape: [32, 8], index_map: "(i, j)", transforms: {swizzle: 32}}')
    assert problems(tmp_path, text) == [
        "F:16:74: schedule.in_specs.x.transforms.swizzle: swizzle 32 needs the minor block dimension's bytes (16 B) "
        "to be a multiple of 32; legal here: none (use 0)"]


@pytest.mark.parametrize("body", ["  body: >\n    o = x +\n    zz", "  body: o = x\n    + zz"], ids=["folded", "plain"])
def test_body_error_in_folded_scalar_is_located_at_the_value(tmp_path, body):
    """Folded and multi-line plain scalars are re-flowed by YAML, so offsets inside them cannot be mapped back to
    the file: the error points at the start of the value (still the right field and line of the file)."""
    lines = problems(tmp_path, edit(YAML, (BODY, body)))
    assert [line.split(": ")[0] for line in lines] == ["F:12:9"]


def test_toml_triple_quoted_same_line_points_at_token(tmp_path):
    lines = problems(tmp_path, edit(TOML, ('body = "o = x * scale"', 'body = """o = x * zz"""')), ".toml")
    assert [line.split(": ")[0] for line in lines] == ["F:9:19"]


# --------------------------------------------------------------------------------------------- -D overrides

def test_parse_overrides_reads_yaml_scalars():
    got = parse_overrides(["M=64", "schedule.pipeline.max_concurrent_steps=3", "dt=bf16", "flag=true", "r=[1, 2]",
                           "empty="])
    assert got == {"M": 64, "schedule.pipeline.max_concurrent_steps": 3, "dt": "bf16", "flag": True, "r": [1, 2],
                   "empty": ""}


def test_parse_overrides_needs_name_value():
    with pytest.raises(ValueError, match=r"^-D M: expected NAME=VALUE, e.g. -D M=8192$"):
        parse_overrides(["M"])


def test_override_changes_plan_sizes(tmp_path):
    path = tmp_path / "add.yaml"
    path.write_text(YAML)
    spec, src = load_spec(str(path), parse_overrides(["M=64", "schedule.pipeline.max_concurrent_steps=3"]))
    p = plan(spec, src)
    assert p.sizes == {"M": 64, "N": 4096}
    assert p.grid == (2, 16) and p.num_tiles == 32 and p.stages == 3
    assert p.inputs[0].shape == (64, 4096)
    assert p.launch.kernel_name == "map_add_bf16_32x256_s3_wg2"
    # the file itself is untouched
    spec2, src2 = load_spec(str(path))
    assert plan(spec2, src2).sizes == {"M": 4096, "N": 4096}


def test_overridden_values_are_validated_like_written_ones(tmp_path):
    assert problems(tmp_path, YAML, overrides=parse_overrides(["schedule.pipeline.max_concurrent_steps=17"])) == [
        "F:21:57: schedule.pipeline.max_concurrent_steps: Input should be less than or equal to 16 (got 17)"]
    assert problems(tmp_path, YAML, overrides=parse_overrides(["M=4100"])) == [
        NOT_DIV.format(line=l, where=w, n=n) for l, w, n in OPERANDS]


def test_override_errors_and_file_errors_reported_together(tmp_path):
    text = edit(YAML, ("name: add_bf16", "name: 1abc"))
    assert problems(tmp_path, text, overrides={"K": 1}) == [
        f"F:2:7: name: '1abc' is not a legal name; {IDENT_RULE} (got '1abc')",
        "F:6:10: op.sizes: -D K: no size named 'K'; sizes are: M, N"]


# --------------------------------------------------------------------------------------------- the CLI

def _cli(*args, cwd=ROOT):
    env_path = str(ROOT)
    import os
    env = dict(os.environ, PYTHONPATH=env_path + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "schedgen", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)


def test_cli_validate_bad_file_exits_2_with_located_lines(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit(YAML, ("name: add_bf16", "name: 1abc"), ("loop: nd_loop", "loop: dynamic")))
    good = DATA_DIR / "add_bf16.yaml"
    res = _cli("validate", str(good), str(bad))
    assert res.returncode == 2
    assert res.stdout == f"{good}: ok (map 'add_bf16')\n"
    assert res.stderr.splitlines() == [f"{bad}:2:7: name: '1abc' is not a legal name; {IDENT_RULE} (got '1abc')"]
    assert "Traceback" not in res.stderr + res.stdout


def test_cli_validate_plan_error_and_define(tmp_path):
    res = _cli("validate", str(DATA_DIR / "add_bf16.yaml"), "-D", "K=3")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.splitlines() == [f"{DATA_DIR / 'add_bf16.yaml'}:6:10: op.sizes: -D K: no size named 'K'; "
                                       "sizes are: M, N"]
    res = _cli("validate", str(DATA_DIR / "add_bf16.yaml"), "-D", "M=4100")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.splitlines()) == 3 and "(4100) is not a multiple of the block (32)" in res.stderr


def test_cli_validate_missing_file(tmp_path):
    res = _cli("validate", str(tmp_path / "nope.yaml"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"{tmp_path / 'nope.yaml'}:1:1: <file>: cannot read file: ")


def test_cli_all_specs_valid():
    files = [str(p) for p in sorted(SPECS_DIR.iterdir())]
    res = _cli("validate", *files)
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == len(files)


# --------------------------------------------------------------------------------------------- dynamic sizes

@pytest.mark.parametrize("size,expected", [
    ("{dynamic: true, max: 100, min: 200}", "F:6:14: op.sizes.M: min = 200 is above max = 100"),
    ("{dynamic: true, max: 100, multiple_of: 8}", "F:6:14: op.sizes.M: max = 100 is not a multiple of multiple_of = 8"),
    ("{dynamic: true, max: 96, min: 3, multiple_of: 8}",
     "F:6:14: op.sizes.M: min = 3 is not a multiple of multiple_of = 8 (use min: 8)"),
    ("{dynamic: false, max: 96}", "F:6:24: op.sizes.M.dynamic: Input should be True"),
    ("{dynamic: true}", "F:6:14: op.sizes.M.max: required key is missing"),
])
def test_dynamic_size_declarations_are_checked(tmp_path, size, expected):
    got = problems(tmp_path, edit(YAML, ("M: 4096,", f"M: {size},")))
    assert got and got[0].startswith(expected), got


def test_a_family_without_dynamic_sizes_says_so_located():
    """Until a family's planner takes ranges, a dynamic size is one located problem, not a crash."""
    from schedgen.frontend.model import DynamicSize
    from schedgen.plan.common import Problems, static_sizes_only
    spec, _ = load_spec(str(DATA_DIR / "add_bf16.yaml"))
    dyn = spec.op.model_copy(update={"sizes": {"M": DynamicSize(dynamic=True, max=64), "N": 4096}})
    probs = Problems()
    out = static_sizes_only(spec.model_copy(update={"op": dyn}), probs, "map")
    assert [(p.path, p.message) for p in probs] == [(("op", "sizes", "M"), "the map family does not take dynamic "
                                                     "sizes yet; give M a fixed value (one package per size)")]
    assert out.op.sizes == {"M": 64, "N": 4096}
