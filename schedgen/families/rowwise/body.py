"""The rowwise body: the map family's elementwise language plus reductions over the row axis.

A body is `name = expression` statements (one a line). Besides the map family's functions (frontend/expr.py's
whitelist, checked by its own checker) an expression may call a reduction over the row (the last axis, N):

- `sum(e)`, `mean(e)`, `max(e)`, `min(e)`: the row's sum / mean / maximum / minimum of `e`;
- `logsumexp(e)`: log(sum(exp(e))) over the row, computed stably (max first);
- `take(e, i)`: the value of `e` at column `i` of the row, `i` a per-row value (an input of shape [M] holding
  class indices as floats, as cross-entropy's targets): 0 where `i` is no column of the row.

A reduction yields one value per row, which broadcasts back over the row wherever it is used. Reductions nest
(`var = mean((x - mean(x)) ** 2)`): each one's level is one more than the deepest reduction its argument reads,
and the kernels sweep the row (kept on chip) once per level. `max(a, b)` / `min(a, b)` with two arguments stay
the elementwise maximum / minimum.

`parse` returns the statements with every reduction call replaced by a placeholder name (`_r<k>`, a name no
spec can use: spec names start with a letter), plus the reductions in order, so that the shared render filters spell every
elementwise tree and the templates spell the reductions themselves.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
from dataclasses import dataclass
from typing import Collection, Mapping

from ...frontend import expr as ex

REDUCTIONS: Mapping[str, int] = {"sum": 1, "mean": 1, "max": 1, "min": 1, "logsumexp": 1, "take": 2}
# what each reduction combines its per-element terms with (logsumexp: max, then a sum of exp)
COMBINE = {"sum": "sum", "mean": "sum", "max": "max", "min": "min", "logsumexp": "lse", "take": "sum"}
PLACEHOLDER = "_r{}"   # no spec name starts with "_" (names start with a letter)


@dataclass(frozen=True)
class Reduction:
    index: int                 # its k: the placeholder _r<k>
    op: str                    # sum | mean | max | min | logsumexp | take
    arg: ex.Expr               # the reduced expression (inner reductions already placeholders)
    index_arg: ex.Expr | None  # take's column: a per-row expression
    level: int                 # 1 + the deepest level its argument reads
    statement: int             # the statement it is called in (0-based)
    line: int                  # 0-based line / column of the call in the body (for located errors)
    col: int


@dataclass(frozen=True)
class RowBody:
    statements: tuple[tuple[str, ex.Expr], ...]   # reductions replaced by placeholders
    reductions: tuple[Reduction, ...]
    text: str
    outputs: tuple[str, ...]
    level: Mapping[str, int]        # every statement target -> the deepest reduction level it reads
    varies: Mapping[str, bool]      # every target -> whether it varies along the row (False: one value a row)


class _Checker(ex._Checker):
    """frontend.expr's checker with the reduction calls let through (their arguments are checked as usual)."""

    def call(self, node: ast.Call, depth: int) -> int:
        fn = node.func.id if isinstance(node.func, ast.Name) else None
        if fn in REDUCTIONS and not (fn in ("max", "min") and len(node.args) == 2):
            if node.keywords:
                raise self.error(node.keywords[0], f"keyword arguments are not allowed (in {fn}()); the reduction "
                                                   f"is over the row (the last axis): pass the expression only")
            if len(node.args) != REDUCTIONS[fn]:
                want = "an expression and a per-row column index" if fn == "take" else "one expression"
                raise self.error(node, f"{fn}() takes {want} ({REDUCTIONS[fn]} argument(s)), got {len(node.args)}")
            return 1 + sum(self.check(a, depth + 1) for a in node.args)
        return super().call(node, depth)


def _is_reduction(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REDUCTIONS and \
        not (node.func.id in ("max", "min") and len(node.args) == 2)


def parse(text: str, *, inputs: Collection[str], outputs: Collection[str], constants: Collection[str],
          row_inputs: Collection[str]) -> RowBody:
    """Parse and check a rowwise body (ExprError with a line and column on any problem). `row_inputs`: the inputs
    that vary along the row ([M, N] and [N]); the others hold one value a row ([M], [M, 1])."""
    assigned, outs, checker = ex.check_statements(text, inputs=inputs, outputs=outputs, constants=constants,
                                                  checker=_Checker)
    return _hoist(assigned, text, outs, set(row_inputs), checker)


def _hoist(assigned: dict[str, ex.Expr], text: str, outs: tuple[str, ...], row_inputs: set[str],
           checker: _Checker) -> RowBody:
    """Replace every reduction call by its placeholder (innermost first) and work out levels and variation."""
    reductions: list[Reduction] = []
    level: dict[str, int] = {}
    varies: dict[str, bool] = {n: True for n in row_inputs}

    def info(tree: ast.AST) -> tuple[int, bool]:
        lv, var = 0, False
        for n in ast.walk(tree):
            if isinstance(n, ast.Name):
                if n.id.startswith("_r"):
                    lv = max(lv, reductions[int(n.id[2:])].level)
                else:
                    lv, var = max(lv, level.get(n.id, 0)), var or varies.get(n.id, False)
        return lv, var

    class Hoist(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call):
            self.generic_visit(node)       # inner reductions first
            if not _is_reduction(node):
                return node
            fn = node.func.id
            arg = node.args[0]
            lv, var = info(arg)
            if not var:
                raise checker.error(node, f"{fn}() reduces over the row, but its argument has one value a row "
                                          f"(it reads no [M, N] or [N] input): reduce an expression of the row")
            idx = None
            if fn == "take":
                ilv, ivar = info(node.args[1])
                if ivar:
                    raise checker.error(node.args[1], "take(e, i): the column i must have one value a row (an input "
                                                      "of shape [M] or a reduction), not vary along the row")
                lv = max(lv, ilv)
                idx = _expr(node.args[1], text)
            k = len(reductions)
            reductions.append(Reduction(k, fn, _expr(arg, text), idx, lv + 1, len(statements), node.lineno - 1,
                                        node.col_offset))
            return ast.copy_location(ast.Name(id=PLACEHOLDER.format(k), ctx=ast.Load()), node)

    statements = []
    for target, value in assigned.items():
        tree = Hoist().visit(copy.deepcopy(value.tree))
        lv, var = info(tree)
        level[target], varies[target] = lv, var
        statements.append((target, _expr(tree, text)))
    return RowBody(tuple(statements), tuple(reductions), text, outs, level, varies)


RECIPROCAL = "_q{}"   # a hoisted reciprocal's name (like the placeholders, no spec name can take it)


def hoist_reciprocals(body: RowBody) -> RowBody:
    """Every `a / d` whose divisor `d` has one value a row, in a statement that varies along the row, becomes
    `a * _q<k>` with `_q<k> = 1.0 / d` a per-row statement just before it (a reciprocal a row and a multiply an
    element instead of a division an element: softmax's `e / sum(e)`). Approximate math only: a * (1 / d) may
    differ from a / d in the last bit."""
    statements: list[tuple[str, ex.Expr]] = []
    level, varies = dict(body.level), dict(body.varies)

    def lv_of(tree: ast.AST) -> tuple[int, bool]:
        lv, var = 0, False
        for n in ast.walk(tree):
            if isinstance(n, ast.Name):
                if n.id.startswith("_r"):
                    lv = max(lv, body.reductions[int(n.id[2:])].level)
                else:
                    lv, var = max(lv, level.get(n.id, 0)), var or varies.get(n.id, False)
        return lv, var

    class Hoist(ast.NodeTransformer):
        def visit_BinOp(self, node: ast.BinOp):
            self.generic_visit(node)
            if not isinstance(node.op, ast.Div):
                return node
            lv, var = lv_of(node.right)
            if var:
                return node
            name = RECIPROCAL.format(sum(1 for t, _ in statements if t.startswith("_q")))
            one = ast.BinOp(ast.Constant(1.0), ast.Div(), node.right)
            statements.append((name, _expr(ast.fix_missing_locations(one), body.text)))
            level[name], varies[name] = lv, False
            return ast.copy_location(ast.BinOp(node.left, ast.Mult(), ast.Name(id=name, ctx=ast.Load())), node)

    start = []                      # each statement's first index in the new list (its reductions go there)
    for target, value in body.statements:
        start.append(len(statements))
        if not body.varies[target]:
            statements.append((target, value))
            continue
        tree = ast.fix_missing_locations(Hoist().visit(copy.deepcopy(value.tree)))
        statements.append((target, _expr(tree, body.text)))
    reductions = tuple(dataclasses.replace(r, statement=start[r.statement]) for r in body.reductions)
    return RowBody(tuple(statements), reductions, body.text, body.outputs, level, varies)


def _expr(tree: ast.expr, text: str) -> ex.Expr:
    names = frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))
    return ex.Expr(ast.unparse(tree), tree, names, text)


def functions_used(body: RowBody) -> set[str]:
    """The elementwise functions and the reductions the body calls."""
    used = {r.op for r in body.reductions}
    for tree in [e.tree for _, e in body.statements] + [r.arg.tree for r in body.reductions]:
        used |= {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return used
