"""The expression language of specs: element-wise bodies (float math) and integer index maps.

User text is only ever handed to ``ast.parse``; every node of the tree is checked against a whitelist.
The renderers build their output from the validated tree alone: names go through the caller's mapping,
literals are re-formatted from their values and functions come from fixed tables, so no character of the
user's text (comments included) reaches generated code.  Never paste ``Expr.text``/``Body.text`` into
generated code either.
"""

from __future__ import annotations

import ast
import difflib
import keyword
import math
import operator
import re
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from ..errors import quoted

MAX_TEXT = 4000
MAX_DEPTH = 64
MAX_STATEMENTS = 64
MAX_TERMS = 10_000  # tree size after expanding ``**`` and square(): bounds the rendered text
MAX_INT = 2**31 - 1  # index math is C++ ``int``
_F32_MAX = float(np.finfo(np.float32).max)
_F32_SHOWN = "3.4028235e38"  # FLT_MAX as float32 prints it (repr of np.float32 max)


class ExprError(ValueError):
    """A problem in one expression; ``col`` is the 0-based character column within 0-based ``line``."""

    def __init__(self, message: str, col: int = 0, line: int = 0) -> None:
        super().__init__(message)
        self.message, self.col, self.line = message, col, line


# \A...\Z rather than ^...$: '$' would also match before a trailing newline.
IDENT_RE = re.compile(r"\A[A-Za-z][A-Za-z0-9_]{0,62}\Z")

FUNCTIONS: Mapping[str, int] = MappingProxyType(
    {name: 1 for name in ("abs exp exp2 log log2 sqrt rsqrt tanh sigmoid relu gelu gelu_erf silu square erf heaviside sign").split()}
    | {"minimum": 2, "maximum": 2, "clamp": 3}
)

# Names users type for the functions above (other libraries' spellings): accepted, and read as the function.
FUNCTION_ALIASES: Mapping[str, str] = MappingProxyType({
    "swish": "silu", "gelu_tanh": "gelu", "logistic": "sigmoid", "expit": "sigmoid", "min": "minimum",
    "max": "maximum", "clip": "clamp", "fabs": "abs", "absolute": "abs",
})

_CXX_KEYWORDS = """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
decltype default delete do double dynamic_cast else enum explicit export extern false float for friend goto if
inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
register reinterpret_cast requires restrict return short signed sizeof static static_assert static_cast struct
switch template this thread_local throw true try typedef typeid typename union unsigned using virtual void
volatile wchar_t while xor xor_eq""".split()
_GENERATED_NAMES = """jnp jax np numpy lax pl plgpu math functools std cuda cute cutlass half dim3 size_t int32_t
uint32_t int64_t uint64_t threadIdx blockIdx blockDim gridDim warpSize NULL INFINITY NAN assert main min max
range len print float int""".split()
_RESERVED_WHY: dict[str, str] = (
    dict.fromkeys(_GENERATED_NAMES, "used by generated code")
    | dict.fromkeys(_CXX_KEYWORDS, "a C++ keyword")
    | dict.fromkeys(keyword.kwlist, "a Python keyword")
    | dict.fromkeys(FUNCTIONS, "a function name")
)
RESERVED: frozenset[str] = frozenset(_RESERVED_WHY)
_RESERVED_PREFIXES = ("sg_", "__")
_LEGAL_NAME = "names are 1-63 ASCII letters, digits or '_', starting with a letter"


def _non_ascii(text: str) -> str | None:
    """A message naming the first non-ASCII character of ``text``, or None."""
    bad = next((c for c in text if not c.isascii()), None)
    return None if bad is None else f"{quoted(text)} contains the non-ASCII character {bad!r} (U+{ord(bad):04X})"


def check_identifier(name: str) -> str | None:
    """None when ``name`` is a legal user identifier, else a short message saying why not and what is legal."""
    if not isinstance(name, str):
        return f"a name must be a string, not {type(name).__name__}"
    if (msg := _non_ascii(name)) is not None:
        return f"{msg}; {_LEGAL_NAME}"
    if name.startswith(_RESERVED_PREFIXES):
        return f"{quoted(name)} is reserved: names starting with 'sg_' or '__' belong to generated code"
    if not IDENT_RE.match(name):
        return f"{quoted(name)} is not a legal name; {_LEGAL_NAME}"
    if name in RESERVED:
        return f"{quoted(name)} is reserved ({_RESERVED_WHY[name]}); choose another name"
    return None


@dataclass(frozen=True)
class Expr:
    """One validated expression: its source text, its checked tree and the free names it uses."""

    text: str
    tree: ast.expr
    names: frozenset[str]
    source: str = field(default="", compare=False, repr=False)  # the whole text the tree's positions refer to


@dataclass(frozen=True)
class Body:
    """A validated body: ``(target, value)`` statements in order; ``outputs`` in assignment order."""

    statements: tuple[tuple[str, Expr], ...]
    text: str
    outputs: tuple[str, ...]


_DESCRIBE: dict[type, str] = {
    ast.Attribute: "attribute access", ast.Subscript: "subscript", ast.Slice: "slice", ast.Lambda: "lambda",
    ast.Compare: "comparison", ast.BoolOp: "boolean operator (and/or)",
    ast.IfExp: "conditional expression (x if c else y)", ast.JoinedStr: "f-string", ast.FormattedValue: "f-string",
    ast.NamedExpr: "assignment expression (:=)", ast.Starred: "starred expression", ast.Yield: "yield",
    ast.YieldFrom: "yield", ast.Await: "await", ast.ListComp: "comprehension", ast.SetComp: "comprehension",
    ast.DictComp: "comprehension", ast.GeneratorExp: "comprehension", ast.List: "list", ast.Tuple: "tuple",
    ast.Set: "set", ast.Dict: "dict", ast.Call: "function call", ast.Import: "import statement",
    ast.ImportFrom: "import statement", ast.AugAssign: "augmented assignment (+= etc.)",
    ast.AnnAssign: "annotated assignment", ast.Expr: "bare expression statement",
}
_OP_SYMBOL: dict[type, str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
    ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitXor: "^", ast.BitAnd: "&",
    ast.Invert: "~", ast.Not: "not", ast.UAdd: "+", ast.USub: "-",
}
_FLOAT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)
_INT_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}
_POW_EXPONENTS = (2, 3, 4)
_FLOAT_ALLOWED = (
    "allowed: numbers, names, unary + -, binary + - * /, ** with exponent 2, 3 or 4, parentheses, "
    f"and calls of {', '.join(FUNCTIONS)}"
)
_INT_ALLOWED = "allowed: integers, names, + - * // %, unary -, parentheses"
_LITERAL_KIND: dict[type, str] = {bool: "boolean", str: "string", bytes: "bytes", complex: "complex"}


def _describe(node: ast.AST) -> str:
    return _DESCRIBE.get(type(node), f"'{type(node).__name__}'")


def _literal_problem(value: object, integer: bool) -> str | None:
    """Why ``value`` is not a legal literal (None when it is); shared by validation and rendering."""
    kind = type(value)
    if kind not in (int, float):  # bool, str, bytes, complex, None, Ellipsis
        return f"{_LITERAL_KIND.get(kind, repr(value))} literal is not allowed"
    if integer:
        if kind is float:
            return "is a float; only integers are allowed here"
        return None if value <= MAX_INT else f"is too large (at most {MAX_INT})"
    try:
        f = float(value)  # type: ignore[arg-type]
    except OverflowError:
        f = math.inf
    # The range is checked after rounding to float32: FLT_MAX as printed (3.4028235e38) is a little over
    # FLT_MAX as a double, and rounds to it.
    if not abs(_to_f32(f)) <= _F32_MAX:
        return f"is out of float32 range (largest is {_F32_SHOWN})"
    if f != 0.0 and _to_f32(f) == 0.0:
        return "underflows to 0 in float32"
    return None


def _to_f32(f: float) -> float:
    """``f`` rounded to the nearest float32 (inf past the range, as a C cast), without numpy's overflow warning."""
    if math.isnan(f) or math.isinf(f):
        return f
    try:
        return struct.unpack("<f", struct.pack("<f", f))[0]
    except OverflowError:
        return math.copysign(math.inf, f)


def _f32_literal(f: float) -> float:
    """The value a float32 literal stands for where the text would be past FLT_MAX (3.4028235e38 -> FLT_MAX), so
    the generated C++ never holds an out-of-range float literal; every other value is kept as written."""
    return _to_f32(f) if abs(f) > _F32_MAX else f


def check_float32(value: float) -> str | None:
    """None when ``value`` is a finite constant that rounds to a finite float32 (not flushed to 0), else why not."""
    try:
        f = float(value)
    except OverflowError:
        f = math.inf
    return _literal_problem(f, False)


def _pow_exponent(node: ast.BinOp) -> int | None:
    """The exponent of ``x ** n`` when n is an allowed integer literal, else None."""
    right = node.right
    ok = isinstance(right, ast.Constant) and type(right.value) is int and right.value in _POW_EXPONENTS
    return right.value if ok else None  # type: ignore[union-attr]


class _Checker:
    """Validates expressions of one source text; positions of errors are converted to character columns."""

    def __init__(self, text: str, integer: bool, known: Callable[[str], str | None]) -> None:
        self.text, self.integer, self.known = text, integer, known
        self.lines = re.split(r"\r\n?|\n", text)
        self.names: set[str] = set()

    def error(self, node: ast.AST, message: str) -> ExprError:
        """An ExprError located at ``node`` (ast offsets are UTF-8 bytes; ours are characters)."""
        lineno, offset = getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
        line = self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""
        return ExprError(message, len(line.encode()[:offset].decode("utf-8", "ignore")), lineno - 1)

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""

    def expr(self, node: ast.expr) -> Expr:
        """Validate one expression tree and wrap it."""
        self.names = set()
        terms = self.check(node, 1)
        if terms > MAX_TERMS:
            raise self.error(node, f"expression is too large after expanding ** and square() "
                                   f"({terms} terms; at most {MAX_TERMS})")
        return Expr(self.segment(node), node, frozenset(self.names), self.text)

    def name(self, node: ast.Name) -> str:
        """The ASCII name of ``node`` (the parser NFKC-normalizes look-alikes, so check the raw text)."""
        raw = self.segment(node)
        if (msg := _non_ascii(raw)) is not None:
            raise self.error(node, f"name {msg}; names must be ASCII")
        return node.id

    def check(self, node: ast.expr, depth: int) -> int:
        """Check ``node`` recursively; returns its size in terms after expansion."""
        if depth > MAX_DEPTH:
            raise self.error(node, f"expression is nested too deeply (more than {MAX_DEPTH} levels)")
        allowed = _INT_ALLOWED if self.integer else _FLOAT_ALLOWED
        if isinstance(node, ast.Constant):
            if (msg := _literal_problem(node.value, self.integer)) is not None:
                number = type(node.value) in (int, float)
                raise self.error(node, f"literal {self.segment(node)} {msg}" if number else f"{msg}; {allowed}")
            return 1
        if isinstance(node, ast.Name):
            if (msg := self.known(self.name(node))) is not None:
                raise self.error(node, msg)
            self.names.add(node.id)
            return 1
        if isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.UAdd, ast.USub)):
                raise self.error(node, f"operator '{_OP_SYMBOL[type(node.op)]}' is not allowed; {allowed}")
            return 1 + self.check(node.operand, depth + 1)
        if isinstance(node, ast.BinOp):
            if not isinstance(node.op, tuple(_INT_OPS) if self.integer else _FLOAT_OPS):
                hint = "; use '//' for integer division" if self.integer and isinstance(node.op, ast.Div) else ""
                raise self.error(node, f"operator '{_OP_SYMBOL[type(node.op)]}' is not allowed{hint}; {allowed}")
            if isinstance(node.op, ast.Pow):
                if (n := _pow_exponent(node)) is None:
                    raise self.error(node.right, "'**' needs an integer literal exponent 2, 3 or 4")
                return 1 + n * self.check(node.left, depth + 1)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and isinstance(node.right, ast.Constant) \
                    and node.right.value == 0:
                raise self.error(node.right, "division by zero")
            return 1 + self.check(node.left, depth + 1) + self.check(node.right, depth + 1)
        if isinstance(node, ast.Call) and not self.integer:
            return self.call(node, depth)
        raise self.error(node, f"{_describe(node)} is not allowed; {allowed}")

    def call(self, node: ast.Call, depth: int) -> int:
        """Check a call of a whitelisted function."""
        if isinstance(node.func, ast.Attribute):
            raise self.error(node.func, f"attribute access is not allowed; {_FLOAT_ALLOWED}")
        if not isinstance(node.func, ast.Name):
            raise self.error(node.func, f"only the allowed functions can be called: {', '.join(FUNCTIONS)}")
        fn = self.name(node.func)
        if fn in FUNCTION_ALIASES:              # the checked tree holds the function's own name from here on
            fn = node.func.id = FUNCTION_ALIASES[fn]
        if fn not in FUNCTIONS:
            raise self.error(node.func, f"function {quoted(fn)} is not allowed{_did_you_mean(fn)}; allowed: "
                                        f"{', '.join(FUNCTIONS)}")
        if node.keywords:
            raise self.error(node.keywords[0], f"keyword arguments are not allowed (in {fn}()); "
                                               "pass arguments by position")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.error(arg, f"starred arguments are not allowed (in {fn}())")
        if len(node.args) != FUNCTIONS[fn]:
            raise self.error(node, f"{fn}() takes {FUNCTIONS[fn]} argument(s), got {len(node.args)}")
        terms = sum(self.check(arg, depth + 1) for arg in node.args)
        return 1 + (2 * terms if fn == "square" else terms)


def _did_you_mean(fn: str) -> str:
    """' (did you mean silu?)' for a near miss of a function or alias name, else ''."""
    close = difflib.get_close_matches(fn.lower(), list(FUNCTIONS) + list(FUNCTION_ALIASES), n=1, cutoff=0.6)
    return f" (did you mean {FUNCTION_ALIASES.get(close[0], close[0])}?)" if close else ""


def _parse(text: str, mode: str) -> ast.AST:
    """ast.parse with size limits; every failure becomes an ExprError."""
    if not isinstance(text, str):
        raise ExprError(f"expected expression text, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise ExprError(f"expression text is too long ({len(text)} characters; at most {MAX_TEXT})")
    try:
        return ast.parse(text, mode=mode)
    except SyntaxError as e:
        raise ExprError(f"syntax error: {e.msg}", max((e.offset or 1) - 1, 0), max((e.lineno or 1) - 1, 0)) from None
    except (RecursionError, MemoryError):
        raise ExprError(f"expression is nested too deeply (more than {MAX_DEPTH} levels)") from None
    except ValueError as e:
        raise ExprError(f"invalid expression text: {e}") from None


def _listing(label: str, names: Collection[str]) -> str:
    return f"{label}: {', '.join(names) if names else '(none)'}"


def parse_body(text: str, *, inputs: Collection[str], outputs: Collection[str], constants: Collection[str]) -> Body:
    """Parse and validate an element-wise body: one ``target = expression`` per line or ';'.

    Targets are outputs (each assigned exactly once) or new temporaries (legal identifiers, assigned once,
    before use).  Expressions may read inputs, constants and anything assigned on an earlier line.
    """
    assigned, outs, _ = check_statements(text, inputs=inputs, outputs=outputs, constants=constants)
    return Body(tuple(assigned.items()), text, outs)


def check_statements(text: str, *, inputs: Collection[str], outputs: Collection[str], constants: Collection[str],
                     checker: type[_Checker] | None = None) -> tuple[dict[str, Expr], tuple[str, ...], _Checker]:
    """The statements of a body, each checked (`checker`: a _Checker subclass that lets more calls through, such
    as the rowwise family's reductions): (target -> expression in order, the outputs in assignment order, the
    checker, for located errors of a caller's own checks)."""
    module = _parse(text, "exec")
    assert isinstance(module, ast.Module)
    if not module.body:
        raise ExprError("body is empty; write one 'output = expression' per line")
    if len(module.body) > MAX_STATEMENTS:
        raise ExprError(f"body has {len(module.body)} statements; at most {MAX_STATEMENTS}")
    inputs, constants, outputs = frozenset(inputs), frozenset(constants), frozenset(outputs)
    assigned: dict[str, Expr] = {}
    later = {t.id for s in module.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}

    def known(name: str) -> str | None:
        if name in inputs or name in constants or name in assigned:
            return None
        if name in later:
            return f"name {quoted(name)} is used before it is assigned"
        return (f"unknown name {quoted(name)}; {_listing('inputs are', sorted(inputs))}; "
                f"{_listing('constants are', sorted(constants))}; {_listing('assigned so far', list(assigned))}")

    checker = (checker or _Checker)(text, False, known)
    for stmt in module.body:
        if not isinstance(stmt, ast.Assign):
            raise checker.error(stmt, f"{_describe(stmt)} is not allowed; each statement must be 'name = expression'")
        if len(stmt.targets) != 1:
            raise checker.error(stmt, "chained assignment (a = b = ...) is not allowed")
        target = stmt.targets[0]
        if not isinstance(target, ast.Name):
            raise checker.error(target, f"only a plain name can be assigned, not {_describe(target)}")
        name = checker.name(target)
        role = "input" if name in inputs else "constant" if name in constants else None
        if role:
            raise checker.error(target, f"cannot assign to {role} {quoted(name)}")
        if name in assigned:
            raise checker.error(target, f"{quoted(name)} is assigned more than once")
        if name not in outputs and (msg := check_identifier(name)) is not None:
            raise checker.error(target, f"bad temporary name: {msg}")
        assigned[name] = checker.expr(stmt.value)
    missing = sorted(outputs - assigned.keys())
    if missing:
        raise ExprError(f"output(s) never assigned: {', '.join(missing)}", 0, len(checker.lines) - 1)
    return assigned, tuple(n for n in assigned if n in outputs), checker


def parse_index_map(text: str, *, grid_names: Sequence[str], sizes: Collection[str]) -> tuple[Expr, ...]:
    """Parse an index map such as ``(i, k)`` or ``i // 2, 0``: a tuple (or one expression) of int expressions."""
    tree = _parse(text, "eval")
    assert isinstance(tree, ast.Expression)
    grid, sizes = list(grid_names), frozenset(sizes)

    def known(name: str) -> str | None:
        if name in grid or name in sizes:
            return None
        size_list = f"; {_listing('sizes are', sorted(sizes))}" if sizes else ""
        return f"unknown name {quoted(name)} in index map; {_listing('grid names are', grid)}{size_list}"

    elts = tree.body.elts if isinstance(tree.body, ast.Tuple) else [tree.body]
    if not elts:
        raise ExprError("index map is empty; write e.g. '(i, k)'")
    checker = _Checker(text, True, known)
    return tuple(checker.expr(e) for e in elts)


def parse_int_expr(text: str, *, names: Collection[str]) -> Expr:
    """Parse an integer expression such as ``M // 128`` over ``names`` (same grammar as index maps)."""
    tree = _parse(text, "eval")
    assert isinstance(tree, ast.Expression)
    known_names = frozenset(names)

    def known(name: str) -> str | None:
        if name in known_names:
            return None
        return f"unknown name {quoted(name)}; {_listing('known names are', sorted(known_names))}"

    return _Checker(text, True, known).expr(tree.body)


def eval_int(expr: Expr, env: Mapping[str, int]) -> int:
    """Evaluate an integer expression with Python semantics (floor division, modulo of the divisor's sign)."""

    def ev(node: ast.expr) -> int:
        if isinstance(node, ast.Constant) and _literal_problem(node.value, True) is None:
            return node.value  # type: ignore[return-value]
        if isinstance(node, ast.Name):
            return operator.index(env[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            value = ev(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
            try:
                return _INT_OPS[type(node.op)](ev(node.left), ev(node.right))
            except ZeroDivisionError:
                raise ExprError(f"division by zero in {expr.text!r}") from None
        raise ExprError(f"{_describe(node)} cannot be evaluated as an integer expression")

    return ev(expr.tree)


# --------------------------------------------------------------------------- integer expressions: 32-bit bounds


_FLOAT_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def _np_sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # == 1 / (1 + exp(-x)) without overflow


_np_erf = np.vectorize(math.erf, otypes=[np.float64])
_NP_CALL: dict[str, Callable[..., np.ndarray]] = {
    "abs": np.abs, "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh, "sigmoid": _np_sigmoid,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x))),
    "gelu_erf": lambda x: 0.5 * x * (1.0 + _np_erf(x / math.sqrt(2.0))),
    "silu": lambda x: x * _np_sigmoid(x), "square": lambda x: x * x, "erf": _np_erf,
    "heaviside": lambda x: np.where(x > 0.0, 1.0, 0.0), "sign": np.sign,
    "minimum": np.minimum, "maximum": np.maximum, "clamp": lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
}


def eval_numpy(body: Body, env: Mapping[str, np.ndarray | float]) -> dict[str, np.ndarray]:
    """float64 reference evaluation of ``body`` (numpy broadcasting, IEEE results without warnings)."""
    values = {name: np.asarray(v, dtype=np.float64) for name, v in env.items()}

    def ev(n: ast.expr) -> np.ndarray:
        if isinstance(n, ast.Constant) and _literal_problem(n.value, False) is None:
            return np.float64(n.value)  # type: ignore[arg-type]
        if isinstance(n, ast.Name):
            return values[n.id]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.UAdd, ast.USub)):
            return -ev(n.operand) if isinstance(n.op, ast.USub) else ev(n.operand)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) and (exponent := _pow_exponent(n)) is not None:
            base = ev(n.left)
            return math.prod([base] * exponent)  # type: ignore[return-value]
        if isinstance(n, ast.BinOp) and type(n.op) in _FLOAT_SYMBOLS:
            a, b = ev(n.left), ev(n.right)
            return {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.divide}[type(n.op)](a, b)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _NP_CALL \
                and not n.keywords and len(n.args) == FUNCTIONS[n.func.id]:
            return _NP_CALL[n.func.id](*(ev(a) for a in n.args))
        raise ExprError(f"cannot evaluate {_describe(n)} (not a validated body expression)")

    with np.errstate(all="ignore"):
        for target, expr in body.statements:
            values[target] = np.asarray(ev(expr.tree), dtype=np.float64)
    return {name: values[name] for name in body.outputs}
