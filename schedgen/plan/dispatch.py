"""The dispatch record of a bucketed package ("many shapes, one package", docs/tuning.md): which variant serves a
call, by the call's dynamic sizes. Written by schedgen/bucketed.py as `dispatch.json`, read by
schedgen/runtime/buckets.py; plain data, never code.

A bucketed package folder holds dispatch.json and `variants/<id>/`, each variant a whole one-kernel package (its
own launch.json, kernel.cubin, pallas_kernel.py, ...) built from one schedule of the same spec, so every variant
takes the same operands and the same dynamic size ranges.

Fields (every one required; unknown fields are refused):

- version: int            DISPATCH_VERSION.
- name: str               the package's (and every variant's) kernel name.
- sizes: [str]            the dynamic sizes the buckets split, in order.
- bounds: [[int]]         per size, its buckets' upper bounds, increasing: bucket i takes (bounds[i-1], bounds[i]].
- variants: [str]         the variant folders under variants/, in table order.
- table: [int]            one entry per bucket cell, row-major over `sizes` (the last size fastest): the index
                          into `variants` of the variant that serves it.
- buckets: [object]       per cell, for people and tools (the range, where its schedule came from, its time);
                          nothing that dispatches reads it.

A size past the last bound (a call the variants' own checks refuse anyway) takes the last bucket.
"""
from __future__ import annotations

import json
import math
import re
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .. import boundedjson
from ..errors import shorten

FILE_NAME = "dispatch.json"
VARIANTS_DIR = "variants"
DISPATCH_VERSION = 1
_FIELDS = ("version", "name", "sizes", "bounds", "variants", "table", "buckets")
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,62}")


class DispatchRecordError(ValueError):
    """dispatch.json is missing, of another version, or malformed: the message names the file and the field."""


@dataclass(frozen=True)
class DispatchRecord:
    name: str
    sizes: tuple[str, ...]
    bounds: tuple[tuple[int, ...], ...]
    variants: tuple[str, ...]
    table: tuple[int, ...]
    buckets: tuple[dict, ...] = ()

    def cell(self, values: Sequence[int]) -> int:
        """The bucket cell of one value per size (bisect per size: O(log n))."""
        cell = 0
        for v, bounds in zip(values, self.bounds):
            i = bisect_left(bounds, v)
            cell = cell * len(bounds) + (i if i < len(bounds) else len(bounds) - 1)
        return cell

    def variant_of(self, values: Sequence[int]) -> str:
        """The variant folder serving these sizes (one value per entry of `sizes`)."""
        return self.variants[self.table[self.cell(values)]]

    def to_dict(self) -> dict:
        return {"version": DISPATCH_VERSION, "name": self.name, "sizes": list(self.sizes),
                "bounds": [list(b) for b in self.bounds], "variants": list(self.variants), "table": list(self.table),
                "buckets": [dict(b) for b in self.buckets]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"


def _int(v: Any) -> bool:
    return type(v) is int


def from_dict(data: Any, where: str = FILE_NAME) -> DispatchRecord:
    """A record from parsed JSON, every field checked (DispatchRecordError naming the file and the field)."""
    def bad(field: str, what: str) -> DispatchRecordError:
        return DispatchRecordError(f"{where}: {field}: {what}")
    if not isinstance(data, dict):
        raise bad("(top)", "not a JSON object")
    missing = [f for f in _FIELDS if f not in data]
    extra = sorted(set(data) - set(_FIELDS))
    if missing or extra:
        raise bad("(top)", f"missing {missing}" if missing else f"unknown fields {extra}")
    if type(data["version"]) is not int or data["version"] != DISPATCH_VERSION:   # true, 1.0: not the version 1
        raise bad("version", f"{shorten(data['version'])}, this schedgen reads version {DISPATCH_VERSION} (rebuild the "
                             f"package with this schedgen)")
    if not isinstance(data["name"], str) or not data["name"]:
        raise bad("name", "not a name")
    sizes, bounds, variants, table = data["sizes"], data["bounds"], data["variants"], data["table"]
    if not isinstance(sizes, list) or not sizes or not all(isinstance(s, str) and _PLAIN.fullmatch(s) for s in sizes) \
            or len(set(sizes)) != len(sizes):
        raise bad("sizes", "not a non-empty list of distinct size names")
    if not isinstance(bounds, list) or len(bounds) != len(sizes):
        raise bad("bounds", f"not one list per size ({len(sizes)})")
    for s, b in zip(sizes, bounds):
        if not isinstance(b, list) or not b or not all(_int(v) and v >= 1 for v in b) or \
                any(x >= y for x, y in zip(b, b[1:])):
            raise bad("bounds", f"{s}: not an increasing list of positive integers")
    if not isinstance(variants, list) or not variants or len(set(map(str, variants))) != len(variants) or \
            not all(isinstance(v, str) and _PLAIN.fullmatch(v) for v in variants):
        raise bad("variants", "not a non-empty list of distinct folder names")
    cells = math.prod(len(b) for b in bounds)
    if not isinstance(table, list) or len(table) != cells or \
            not all(_int(i) and 0 <= i < len(variants) for i in table):
        raise bad("table", f"not {cells} indices into the {len(variants)} variants")
    if not isinstance(data["buckets"], list) or not all(isinstance(b, dict) for b in data["buckets"]):
        raise bad("buckets", "not a list of objects")
    return DispatchRecord(data["name"], tuple(sizes), tuple(tuple(b) for b in bounds), tuple(variants), tuple(table),
                          tuple(data["buckets"]))


def load(root: str | Path) -> DispatchRecord:
    """The record of the bucketed package folder `root`."""
    path = Path(root) / FILE_NAME
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise DispatchRecordError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        data = boundedjson.loads(text)
    except ValueError as exc:                      # UnicodeDecodeError is one
        raise DispatchRecordError(f"{path}: not valid JSON: {exc}") from None
    return from_dict(data, str(path))


def is_bucketed(root: str | Path) -> bool:
    """A bucketed package folder (dispatch.json and variants/) rather than a one-kernel one."""
    return (Path(root) / FILE_NAME).is_file()
