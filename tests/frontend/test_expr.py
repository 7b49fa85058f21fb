"""Tests of schedgen.frontend.expr: parsing, whitelisting, rendering and reference evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from schedgen.frontend.expr import (
    FUNCTIONS, IDENT_RE, RESERVED, ExprError, check_identifier, eval_int, eval_numpy, parse_body,
    parse_index_map, parse_int_expr,
)
from schedgen.frontend.spelling import render_cxx, render_cxx_int, render_jnp, render_py_int

INPUTS, OUTPUTS, CONSTANTS = ("x", "y"), ("o",), ("alpha",)
NAMES = {n: f"v_{n}" for n in ("x", "y", "o", "p", "t", "u", "alpha")}
GRID = {n: f"g_{n}" for n in ("i", "j", "k", "M", "N")}


def body(text: str, outputs: tuple[str, ...] = OUTPUTS):
    return parse_body(text, inputs=INPUTS, outputs=outputs, constants=CONSTANTS)


def only(text: str):
    """The value of the single statement of ``text``."""
    (_, expr), = body(text).statements
    return expr


# ---------------------------------------------------------------- accepted bodies and golden renderings

@pytest.mark.parametrize("text, cxx, jnp_src", [
    ("o = x * 2 + 1", "((v_x * 2.0f) + 1.0f)", "((v_x * 2.0) + 1.0)"),
    ("o = x - -y", "(v_x - (-v_y))", "(v_x - (-v_y))"),
    ("o = +x / (y - alpha)", "(v_x / (v_y - v_alpha))", "(v_x / (v_y - v_alpha))"),
    ("o = (x + y) ** 3", "((v_x + v_y) * (v_x + v_y) * (v_x + v_y))", "((v_x + v_y) * (v_x + v_y) * (v_x + v_y))"),
    ("o = gelu(x)", "sg_gelu(v_x)", "jax.nn.gelu(v_x, approximate=True)"),
    ("o = gelu_erf(x)", "sg_gelu_erf(v_x)", "jax.nn.gelu(v_x, approximate=False)"),
    ("o = rsqrt(x)", "sg_rsqrt(v_x)", "jax.lax.rsqrt(v_x)"),
    ("o = square(x + 1)", "sg_square((v_x + 1.0f))", "((v_x + 1.0) * (v_x + 1.0))"),
    ("o = clamp(x, -1, 1.5)", "sg_clamp(v_x, (-1.0f), 1.5f)", "jnp.clip(v_x, (-1.0), 1.5)"),
    ("o = minimum(x, maximum(y, 0))", "sg_minimum(v_x, sg_maximum(v_y, 0.0f))",
     "jnp.minimum(v_x, jnp.maximum(v_y, 0.0))"),
    ("o = x * 0.1 + 1e-30 - 1e30", "(((v_x * 0.1f) + 1e-30f) - 1e+30f)", "(((v_x * 0.1) + 1e-30) - 1e+30)"),
    ("o = 3.4e38 * x", "(3.4e+38f * v_x)", "(3.4e+38 * v_x)"),
    ("o = 16777217", "16777217.0f", "16777217.0"),
])
def test_render_float_golden(text: str, cxx: str, jnp_src: str) -> None:
    expr = only(text)
    assert render_cxx(expr, NAMES) == cxx
    assert render_jnp(expr, NAMES) == jnp_src
    assert "inf" not in cxx and "nan" not in cxx


def test_body_statements_temporaries_comments_and_names() -> None:
    text = "t = x * alpha  # scale\nu = t + y; o = silu(u)\r\np = o * 2\n"
    b = body(text, outputs=("o", "p"))
    assert [t for t, _ in b.statements] == ["t", "u", "o", "p"]
    assert b.outputs == ("o", "p") and b.text == text
    assert [e.text for _, e in b.statements] == ["x * alpha", "t + y", "silu(u)", "o * 2"]
    assert [e.names for _, e in b.statements] == [{"x", "alpha"}, {"t", "y"}, {"u"}, {"o"}]


def test_comment_never_reaches_generated_code() -> None:
    b = body('o = x\n#include <cstdlib>\n# """); import os; (""" ')
    (_, expr), = b.statements
    for out in (render_cxx(expr, NAMES), render_jnp(expr, NAMES)):
        assert out == "v_x"


def test_functions_table() -> None:
    assert dict(FUNCTIONS) == {
        **dict.fromkeys("abs exp exp2 log log2 sqrt rsqrt tanh sigmoid relu gelu gelu_erf silu square erf heaviside sign".split(), 1),
        "minimum": 2, "maximum": 2, "clamp": 3}
    for fn, arity in FUNCTIONS.items():
        args = ", ".join(["x"] * arity)
        assert render_cxx(only(f"o = {fn}({args})"), NAMES) == f"sg_{fn}({', '.join(['v_x'] * arity)})"


# ---------------------------------------------------------------- rejected bodies

@pytest.mark.parametrize("text, fragment, line, col", [
    ("o = __import__('os').system('x')", "attribute access is not allowed", 0, 4),
    ("o = __import__('os')", "function '__import__' is not allowed; allowed: abs, exp,", 0, 4),
    ("o = eval('1')", "function 'eval' is not allowed", 0, 4),
    ("o = open('f')", "function 'open' is not allowed", 0, 4),
    ("o = x; import os", "import statement is not allowed", 0, 7),
    ("o = x\nfrom os import system", "import statement is not allowed", 1, 0),
    ("o = x.__class__", "attribute access is not allowed", 0, 4),
    ('o = "a"', "string literal is not allowed", 0, 4),
    ("o = b'a'", "bytes literal is not allowed", 0, 4),
    ("o = True", "boolean literal is not allowed", 0, 4),
    ("o = None", "None literal is not allowed", 0, 4),
    ("o = 2j", "complex literal is not allowed", 0, 4),
    ('o = asm("trap")', "function 'asm' is not allowed", 0, 4),
    ("o = x if x else y", "conditional expression (x if c else y) is not allowed", 0, 4),
    ("o = lambda: 1", "lambda is not allowed", 0, 4),
    ("o = (yield)", "yield is not allowed", 0, 5),
    ("o = x[0]", "subscript is not allowed", 0, 4),
    ('o = f"{x}"', "f-string is not allowed", 0, 4),
    ("o = (t := x)", "assignment expression (:=) is not allowed", 0, 5),
    ("o = x < y", "comparison is not allowed", 0, 4),
    ("o = x and y", "boolean operator (and/or) is not allowed", 0, 4),
    ("o = [x]", "list is not allowed", 0, 4),
    ("o = x % y", "operator '%' is not allowed; allowed: numbers, names", 0, 4),
    ("o = x @ y", "operator '@' is not allowed", 0, 4),
    ("o = ~x", "operator '~' is not allowed", 0, 4),
    ("o = not x", "operator 'not' is not allowed", 0, 4),
    ("o = x ** 5", "'**' needs an integer literal exponent 2, 3 or 4", 0, 9),
    ("o = x ** 2.0", "'**' needs an integer literal exponent", 0, 9),
    ("o = x ** y", "'**' needs an integer literal exponent", 0, 9),
    ("o = exp(x, y)", "exp() takes 1 argument(s), got 2", 0, 4),
    ("o = clamp(x, y)", "clamp() takes 3 argument(s), got 2", 0, 4),
    ("o = exp(x=1)", "keyword arguments are not allowed", 0, 8),
    ("o = exp(*x)", "starred arguments are not allowed", 0, 8),
    ("o = (exp)(x)(y)", "only the allowed functions can be called", 0, 4),
    ("o = 1e400", "literal 1e400 is out of float32 range", 0, 4),
    ("o = 1e39", "literal 1e39 is out of float32 range", 0, 4),
    ("o = x * 1" + "0" * 400, "is out of float32 range", 0, 8),
    ("o = 1e-50", "literal 1e-50 underflows to 0 in float32", 0, 4),
    ("o = х", "non-ASCII character 'х' (U+0445)", 0, 4),          # Cyrillic look-alike
    ("o = ｘ", "non-ASCII character 'ｘ' (U+FF58)", 0, 4),          # the parser would normalize it to 'x'
    ("o = ｅxp(x)", "non-ASCII character", 0, 4),
    ("sg_x = x\no = sg_x", "bad temporary name: 'sg_x' is reserved", 0, 0),
    ("__x = x\no = __x", "names starting with 'sg_' or '__'", 0, 0),
    ("int = x\no = int", "'int' is reserved (a C++ keyword)", 0, 0),
    ("o = x\nreturn = 1", "syntax error", 1, 7),
    ("o = x\nasm = 1", "'asm' is reserved (a C++ keyword)", 1, 0),
    ("o = x\nexp = 1", "'exp' is reserved (a function name)", 1, 0),
    ("o = x\njnp = 1", "'jnp' is reserved (used by generated code)", 1, 0),
    ("o += x", "augmented assignment (+= etc.) is not allowed", 0, 0),
    ("o: float = x", "annotated assignment is not allowed", 0, 0),
    ("o = x\nx", "bare expression statement is not allowed", 1, 0),
    ("o = p = x", "chained assignment", 0, 0),
    ("o, p = x, y", "only a plain name can be assigned, not tuple", 0, 0),
    ("o.a = x", "only a plain name can be assigned, not attribute access", 0, 0),
    ("x = 1\no = x", "cannot assign to input 'x'", 0, 0),
    ("alpha = 1\no = x", "cannot assign to constant 'alpha'", 0, 0),
    ("o = x\no = y", "'o' is assigned more than once", 1, 0),
    ("t = x\nt = y\no = t", "'t' is assigned more than once", 1, 0),
    ("o = t\nt = x", "name 't' is used before it is assigned", 0, 4),
    ("o = o + 1", "name 'o' is used before it is assigned", 0, 4),
    ("o = q", "unknown name 'q'; inputs are: x, y; constants are: alpha", 0, 4),
    ("t = x", "output(s) never assigned: o", 0, 0),
    ("", "body is empty", 0, 0),
    ("# only a comment", "body is empty", 0, 0),
    ("o = x +* 2", "syntax error: invalid syntax", 0, 7),
    ("o = é +* 2", "syntax error", 0, 7),                         # columns count characters, not bytes
    ("o = ｘ ** 5", "'**' needs", 0, 9),                          # ast offsets are bytes; ours characters
    ("o = (1 +\n    'é' + x.y)", "string literal", 1, 4),
    ("o = x\n  p = 2", "syntax error: unexpected indent", 1, 1),
    ("o = x\x00", "null bytes", 0, 0),
])
def test_rejected_body(text: str, fragment: str, line: int, col: int) -> None:
    with pytest.raises(ExprError) as info:
        body(text)
    err = info.value
    assert fragment in err.message and str(err) == err.message
    assert (err.line, err.col) == (line, col)


@pytest.mark.parametrize("text, fragment", [
    ("o = " + "x + " * 1100 + "x", "text is too long (4405 characters; at most 4000)"),
    ("o = " + "-" * 3990 + "x", "nested too deeply"),               # the parser itself gives up
    ("o = " + "-" * 70 + "x", "nested too deeply (more than 64 levels)"),
    ("o = " + "exp(" * 65 + "x" + ")" * 65, "nested too deeply"),
    ("o = " + "(" * 250 + "x" + ")" * 250, "too many nested parentheses"),
    ("o = " + "(" * 12 + "x" + "**4)" * 12, "too large after expanding ** and square()"),
    ("o = " + "square(" * 14 + "x" + ")" * 14, "too large after expanding"),
    ("\n".join(f"t{n} = x" for n in range(65)) + "\no = x", "66 statements; at most 64"),
])
def test_size_limits(text: str, fragment: str) -> None:
    with pytest.raises(ExprError) as info:
        body(text)
    assert fragment in info.value.message


def test_limits_are_not_too_tight() -> None:
    assert render_cxx(only("o = " + "-" * 63 + "x"), NAMES).count("-") == 63
    long_ok = "\n".join(f"t{n} = x * {n}" for n in range(63)) + "\no = t62"
    assert len(body(long_ok).statements) == 64


# ---------------------------------------------------------------- identifiers

@pytest.mark.parametrize("name, fragment", [
    ("x", None), ("i", None), ("k", None), ("M", None), ("a_1", None), ("A" * 63, None),
    ("A" * 64, "not a legal name"), ("", "not a legal name"), ("_x", "not a legal name"),
    ("1x", "not a legal name"), ("x-y", "not a legal name"), ("x\n", "not a legal name"),
    ("х", "non-ASCII character 'х' (U+0445)"), ("xé", "non-ASCII"),
    ("sg_x", "names starting with 'sg_' or '__'"), ("__x", "names starting with 'sg_' or '__'"),
    ("int", "C++ keyword"), ("float", "C++ keyword"), ("return", "Python keyword"), ("asm", "C++ keyword"),
    ("lambda", "Python keyword"), ("None", "Python keyword"), ("gelu", "function name"), ("clamp", "function name"),
    ("jnp", "generated code"), ("plgpu", "generated code"), ("threadIdx", "generated code"),
])
def test_check_identifier(name: str, fragment: str | None) -> None:
    msg = check_identifier(name)
    if fragment is None:
        assert msg is None and IDENT_RE.match(name)
    else:
        assert msg is not None and fragment in msg


def test_reserved_contents() -> None:
    assert {"int", "float", "asm", "return", "jnp", "jax", "np", "lax", "pl", "plgpu", "math", "exp", "def"} <= RESERVED
    assert not {"i", "j", "k", "x", "M", "N", "K"} & RESERVED


# ---------------------------------------------------------------- index maps and int expressions

@pytest.mark.parametrize("text, cxx, py, env, value", [
    ("(i, k)", ["g_i", "g_k"], ["g_i", "g_k"], {"i": 3, "k": 5}, (3, 5)),
    ("i, j", ["g_i", "g_j"], ["g_i", "g_j"], {"i": 1, "j": 2}, (1, 2)),
    ("(j,)", ["g_j"], ["g_j"], {"j": 7}, (7,)),
    ("j", ["g_j"], ["g_j"], {"j": 7}, (7,)),
    ("(i // 2, 0)", ["sg_floordiv(g_i, 2)", "0"], ["(g_i // 2)", "0"], {"i": 7}, (3, 0)),
    ("(-i // 2, -i % 3)", ["sg_floordiv((-g_i), 2)", "sg_floormod((-g_i), 3)"], ["((-g_i) // 2)", "((-g_i) % 3)"], {"i": 7}, (-4, 2)),
    ("(M - 1 - i * 2 % N, (j + 1) * k)", ["((g_M - 1) - sg_floormod((g_i * 2), g_N))", "((g_j + 1) * g_k)"],
     ["((g_M - 1) - ((g_i * 2) % g_N))", "((g_j + 1) * g_k)"], {"M": 10, "N": 4, "i": 3, "j": 1, "k": 2}, (7, 4)),
])
def test_index_map(text: str, cxx: list[str], py: list[str], env: dict[str, int], value: tuple[int, ...]) -> None:
    exprs = parse_index_map(text, grid_names=["i", "j", "k"], sizes={"M", "N"})
    assert [render_cxx_int(e, GRID) for e in exprs] == cxx
    assert [render_py_int(e, GRID) for e in exprs] == py
    assert tuple(eval_int(e, env) for e in exprs) == value
    for e, src in zip(exprs, py):  # the rendered Python agrees with eval_int (our own source)
        assert eval(src, {}, {f"g_{n}": v for n, v in env.items()}) == eval_int(e, env)  # noqa: S307


@pytest.mark.parametrize("text, fragment, col", [
    ("(i, q)", "unknown name 'q' in index map; grid names are: i, j; sizes are: M", 4),
    ("i / 2", "operator '/' is not allowed; use '//' for integer division", 0),
    ("i * 1.5", "literal 1.5 is a float; only integers are allowed here", 4),
    ("i ** 2", "operator '**' is not allowed; allowed: integers, names, + - * // %", 0),
    ("exp(i)", "function call is not allowed", 0),
    ("i.real", "attribute access is not allowed", 0),
    ("(*i,)", "starred expression is not allowed", 1),
    ("((i, j), 0)", "tuple is not allowed", 1),
    ("i // 0", "division by zero", 5),
    ("i % 0", "division by zero", 4),
    ("i + 2147483648", "literal 2147483648 is too large (at most 2147483647)", 4),
    ("()", "index map is empty", 0),
    ("i < j", "comparison is not allowed", 0),
    ("i, True", "boolean literal is not allowed", 3),
    ("i, __import__('os')", "function call is not allowed", 3),
    ("i j", "syntax error", 2),
])
def test_rejected_index_map(text: str, fragment: str, col: int) -> None:
    with pytest.raises(ExprError) as info:
        parse_index_map(text, grid_names=["i", "j"], sizes=["M"])
    assert fragment in info.value.message and info.value.col == col


def test_int_expr() -> None:
    expr = parse_int_expr("(M + 127) // 128 * 2 - M % 3", names={"M"})
    assert expr.names == {"M"}
    assert render_cxx_int(expr, {"M": "M"}) == "((sg_floordiv((M + 127), 128) * 2) - sg_floormod(M, 3))"
    assert [eval_int(expr, {"M": m}) for m in (1, 128, 129, 1000)] == [1, 0, 4, 15]
    with pytest.raises(ExprError, match="unknown name 'K'; known names are: M, N"):
        parse_int_expr("K", names=["N", "M"])
    with pytest.raises(ExprError, match="tuple is not allowed"):
        parse_int_expr("M, 1", names=["M"])
    with pytest.raises(ExprError, match="division by zero in 'M // N'"):
        eval_int(parse_int_expr("M // N", names=["M", "N"]), {"M": 1, "N": 0})
    with pytest.raises(TypeError):  # floats are not silently truncated
        eval_int(parse_int_expr("M", names=["M"]), {"M": 1.5})  # type: ignore[dict-item]


def test_renderers_refuse_the_other_grammar() -> None:
    float_expr, int_expr = only("o = x / 2"), parse_int_expr("M // 2", names=["M"])
    for render in (render_cxx_int, render_py_int):
        with pytest.raises(ExprError, match="cannot render"):
            render(float_expr, NAMES)
    for render in (render_cxx, render_jnp):
        with pytest.raises(ExprError, match="cannot render"):
            render(int_expr, {"M": "M"})
    with pytest.raises(ExprError, match="cannot be evaluated"):
        eval_int(float_expr, {"x": 1})
    with pytest.raises(KeyError):
        render_cxx(float_expr, {})


# ---------------------------------------------------------------- numeric semantics

X = np.array([-3.0, -0.5, 0.0, 0.25, 2.0])
SIG = np.array([1 / (1 + math.exp(-v)) for v in X])


def _gelu_tanh(v: float) -> float:
    return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))


@pytest.mark.parametrize("text, expected", [
    ("o = abs(x)", np.abs(X)),
    ("o = exp(x)", np.array([math.exp(v) for v in X])),
    ("o = exp2(x)", np.array([2.0 ** v for v in X])),
    ("o = log(abs(x) + 1)", np.array([math.log(abs(v) + 1) for v in X])),
    ("o = log2(abs(x) + 1)", np.array([math.log2(abs(v) + 1) for v in X])),
    ("o = sqrt(abs(x))", np.array([math.sqrt(abs(v)) for v in X])),
    ("o = rsqrt(abs(x) + 1)", np.array([1 / math.sqrt(abs(v) + 1) for v in X])),
    ("o = tanh(x)", np.array([math.tanh(v) for v in X])),
    ("o = sigmoid(x)", SIG),
    ("o = relu(x)", np.array([0, 0, 0, 0.25, 2.0])),
    ("o = gelu(x)", np.array([_gelu_tanh(v) for v in X])),
    ("o = gelu_erf(x)", np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in X])),
    ("o = silu(x)", X * SIG),
    ("o = square(x)", X * X),
    ("o = x ** 3 + x ** 4", X ** 3 + X ** 4),
    ("o = minimum(x, 0.1)", np.array([-3.0, -0.5, 0.0, 0.1, 0.1])),
    ("o = maximum(x, 0.1)", np.array([0.1, 0.1, 0.1, 0.25, 2.0])),
    ("o = clamp(x, -1, 1)", np.array([-1.0, -0.5, 0.0, 0.25, 1.0])),
    ("o = -x / 4 - 1", -X / 4 - 1),
])
def test_eval_numpy_functions(text: str, expected: np.ndarray) -> None:
    out = eval_numpy(body(text), {"x": X, "y": 0.0, "alpha": 1.0})
    assert list(out) == ["o"] and out["o"].dtype == np.float64
    np.testing.assert_allclose(out["o"], expected, rtol=1e-14, atol=1e-300)


def test_eval_numpy_broadcasting_temporaries_and_ieee() -> None:
    b = body("t = x * alpha\no = t + y\np = log(x) + 1 / y", outputs=("o", "p"))
    out = eval_numpy(b, {"x": [[1.0], [2.0]], "y": [0.0, 10.0], "alpha": 3})
    np.testing.assert_array_equal(out["o"], [[3.0, 13.0], [6.0, 16.0]])
    assert list(out) == ["o", "p"] and np.isinf(out["p"][0, 0])
    assert eval_numpy(body("o = sigmoid(x)"), {"x": [-1000.0, 1000.0]})["o"].tolist() == [0.0, 1.0]


def test_render_jnp_matches_eval_numpy() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    text = ("t = gelu(x) + gelu_erf(y) * alpha\n"
            "u = silu(x) - sigmoid(y) + relu(x - 0.5) + square(y) + (x - y) ** 2\n"
            "p = exp(-abs(x)) + exp2(y * 0.5) + log(abs(x) + 1) + log2(abs(y) + 2) + sqrt(abs(x)) + rsqrt(y * y + 1)\n"
            "o = clamp(tanh(t) + u * 0.1, -2, 2) + minimum(x, y) - maximum(x, 1e-3) + p / 3")
    b = body(text, outputs=("o", "p"))
    rng = np.random.default_rng(0)
    env = {"x": rng.standard_normal((4, 33)), "y": rng.standard_normal((4, 33)), "alpha": 0.75}
    values = {n: jnp.asarray(v, dtype=jnp.float32) for n, v in env.items()}
    names = {n: n for n in ("x", "y", "alpha", "t", "u", "p", "o")}
    for target, expr in b.statements:  # executing our own generated source, not user text
        values[target] = eval(render_jnp(expr, names), {"jnp": jnp, "jax": jax}, dict(values))  # noqa: S307
    ref = eval_numpy(b, env)
    for out in b.outputs:
        assert values[out].dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(values[out]), ref[out], rtol=2e-5, atol=2e-5)
