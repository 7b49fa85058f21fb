"""Arbitrary text (a spec path, a GPU name from a database, a knob value) made safe to write inside a one-line comment
of a generated file: a YAML or Python `#` comment, a C++ `//` comment.

Such a comment ends at the first line break, so a path with a newline in it would end the comment and the rest of
the path would be read as YAML or code. `comment_text` escapes every character that is not printable (line breaks of
every kind: \\n \\r \\x85 \\u2028 \\u2029, the other control characters, lone surrogates from undecodable file names)
and the backslash itself (in C++ a backslash at the end of a line continues a `//` comment onto the next line), in
Python's escape notation, so the result is one line and says unambiguously what the text was. Printable text,
identifiers and ordinary paths come out unchanged.
"""
from __future__ import annotations

from .errors import printable


def comment_text(text: object) -> str:
    """`text` (anything; str() of it) as one line that cannot end or continue the comment it is written in."""
    return printable(str(text), backslash=True)
