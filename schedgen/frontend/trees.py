"""Validated float expressions as plain (JSON-able) trees, the form a plan carries them in (the map body's
statements); spelled as C++ or jnp only at render time, by the templates' `tree_cxx` and `tree_jnp` filters
(schedgen/render).

A tree is nested tuples: ("lit", value), ("name", C++ identifier, jnp identifier), ("neg", x),
("bin", "+" | "-" | "*" | "/" | "**", left, right), ("call", function, *args). The filters turn it back into the
Python AST that schedgen.frontend.expr validated and render it with expr.render_cxx / render_jnp, so the text is
exactly what those give (and they re-check every node)."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Mapping

from . import expr as ex

_BIN = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_BIN_NODE = {sym: op for op, sym in _BIN.items()}


@dataclass(frozen=True)
class Statement:
    target: str        # r_<output> or t_<temporary>: the same identifier in both languages
    value: tuple       # the expression tree (see the module docstring)


def tree_of(node: ast.expr, cxx_names: Mapping[str, str], jnp_names: Mapping[str, str]) -> tuple:
    """The tree of a validated expression, its names resolved to each language's identifiers."""
    if isinstance(node, ast.Constant):
        return ("lit", node.value)
    if isinstance(node, ast.Name):
        return ("name", cxx_names[node.id], jnp_names[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return ("neg", tree_of(node.operand, cxx_names, jnp_names))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
        return tree_of(node.operand, cxx_names, jnp_names)   # +x renders as x
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        return ("bin", _BIN[type(node.op)], tree_of(node.left, cxx_names, jnp_names),
                tree_of(node.right, cxx_names, jnp_names))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        return ("call", node.func.id, *(tree_of(a, cxx_names, jnp_names) for a in node.args))
    raise ex.ExprError(f"cannot carry {type(node).__name__} in a map body (not a validated expression)")


def _node(tree, lang: int) -> ast.expr:
    """The AST of a tree, names as the identifiers of language `lang` (0: C++, 1: jnp)."""
    kind = tree[0]
    if kind == "lit":
        return ast.Constant(tree[1])
    if kind == "name":
        return ast.Name(tree[1 + lang], ast.Load())
    if kind == "neg":
        return ast.UnaryOp(ast.USub(), _node(tree[1], lang))
    if kind == "bin":
        return ast.BinOp(_node(tree[2], lang), _BIN_NODE[tree[1]](), _node(tree[3], lang))
    if kind == "call":
        return ast.Call(ast.Name(tree[1], ast.Load()), [_node(a, lang) for a in tree[2:]], [])
    raise ValueError(f"not a map body tree: {tree!r}")


def _expr(tree, lang: int) -> tuple[ex.Expr, dict[str, str]]:
    node = _node(tree, lang)
    names = {n.id: n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return ex.Expr(text="", tree=node, names=frozenset(names)), names


def cxx(tree) -> str:
    """float32 C++ text of a tree (the `tree_cxx` template filter)."""
    return ex.render_cxx(*_expr(tree, 0))


def jnp(tree) -> str:
    """jax.numpy text of a tree (the `tree_jnp` template filter)."""
    return ex.render_jnp(*_expr(tree, 1))
