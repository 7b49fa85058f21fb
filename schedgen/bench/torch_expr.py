"""A validated element-wise body (a map's body, a matmul's epilogue: `frontend.expr.Body`) as eager torch ops, for
the peers that time "what a torch user writes" on the same tensors.

The body is never eval'ed: its checked tree is walked once (as `expr.eval_numpy` walks it for the float64
reference) and turned into a chain of closures over torch functions, so a call costs the torch ops and little
else, and `torch.compile` traces the same function. Constants stay Python floats (torch's type promotion keeps a
tensor's dtype for them, as in user code); a sub-expression of constants only is folded in float64 while the
function is built (so a call runs torch ops on tensors only, and torch.compile traces it whole). Functions:
gelu is `F.gelu(approximate="tanh")` (the tanh form the reference uses), gelu_erf is `F.gelu`, minimum / maximum
with a constant are `torch.clamp` (a tensor bound otherwise), clamp(x, lo, hi) = minimum(maximum(x, lo), hi) as in
the reference; `x ** n` is n - 1 multiplications, as in the reference.
"""
from __future__ import annotations

import ast
from typing import Any, Callable, Mapping

import numpy as np

from ..frontend import expr as ex

_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv"}

Node = Callable[[dict], Any]


def _unary_functions(torch) -> dict[str, Callable]:
    F = torch.nn.functional
    return {"abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2,
            "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
            "relu": torch.relu, "gelu": lambda x: F.gelu(x, approximate="tanh"), "gelu_erf": F.gelu,
            "silu": F.silu, "square": torch.square, "erf": torch.erf, "sign": torch.sign,
            "heaviside": lambda x: (x > 0).to(x.dtype)}


def _is_tensor(torch, x) -> bool:
    return isinstance(x, torch.Tensor)


def _scalar(torch, fn: Callable, *args: float) -> float:
    """`fn` of Python floats, in float64 (a 0-d CPU tensor each)."""
    return float(fn(*(torch.tensor(a, dtype=torch.float64) for a in args)))


def _minimum(torch, a, b):
    if _is_tensor(torch, a) and _is_tensor(torch, b):
        return torch.minimum(a, b)
    if _is_tensor(torch, a):
        return torch.clamp(a, max=b)
    if _is_tensor(torch, b):
        return torch.clamp(b, max=a)
    return float(np.minimum(np.float64(a), np.float64(b)))


def _maximum(torch, a, b):
    if _is_tensor(torch, a) and _is_tensor(torch, b):
        return torch.maximum(a, b)
    if _is_tensor(torch, a):
        return torch.clamp(a, min=b)
    if _is_tensor(torch, b):
        return torch.clamp(b, min=a)
    return float(np.maximum(np.float64(a), np.float64(b)))


def _arith(op: str, a, b):
    """a op b; two Python floats in float64 with IEEE results (x / 0 is inf, as numpy gives the reference)."""
    if isinstance(a, float) and isinstance(b, float):
        with np.errstate(all="ignore"):
            return float(getattr(np, {"add": "add", "sub": "subtract", "mul": "multiply",
                                      "truediv": "divide"}[op])(np.float64(a), np.float64(b)))
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    return a / b


class _Const:
    """A sub-expression of constants only, folded while the body is built (never a torch op at call time)."""

    def __init__(self, value: float):
        self.value = float(value)

    def __call__(self, env: dict) -> float:
        return self.value


def _folded(node: Node, parts: list[Node]) -> Node:
    """`node` itself, or its value as a _Const when every part of it is constant."""
    return _Const(node({})) if all(isinstance(p, _Const) for p in parts) else node


def _call(torch, name: str, args: list[Node]) -> Node:
    unary = _unary_functions(torch)
    if name in unary:
        fn, (arg,) = unary[name], args

        def call1(env: dict):
            x = arg(env)
            return fn(x) if _is_tensor(torch, x) else _scalar(torch, fn, x)
        return call1
    if name == "minimum" or name == "maximum":
        pick, (a, b) = (_minimum if name == "minimum" else _maximum), args
        return lambda env: pick(torch, a(env), b(env))
    if name == "clamp":
        x, lo, hi = args
        return lambda env: _minimum(torch, _maximum(torch, x(env), lo(env)), hi(env))
    raise ex.ExprError(f"function {name!r} has no torch spelling")


def _power(base: Node, times: int) -> Node:
    def power(env: dict):
        b = base(env)
        out = b
        for _ in range(times - 1):
            out = _arith("mul", out, b)
        return out
    return power


def _node(torch, n: ast.expr, known: Mapping[str, float]) -> Node:
    """One node of a validated tree as a closure env -> tensor or float; `known`: the names whose value is a
    constant (the spec's constants, temporaries of constants only). The tree's checks are not repeated: an
    unexpected node is an ExprError, as in eval_numpy."""
    if isinstance(n, ast.Constant) and type(n.value) in (int, float):
        return _Const(n.value)
    if isinstance(n, ast.Name):
        name = n.id
        return _Const(known[name]) if name in known else (lambda env: env[name])
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.UAdd, ast.USub)):
        inner = _node(torch, n.operand, known)
        if isinstance(n.op, ast.UAdd):
            return inner
        return _folded(lambda env: -inner(env), [inner])
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) and isinstance(n.right, ast.Constant) \
            and type(n.right.value) is int and n.right.value in (2, 3, 4):
        base = _node(torch, n.left, known)
        return _folded(_power(base, n.right.value), [base])
    if isinstance(n, ast.BinOp) and type(n.op) in _BINARY:
        op, left, right = _BINARY[type(n.op)], _node(torch, n.left, known), _node(torch, n.right, known)
        return _folded(lambda env: _arith(op, left(env), right(env)), [left, right])
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ex.FUNCTIONS and not n.keywords \
            and len(n.args) == ex.FUNCTIONS[n.func.id]:
        args = [_node(torch, a, known) for a in n.args]
        return _folded(_call(torch, n.func.id, args), args)
    raise ex.ExprError(f"cannot spell {type(n).__name__} in torch (not a validated body expression)")


def torch_body(torch, body: ex.Body, constants: Mapping[str, float] | None = None
               ) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The body as f(env) -> {output: tensor or float}: env maps its inputs to tensors; `constants` (the spec's)
    are folded in while it is built, with every sub-expression of constants only."""
    known = {k: float(v) for k, v in (constants or {}).items()}
    steps = []
    for target, value in body.statements:
        node = _node(torch, value.tree, known)
        if isinstance(node, _Const):
            known[target] = node.value
        steps.append((target, node))
    outputs = body.outputs

    def run(env: Mapping[str, Any]) -> dict[str, Any]:
        values = dict(env)
        for target, node in steps:
            values[target] = node(values)
        return {name: values[name] for name in outputs}
    return run


def as_output(torch, value, shape, dtype, device=None):
    """A body's output value as a tensor of `shape` and torch `dtype` (a float or a broadcast value expanded; a
    float on `device`)."""
    if not _is_tensor(torch, value):
        return torch.full(tuple(shape), value, dtype=dtype, device=device)
    if tuple(value.shape) != tuple(shape):
        value = value.expand(*shape).contiguous()
    return value.to(dtype)
