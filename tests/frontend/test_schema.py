"""The exported JSON Schema: draft-07 for editors, as strict as the pydantic models, and in step with them.

Checked with a real validator (`jsonschema`, in the `test` extra): every bundled spec and every error file of
tests/errors/, plus a table of mutations, go through both the schema and pydantic, which must agree: both accept,
or both reject naming the same fields (the schema's error path, with the key a `required` / `additionalProperties`
error names, is the field pydantic reports). What JSON Schema cannot say is pinned in KNOWN_GAPS, each case
checked to be still a gap (so that closing one shows).
"""
from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys

import pytest

from conftest import ROOT, spec_files
from schedgen.errors import SpecErrors
from schedgen.frontend.load import load_file
from schedgen.frontend.schema import DRAFT, SCHEMA_ID, schema, schema_json
from schedgen.frontend.specfile import SpecFile
from schedgen.frontend.validate import validate_data

jsonschema = pytest.importorskip(
    "jsonschema", reason="jsonschema is not installed: pip install -e '.[test]' (the schema tests need a real "
                         "JSON Schema validator)")

SCHEMA_FILE = ROOT / "schemas" / "schedgen.schema.json"
ERROR_FILES = sorted(p for p in (ROOT / "tests" / "errors").iterdir() if p.suffix in (".yaml", ".toml"))


@pytest.fixture(scope="module")
def validator():
    s = schema()
    jsonschema.Draft7Validator.check_schema(s)
    return jsonschema.Draft7Validator(s)


def schema_fields(validator, data) -> set[tuple]:
    """The fields the schema's errors point at: the error's path, plus the key a `required`,
    `additionalProperties` or `propertyNames` error is about."""
    out = set()
    for err in validator.iter_errors(data):
        path = tuple(err.absolute_path)
        if err.validator == "required":
            out |= {path + (key,) for key in err.validator_value if key not in err.instance}
        elif err.validator == "additionalProperties":
            out |= {path + (key,) for key in err.instance if key not in err.schema.get("properties", {})}
        elif "propertyNames" in err.absolute_schema_path:
            out.add(path + (err.instance, "[key]"))
        else:
            out.add(path)
    return out


def pydantic_fields(data) -> set[tuple]:
    """The fields pydantic's located problems name (empty when the data validates)."""
    try:
        validate_data(data, load_file_src())
    except SpecErrors as exc:
        return {tuple(p.path) for p in exc.problems}
    return set()


def load_file_src():
    from schedgen.errors import SourceMap
    return SourceMap("<test>")


def loaded(path):
    return load_file(str(path))[0]


# ---------------------------------------------------------------------------- the file and its form


def test_committed_schema_has_not_drifted():
    """schemas/schedgen.schema.json must be regenerated (`schedgen schema`) whenever the models change."""
    assert SCHEMA_FILE.read_text() == schema_json()


def _walk(node, path=()):
    if isinstance(node, dict):
        yield path, node
        for key, sub in node.items():
            if key not in ("default", "examples", "const", "enum"):
                yield from _walk(sub, path + (key,))
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _walk(sub, path + (i,))


def test_schema_is_draft07_for_editors():
    s = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft7Validator.check_schema(s)
    assert s["$schema"] == DRAFT == "http://json-schema.org/draft-07/schema#" and s["$id"] == SCHEMA_ID
    assert s["type"] == "object" and s["additionalProperties"] is False
    assert set(s["required"]) == {"name", "op"} and set(s["properties"]) == set(SpecFile.model_fields)
    text = SCHEMA_FILE.read_text()
    for later in ("$defs", "discriminator", "prefixItems", "unevaluatedProperties", "$dynamicRef", "x-schedgen-def"):
        assert f'"{later}"' not in text, later
    refs = set(re.findall(r'"\$ref": "#/definitions/(\w+)"', text))
    assert refs and refs == set(s["definitions"])       # every $ref resolves, and every definition is used
    for path, node in _walk(s):
        # draft-07 ignores a $ref's siblings: a description or default beside one would be lost on editors
        assert "$ref" not in node or len(node) == 1, path
        assert "oneOf" not in node, path        # unions are if/then(/else): errors point into the member


def test_schema_check_cli_agrees(tmp_path):
    env_py = [sys.executable, "-m", "schedgen", "schema", "--check", "-o"]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run(env_py + [str(SCHEMA_FILE)], cwd=ROOT, capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    stale = tmp_path / "stale.json"
    stale.write_text(SCHEMA_FILE.read_text().replace('"maxLength": 4000', '"maxLength": 4001'))
    bad = subprocess.run(env_py + [str(stale)], cwd=ROOT, capture_output=True, text=True, env=env)
    assert bad.returncode == 1 and "out of date" in bad.stderr


def test_schema_print_is_the_schema(tmp_path):
    """`schedgen schema --print`: the schema on stdout for users of an installed package (no file written)."""
    run = subprocess.run([sys.executable, "-m", "schedgen", "schema", "--print"], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout == schema_json() and list(tmp_path.iterdir()) == []
    both = subprocess.run([sys.executable, "-m", "schedgen", "schema", "--print", "--check"], cwd=tmp_path,
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert both.returncode == 2 and both.stdout == ""
    assert both.stderr == "schedgen: --print writes to stdout: it takes neither -o nor --check\n"
    md = subprocess.run([sys.executable, "-m", "schedgen", "schema", "--print", "--markdown"], cwd=tmp_path,
                        capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert md.returncode == 0 and md.stdout == (ROOT / "docs" / "spec-reference.md").read_text()


# ---------------------------------------------------------------------------- bundled specs and error files


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.name)
def test_bundled_spec_conforms_to_schema(path, validator):
    data = loaded(path)
    assert [e.message for e in validator.iter_errors(data)] == []
    assert pydantic_fields(data) == set()


MODELINE = {".yaml": "# yaml-language-server: $schema=", ".yml": "# yaml-language-server: $schema=",
            ".toml": "#:schema "}


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.name)
def test_bundled_spec_names_the_committed_schema(path):
    """The first line tells the YAML language server (or taplo) where the schema is, relative to the spec."""
    first = path.read_text().split("\n", 1)[0]
    prefix = MODELINE[path.suffix]
    assert first.startswith(prefix), first
    target = first.removeprefix(prefix).strip()
    assert not target.startswith("/") and (path.parent / target).resolve() == SCHEMA_FILE


KNOWN_GAPS = {
    # JSON numbers have no int/float distinction: draft-06 on counts 4.0 as an integer; pydantic (strict) does not
    "float_for_int.yaml": {("schedule", "pipeline", "max_concurrent_steps")},
}


@pytest.mark.parametrize("path", ERROR_FILES, ids=lambda p: p.name)
def test_error_files_agree(path, validator):
    """Every error file the loader reads: the fields pydantic rejects are the fields the schema rejects (a file
    whose problems come from the planner validates under both)."""
    try:
        data = loaded(path)
    except SpecErrors:
        pytest.skip("a load error (YAML/TOML syntax or quirk): neither the models nor the schema see it")
    py, js = pydantic_fields(data), schema_fields(validator, data)
    if path.name in KNOWN_GAPS:
        assert py == KNOWN_GAPS[path.name] and js == set(), (py, js)
        return
    assert py == js


# ---------------------------------------------------------------------------- mutations, both ways

BASE = {"map": "add_bf16.yaml", "matmul": "matmul_bf16_4096_tune.yaml", "attention": "attention_bf16_4096.yaml",
        "collective": "collective_matmul_bf16_1024x4096.yaml", "toml": "scale_f32.toml"}
_LONG = "a" * 64
_RESERVED_KEY = {"int": {"shape": ["M", "N"], "dtype": "bf16"}}


def _set(path, value):
    def mutate(d):
        node = d
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return mutate


def _pop(path):
    def mutate(d):
        node = d
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]
    return mutate


# (base, mutation, the fields both must name: empty = both accept[, the schema's when it names them otherwise])
CASES = {
    "bad-dtype": ("map", _set(("op", "inputs", "y", "dtype"), "bf32"), {("op", "inputs", "y", "dtype")}),
    "dtype-alias": ("map", _set(("op", "inputs", "y", "dtype"), "bfloat16"), set()),
    "dtype-alias-case": ("map", _set(("op", "inputs", "y", "dtype"), "BF16"), {("op", "inputs", "y", "dtype")}),
    "bad-kind": ("map", _set(("op", "kind"), "mapp"), {("op", "kind")}),
    # pydantic names the op ("required key 'kind' is missing"), the schema its missing key: the same place
    "missing-kind": ("map", _pop(("op", "kind")), {("op",)}, {("op", "kind")}),
    "missing-op": ("map", _pop(("op",)), {("op",)}),
    "missing-body": ("map", _pop(("op", "body")), {("op", "body")}),
    "unknown-key": ("map", _set(("op", "bodyy"), "o = x"), {("op", "bodyy")}),
    "other-family-key": ("map", _set(("op", "causal"), True), {("op", "causal")}),
    "string-int": ("map", _set(("schedule", "pipeline", "max_concurrent_steps"), "4"),
                   {("schedule", "pipeline", "max_concurrent_steps")}),
    "bool-int": ("map", _set(("schedule", "pipeline", "max_concurrent_steps"), True),
                 {("schedule", "pipeline", "max_concurrent_steps")}),
    "too-many-stages": ("map", _set(("schedule", "pipeline", "max_concurrent_steps"), 17),
                        {("schedule", "pipeline", "max_concurrent_steps")}),
    "empty-cluster": ("map", _set(("schedule", "cluster"), []), {("schedule", "cluster")}),
    "name-digit": ("map", _set(("name",), "1abc"), {("name",)}),
    "name-reserved": ("map", _set(("name",), "threadIdx"), {("name",)}),
    "name-keyword": ("map", _set(("name",), "class"), {("name",)}),
    "name-sg": ("map", _set(("name",), "sg_add"), {("name",)}),
    "name-64": ("map", _set(("name",), _LONG), {("name",)}),
    "name-63": ("map", _set(("name",), _LONG[:63]), set()),
    "name-newline": ("map", _set(("name",), "add\n"), {("name",)}),
    "name-cyrillic": ("map", _set(("name",), "\u0430dd"), {("name",)}),
    "input-key-reserved": ("map", lambda d: d["op"]["inputs"].update(_RESERVED_KEY),
                           {("op", "inputs", "int", "[key]")}),
    "size-key-bad": ("map", _set(("op", "sizes", "2M"), 8), {("op", "sizes", "2M", "[key]")}),
    "shape-zero": ("map", _set(("op", "inputs", "x", "shape"), [0, "N"]), {("op", "inputs", "x", "shape", 0)}),
    "shape-too-big": ("map", _set(("op", "inputs", "x", "shape"), [2**31 + 1, "N"]),
                      {("op", "inputs", "x", "shape", 0)}),
    "shape-bad-name": ("map", _set(("op", "inputs", "x", "shape"), ["M", "2N"]), {("op", "inputs", "x", "shape", 1)}),
    "shape-bool": ("map", _set(("op", "inputs", "x", "shape"), ["M", True]), {("op", "inputs", "x", "shape", 1)}),
    "size-zero": ("map", _set(("op", "sizes", "M"), 0), {("op", "sizes", "M")}),
    "size-string": ("map", _set(("op", "sizes", "M"), "4096"), {("op", "sizes", "M")}),
    "dynamic-ok": ("map", _set(("op", "sizes", "M"), {"dynamic": True, "max": 8192, "multiple_of": 32}), set()),
    "dynamic-false": ("map", _set(("op", "sizes", "M"), {"dynamic": False, "max": 8192}),
                      {("op", "sizes", "M", "dynamic")}),
    "dynamic-no-max": ("map", _set(("op", "sizes", "M"), {"dynamic": True}), {("op", "sizes", "M", "max")}),
    "dynamic-multiple-0": ("map", _set(("op", "sizes", "M"), {"dynamic": True, "max": 64, "multiple_of": 0}),
                           {("op", "sizes", "M", "multiple_of")}),
    "num-blocks-word": ("map", _set(("schedule", "persistent", "num_blocks"), "autoo"),
                        {("schedule", "persistent", "num_blocks")}),
    "num-blocks-zero": ("map", _set(("schedule", "persistent", "num_blocks"), 0),
                        {("schedule", "persistent", "num_blocks")}),
    "num-blocks-int": ("map", _set(("schedule", "persistent", "num_blocks"), 132), set()),
    "swizzle-48": ("map", _set(("schedule", "in_specs", "x", "transforms"), {"swizzle": 48}),
                   {("schedule", "in_specs", "x", "transforms", "swizzle")}),
    "index-map-long": ("map", _set(("schedule", "in_specs", "x", "index_map"), "(i, j)" + " " * 400),
                       {("schedule", "in_specs", "x", "index_map")}),
    "index-map-null": ("map", _set(("schedule", "in_specs", "x", "index_map"), None), set()),
    "grid-empty-string": ("map", _set(("schedule", "grid"), [""]), {("schedule", "grid", 0)}),
    "grid-names-reserved": ("map", _set(("schedule", "grid_names"), ["i", "for"]), {("schedule", "grid_names", 1)}),
    "backends-unknown": ("map", _set(("schedule", "backends"), ["triton"]), {("schedule", "backends", 0)}),
    "f32-flt-max": ("toml", _set(("op", "constants", "scale"), 3.4028235e38), set()),
    "f32-over": ("toml", _set(("op", "constants", "scale"), 3.5e38), {("op", "constants", "scale")}),
    "f32-neg-over": ("toml", _set(("op", "constants", "scale"), -3.5e38), {("op", "constants", "scale")}),
    "f32-inf": ("toml", _set(("op", "constants", "scale"), math.inf), {("op", "constants", "scale")}),
    "f32-underflow": ("toml", _set(("op", "constants", "scale"), 1e-46), {("op", "constants", "scale")}),
    "f32-neg-underflow": ("toml", _set(("op", "constants", "scale"), -1e-46), {("op", "constants", "scale")}),
    "f32-subnormal": ("toml", _set(("op", "constants", "scale"), 1e-45), set()),
    "f32-zero": ("toml", _set(("op", "constants", "scale"), 0.0), set()),
    "f32-int": ("toml", _set(("op", "constants", "scale"), 3), set()),
    "f32-nan": ("toml", _set(("op", "constants", "scale"), math.nan), {("op", "constants", "scale")}),
    "f32-string": ("toml", _set(("op", "constants", "scale"), "2.5"), {("op", "constants", "scale")}),
    "f32-bool": ("toml", _set(("op", "constants", "scale"), True), {("op", "constants", "scale")}),
    "constant-key-reserved": ("toml", _set(("op", "constants", "exp"), 1.0), {("op", "constants", "exp", "[key]")}),
    "attention-scale-over": ("attention", _set(("op", "scale"), 1e39), {("op", "scale")}),
    "attention-scale-null": ("attention", _set(("op", "scale"), None), set()),
    "attention-layout": ("attention", _set(("op", "layout"), "bsdh"), {("op", "layout")}),
    "attention-two-inputs": ("attention", lambda d: d["op"]["inputs"].pop("v"), {("op", "inputs")}),
    "matmul-lhs-reserved": ("matmul", _set(("op", "lhs"), "float"), {("op", "lhs")}),
    "matmul-epilogue-empty": ("matmul", _set(("op", "epilogue"), ""), {("op", "epilogue")}),
    "tune-key-ok": ("matmul", _set(("tune", "params", "schedule.in_specs.a.block_shape[0]"), [64, 128]), set()),
    "tune-key-empty-part": ("matmul", _set(("tune", "params", "schedule..cluster"), [1]),
                            {("tune", "params", "schedule..cluster", "[key]")}),
    "tune-key-reserved-part": ("matmul", _set(("tune", "params", "schedule.int"), [1]),
                               {("tune", "params", "schedule.int", "[key]")}),
    "tune-key-reserved-indexed": ("matmul", _set(("tune", "params", "op.max[0]"), [1]),
                                  {("tune", "params", "op.max[0]", "[key]")}),
    "tune-key-sg": ("matmul", _set(("tune", "params", "schedule.sg_x"), [1]),
                    {("tune", "params", "schedule.sg_x", "[key]")}),
    "tune-key-bad-index": ("matmul", _set(("tune", "params", "schedule.cluster[x]"), [1]),
                           {("tune", "params", "schedule.cluster[x]", "[key]")}),
    "tune-key-newline": ("matmul", _set(("tune", "params", "tile_n\n"), [1]),
                         {("tune", "params", "tile_n\n", "[key]")}),
    "tune-values-not-list": ("matmul", _set(("tune", "params", "tile_n"), 128), {("tune", "params", "tile_n")}),
    "tune-constraint-long": ("matmul", _set(("tune", "constraints"), ["x" * 401]), {("tune", "constraints", 0)}),
    "mesh-devices": ("collective", _set(("op", "mesh", "num_devices"), 9), {("op", "mesh", "num_devices")}),
    "mesh-axis-reserved": ("collective", _set(("op", "mesh", "axis_name"), "lax"), {("op", "mesh", "axis_name")}),
    "transport-unknown": ("collective", _set(("schedule", "collective", "transport"), "nccl"),
                          {("schedule", "collective", "transport")}),
    "semaphore-per": ("collective", _set(("schedule", "collective", "semaphores", "done", "per"), "tile"),
                      {("schedule", "collective", "semaphores", "done", "per")}),
    "profile-dir-ok": ("map", _set(("schedule", "compiler_params", "profile_dir"), "profiles/run 1"), set()),
    "profile-dir-newline": ("map", _set(("schedule", "compiler_params", "profile_dir"), "profiles\n"),
                            {("schedule", "compiler_params", "profile_dir")}),
    "profile-dir-control": ("map", _set(("schedule", "compiler_params", "profile_dir"), "a\x1bb"),
                            {("schedule", "compiler_params", "profile_dir")}),
    "collective-null": ("collective", _set(("schedule", "collective"), None), set()),
}


@pytest.mark.parametrize("case", list(CASES))
def test_schema_and_models_agree(case, validator):
    base, mutate, fields, *schema_says = CASES[case]
    data = copy.deepcopy(loaded(ROOT / "specs" / BASE[base]))
    assert pydantic_fields(data) == set() and schema_fields(validator, data) == set()
    mutate(data)
    assert pydantic_fields(data) == fields
    assert schema_fields(validator, data) == (schema_says[0] if schema_says else fields)


def test_a_bad_dtype_is_one_error_at_the_dtype(validator):
    """The op union is an if/then on kind: a wrong dtype is one error naming the legal ones, not one per family."""
    data = loaded(ROOT / "specs" / "add_bf16.yaml")
    data["op"]["inputs"]["y"]["dtype"] = "bf32"
    errors = list(validator.iter_errors(data))
    assert len(errors) == 1, [e.message for e in errors]
    assert list(errors[0].absolute_path) == ["op", "inputs", "y", "dtype"]
    assert "'bf32' is not one of ['bf16', 'f16', 'f32', 'f8e4m3', 'f8e5m2', 'bfloat16', " in errors[0].message


def test_a_bad_size_is_reported_in_its_own_member(validator):
    """Unions of distinct JSON types are if/then/else on the type: a bad dynamic size names its field."""
    data = loaded(ROOT / "specs" / "add_bf16.yaml")
    data["op"]["sizes"]["M"] = {"dynamic": True, "max": "big"}
    errors = list(validator.iter_errors(data))
    assert [(list(e.absolute_path), e.validator) for e in errors] == [(["op", "sizes", "M", "max"], "type")]


# Rules JSON Schema cannot state (cross-field, or below its number model): pydantic rejects, the schema accepts.
GAP_CASES = {
    "dynamic-min-above-max": ("map", _set(("op", "sizes", "M"), {"dynamic": True, "max": 64, "min": 128}),
                              {("op", "sizes", "M")}),
    "dynamic-max-not-multiple": ("map", _set(("op", "sizes", "M"), {"dynamic": True, "max": 100, "multiple_of": 64}),
                                 {("op", "sizes", "M")}),
    "int-written-as-float": ("map", _set(("schedule", "pipeline", "max_concurrent_steps"), 4.0),
                             {("schedule", "pipeline", "max_concurrent_steps")}),
}


@pytest.mark.parametrize("case", list(GAP_CASES))
def test_known_gaps_are_still_gaps(case, validator):
    base, mutate, fields = GAP_CASES[case]
    data = copy.deepcopy(loaded(ROOT / "specs" / BASE[base]))
    mutate(data)
    assert pydantic_fields(data) == fields
    assert schema_fields(validator, data) == set()


# ---------------------------------------------------------------------------- descriptions for editors


def _models():
    from schedgen.frontend.schema import models
    return models()


# fields whose value is an expression (or a set of them): an editor shows the examples
EXPRESSIONS = {("BlockSpec", "index_map"), ("MapOp", "body"), ("MatmulOp", "epilogue"), ("Tune", "params"),
               ("Tune", "constraints"), ("Schedule", "grid"), ("RemoteRef", "device_id")}


def test_every_field_says_what_it_does():
    models = _models()
    assert {m.__name__ for m in models} >= {"SpecFile", "Schedule", "BlockSpec", "MapOp", "MatmulOp", "AttentionOp",
                                            "CollectiveMatmulOp", "Mesh", "DynamicSize", "Tune"}
    missing = [f"{m.__name__}.{n}" for m in models for n, f in m.model_fields.items()
               if len(f.description or "") < 20]
    assert missing == []
    for model, field in EXPRESSIONS:
        f = next(m for m in models if m.__name__ == model).model_fields[field]
        assert f.examples, f"{model}.{field}"


def test_the_schema_carries_descriptions_and_examples():
    s = schema()
    defs = s["definitions"]
    for model, field in EXPRESSIONS:
        node = defs[model]["properties"][field]
        assert node["description"] and node["examples"], (model, field)
    assert "bottom_right" in defs["AttentionOp"]["properties"]["causal"]["description"]
    assert defs["Schedule"]["properties"]["pipeline"]["allOf"] == [{"$ref": "#/definitions/Pipeline"}]
    assert defs["Schedule"]["properties"]["pipeline"]["description"]


def test_examples_validate(validator):
    """An example in the schema is a legal value of its field (an editor offers it as one)."""
    s = schema()
    for model, body in s["definitions"].items():
        for field, node in body.get("properties", {}).items():
            for example in node.get("examples", []):
                errors = list(jsonschema.Draft7Validator({**node, "definitions": s["definitions"]}).iter_errors(
                    example))
                assert errors == [], (model, field, example, [e.message for e in errors])


# ---------------------------------------------------------------------------- the field reference page

REFERENCE = ROOT / "docs" / "spec-reference.md"


def test_reference_page_is_generated_and_up_to_date():
    """docs/spec-reference.md is `schedgen schema --markdown` of the current models (regenerate it with that)."""
    from schedgen.frontend.schemadoc import reference_markdown
    assert REFERENCE.read_text() == reference_markdown()


def test_reference_page_covers_every_field():
    text = REFERENCE.read_text()
    for model in _models():
        title = "SpecFile" if model is SpecFile else model.__name__
        section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
        for field in model.model_fields:
            assert f"| `{field}` |" in section, f"{title}.{field}"
    for rule in ("Identifier", "Float32", "TuneKey"):
        assert f"\n## {rule}\n" in text
    causal = next(line for line in text.split("\n## AttentionOp\n", 1)[1].splitlines() if line.startswith("| `causal`"))
    assert "bottom_right" in causal


def test_reference_check_cli_and_readme_link(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run([sys.executable, "-m", "schedgen", "schema", "--markdown", "--check"], cwd=ROOT,
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    stale = tmp_path / "ref.md"
    stale.write_text(REFERENCE.read_text().replace("bottom_right", "top-left"))
    bad = subprocess.run([sys.executable, "-m", "schedgen", "schema", "--markdown", "--check", "-o", str(stale)],
                         cwd=ROOT, capture_output=True, text=True, env=env)
    assert bad.returncode == 1 and "schedgen schema --markdown" in bad.stderr
    assert "](docs/spec-reference.md)" in (ROOT / "README.md").read_text()


def test_starter_specs_conform_and_name_the_schema(tmp_path, validator):
    """`schedgen new KIND` writes a spec the schema accepts, whose modeline finds the committed schema."""
    from schedgen import families
    from schedgen.starter import starter_text
    for kind in families.kinds():
        if families.get(kind).starter is None:
            continue
        dest = tmp_path / kind / f"my_{kind}.yaml"
        dest.parent.mkdir()
        dest.write_text(starter_text(kind, dest))
        first = dest.read_text().split("\n", 1)[0]
        assert (dest.parent / first.removeprefix(MODELINE[".yaml"])).resolve() == SCHEMA_FILE
        data = loaded(dest)
        assert [e.message for e in validator.iter_errors(data)] == [] and pydantic_fields(data) == set(), kind
