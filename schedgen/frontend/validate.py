"""Plain data -> `SpecFile`, with every pydantic error turned into a located, readable `Problem`.

`load_spec` also applies command-line overrides (`-D M=8192` for a size, `-D schedule.pipeline.max_concurrent_steps=4`
for any field; parsed in overrides.py) to the data before validation, so overridden values are checked like
written ones.
"""
from __future__ import annotations

import difflib
import typing
from typing import Any, Mapping

from pydantic import BaseModel, ValidationError

from .. import registry as families
from ..errors import SHOWN_NAME, Problem, SourceMap, SpecErrors, clip, shorten
from .load import load_file
from .model import DTYPE_ALIASES
from .overrides import apply_overrides, parse_overrides  # noqa: F401  (re-exported: cli.py and tune import them here)
from .specfile import NO_FAMILY, SPEC, SPEC_MODELS, SpecFile, spec_tag


FAMILY_HOWTO = ("a folder schedgen/families/<kind>/ registering a Family manifest, plus its line in _FAMILIES of "
                "schedgen/registry.py, see docs/architecture.md")


def _kinds_listing() -> str:
    """What each kind is, for the unknown-kind message: 'map: <its summary>; ...' (from the registry)."""
    return "; ".join(f"{f.kind}: {f.summary}" for f in families.all_families())


def _unwrap(tp: Any) -> list[Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin is typing.Union or str(origin) == "types.UnionType":
        out = []
        for arg in typing.get_args(tp):
            out.extend(_unwrap(arg))
        return out
    return [tp]


def _kind_tag(t: Any) -> str | None:
    if isinstance(t, type) and issubclass(t, BaseModel) and "kind" in t.model_fields:
        args = typing.get_args(t.model_fields["kind"].annotation)
        return args[0] if len(args) == 1 else None
    return None


def _tagged(loc: tuple, spec: type[BaseModel]) -> tuple[type[BaseModel], tuple]:
    """(the spec model, the rest of `loc`) where `loc` starts with the spec union's tag; else (spec, loc)."""
    if loc and (loc[0] in SPEC_MODELS or loc[0] == NO_FAMILY):
        return SPEC_MODELS.get(loc[0], spec), loc[1:]
    return spec, loc


def _model_at(loc: tuple, spec: type[BaseModel] = SpecFile) -> type[BaseModel] | None:
    """The model class whose field set governs `loc` (a path of field names, dict keys, list indices) in a spec of
    model `spec`; `loc` may start with the spec union's tag (the family's kind), which picks that family's spec."""
    spec, loc = _tagged(loc, spec)
    candidates: list[Any] = [spec]
    for part in loc:
        tagged = [t for tp in candidates for t in _unwrap(tp) if _kind_tag(t) == part]
        if tagged:  # pydantic's discriminated-union tag (op.<kind>): that member alone
            candidates = tagged
            continue
        nxt: list[Any] = []
        for tp in candidates:
            for t in _unwrap(tp):
                origin = typing.get_origin(t)
                if isinstance(t, type) and issubclass(t, BaseModel):
                    field = t.model_fields.get(str(part))
                    if field is not None:
                        nxt.append(field.annotation)
                elif origin is dict:
                    nxt.append(typing.get_args(t)[1])
                elif origin is list and isinstance(part, int):
                    nxt.append(typing.get_args(t)[0])
        candidates = nxt
    for tp in candidates:
        for t in _unwrap(tp):
            if isinstance(t, type) and issubclass(t, BaseModel):
                return t
    return None


def _unknown_key(err: Mapping[str, Any], loc: tuple) -> str:
    """An unknown key, with did-you-mean and the allowed keys; a field of other families' schedules (the spec union's
    tag is op.kind's family) names them and what this family has there."""
    raw = tuple(err.get("raw_loc", loc))
    model = _model_at(raw[:-1])
    allowed = list(model.model_fields) if model else []
    hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    msg = f"unknown key '{clip(str(loc[-1]))}'"
    if hint:
        msg += f" (did you mean '{hint[0]}'?)"
    owners = _owners(raw)
    if owners and model is not None:
        dotted = ".".join(str(p) for p in loc)
        parent = ".".join(str(p) for p in loc[:-1]) or "the spec"
        article = "an" if owners[0][0] in "aeiou" else "a"
        return (msg + f": {clip(dotted)} is {article} {' / '.join(owners)} field; the {raw[0]} family's "
                      f"{clip(parent)} has: {', '.join(allowed)}")
    return msg + (f"; allowed keys: {', '.join(allowed)}" if allowed else "")


def _message(err: Mapping[str, Any], loc: tuple) -> str:
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden" and loc:
        return _unknown_key(err, loc)
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        ctx = err.get("ctx") or {}
        return (f"unknown kind {shorten(ctx.get('tag'), SHOWN_NAME)}; legal kinds: {', '.join(families.kinds())} "
                f"(a new kind of kernel is a family: {FAMILY_HOWTO}); {_kinds_listing()}")
    if kind == "union_tag_not_found":
        return f"required key 'kind' is missing; legal kinds: {', '.join(families.kinds())}"
    msg = err["msg"]
    if kind.startswith("value_error"):
        msg = msg.removeprefix("Value error, ")
    shown = shorten(value)
    if not isinstance(value, (dict, list)):
        msg += f" (got {shown})"
    if kind == "literal_error" and loc and loc[-1] == "dtype":
        msg += f"; also read as those: {', '.join(DTYPE_ALIASES)}"
    return msg


def _owners(raw: tuple) -> list[str]:
    """The families whose spec model has the key at the end of `raw` (a pydantic loc starting with the spec union's
    tag) where the tag's family has not: a field written under a family that does not have it."""
    if not raw or raw[0] not in SPEC_MODELS:
        return []
    found = []
    for kind, model in SPEC_MODELS.items():
        if kind != raw[0]:
            at = _model_at(raw[1:-1], model)
            if at is not None and str(raw[-1]) in at.model_fields:
                found.append(kind)
    return found


def _data_loc(loc: tuple, data: Any) -> tuple:
    """`loc` without pydantic's union-member tags ('int', "literal['auto']", ...): the parts that index the data.

    Walking the data tells a tag from a user's key of the same name (a mapping key may well be 'int')."""
    out, node = [], data
    if loc and isinstance(data, dict) and loc[0] == spec_tag(data) and loc[0] not in data:
        loc = loc[1:]      # the spec union's tag (op.kind's family): matmul.schedule.epilogue -> schedule.epilogue
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif isinstance(node, dict) and part == node.get("kind"):
            continue  # a discriminated union's tag (op.matmul.inputs -> op.inputs)
        elif isinstance(node, dict) and part == "[key]":
            pass  # the error is about the key itself (its value stays the current node's entry)
        elif isinstance(part, str) and (part.startswith(("int", "str", "literal[", "function-after[", "constrained-"))
                                        or part in ("float", "bool", "fixed-size", "dynamic-size")):
            continue
        out.append(part)
    return tuple(out)


def _collapse_union_errors(errors: list[dict], data: Any = None) -> list[dict]:
    """Pydantic reports one error per union member; keep the most specific one per location."""
    by_loc: dict[tuple, list[dict]] = {}
    for err in errors:
        loc = _data_loc(tuple(err["loc"]), data)
        by_loc.setdefault(loc, []).append(dict(err, loc=loc, raw_loc=tuple(err["loc"])))
    out = []
    for errs in by_loc.values():
        if len(errs) == 1:
            out.append(errs[0])
            continue
        # Prefer a constraint/value error over "should be a valid string/integer" from the other member.
        specific = [e for e in errs if e["type"] not in ("int_type", "string_type", "literal_error", "float_type",
                                                         "bool_type", "model_type")]
        if specific:
            out.append(specific[0])
        else:
            types = sorted({e["type"].replace("_type", "").replace("literal_error", "literal") for e in errs})
            merged = dict(errs[0])
            merged["msg"] = " or ".join(e["msg"].removeprefix("Input should be ") for e in errs)
            merged["msg"] = ("Input should be " + merged["msg"]).replace(
                "a valid dictionary or instance of DynamicSize", "{dynamic: true, max: N} (a dynamic size)")
            merged["type"] = "union:" + ",".join(types)
            out.append(merged)
    return out


def validate_data(data: Any, src: SourceMap) -> SpecFile:
    """The spec of op.kind's family (SPEC_MODELS: SpecFile with the family's op and schedule models)."""
    try:
        return SPEC.validate_python(data)
    except ValidationError as exc:
        problems = []
        for err in _collapse_union_errors(exc.errors(include_url=False), data):
            loc = tuple(err["loc"])
            if err["type"] == "union_tag_invalid":
                loc += ("kind",)
            pos = src.key_positions.get(loc) if err["type"] == "extra_forbidden" else None
            problems.append(Problem(loc, _message(err, loc), pos=pos))
        raise SpecErrors(problems, src) from None


def load_spec(path: str, overrides: Mapping[str, Any] | None = None,
              raw: bytes | None = None) -> tuple[SpecFile, SourceMap]:
    """Read, override and validate one spec (`raw`: its bytes, when the caller read them). Raises
    SpecErrors with every problem found."""
    data, src = load_file(path, raw)
    problems: list[Problem] = []
    if overrides:
        data, problems = apply_overrides(data, overrides, src)
    try:
        spec = validate_data(data, src)
    except SpecErrors as exc:
        raise SpecErrors(problems + exc.problems, src) from None
    if problems:
        raise SpecErrors(problems, src)
    return spec, src
