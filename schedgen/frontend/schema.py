"""JSON Schema of specs (draft-07), exported from the pydantic models, for editors and validators.

The YAML language server and taplo speak draft-07, so pydantic's 2020-12 output is rewritten into it:
- `definitions` instead of `$defs`, and a `$ref` with sibling keys (a description, a default) wrapped in `allOf`
  (draft-07 ignores the siblings of a `$ref`);
- the op union (pydantic's `oneOf` + OpenAPI `discriminator`) becomes an enum on `kind` plus one `if`/`then` per
  family, so a bad value is reported where it is (`op.inputs.x.dtype`), not as one failure per family;
- every other union whose members differ in JSON type (an int or a size name, an int or `auto`, a value or null)
  becomes an `if`/`then`/`else` chain on the type, for the same reason;
- the rules pydantic checks in Python (names, float32 constants, tune keys: `model.SCHEMA_DEFINITIONS`) are
  shared definitions with `pattern` / bounds, referenced where the models mark them (`SchemaDef`);
- pydantic's titles (the field name, title-cased) are dropped: the descriptions say more.

What JSON Schema cannot say is left to `schedgen validate` (its tests list each case): the cross-field rules of a
dynamic size (min <= max, multiples), NaN, and 4.0 for an integer (draft-06 on counts 4.0 as an integer).
"""
from __future__ import annotations

import json
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from pydantic_core import to_jsonable_python

from .model import SCHEMA_DEFINITIONS
from .. import registry as families
from .specfile import SpecFile, schedule_model

SCHEMA_ID = "https://schedgen.invalid/schedgen.schema.json"
DRAFT = "http://json-schema.org/draft-07/schema#"
_PREFIX = "#/definitions/"
_ANNOTATIONS = ("description", "examples", "default")
# Python's `$` also matches before a final newline (the jsonschema package uses `re.search`); ECMA-262's and Rust's
# do not: the lookahead makes every engine end where pydantic's does
_END = r"(?!\n)$"


def schema() -> dict:
    _, raw = models_json_schema([(m, "validation") for m in _roots()], ref_template=_PREFIX + "{model}")
    defs = {**raw.pop("$defs", {}), **SCHEMA_DEFINITIONS}
    top = defs.pop(SpecFile.__name__)
    for model in models():        # pydantic leaves out what a default_factory makes ([1], [cuda, pallas], {})
        props = (top if model is SpecFile else defs[model.__name__]).get("properties", {})
        for name, field in model.model_fields.items():
            if field.default_factory is not None:
                props[name]["default"] = to_jsonable_python(field.get_default(call_default_factory=True))
    _schedule_by_kind(top)
    out = _rewrite({**top, "definitions": defs}, defs)
    out.pop("title", None)
    return {"$schema": DRAFT, "$id": SCHEMA_ID, "title": "schedgen spec", **out}


def _roots() -> list[type[BaseModel]]:
    """SpecFile and each family's schedule model (the core Schedule where a family adds no field), once each."""
    out: list[type[BaseModel]] = [SpecFile]
    for family in families.all_families():
        if schedule_model(family) not in out:
            out.append(schedule_model(family))
    return out


def _schedule_by_kind(top: dict) -> None:
    """`schedule` is an object whose model op.kind picks: one `if` op.kind / `then` the family's schedule model each
    (the spec is a union discriminated on op.kind: specfile.SPEC)."""
    written = top["properties"]["schedule"]
    top["properties"]["schedule"] = {"type": "object", "default": {}, "description": written["description"]}
    top["allOf"] = [
        {"if": {"properties": {"op": {"properties": {"kind": {"const": f.kind}}, "required": ["kind"]}},
                "required": ["op"]},
         "then": {"properties": {"schedule": {"$ref": _PREFIX + schedule_model(f).__name__}}}}
        for f in families.all_families()]


def schema_json() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


def models() -> list[type[BaseModel]]:
    """Every model class a spec file can hold, SpecFile first (each family's schedule model included)."""
    seen: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = _roots()
    while todo:
        model = todo.pop(0)
        if model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            stack = [field.annotation]
            while stack:
                t = stack.pop()
                if isinstance(t, type) and issubclass(t, BaseModel):
                    todo.append(t)
                stack.extend(typing.get_args(t))
    return seen


def _rewrite(node: Any, defs: dict, key: str = "") -> Any:
    """`node` rewritten into draft-07, children first (`key`: the keyword `node` is the value of)."""
    if key == "pattern" and isinstance(node, str) and node.endswith("$") and not node.endswith(("\\$", _END)):
        return node[:-1] + _END      # pydantic's own patterns (Rust regex: `$` is the end of the text)
    if isinstance(node, list):
        return [_rewrite(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if key in ("properties", "definitions"):   # a map of names to schemas: the names are not keywords
        return {name: _rewrite(sub, defs) for name, sub in node.items()}
    if key in ("default", "examples", "const", "enum"):
        return node
    node = {k: _rewrite(v, defs, k) for k, v in node.items() if k != "title"}
    if "x-schedgen-def" in node:
        node = {"$ref": _PREFIX + node["x-schedgen-def"], **{k: node[k] for k in _ANNOTATIONS if k in node}}
    if "propertyNames" in node and len(node.get("patternProperties", {})) == 1:   # the keys are checked there
        node["additionalProperties"] = node.pop("patternProperties").popitem()[1]
    if "discriminator" in node:
        node = _tagged_union(node)
    for union in ("anyOf", "oneOf"):
        if union in node and (chain := _by_type(node[union], defs)) is not None:
            node = {**{k: v for k, v in node.items() if k != union}, **chain}
    if "$ref" in node and len(node) > 1:
        node = {"allOf": [{"$ref": node.pop("$ref")}], **node}
    return node


def _tagged_union(node: dict) -> dict:
    """pydantic's `oneOf` + `discriminator` as an enum on the tag and one `if`/`then` per member."""
    tag, mapping = node["discriminator"]["propertyName"], node["discriminator"]["mapping"]
    order = [member["$ref"] for member in node["oneOf"]]      # the registry's order, as the models list them
    values = sorted(mapping, key=lambda value: order.index(mapping[value]))
    rest = {k: v for k, v in node.items() if k not in ("discriminator", "oneOf")}
    return {**rest, "type": "object", "required": [tag],
            "properties": {tag: {"enum": values, "description": f"which kind of kernel; legal: {', '.join(values)}"}},
            "allOf": [{"if": {"properties": {tag: {"const": value}}, "required": [tag]},
                       "then": {"$ref": mapping[value]}} for value in values]}


_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}


def _types(branch: dict, defs: dict) -> frozenset[str] | None:
    """The JSON types `branch` admits, when that is plain from its keywords; None when it is not."""
    if "$ref" in branch:
        target = defs.get(branch["$ref"].removeprefix(_PREFIX), {})
        return _types(target, defs) if target is not branch else None
    if isinstance(branch.get("type"), str):
        return frozenset({branch["type"]})
    values = branch.get("enum", [branch["const"]] if "const" in branch else None)
    if values:
        return frozenset(_TYPES[type(v)] for v in values)
    return None


def _by_type(branches: list[dict], defs: dict) -> dict | None:
    """`{"if": {"type": T1}, "then": B1, "else": ...}` for members of distinct JSON types (an integer overlaps a
    number), the last `else` naming every type; None when the members overlap."""
    types = [_types(b, defs) for b in branches]
    if any(t is None for t in types):
        return None
    seen: set[str] = set()
    for t in types:
        widened = t | ({"integer"} if "number" in t else set()) | ({"number"} if "integer" in t else set())
        if seen & widened:
            return None
        seen |= widened
    chain: dict = {"type": _one_or_list(set().union(*types))}
    for branch, t in reversed(list(zip(branches, types))):
        chain = {"if": {"type": _one_or_list(t)}, "then": branch, "else": chain}
    return chain


def _one_or_list(types: set[str] | frozenset[str]) -> str | list[str]:
    return next(iter(types)) if len(types) == 1 else sorted(types)
