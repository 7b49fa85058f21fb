"""How much the templates compute, read from their Jinja syntax trees (nothing is rendered): the design is that a
template prints the plan's values and branches on its booleans and enums, and every derived number is a plan field.
tests/test_architecture.py keeps a ratchet on the total; run this file to print the count of each template
(`python tests/templatecheck.py`, `-v` for every place).

A computation is one node of a template's expressions that
- does arithmetic: + - * / // % ** and unary minus (not of a literal: `-1` is a number);
- compares: < <= > >=, and == != `in` unless every other side is a string literal or a tuple of them (a branch on
  an enum, `{% if p.layout == "bshd" %}`, is what a template may do);
- applies a filter or a test that computes (`|int`, `|length`, `|selectattr`, `is divisibleby`): every filter but
  the ones that spell a value in the generated code's language (`cxx`, `cxxdim`, `pyfloat`, ...) or lay out text
  (`join`, `indent`, `comment`, ...), every test but the ones that ask what a value is (`none`, `defined`,
  `dynamic`, ...).
`~` (string concatenation), `and` / `or` / `not`, conditional expressions and loops over plan lists print and branch;
they are not counted.
"""
from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import jinja2
import jinja2.nodes as jn

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "templates"

ARITHMETIC = (jn.Add, jn.Sub, jn.Mul, jn.Div, jn.FloorDiv, jn.Mod, jn.Pow, jn.Neg, jn.Pos)
# filters that spell a value in the generated language (schedgen/render: expressions, extents, literals) or lay out
# text: printing, not computing
PRINTING_FILTERS = {"cxx", "jnp", "cxxint", "pyint", "cxxfloat", "pyfloat", "pystr", "spelled", "cxxdim", "pydim",
                    "pytuple", "comment", "join", "indent", "format", "string", "trim"}
# tests that ask what a value is
ASKING_TESTS = {"none", "defined", "undefined", "dynamic", "true", "false", "boolean", "string", "mapping"}


@dataclass(frozen=True)
class Computation:
    template: str        # loader name: '<kind>/<file>' or 'common/<file>'
    line: int
    what: str            # 'Mul', 'Compare >', 'filter length', 'test divisibleby'


def _is_enum_side(node: jn.Node) -> bool:
    if isinstance(node, jn.Const):
        return isinstance(node.value, str)
    if isinstance(node, (jn.Tuple, jn.List)):
        return all(isinstance(i, jn.Const) and isinstance(i.value, str) for i in node.items)
    return False


def _compare(node: jn.Compare) -> list[str]:
    """The computing operators of a comparison: order always, equality and membership unless against strings."""
    found, left = [], node.expr
    for op in node.ops:
        enum = op.op in ("eq", "ne", "in", "notin") and (_is_enum_side(op.expr) or _is_enum_side(left))
        if not enum:
            found.append(f"Compare {op.op}")
        left = op.expr
    return found


def computations(tree: jn.Template, name: str) -> list[Computation]:
    found = []
    for node in tree.find_all(jn.Expr):
        what: list[str] = []
        if isinstance(node, ARITHMETIC):
            if not (isinstance(node, (jn.Neg, jn.Pos)) and isinstance(node.node, jn.Const)):
                what.append(type(node).__name__)
        elif isinstance(node, jn.Compare):
            what = _compare(node)
        elif isinstance(node, jn.Filter) and node.name not in PRINTING_FILTERS:
            what.append(f"filter {node.name}")
        elif isinstance(node, jn.Test) and node.name not in ASKING_TESTS:
            what.append(f"test {node.name}")
        found += [Computation(name, node.lineno, w) for w in what]
    return found


def template_names(root: Path = TEMPLATES) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.j2"))


def count(root: Path = TEMPLATES) -> dict[str, list[Computation]]:
    """Loader name -> its computations, for every template under `root`."""
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    return {name: computations(env.parse((root / name).read_text()), name) for name in template_names(root)}


def main(argv: list[str]) -> None:
    counts = count()
    for name, found in sorted(counts.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        kinds = Counter(c.what for c in found)
        print(f"{len(found):4d}  {name}" + (f"  ({', '.join(f'{k} {n}' for k, n in kinds.most_common())})"
                                             if found else ""))
        if "-v" in argv:
            for c in found:
                print(f"        {c.line}: {c.what}")
    print(f"{sum(len(f) for f in counts.values()):4d}  total")


if __name__ == "__main__":
    main(sys.argv[1:])
