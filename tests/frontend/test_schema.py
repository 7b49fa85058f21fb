"""The committed JSON Schema matches the models, and every bundled spec conforms to it.

No jsonschema dependency: a small validator for the subset pydantic emits (type, properties, required,
additionalProperties, $ref, anyOf, enum/const, items, numeric and length bounds, pattern) checks the specs
structurally; it is itself checked against files the schema must reject.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib

import pydantic
import pytest
import yaml

from conftest import ROOT, spec_files
from schedgen.frontend.specfile import SpecFile
from schedgen.frontend.schema import SCHEMA_ID, schema, schema_json

SCHEMA_FILE = ROOT / "schemas" / "schedgen.schema.json"

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def conform(value, node: dict, root: dict, path: str = "$") -> list[str]:
    """Errors of `value` against schema `node` (the subset of JSON Schema pydantic generates)."""
    if "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/$defs/"), ref
        return conform(value, root["$defs"][ref.split("/")[-1]], root, path)
    if "oneOf" in node and "discriminator" in node:   # pydantic's tagged union: the branch the tag names
        disc = node["discriminator"]
        tag = value.get(disc["propertyName"]) if isinstance(value, dict) else None
        if tag not in disc["mapping"]:
            return [f"{path}: {disc['propertyName']} {tag!r} not in {sorted(disc['mapping'])}"]
        return conform(value, {"$ref": disc["mapping"][tag]}, root, path)
    if "anyOf" in node:
        branches = [conform(value, sub, root, path) for sub in node["anyOf"]]
        return [] if any(not b for b in branches) else [f"{path}: matches no anyOf branch {branches}"]
    errs: list[str] = []
    if "type" in node and not _TYPES[node["type"]](value):
        return [f"{path}: expected {node['type']}, got {type(value).__name__}"]
    if "const" in node and value != node["const"]:
        errs.append(f"{path}: expected {node['const']!r}")
    if "enum" in node and value not in node["enum"]:
        errs.append(f"{path}: {value!r} not in {node['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in node and value < node["minimum"]:
            errs.append(f"{path}: below minimum")
        if "maximum" in node and value > node["maximum"]:
            errs.append(f"{path}: above maximum")
    if isinstance(value, str):
        if len(value) < node.get("minLength", 0) or len(value) > node.get("maxLength", 1 << 60):
            errs.append(f"{path}: bad length")
        if "pattern" in node and not re.search(node["pattern"], value):
            errs.append(f"{path}: does not match {node['pattern']}")
    if isinstance(value, list):
        if len(value) < node.get("minItems", 0) or len(value) > node.get("maxItems", 1 << 60):
            errs.append(f"{path}: bad item count")
        for i, item in enumerate(value):
            errs += conform(item, node.get("items", {}), root, f"{path}[{i}]")
    if isinstance(value, dict):
        props = node.get("properties", {})
        for key in node.get("required", []):
            if key not in value:
                errs.append(f"{path}: missing required {key!r}")
        if len(value) < node.get("minProperties", 0) or len(value) > node.get("maxProperties", 1 << 60):
            errs.append(f"{path}: bad property count")
        extra = node.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                errs += conform(item, props[key], root, f"{path}.{key}")
            elif extra is False:
                errs.append(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                errs += conform(item, extra, root, f"{path}.{key}")
    return errs


def load_data(path):
    text = path.read_text()
    return tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)


def test_committed_schema_has_not_drifted():
    """schemas/schedgen.schema.json must be regenerated (`schedgen schema`) whenever the models change."""
    assert SCHEMA_FILE.read_text() == schema_json()


def test_schema_is_valid_json_with_identity():
    s = json.loads(SCHEMA_FILE.read_text())
    assert s["$id"] == SCHEMA_ID
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert s["type"] == "object" and s["additionalProperties"] is False
    assert set(s["required"]) == {"name", "op"}
    assert set(s["properties"]) == set(SpecFile.model_fields)
    # every $ref resolves
    refs = set(re.findall(r'"\$ref": "#/\$defs/(\w+)"', SCHEMA_FILE.read_text()))
    assert refs and refs <= set(s["$defs"])


def test_schema_check_cli_agrees(tmp_path):
    env_py = [sys.executable, "-m", "schedgen", "schema", "--check", "-o"]
    ok = subprocess.run(env_py + [str(SCHEMA_FILE)], cwd=ROOT, capture_output=True, text=True,
                        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert ok.returncode == 0, ok.stderr
    stale = tmp_path / "stale.json"
    stale.write_text(SCHEMA_FILE.read_text().replace('"maxLength": 4000', '"maxLength": 4001'))
    bad = subprocess.run(env_py + [str(stale)], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 1 and "out of date" in bad.stderr


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.name)
def test_bundled_spec_conforms_to_schema(path):
    s = schema()
    data = load_data(path)
    assert conform(data, s, s) == []
    # and the schema's required keys are really there
    assert set(s["required"]) <= set(data)
    model = {"map": "MapOp", "matmul": "MatmulOp", "attention": "AttentionOp",
             "collective_matmul": "CollectiveMatmulOp"}[data["op"]["kind"]]
    assert set(s["$defs"][model]["required"]) <= set(data["op"])


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.pop("op"), "missing required 'op'"),
    (lambda d: d["op"].update(bodyy="o = x"), "unexpected key 'bodyy'"),
    (lambda d: d["op"]["inputs"]["x"].update(dtype="bf32"), "not in"),
    (lambda d: d["schedule"]["pipeline"].update(max_concurrent_steps="4"), "expected integer"),
    (lambda d: d["schedule"]["pipeline"].update(max_concurrent_steps=17), "above maximum"),
    (lambda d: d["schedule"].update(cluster=[]), "bad item count"),
], ids=["missing-op", "unknown-key", "bad-dtype", "string-int", "too-many-stages", "empty-cluster"])
def test_schema_rejects_what_the_models_reject(mutate, needle):
    """The mini validator is not vacuous: a broken spec fails both it and pydantic."""
    s = schema()
    data = load_data(spec_files()[0])
    assert conform(data, s, s) == []
    mutate(data)
    errs = conform(data, s, s)
    assert errs and any(needle in e for e in errs), errs
    with pytest.raises(pydantic.ValidationError):
        SpecFile.model_validate(data)
