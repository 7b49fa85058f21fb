"""Symbolic reverse-mode derivatives of validated bodies (issue 19): a map body, a matmul epilogue, a rowwise body.

`vjp(body, wrt=..., cotangents=...)` returns the text of a new body (the same statement language, re-validated by
the caller through `frontend.expr.parse_body`, so a derived body gets every check a user's body gets and reaches
generated code only through the render filters) that computes the vector-Jacobian product: the gradient of
sum(cotangent * output) with respect to each `wrt` name.

How: the forward statements are walked in reverse; every node of an expression passes its adjoint to its
operands by the rules of `_RULES` (one per operator and function); the adjoints of a name are summed where the
name is assigned. Only what is needed is kept: statements of names that depend on no `wrt` name get no adjoint,
forward statements are recomputed only when an adjoint reads them, and `saved` temporaries are read as inputs
instead of recomputed (what the forward kernel wrote as an extra output). Derivatives at kinks follow torch:
relu'(0) = 0, abs'(0) = 0, and minimum / maximum / clamp send the whole gradient to one operand, the first on a
tie (torch splits a tie of maximum / minimum in halves; the difference is confined to exact ties);
`heaviside(x)` (1 where x > 0, else 0) and `sign(x)` spell these.

A family extends the rules with its own calls (`calls`: the rowwise family's reductions): name -> rule
(args, node, adjoint, namer) -> one contribution (an ast expression or None) per argument.
"""
from __future__ import annotations

import ast
import copy
import functools
import math
from dataclasses import dataclass
from typing import Callable, Collection, Mapping, Sequence

from ..frontend.expr import Body
from . import names

Rule = Callable[[Sequence[ast.expr], ast.expr, ast.expr], Sequence["ast.expr | None"]]


@dataclass(frozen=True)
class Derived:
    """A derived body: `text` assigns every gradient name of `wrt` not in `zero`; `inputs` are the names it reads
    and does not assign (forward inputs, constants, saved temporaries, cotangent names, in first-use order);
    `zero` holds the gradient names that are identically zero (no statement assigns them)."""
    text: str
    inputs: tuple[str, ...]
    zero: frozenset[str]


# ------------------------------------------------------------------ expression builders with light simplification


def _c(value: float) -> ast.expr:
    return ast.Constant(float(value)) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(float(-value)))


def _const(node: ast.expr) -> float | None:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and (v := _const(node.operand)) is not None:
        return -v
    return None


def _name(n: str) -> ast.expr:
    return ast.Name(n, ast.Load())


def _call(fn: str, *args: ast.expr) -> ast.expr:
    return ast.Call(_name(fn), list(args), [])


def mul(a: ast.expr, b: ast.expr) -> ast.expr:
    ca, cb = _const(a), _const(b)
    if ca == 0.0 or cb == 0.0:
        return _c(0.0)
    if ca == 1.0:
        return b
    if cb == 1.0:
        return a
    if ca == -1.0:
        return neg(b)
    if cb == -1.0:
        return neg(a)
    if ca is not None and cb is not None:
        return _c(ca * cb)
    return ast.BinOp(a, ast.Mult(), b)


def div(a: ast.expr, b: ast.expr) -> ast.expr:
    return a if _const(b) == 1.0 else ast.BinOp(a, ast.Div(), b)


def add(a: ast.expr, b: ast.expr) -> ast.expr:
    if _const(a) == 0.0:
        return b
    if _const(b) == 0.0:
        return a
    if isinstance(b, ast.UnaryOp) and isinstance(b.op, ast.USub):
        return ast.BinOp(a, ast.Sub(), b.operand)
    return ast.BinOp(a, ast.Add(), b)


def sub(a: ast.expr, b: ast.expr) -> ast.expr:
    if _const(b) == 0.0:
        return a
    return ast.BinOp(a, ast.Sub(), b)


def neg(a: ast.expr) -> ast.expr:
    if (v := _const(a)) is not None:
        return _c(-v)
    if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.USub):
        return a.operand
    return ast.UnaryOp(ast.USub(), a)


def _cp(node: ast.expr) -> ast.expr:
    return copy.deepcopy(node)


# ------------------------------------------------------------------ the rules: d(node)/d(arg) times the adjoint g

_LN2 = math.log(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _gelu_tanh_grad(x: ast.expr) -> ast.expr:
    # d/dx 0.5 x (1 + t), t = tanh(c (x + a x^3)):  0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2)
    inner = mul(_c(_SQRT_2_OVER_PI), add(_cp(x), mul(_c(_GELU_CUBIC), ast.BinOp(_cp(x), ast.Pow(), ast.Constant(3)))))
    t = _call("tanh", inner)
    first = mul(_c(0.5), add(_c(1.0), t))
    second = mul(mul(mul(_c(0.5), _cp(x)), sub(_c(1.0), ast.BinOp(_cp(t), ast.Pow(), ast.Constant(2)))),
                 mul(_c(_SQRT_2_OVER_PI), add(_c(1.0), mul(_c(3 * _GELU_CUBIC), ast.BinOp(_cp(x), ast.Pow(), ast.Constant(2))))))
    return add(first, second)


def _gelu_erf_grad(x: ast.expr) -> ast.expr:
    # Phi(x) + x phi(x) = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi)
    cdf = mul(_c(0.5), add(_c(1.0), _call("erf", mul(_cp(x), _c(_INV_SQRT2)))))
    pdf = mul(_c(_INV_SQRT_2PI), _call("exp", mul(_c(-0.5), ast.BinOp(_cp(x), ast.Pow(), ast.Constant(2)))))
    return add(cdf, mul(_cp(x), pdf))


def _sigmoid_grad(x: ast.expr) -> ast.expr:
    s = _call("sigmoid", _cp(x))
    return mul(s, sub(_c(1.0), _cp(s)))


def _silu_grad(x: ast.expr) -> ast.expr:
    # s (1 + x (1 - s)), s = sigmoid(x)
    s = _call("sigmoid", _cp(x))
    return mul(s, add(_c(1.0), mul(_cp(x), sub(_c(1.0), _cp(s)))))


_UNARY: dict[str, Callable[[ast.expr, ast.expr], ast.expr]] = {
    # (argument, the node itself) -> the derivative
    "exp": lambda x, y: _cp(y),
    "exp2": lambda x, y: mul(_cp(y), _c(_LN2)),
    "log": lambda x, y: div(_c(1.0), _cp(x)),
    "log2": lambda x, y: div(_c(1.0 / _LN2), _cp(x)),
    "sqrt": lambda x, y: div(_c(0.5), _cp(y)),
    "rsqrt": lambda x, y: div(mul(_c(-0.5), _cp(y)), _cp(x)),
    "tanh": lambda x, y: sub(_c(1.0), ast.BinOp(_cp(y), ast.Pow(), ast.Constant(2))),
    "sigmoid": lambda x, y: _sigmoid_grad(x),
    "relu": lambda x, y: _call("heaviside", _cp(x)),
    "gelu": lambda x, y: _gelu_tanh_grad(x),
    "gelu_erf": lambda x, y: _gelu_erf_grad(x),
    "silu": lambda x, y: _silu_grad(x),
    "square": lambda x, y: mul(_c(2.0), _cp(x)),
    "abs": lambda x, y: _call("sign", _cp(x)),
    "erf": lambda x, y: mul(_c(2.0 / math.sqrt(math.pi)), _call("exp", neg(ast.BinOp(_cp(x), ast.Pow(), ast.Constant(2))))),
    "heaviside": lambda x, y: _c(0.0),
    "sign": lambda x, y: _c(0.0),
}


def _minmax(first_wins: Callable[[ast.expr, ast.expr], ast.expr]) -> Rule:
    def rule(args, node, g):
        a, b = args
        pick = first_wins(a, b)              # 1 where the first operand is the result, else 0
        return [mul(g, pick), mul(g, sub(_c(1.0), _cp(pick)))]
    return rule


# maximum(a, b) is a where a >= b (the first operand takes a tie): 1 - heaviside(b - a)
_RULES: dict[str, Rule] = {
    "maximum": _minmax(lambda a, b: sub(_c(1.0), _call("heaviside", sub(_cp(b), _cp(a))))),
    "minimum": _minmax(lambda a, b: sub(_c(1.0), _call("heaviside", sub(_cp(a), _cp(b))))),
}


def _clamp_rule(args, node, g):
    # clamp(x, lo, hi) = minimum(maximum(x, lo), hi): x inside [lo, hi] gets g (ties to x), lo below, hi above
    x, lo, hi = args
    below = _call("heaviside", sub(_cp(lo), _cp(x)))           # x < lo: lo is the result
    above = _call("heaviside", sub(_cp(x), _cp(hi)))           # x > hi: hi is the result (wins over lo)
    inside = mul(sub(_c(1.0), _cp(below)), sub(_c(1.0), _cp(above)))
    return [mul(g, inside), mul(g, mul(_cp(below), sub(_c(1.0), _cp(above)))), mul(g, _cp(above))]


_RULES["clamp"] = _clamp_rule
for _fn, _d in _UNARY.items():
    _RULES[_fn] = (lambda d: lambda args, node, g: [mul(g, d(args[0], node))])(_d)


# ------------------------------------------------------------------ the reverse walk


def _free_names(node: ast.expr) -> set[str]:
    """The names an expression reads (not the functions it calls)."""
    return set(_ordered_names(node))


class _Namer:
    """Fresh temporary names that collide with nothing the forward or the caller uses, and are legal names (of at
    most 63 characters: `d_<a 62-character name>` is cut, names.fresh)."""

    def __init__(self, taken: Collection[str]) -> None:
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        return names.fresh(f"d_{base}", self.taken)


@dataclass
class Axis:
    """An axis some values vary along and others are constant over (a rowwise body's row: rows vary, a reduction's
    result and a per-row input do not). Given to `vjp`, it makes the adjoint of a value that was broadcast along the
    axis the `reduce` (a call name, e.g. sum) of its varying contributions, as a broadcast's derivative is."""
    varying: set[str]                 # the names that vary along the axis (grows with the adjoint temporaries)
    collapsing: frozenset[str]        # the calls whose result has one value along the axis (the reductions)
    reduce: str = "sum"

    def varies(self, node: ast.expr) -> bool:
        """Whether `node` varies along the axis: it reads a varying name outside every collapsing call."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.collapsing:
            return False
        if isinstance(node, ast.Name):
            return node.id in self.varying
        return any(self.varies(c) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)
                   and not (isinstance(node, ast.Call) and c is node.func))


class _Adjoints:
    """The adjoint contributions of each name, collected while walking the statements back."""

    def __init__(self, rules: Mapping[str, Rule], active: set[str], axis: "Axis | None" = None,
                 namer: "_Namer | None" = None) -> None:
        self.rules, self.active, self.axis, self.namer = rules, active, axis, namer
        self.contrib: dict[str, list[ast.expr]] = {}
        self.statements: list[tuple[str, ast.expr]] = []      # adjoint temporaries, in the order they are needed

    def bind(self, g: ast.expr, base: str) -> ast.expr:
        """`g` as a name: a new adjoint temporary unless it is a name or a number already (so an adjoint read by
        several operands is computed once, not written out once per operand)."""
        if self.namer is None or isinstance(g, (ast.Name, ast.Constant)) or _const(g) is not None:
            return g
        tmp = self.namer.fresh(base)
        self.statements.append((tmp, g))
        if self.axis is not None and self.axis.varies(g):
            self.axis.varying.add(tmp)
        return _name(tmp)

    def add(self, name: str, g: ast.expr) -> None:
        self.contrib.setdefault(name, []).append(g)

    def total(self, name: str) -> ast.expr | None:
        """The sum of a name's contributions (None: it has none), removed from the collection; for a name with one
        value along the axis, its contributions that vary along it are reduced first (it was broadcast)."""
        parts = self.contrib.pop(name, [])
        if not parts:
            return None
        if self.axis is None or name in self.axis.varying:
            return functools.reduce(add, parts)
        varying = [p for p in parts if self.axis.varies(p)]
        fixed = [p for p in parts if not self.axis.varies(p)]
        pieces = fixed + ([_call(self.axis.reduce, functools.reduce(add, varying))] if varying else [])
        return functools.reduce(add, pieces)

    def collapse(self, g: ast.expr) -> ast.expr:
        """The adjoint of a value with one value along the axis (a reduction's result) from a varying `g`."""
        return _call(self.axis.reduce, g) if self.axis is not None and self.axis.varies(g) else g

    def back(self, node: ast.expr, g: ast.expr) -> None:
        """Pass the adjoint `g` of `node` to the names it reads."""
        if not (_free_names(node) & self.active) or _const(g) == 0.0:
            return
        if isinstance(node, ast.Name):
            self.add(node.id, g)
        elif isinstance(node, ast.UnaryOp):
            self.back(node.operand, neg(g) if isinstance(node.op, ast.USub) else g)
        elif isinstance(node, ast.BinOp):
            if all(_free_names(o) & self.active for o in (node.left, node.right)):
                g = self.bind(g, "t")        # both operands read it
            for operand, piece in zip((node.left, node.right), _binop(node, g)):
                self.back(operand, piece)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.rules:
            if self.axis is not None and node.func.id in self.axis.collapsing:
                g = self.collapse(g)
            if sum(bool(_free_names(a) & self.active) for a in node.args) > 1:
                g = self.bind(g, "t")
            for arg, piece in zip(node.args, self.rules[node.func.id](node.args, node, g)):
                if piece is not None:
                    self.back(arg, piece)
        elif not isinstance(node, ast.Constant):
            raise ValueError(f"no derivative for {ast.unparse(node)!r}")


def _binop(node: ast.BinOp, g: ast.expr) -> tuple[ast.expr, ast.expr]:
    """The adjoints of a binary operator's two operands."""
    a, b = node.left, node.right
    if isinstance(node.op, ast.Add):
        return g, _cp(g)
    if isinstance(node.op, ast.Sub):
        return g, neg(_cp(g))
    if isinstance(node.op, ast.Mult):
        return mul(g, _cp(b)), mul(_cp(a), _cp(g))
    if isinstance(node.op, ast.Div):
        return div(g, _cp(b)), neg(div(mul(_cp(g), _cp(node)), _cp(b)))
    if isinstance(node.op, ast.Pow):
        n = node.right.value  # type: ignore[attr-defined]   # 2, 3 or 4 (validated)
        power = _cp(a) if n == 2 else ast.BinOp(_cp(a), ast.Pow(), ast.Constant(n - 1))
        return mul(g, mul(_c(float(n)), power)), _c(0.0)
    raise ValueError(f"no derivative for operator {type(node.op).__name__}")


def vjp(body: Body, *, wrt: Mapping[str, str], cotangents: Mapping[str, str], saved: Collection[str] = (),
        calls: Mapping[str, Rule] | None = None, axis: Axis | None = None, taken: Collection[str] = ()) -> Derived:
    """The body computing the gradients of `wrt` (forward name -> its gradient's name) given the upstream gradients
    of the forward's outputs (output -> the name the derived body reads it as). `taken`: names of the caller's that
    no temporary of the derived body may take (the spec's sizes, constants, inputs, ... the body does not read).
    See the module docstring."""
    forward = [(t, e.tree) for t, e in body.statements]
    assigned = {t for t, _ in forward}
    if unknown := set(saved) - assigned:
        raise ValueError(f"saved names {sorted(unknown)} are not temporaries of the body")
    active: set[str] = set(wrt)             # the names that depend on a wrt name, in forward order
    for target, tree in forward:
        if _free_names(tree) & active:
            active.add(target)
    namer = _Namer(assigned | {n for _, t in forward for n in _free_names(t)} | set(wrt.values())
                   | set(cotangents.values()) | set(taken))
    if axis is not None:            # the forward's temporaries vary where what they read does
        axis = Axis(set(axis.varying), axis.collapsing, axis.reduce)
        for target, tree in forward:
            if axis.varies(tree):
                axis.varying.add(target)
    adj = _Adjoints(dict(_RULES) | dict(calls or {}), active, axis, namer)
    for out, g in cotangents.items():
        if out in assigned:
            adj.add(out, _name(g))
    for target, tree in reversed(forward):
        g = adj.total(target) if target in active else None
        if g is not None:
            adj.back(tree, adj.bind(g, target))
    grads = [(gname, g) for name, gname in wrt.items() if (g := adj.total(name)) is not None]
    zero = frozenset(wrt.values()) - {gname for gname, _ in grads}
    statements = _recomputed(forward, adj.statements + grads, saved) + adj.statements + grads
    own = {t for t, _ in statements}
    inputs = dict.fromkeys(n for _, e in statements for n in _ordered_names(e) if n not in own)
    text = "\n".join(f"{t} = {ast.unparse(e)}" for t, e in statements)
    return Derived(text, tuple(inputs), zero)


def renamed(derived: Derived, new: Mapping[str, str]) -> Derived:
    """`derived` with each name of `new` read (and written) as its value: a saved temporary a step reads under
    another name."""
    new = {k: v for k, v in new.items() if k != v}
    if not new:
        return derived
    tree = ast.parse(derived.text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in new:
            node.id = new[node.id]
    return Derived(ast.unparse(tree), tuple(new.get(n, n) for n in derived.inputs), derived.zero)


def _recomputed(forward, statements, saved) -> list[tuple[str, ast.expr]]:
    """The forward statements the `statements` read, directly or through each other (saved ones are inputs)."""
    needed: set[str] = set()
    for _, e in statements:
        needed |= _free_names(e)
    keep = []
    for target, tree in reversed(forward):
        if target in needed and target not in saved:
            keep.append((target, tree))
            needed |= _free_names(tree)
    return keep[::-1]


def _ordered_names(node: ast.expr) -> list[str]:
    """The names an expression reads (not the functions it calls), each once, in the order they first stand."""
    out: list[str] = []

    def walk(n: ast.AST) -> None:
        if isinstance(n, ast.Name):
            if n.id not in out:
                out.append(n.id)
        elif isinstance(n, ast.Call):
            for a in n.args:
                walk(a)
        else:
            for child in ast.iter_child_nodes(n):
                walk(child)

    walk(node)
    return out


def split_passthrough(derived: Derived, grads: Collection[str], cotangents: Mapping[str, str],
                      may_pass: Callable[[str, str], bool]) -> tuple[Derived, dict[str, str]]:
    """The gradients of `derived` that are an upstream gradient unchanged, taken out of its body (issue 43):
    (the derived body without them, gradient name -> the output whose upstream gradient it is).

    `grads`: the gradient names the body assigns (vjp's `wrt` values); `cotangents`: output -> the name the body
    reads its upstream gradient as (vjp's `cotangents`); `may_pass(grad, output)`: whether that gradient may be
    the output's upstream gradient as it is, the family's rule (the same shape, no broadcast, the same dtype: a
    cast or a sum stays a kernel). A gradient assigned a cotangent name, or a name that is one (`d_h = g_y;
    grad_x = d_h`), passes; statements only it read go with it, and a body whose every gradient passes is empty
    (text '', no inputs): the family's step disappears."""
    outputs_of = {c: o for o, c in cotangents.items()}
    statements = [(s.targets[0].id, s.value) for s in ast.parse(derived.text).body]
    value = dict(statements)
    assigned = [t for t, _ in statements if t in set(grads)]
    passed: dict[str, str] = {}
    for g in assigned:
        source = _alias_of(value, g)
        if source in outputs_of and may_pass(g, outputs_of[source]):
            passed[g] = outputs_of[source]
    if not passed:
        return derived, {}
    kept = _live(statements, {g for g in assigned if g not in passed})
    read = {n for _, e in kept for n in _free_names(e)} - {t for t, _ in kept}
    inputs = tuple(n for n in derived.inputs if n in read)
    return Derived("\n".join(f"{t} = {ast.unparse(e)}" for t, e in kept), inputs, derived.zero), passed


def _alias_of(value: Mapping[str, ast.expr], name: str) -> str | None:
    """The name `name`'s statement reads through plain renames (`a = b`, `b = c`: c), or None where it computes."""
    node, seen = value.get(name), set()
    while isinstance(node, ast.Name) and node.id in value and node.id not in seen:
        seen.add(node.id)
        node = value[node.id]
    return node.id if isinstance(node, ast.Name) else None


def _live(statements: Sequence[tuple[str, ast.expr]], needed: set[str]) -> list[tuple[str, ast.expr]]:
    """The statements that assign `needed` names and what they read, in order."""
    kept = []
    for target, tree in reversed(statements):
        if target in needed:
            kept.append((target, tree))
            needed |= _free_names(tree)
    return kept[::-1]
