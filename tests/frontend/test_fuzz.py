"""Property-based fuzzing of the promise: bad input never gives a traceback.

Every failure of load / validate / plan is a located `SpecErrors`; a spec that plans renders through both
templates (valid Python for Pallas), carries no injected text into the generated code, and compiles with NVRTC.

Profiles: `ci` (default, derandomized, about 30 s on 2 cores, ~25 NVRTC compiles) and `long`
(`SCHEDGEN_FUZZ=long pytest tests/test_fuzz.py`, random seeds, for on-demand campaigns).
"""
from __future__ import annotations

import ast
import copy
import json
import math
import os

import pytest
import yaml
from hypothesis import HealthCheck, assume, event, example, given, note, settings
from hypothesis import strategies as st

from conftest import ROOT, fuzz_examples, spec_files
from schedgen.errors import SpecErrors, ToolchainError, format_path
from schedgen.plan import plan
from schedgen.render import has_template, render
from schedgen.frontend.expr import check_identifier
from schedgen.frontend.load import load_file, load_toml_text, load_yaml_text
from schedgen.frontend.validate import validate_data

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=400, deadline=None, derandomize=True, suppress_health_check=_SLOW_OK,
                          print_blob=True)
settings.register_profile("long", max_examples=20_000, deadline=None, suppress_health_check=_SLOW_OK, print_blob=True)
LONG = os.environ.get("SCHEDGEN_FUZZ", "") == "long"
settings.load_profile("long" if LONG else "ci")
COMPILE_EXAMPLES = fuzz_examples(10, 25, 2_000)          # each one is an NVRTC compile (~0.1-0.3 s)
TEXT_EXAMPLES = fuzz_examples(300, 1000, 100_000)        # loader-only examples
SCHEMA_EXAMPLES = fuzz_examples(100, 300, 20_000)        # validate + plan, no compile

SPECS = {p.name: load_file(p) for p in spec_files()}
SPEC_NAMES = sorted(SPECS)

# Text that must never reach generated code verbatim (markers absent from every bundled spec's rendering).
PAYLOADS = [
    'x); system("rm -rf /")', "system(", "__import__('os')", "#include <cstdio>", '"; asm("trap"); //', "asm(",
    "*/", "/*", "{{ p }}", "{% if %}", "\\\n", "'", '"', "\n", "x\ny", "\u0445", "\uff58", "\u202e", "\u200d",
    "o = x\n#define", "\u0000",
]
MARKERS = ["system(", "__import__", "#include <cstdio>", 'asm("trap")', "rm -rf", "#define", "\u202e", "\u200d",
           "\u0445", "\uff58", "\x00"]


def _render_both(p) -> tuple[str, str]:
    """(CUDA, Pallas) sources of a plan; "" for a backend its family has no template of for the plan's target
    (attention_backward: Pallas only so far; matmul on sm_100a: CUDA only so far)."""
    return tuple(render(p, b) if has_template(p, b) else "" for b in ("cuda", "pallas"))


def _baseline() -> dict[str, str]:
    out = {}
    for name, (data, src) in SPECS.items():
        p = plan(validate_data(data, src), src)
        out[name] = "".join(_render_both(p))
    return out


BASELINE = _baseline()
assert not any(m in text for m in MARKERS for text in BASELINE.values())


# ============================================================================ 1. random text through the loaders

_FRAGMENTS = st.sampled_from([
    "name", "op", "schedule", "body", "kind", "map", ": ", ":", "- ", "-", "\t", "  ", "\n", "\r\n", "&a ", "*a", "&b ",
    "*b", "<<: *a", "[", "]", "{", "}", ",", "? ", "---", "...", "%YAML 1.2\n", "!!int ", "!!float ", "!!bool ",
    "!!str ", "!!null ", "!!binary ", "!!python/object/apply:os.system ", "!!timestamp ", "!foo ", "|", ">", "|-",
    "'", '"', '"""', "'''", "#", "= ", "=", ".", "[[a]]", "[a.b]", "a.b.c = ", '"q.k" = ', "x = { y = 1 }",
    "1e999999", "9" * 400, "-0", "0x", "0b2", "0o", "1:2", "1_0", ".nan", "nan", "inf", "-.inf", "true", "yes",
    "~", "null", "1979-05-27T07:32:00Z", "07:32:00", "\x00", "\ufeff", "\u202e", "\u0445", "\uff58", "\U0001f600",
    "\\u0000", "\\", "o = x + y", "(i, j)", "{{ p }}", "{% if %}",
])
_YAMLISH = st.lists(st.one_of(_FRAGMENTS, st.text(max_size=6)), max_size=40).map("".join)


def _load_and_check(loader, text: str) -> None:
    try:
        data, src = loader(text, "fuzz")
    except SpecErrors as exc:
        assert exc.lines(), "SpecErrors without a problem"
        return
    assert isinstance(data, dict)
    try:  # whatever loads must also validate and plan cleanly or fail with located problems
        spec = validate_data(data, src)
        plan(spec, src)
    except SpecErrors as exc:
        assert exc.lines()


@settings(max_examples=TEXT_EXAMPLES)
@given(text=st.one_of(st.text(), _YAMLISH))
@example(text="a: !!int abc")
@example(text="a: !!float ''")
@example(text="a: !!bool maybe")
@example(text="!!int k: 1")
@example(text="!0")
@example(text="a: &a [*a]")
@example(text="&a {b: *a}")
@example(text="[" * 3000 + "]" * 3000)
@example(text="a: " + "{b: " * 3000 + "1" + "}" * 3000)
def test_random_yaml_text(text):
    _load_and_check(load_yaml_text, text)


@settings(max_examples=TEXT_EXAMPLES)
@given(text=st.one_of(st.text(), _YAMLISH))
@example(text="a = " + "[" * 3000 + "]" * 3000)
@example(text="a = " + "{b = " * 3000 + "1" + "}" * 3000)
@example(text="a = 1979-05-27T07:32:00Z")
def test_random_toml_text(text):
    _load_and_check(load_toml_text, text)


@settings(max_examples=TEXT_EXAMPLES // 2)
@given(st.data())
def test_mutated_spec_text(data):
    """Byte-level edits of the bundled files' text (the loaders' position mapping runs on near-valid input)."""
    path = data.draw(st.sampled_from(spec_files()), label="spec")
    text = path.read_text()
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        i = data.draw(st.integers(0, len(text)), label="at")
        j = data.draw(st.integers(i, min(len(text), i + 20)), label="to")
        text = text[:i] + data.draw(st.one_of(_FRAGMENTS, st.text(max_size=4)), label="insert") + text[j:]
    _load_and_check(load_toml_text if path.suffix == ".toml" else load_yaml_text, text)


# ============================================================================ 2./3. structured mutations

_INJECT = st.sampled_from(PAYLOADS + [
    "o = x + y; __import__('os').system('rm')", 'x); system("rm")', "__import__", "i); asm(\"trap\"", "(i, j) #*/",
    "o = x + y\n#include <cstdio>", "x\u200dy", "\u0445", "ｘ", "sg_x", "__x", "int", "make", "interpret", "k", "t",
    "s", "bar", "tile_coords", "M", "N", "x", "y", "o", "i", "j", "bf16", "f32", "", " ", "a" * 300,
])
_SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 1 << 12), st.sampled_from([0, -1, 1 << 31, (1 << 31) - 1, 1 << 63, 10 ** 40, -(10 ** 40)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e-45, 1e-40, 3.5e38, 1e39, -0.0]),
    _INJECT, st.text(max_size=12),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(_INJECT, st.text(max_size=6)), inner, max_size=3)),
    max_leaves=8)
_SMALL = st.one_of(st.integers(1, 300), st.sampled_from([1, 8, 16, 32, 64, 128, 256, 512]))


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _get(node, path):
    for part in path:
        node = node[part]
    return node


@st.composite
def mutate(draw, data: dict) -> dict:
    """One to three random edits: replace / delete / insert / rename a key, at a random path."""
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 3), label="n_edits")):
        paths = [p for p in _paths(data) if p]
        path = draw(st.sampled_from(paths), label="path")
        parent = _get(data, path[:-1])
        last = path[-1]
        how = draw(st.sampled_from(["replace", "replace", "delete", "insert", "rename"]), label="how")
        if how == "replace":
            parent[last] = draw(_VALUES, label="value")
        elif how == "delete":
            del parent[last]
        elif how == "insert":
            if isinstance(parent, list):
                parent.insert(draw(st.integers(0, len(parent))), draw(_VALUES, label="value"))
            else:
                parent[draw(st.one_of(_INJECT, st.text(max_size=8)), label="key")] = draw(_VALUES, label="value")
        elif isinstance(parent, dict):  # rename a key (operand, size, constant names ...)
            new = draw(st.one_of(_INJECT, st.text(max_size=8)), label="new_key")
            parent[new] = parent.pop(last)
    return data


@st.composite
def resize(draw, data: dict) -> dict:
    """Random small sizes and block shapes, sometimes without index maps (the planner's default)."""
    data = copy.deepcopy(data)
    op, sch = data["op"], data.get("schedule", {})
    # Mostly whole multiples of a power-of-two block (specs that plan), sometimes anything.
    multiple = draw(st.booleans(), label="sizes multiple of blocks")
    pow2 = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256])
    for k in op.get("sizes", {}):
        op["sizes"][k] = draw(pow2, label=f"size {k}") * draw(st.integers(1, 4)) if multiple else draw(_SMALL)
    drop_maps = draw(st.booleans(), label="drop index maps")
    block = None
    for group in ("out_specs", "in_specs"):
        for bs in sch.get(group, {}).values():
            if block is None or draw(st.integers(0, 4)) == 0:
                block = [draw(pow2 if multiple else _SMALL, label="block dim") for _ in bs["block_shape"]]
            bs["block_shape"] = list(block[-len(bs["block_shape"]):])
            if drop_maps:
                bs.pop("index_map", None)
            if draw(st.booleans(), label="oob"):
                bs["out_of_bounds"] = draw(st.sampled_from(["zero", "nan"]))
    if drop_maps and draw(st.booleans(), label="drop grid names"):
        sch.pop("grid_names", None)
    pipe = sch.setdefault("pipeline", {})
    pipe["max_concurrent_steps"] = draw(st.integers(1, 6), label="stages")
    sch["num_warpgroups"] = draw(st.integers(1, 4), label="warpgroups")
    return data


def _spec_data(draw):
    name = draw(st.sampled_from(SPEC_NAMES), label="spec")
    data, src = SPECS[name]
    return data, src


@st.composite
def mutated_specs(draw, resized: bool | None = None):
    data, src = _spec_data(draw)
    which = draw(st.sampled_from(["mutate", "resize", "both"]), label="kind") if resized is None else (
        "resize" if resized else "mutate")
    if which in ("resize", "both"):
        data = draw(resize(data))
    if which in ("mutate", "both"):
        data = draw(mutate(data))
    return data, src


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except (SyntaxError, ValueError):
        return False


def _plan_or_problems(data, src):
    """The plan, or None after checking that the failure is a located SpecErrors (any other exception fails)."""
    try:
        spec = validate_data(data, src)
        return plan(spec, src)
    except SpecErrors as exc:
        lines = exc.lines()
        assert lines and all(line.startswith(f"{src.file}:") for line in lines), lines
        return None


def _check_rendered(data, p) -> tuple[str, str]:
    cu, py = _render_both(p)
    compile(py, "<pallas>", "exec")  # the Pallas module is valid Python
    assert cu.count("{") == cu.count("}")
    for text in (cu, py):
        for marker in MARKERS:
            assert marker not in text, f"injected {marker!r} reached the generated code"
        for s in set(_strings(data)):
            # A user string may appear verbatim only when it is a validated identifier or text the
            # expression parser accepted (index maps, bodies, grid expressions, rendered from the tree).
            if len(s) >= 4 and s in text and check_identifier(s) is not None:
                assert _parses(s) and not any(m in s for m in MARKERS), f"user text {s!r} reached generated code"
    return cu, py


# ---------------------------------------------------------------------------- documents valid by the JSON Schema

SCHEMA = json.loads((ROOT / "schemas" / "schedgen.schema.json").read_text())
# names for dict keys, so that sizes, operands and block specs drawn apart sometimes refer to each other
_KEYS = ["x", "y", "o", "a", "b", "c", "q", "k", "v", "lse", "M", "N", "K", "B", "S", "H", "D", "schedule", "i", "j"]
_WORDS = st.sampled_from(_KEYS + ["(i, j)", "(j,)", "(i, 0)", "o = x + y", "o = gelu(x) * 2.0", "acc", "out = acc",
                                  "schedule.pipeline.max_concurrent_steps", "tile_m * tile_n <= 32768"])


def _schema_strategy(node: dict) -> st.SearchStrategy:
    """A hypothesis strategy for the documents that `node` (a piece of our exported JSON Schema) accepts: the
    keywords it uses ($ref, allOf, if/then/else, anyOf, enum/const, objects, arrays, bounded numbers and strings)."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return st.deferred(lambda: _schema_strategy(SCHEMA["definitions"][name]))
    if "allOf" in node:    # the op's if/then per kind, or a $ref with its description beside it
        members = [sub["then"] for sub in node["allOf"] if "then" in sub] or node["allOf"][:1]
        return st.one_of([_schema_strategy(n) for n in members])
    if "else" in node:     # a union by JSON type: if/then/else chain (an if/then alone is a rule, e.g. float32's)
        members, rest = [], node
        while "else" in rest:
            members, rest = members + [rest["then"]], rest["else"]
        return st.one_of([_schema_strategy(n) for n in members])
    if "const" in node:
        return st.just(node["const"])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    for key in ("anyOf", "oneOf"):
        if key in node:
            return st.one_of([_schema_strategy(n) for n in node[key]])
    kind = node.get("type")
    if kind == "object":
        props, required = node.get("properties", {}), set(node.get("required", ()))
        extra = node.get("additionalProperties")
        pattern = node.get("patternProperties")
        if props:
            optional = [k for k in props if k not in required]

            @st.composite
            def obj(draw):
                chosen = list(required) + draw(st.lists(st.sampled_from(optional), unique=True)) if optional else \
                    list(required)
                return {k: draw(_schema_strategy(props[k]), label=k) for k in chosen}
            return obj()
        values = extra if isinstance(extra, dict) else next(iter(pattern.values())) if pattern else {}
        keys = st.sampled_from(_KEYS) if not pattern else st.sampled_from(
            ["schedule.pipeline.max_concurrent_steps", "tile_n", "schedule.in_specs.x.block_shape[1]", "M"])
        return st.dictionaries(keys, _schema_strategy(values), min_size=node.get("minProperties", 0),
                               max_size=max(min(node.get("maxProperties", 4), 4), node.get("minProperties", 0)))
    if kind == "array":
        return st.lists(_schema_strategy(node.get("items", {})), min_size=node.get("minItems", 0),
                        max_size=min(node.get("maxItems", 5), 5))
    if kind == "integer":
        lo, hi = node.get("minimum", -(1 << 31)), node.get("maximum", 1 << 33)
        return st.one_of(st.sampled_from(sorted({lo, hi, max(lo, min(hi, 1)), max(lo, min(hi, 128))})),
                         st.integers(lo, hi))
    if kind == "number":
        return st.floats(node.get("minimum"), node.get("maximum"), allow_nan=False, allow_infinity=False)
    if kind == "string":
        lo, hi = node.get("minLength", 0), node.get("maxLength", 40)
        return st.one_of(_WORDS, st.text(min_size=lo, max_size=min(hi, 40))).filter(lambda t: lo <= len(t) <= hi)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return st.one_of(st.none(), st.booleans(), st.integers(-2, 300), _WORDS)


@settings(max_examples=SCHEMA_EXAMPLES)
@given(doc=_schema_strategy(SCHEMA))
def test_schema_valid_documents_plan_or_fail_located(doc):
    """Documents valid by the committed JSON Schema (what an editor with the schema accepts), as YAML text: each
    either plans, renders and carries no user text into generated code, or fails with located problems only."""
    text = yaml.safe_dump(doc, sort_keys=False)
    note(text)
    try:
        data, src = load_yaml_text(text, "schema-fuzz.yaml")
    except SpecErrors as exc:     # safe_dump of text the YAML 1.2 loader reads differently: located, fine
        assert exc.lines()
        return
    try:
        validate_data(data, src)
        event("valid: reached the planner")
    except SpecErrors:
        event("rejected by validation")
    p = _plan_or_problems(data, src)
    event("planned" if p is not None else "rejected")
    if p is not None:
        _check_rendered(data, p)


@given(case=mutated_specs())
def test_mutated_specs_plan_or_fail_cleanly(case):
    data, src = case
    note(repr(data))
    p = _plan_or_problems(data, src)
    event("planned" if p is not None else "rejected")
    if p is not None:
        _check_rendered(data, p)


@settings(max_examples=COMPILE_EXAMPLES)
@given(case=mutated_specs(resized=True))
def test_planned_specs_compile(case):
    from schedgen.toolchain.nvrtc import compile_cuda

    data, src = case
    note(repr(data))
    p = _plan_or_problems(data, src)
    assume(p is not None)
    cu, _ = _check_rendered(data, p)
    try:
        compile_cuda(cu, f"{p.launch.kernel_name}.cu", arch=p.launch.target)
    except ToolchainError as exc:  # a planned spec that does not compile is a bug in the plan stage
        pytest.fail(f"NVRTC rejected a planned spec:\n{exc}\n{data!r}")


# ---------------------------------------------------------------------------- attention schedules

ATTN_EXAMPLES = fuzz_examples(6, 12, 600)          # each planned one is an NVRTC compile (~1 s)


@st.composite
def attention_schedules(draw):
    """An attention spec over the family's whole schedule space: head_dim, block sizes (ragged or not), stages,
    1-3 consumers with or without the ping-pong barrier, register budgets, a CTA a tile or a static or dynamic
    persistent grid, tile order, causal (either alignment), GQA, Sq != Skv (more keys or fewer), layout, LSE; both
    backends or CUDA alone."""
    data, src = SPECS["attention_bf16_4096.yaml"]
    data = copy.deepcopy(data)
    op, sch = data["op"], data["schedule"]
    d = draw(st.sampled_from([64, 128, 256]), label="D")
    g = draw(st.sampled_from([1, 2, 4]), label="q heads per kv head")
    sq = draw(st.integers(1, 24), label="q blocks of 64") * 64 - draw(st.sampled_from([0, 0, 1, 37]), label="ragged q")
    skv = draw(st.sampled_from([sq, sq * 2, sq + 100, max(1, sq // 2)]), label="Skv")   # fewer: top-left only
    op["sizes"] = {"B": draw(st.integers(1, 2)), "S": sq, "T": skv, "H": 2 * g, "G": 2, "D": d}
    lay = draw(st.sampled_from(["bshd", "bhsd"]), label="layout")
    op["layout"] = lay
    q_shape = ["B", "S", "H", "D"] if lay == "bshd" else ["B", "H", "S", "D"]
    kv_shape = ["B", "T", "G", "D"] if lay == "bshd" else ["B", "G", "T", "D"]
    op["inputs"] = {"q": {"shape": q_shape, "dtype": "bf16"}, "k": {"shape": kv_shape, "dtype": "bf16"},
                    "v": {"shape": kv_shape, "dtype": "bf16"}}
    op["outputs"] = {"o": {"shape": q_shape, "dtype": "bf16"}}
    if draw(st.booleans(), label="lse"):
        op["outputs"]["lse"] = {"shape": ["B", "H", "S"], "dtype": "f32"}
    op["causal"] = draw(st.sampled_from([False, True, "top_left", "bottom_right"]), label="causal")
    nc = draw(st.integers(1, 3), label="consumers")
    bkv = draw(st.sampled_from([16, 32, 48, 64, 80, 96, 128, 160, 176, 192, 256]), label="block_kv")
    sch["in_specs"] = {"q": {"block_shape": [64 * nc, d]}, "k": {"block_shape": [bkv, d]},
                       "v": {"block_shape": [bkv, d]}}
    pipe = sch["pipeline"]
    pipe["num_compute_wgs"] = nc
    pipe["max_concurrent_steps"] = draw(st.integers(1, 4), label="stages")
    pipe["memory_registers"] = draw(st.sampled_from([24, 32]), label="producer registers")
    pipe["compute_registers"] = draw(st.sampled_from([160, 200, 232, 240]), label="consumer registers")
    sch["barriers"] = {"schedule": {"num_arrivals": nc}} if nc > 1 and draw(st.booleans(), label="pingpong") else {}
    loop = draw(st.sampled_from(["none", "nd_loop", "dynamic"]), label="tile loop")
    if loop != "none":
        sch["persistent"] = {"loop": loop}
    order = draw(st.sampled_from([None, "row_major", "lpt", "planar_snake"]), label="tile order")
    if order is not None:
        sch.setdefault("persistent", {})["tile_order"] = order
    sch["backends"] = draw(st.sampled_from([["cuda"], ["cuda", "pallas"]]), label="backends")
    return data, src


@settings(max_examples=ATTN_EXAMPLES)
@given(case=attention_schedules())
def test_attention_schedules_plan_or_compile(case):
    """Every attention schedule is rejected at its field, or compiles; where ptxas spills or serializes the
    wgmmas (its C751x warnings), the build reports it (`Built.warnings`, printed by `schedgen build`). The planner's
    register estimate keeps the bundled specs and the schedules with room to spare clean (tests/test_sass*.py);
    near a low compute_registers budget ptxas has the last word."""
    from schedgen.build import compiler_verdicts
    from schedgen.toolchain.nvrtc import compile_cuda, resource_usage
    data, src = case
    note(repr(data))
    p = _plan_or_problems(data, src)
    event("planned" if p is not None else "rejected")
    assume(p is not None)
    cu, _ = _check_rendered(data, p)
    try:
        c = compile_cuda(cu, f"{p.launch.kernel_name}.cu", arch=p.launch.target)
    except ToolchainError as exc:
        pytest.fail(f"NVRTC rejected a planned spec:\n{exc}\n{data!r}")
    u = resource_usage(c.cubin)[p.launch.kernel_name]
    costly = "C751" in c.log or u["LOCAL"] > 0 or u["STACK"] > 0
    event("compiler verdict: spills or serialized wgmma" if costly else "compiled clean")
    verdicts = compiler_verdicts(c.log, u)
    assert bool(verdicts) == costly, (verdicts, c.log, u)
    assert all(v.startswith(("ptxas C75", "the kernel spills")) for v in verdicts), verdicts


# ---------------------------------------------------------------------------- collective matmul schedules

COLL_EXAMPLES = fuzz_examples(3, 6, 300)           # each planned one is two NVRTC compiles (~0.7 s each)


@st.composite
def collective_schedules(draw):
    """A collective_matmul spec over the family's schedule space: 2-8 devices either way round the ring, tiles,
    stages, 1-2 consumers split along m or n, register budgets, epilogue buffers, tile order, bf16/f16 in, f32 out,
    both semaphore forms and counts (CUDA: the Pallas rendering takes fewer of them)."""
    data, src = SPECS["collective_matmul_bf16_1024x4096.yaml"]
    data = copy.deepcopy(data)
    op, sch = data["op"], data["schedule"]
    d = draw(st.sampled_from([2, 3, 4, 8]), label="devices")
    tm, tn, tk = (draw(st.sampled_from(v), label=n) for n, v in
                  (("tile_m", [64, 128, 256]), ("tile_n", [64, 128, 256]), ("tile_k", [32, 64, 128])))
    m = tm * draw(st.integers(1, 4), label="m tiles")
    op["sizes"] = {"M": m, "M_total": d * m, "K": tk * draw(st.integers(1, 4), label="k tiles"),
                   "N": tn * draw(st.integers(1, 4), label="n tiles")}
    op["mesh"]["num_devices"] = d
    dt = draw(st.sampled_from(["bf16", "f16"]), label="dtype")
    op["inputs"]["a"]["dtype"] = op["inputs"]["b"]["dtype"] = dt
    op["outputs"]["out"]["dtype"] = draw(st.sampled_from([dt, "f32"]), label="out dtype")
    pipe = sch["pipeline"]
    pipe["num_compute_wgs"] = draw(st.integers(1, 2), label="consumers")
    pipe["wg_axis"] = draw(st.sampled_from(["m", "n"]), label="wg_axis")
    pipe["max_concurrent_steps"] = draw(st.integers(2, 6), label="stages")
    pipe["memory_registers"], pipe["compute_registers"] = draw(
        st.sampled_from([(40, 232), (56, 224), (56, 256), (24, 240)]), label="registers")
    sch["in_specs"] = {"a": {"block_shape": [tm, tk], "delay_release": 1}, "b": {"block_shape": [tk, tn], "delay_release": 1}}
    sch["out_specs"] = {"out": {"block_shape": [tm, tn]}}
    sch["epilogue"] = {"buffers": draw(st.integers(1, 3), label="epilogue buffers")}
    sch["persistent"] = {"loop": "nd_loop", "tile_order": draw(st.sampled_from(["row_major", "planar_snake"]))}
    sign = draw(st.sampled_from(["-", "+"]), label="ring direction")
    sch["collective"]["remote_refs"]["gather"]["device_id"] = f"(x {sign} 1) % {d}"
    forms = st.sampled_from(["semaphore_signal", "semaphore_signal_parallel"])
    sch["collective"]["semaphores"] = {
        "received": {"signal": draw(forms, label="received"), "per": draw(st.sampled_from(["chunk", "row_block"]))},
        "done": {"signal": draw(forms, label="done")}}
    sch["backends"] = ["cuda"]
    return data, src


def _step_matmul(data):
    """The matmul family's spec of one ring step of a collective spec (what plan_matmul plans inside it)."""
    data = copy.deepcopy(data)
    op = data["op"]
    op["kind"] = "matmul"
    op.pop("mesh")
    op["sizes"].pop("M_total")
    op["outputs"]["out"]["shape"] = ["M", "N"]
    data["schedule"].pop("collective")
    return data


@settings(max_examples=COLL_EXAMPLES)
@given(case=collective_schedules())
def test_collective_schedules_compile_like_their_step_matmul(case):
    """Every collective schedule is rejected at its field, or compiles; and what ptxas says costs it speed (spills,
    serialized wgmma) is exactly what it says of the matmul family's kernel for one step: the copy warps and the
    cross-device waits add no register pressure of their own (below 40 producer registers they would: rejected)."""
    from schedgen.build import compiler_verdicts
    from schedgen.toolchain.nvrtc import compile_cuda, resource_usage
    data, src = case
    note(repr(data))
    p = _plan_or_problems(data, src)
    event("planned" if p is not None else "rejected")
    assume(p is not None)
    cu, _ = _check_rendered(data, p)
    verdicts = []
    for kernel_name, text in ((p.launch.kernel_name, cu), (None, None)):
        if text is None:
            q = plan(validate_data(_step_matmul(data), src), src)
            kernel_name, text = q.launch.kernel_name, render(q, "cuda")
        c = compile_cuda(text, f"{kernel_name}.cu")
        verdicts.append(sorted(v.split(" in function")[0].split(" around line")[0]
                               for v in compiler_verdicts(c.log, resource_usage(c.cubin)[kernel_name])))
    event("clean" if not verdicts[0] else "compiler verdicts, as the matmul's")
    assert verdicts[0] == verdicts[1], verdicts


# ---------------------------------------------------------------------------- regressions found by fuzzing

def _scale(**edits):
    data, src = SPECS["scale_f32.toml"]
    data = copy.deepcopy(data)
    for dotted, value in edits.items():
        *head, last = dotted.split("__")
        node = data
        for part in head:
            node = node[part]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return data, src


def _no_index_maps(data):
    for group in ("in_specs", "out_specs"):
        for bs in data["schedule"][group].values():
            bs.pop("index_map", None)
    return data


REGRESSIONS = {
    # rank-3 output without grid_names: the default names (i, j, k) clashed with the CUDA tile loop's `k`
    "default-rank3-grid-names": lambda: (_no_index_maps(_scale(schedule__grid_names=None)[0]), _scale()[1]),
    # a constant that is a float32 denormal was printed as a double hex literal NVRTC calls out of range
    "denormal-constant": lambda: _scale(op__constants={"scale": 1e-45}),
    "tiny-constant": lambda: _scale(op__constants={"scale": 1e-40}),
    # an extent-1 grid dimension was sampled at index 1 by the index-map check (a false rejection)
    "extent-1-grid-dim": lambda: _scale(op__sizes={"B": 1, "M": 4096, "N": 4096}),
    # grid names equal to locals of the generated code (t, k, s, bar, ...) failed to compile or silently
    # miscomputed; generated code now spells grid names g_<name>, so every legal name works
    **{f"grid-name-{g}": (lambda g=g: _scale(
        schedule__grid_names=["b", "i", g],
        schedule__in_specs={"x": {"block_shape": [1, 32, 128], "index_map": f"(b, i, {g})"}},
        schedule__out_specs={"o": {"block_shape": [1, 32, 128], "index_map": f"(b, i, {g})"}}))
       for g in ("t", "k", "s", "bar", "num_blocks", "smem_base", "kTxBytes", "slot", "cta", "tile_coords")},
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regressions_plan_render_compile(name):
    from schedgen.toolchain.nvrtc import compile_cuda

    data, src = REGRESSIONS[name]()
    spec = validate_data(data, src)
    p = plan(spec, src)
    cu, _ = _check_rendered(data, p)
    compile_cuda(cu)


REJECTED = {
    # non-finite or out-of-float32-range constants crashed the planner / the compiler
    "nan-constant": (lambda: _scale(op__constants={"scale": math.nan}), "op.constants.scale"),
    "inf-constant": (lambda: _scale(op__constants={"scale": -math.inf}), "op.constants.scale"),
    "huge-constant": (lambda: _scale(op__constants={"scale": 1e39}), "op.constants.scale"),
    "underflow-constant": (lambda: _scale(op__constants={"scale": 1e-50}), "op.constants.scale"),
    # division by zero reached only at a grid point crashed the index-map check
    "index-map-divides-by-zero": (
        lambda: _scale(schedule__in_specs={"x": {"block_shape": [1, 32, 128], "index_map": "(b, i, j // (b - b))"}}),
        "schedule.in_specs.x.index_map"),
    # a user key spelled like a pydantic union tag ('int', 'str') was stripped from the error path (IndexError)
    "user-key-named-int": (lambda: (lambda d, s: ({**{k: v for k, v in d.items() if k != "name"}, "int": "x"}, s))(
        *SPECS["add_bf16.yaml"]), "int"),
    # 2**31 tiles overflow the kernel's int tile counter
    "too-many-tiles": (lambda: _scale(op__sizes={"B": 1 << 31, "M": 32, "N": 128}), "op.sizes"),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_regressions_rejected_with_location(name):
    make, where = REJECTED[name]
    data, src = make()
    with pytest.raises(SpecErrors) as info:
        plan(validate_data(data, src), src)
    assert any(f": {where}" in line for line in info.value.lines()), info.value.lines()


# ============================================================================ 4. injection table

INJECTIONS = [
    '"', "'", "x\ny", "\n", "x\r", "__import__", "__import__('os')", "#include <cstdio>", 'asm("trap")', "x */",
    "/* x", "{{ p.name }}", "{% raw %}", "\u0445", "x\u0445", "\uff58", "\uff41\uff42", "x\u202ey", "\u202ex",
    "x\u200dy", "x\u200d", "x;", "x y", "",
]
ADD = SPECS["add_bf16.yaml"]
SCALE = SPECS["scale_f32.toml"]
MATMUL = SPECS["matmul_bias_gelu_bf16.yaml"]
ATTN = SPECS["attention_bf16_4096.yaml"]
COLL = SPECS["collective_matmul_bf16_1024x4096.yaml"]


def _rename_key(mapping: dict, old: str, new: str) -> None:
    items = list(mapping.items())
    mapping.clear()
    mapping.update((new if k == old else k, v) for k, v in items)


def _field_cases():
    """(field, build(payload) -> (data, src, expected path))."""
    def ident_key(spec, *where):
        def build(payload):
            data, src = copy.deepcopy(spec[0]), spec[1]
            _rename_key(_get(data, where[:-1]), where[-1], payload)
            return data, src, (*where[:-1], payload, "[key]")
        return build

    def value(spec, where, fmt="{}", path=None):
        def build(payload):
            data, src = copy.deepcopy(spec[0]), spec[1]
            _get(data, where[:-1])[where[-1]] = fmt.format(payload)
            return data, src, path or where
        return build

    def grid_name(payload):
        data, src = copy.deepcopy(ADD[0]), ADD[1]
        data["schedule"]["grid_names"] = ["i", payload]
        return data, src, ("schedule", "grid_names", 1)

    def new_key(spec, *where):
        def build(payload):
            data, src = copy.deepcopy(spec[0]), spec[1]
            _get(data, where[:-1]).setdefault(where[-1], {})[payload] = 1.0
            return data, src, (*where, payload, "[key]")
        return build

    def tune_key(payload):
        data, src = copy.deepcopy(ADD[0]), ADD[1]
        data["tune"] = {"params": {payload: [1, 2]}}
        return data, src, ("tune", "params", payload, "[key]")

    return {
        "name": value(ADD, ("name",)),
        "input-name": ident_key(ADD, "op", "inputs", "x"),
        "output-name": ident_key(ADD, "op", "outputs", "o"),
        "in_specs-name": ident_key(ADD, "schedule", "in_specs", "x"),
        "out_specs-name": ident_key(ADD, "schedule", "out_specs", "o"),
        "constant-name": ident_key(SCALE, "op", "constants", "scale"),
        "size-name": ident_key(ADD, "op", "sizes", "M"),
        "grid-name": grid_name,
        "body": value(ADD, ("op", "body"), "o = x + y + {}"),
        "body-temporary": value(ADD, ("op", "body"), "h{} = x\no = h + y", ("op", "body")),
        "index_map": value(ADD, ("schedule", "in_specs", "x", "index_map"), "(i, j + {})"),
        "tune-key": tune_key,
        "matmul-input-name": ident_key(MATMUL, "op", "inputs", "bias"),
        "matmul-output-name": ident_key(MATMUL, "op", "outputs", "y"),
        "matmul-lhs": value(MATMUL, ("op", "lhs")),
        "matmul-epilogue": value(MATMUL, ("op", "epilogue"), "y = gelu(acc + bias) + {}"),
        "matmul-constant-name": new_key(MATMUL, "op", "constants"),
        "attention-input-name": ident_key(ATTN, "op", "inputs", "q"),
        "attention-output-name": ident_key(ATTN, "op", "outputs", "o"),
        # the multi-device family: the mesh axis name (rendered into the Pallas module as a string), its device-id
        # expression (rendered from its tree), operand names, and the names of its remote refs and semaphores
        "collective-input-name": ident_key(COLL, "op", "inputs", "a"),
        "collective-output-name": ident_key(COLL, "op", "outputs", "out"),
        "collective-axis-name": value(COLL, ("op", "mesh", "axis_name")),
        "collective-device-id": value(COLL, ("schedule", "collective", "remote_refs", "gather", "device_id"),
                                      "(x - 1 + {}) % 2"),
        "collective-remote-ref-name": ident_key(COLL, "schedule", "collective", "remote_refs", "gather"),
        "collective-semaphore-name": ident_key(COLL, "schedule", "collective", "semaphores", "received"),
    }


FIELD_CASES = _field_cases()


# In expressions these payloads are plain Python (a line end, a ';', an empty suffix): parsed, so harmless.
HARMLESS_IN_EXPRESSIONS = {"x\r", "x;", ""}
INJECTION_CASES = [pytest.param(field, payload, id=f"{field}-{ascii(payload)}")
                   for field in sorted(FIELD_CASES) for payload in INJECTIONS
                   if not (field in ("body", "body-temporary", "index_map", "matmul-epilogue")
                           and payload in HARMLESS_IN_EXPRESSIONS)]


@pytest.mark.parametrize("field,payload", INJECTION_CASES)
def test_injection_rejected_at_its_field(field, payload):
    data, src, path = FIELD_CASES[field](payload)
    with pytest.raises(SpecErrors) as info:
        plan(validate_data(data, src), src)
    want = f": {format_path(path)}: "
    assert any(want in line for line in info.value.lines()), (want, info.value.lines())


@pytest.mark.parametrize("comment", ['# system("rm -rf /")', "# #include <cstdio>", "# __import__('os')",
                                     "# */ asm(\"trap\"); /*", "# {{ p }} {% if %}"])
def test_comments_in_expressions_never_reach_generated_code(comment):
    data, src = copy.deepcopy(ADD[0]), ADD[1]
    data["op"]["body"] = f"o = x + y  {comment}\n{comment}"
    data["schedule"]["in_specs"]["x"]["index_map"] = f"(i, j)  {comment}"
    p = plan(validate_data(data, src), src)
    for text in _check_rendered(data, p):
        assert comment not in text and comment[2:] not in text
