"""JSON a package holds (launch.json, dispatch.json, backward.json, plan.json), parsed with its nesting bounded.

A package is files anyone may edit or damage. json.loads recurses once per level of nesting: a file of 100000
`[` is a RecursionError (no JSON error, and no file named), and a readable one nested hundreds deep makes the
readers after it recurse as deep; a number of 5000 digits is a ValueError telling the reader to raise
sys.set_int_max_str_digits. `loads` counts the nesting first, without recursing, and refuses anything deeper
than MAX_DEPTH with a ValueError saying so; the records schedgen writes are a handful of levels deep.
"""
from __future__ import annotations

import json
import re
import sys
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


def depth(text: str) -> int:
    """How deep the arrays and objects of JSON text nest (brackets inside strings do not count)."""
    steps = (1 if b in "[{" else -1 for b in _BRACKET.findall(_STRING.sub("", text)))
    return max(accumulate(steps, initial=0))


def loads(data: str | bytes) -> Any:
    """json.loads, for text or bytes (any of the UTF encodings json reads); ValueError (a UnicodeDecodeError for
    bytes that decode in no UTF) for bad JSON, and for nesting deeper than MAX_DEPTH."""
    text = data.decode(json.detect_encoding(data), "surrogatepass") if isinstance(data, (bytes, bytearray)) else data
    levels = depth(text)
    if levels > MAX_DEPTH:
        raise ValueError(f"nested {levels} levels deep; a schedgen record is at most {MAX_DEPTH} (a damaged or "
                         f"foreign file)")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:             # int() refuses a number of more digits than sys.get_int_max_str_digits()
        raise ValueError(f"holds an integer of more than {sys.get_int_max_str_digits()} digits (a damaged or "
                         f"foreign file)") from None
    except RecursionError:         # unreachable at MAX_DEPTH, kept for an interpreter with a tiny recursion limit
        raise ValueError(f"nested too deep to read (at most {MAX_DEPTH} levels)") from None
