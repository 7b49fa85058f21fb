"""No silent acceptance (issue 16, section 1): every field a user writes changes the kernel of every backend the spec
builds, or planning says, at the field, that it has no effect there.

The fields come from the JSON Schema of the models (schedgen/frontend/schema.py), walked, not listed by hand: for
each bundled spec (specs/*, the *_tune sweeps aside) every field reachable in it (its family's op fields and every
schedule field, written in the file or left at its default) is set, one at a time, to each other legal value the
schema gives it: each other enum member or boolean, a few small integers around the current value and at the
bounds, None for an optional field, lists one entry shorter and longer, a new entry of a mapping of planner-named
entries, a few identifiers for a name. Each mutated spec is validated, planned and rendered (no compile): the
products of each backend (CUDA: kernel.cu and the launch record the runtime reads; Pallas: the module), the
kernel's name normalized (a field that only renames the kernel changes nothing), must differ from the unmutated
spec's, or validation/planning must give located problems. `ALLOWED` names, with its reason, each mutation that
genuinely changes nothing; and a field the planner picks when it is left out or `auto` (PICKS) may
be written as the pick, or set to its default where the spec wrote the pick, as long as other values of the field
do change the kernel (and only one value can be the pick).

`python tests/frontend/test_every_field.py` prints every silent mutation (what the test would fail on).
"""
from __future__ import annotations

import copy
import fnmatch
import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:   # run as a script
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from schedgen import families  # noqa: E402
from schedgen.errors import SpecErrors, format_path  # noqa: E402
from schedgen.frontend.load import load_file  # noqa: E402
from schedgen.frontend.schema import schema  # noqa: E402
from schedgen.frontend.validate import validate_data  # noqa: E402
from schedgen.plan import plan  # noqa: E402
from schedgen.plan.launch import launch_record  # noqa: E402
from schedgen.render import render  # noqa: E402

SPECS = sorted(p for p in (ROOT / "specs").iterdir()
               if p.suffix in (".yaml", ".yml", ".toml") and not p.stem.endswith("_tune"))
NAMES = ("m", "n", "x")        # identifiers tried for a name field (a grid axis, a warpgroup axis, a cluster axis)
PALLAS_READS = ("name", "inputs", "outputs", "sizes")   # of launch.json, by the Pallas call path
NEW_KEY = "extra"              # the key of a new entry added to a mapping whose entries have defaults


PICKS = (None, "auto")         # "let the planner choose": a field set to or from one of these may restate its pick


def _strip_ones(cluster) -> list:
    out = list(cluster)
    while len(out) > 1 and out[-1] == 1:
        out.pop()
    return out


def _same_cluster(spec, m) -> bool:
    return _strip_ones(m.value) == _strip_ones(spec.schedule.cluster)


def _same_extents(spec, m) -> bool:
    """A shape with a size name replaced by its own value."""
    group, name = m.path[1], m.path[2]
    old = getattr(spec.op, group)[name].shape
    sizes = spec.op.sizes
    return all(a == b or (isinstance(b, int) and sizes.get(a) == b) for a, b in zip(old, m.value))


def _same_lowest(spec, m) -> bool:
    size = spec.op.sizes[m.path[2]]
    return (m.value if m.value is not None else size.multiple_of) == size.lowest


_PICKS: dict[int, tuple] = {}   # id(spec) -> (spec, its picks): the walks keep their specs alive (functools.cache)


def _picked(spec, path: tuple):
    """The planner's pick for the field at `path` (None when it picks none: the field is written, or not its to
    pick). The picks of a spec are computed once: the allowance check asks for them once per silent mutation and
    allowance, and planning a spec again each time made it pass its time limit on a loaded machine (issue 41)."""
    entry = _PICKS.get(id(spec))
    if entry is None or entry[0] is not spec:
        from schedgen.plan import complete
        entry = _PICKS[id(spec)] = (spec, complete(spec)[1])
    return next((p.value for p in entry[1] if tuple(p.path) == path), None)


def _cuda_only(spec, m, same) -> bool:
    return same == ["cuda"]


# (spec stem pattern, field path pattern, when (spec, mutation, backends unchanged) -> bool, or None: always;
# reason): silent mutations that rightly change nothing. Paths are written as format_path writes them
# (schedule.in_specs.x.block_shape[0]); patterns are fnmatch's.
ALLOWED: list[tuple[str, str, Any, str]] = [
    ("*", "description", None, "documentation of the spec file: it is not part of the kernel"),
    ("*", "tune", None, "the sweep `schedgen tune` runs over the file; the kernel built from the file is its own"),
    ("*", "tune.*", None, "the sweep's knobs, constraints and buckets (a bundled spec with a tune section: "
                          "matmul_bf16_dynamic_buckets): `schedgen build` without --tuned builds the file's own kernel"),
    ("*", "schedule.dispatch", None, "the package's choice among variants by M (schedgen build derives the buckets "
                                     "and each one's schedule: families/matmul/dispatch_auto.py); the kernel planned "
                                     "from the file is its own, the variants are tested in "
                                     "tests/families/matmul/test_dispatch_auto.py"),
    ("*", "schedule.cluster*", lambda s, m, _: _same_cluster(s, m),
     "one cluster: its missing trailing dimensions are 1 ([2] is [2, 1], [1] is [1, 1])"),
    ("*", "op.*.shape*", lambda s, m, _: _same_extents(s, m), "a literal extent equal to the size it replaces"),
    ("*", "op.sizes.*.min", lambda s, m, _: _same_lowest(s, m), "min restates its default, multiple_of"),
    ("matmul*", "op.epilogue", lambda s, m, _: m.value is None and s.op.epilogue.replace(" ", "") == "out=acc",
     "out = acc is the default epilogue"),
    ("*", "schedule.*_specs.*.out_of_bounds", lambda s, m, _: m.value == "zero",
     "zero permits a partial last block (TMA zero-fills the load, clips the store); where the sizes divide by the "
     "block there is none, and a spec written for ragged sizes keeps working when -D picks one that divides"),
    ("*", "schedule.*_specs.*.transforms.tiling*", _cuda_only,
     "Mosaic GPU's SMEM tiling: the Pallas kernel's; the CUDA kernel's SMEM layout is its TMA box"),
    ("*", "schedule.compiler_params.lowering_semantics", _cuda_only,
     "a Mosaic GPU compiler parameter: the Pallas kernel's (an error when pallas is not built)"),
    ("*", "schedule.compiler_params.unsafe_no_auto_barriers", _cuda_only,
     "a Mosaic GPU compiler parameter: the Pallas kernel's (an error when pallas is not built)"),
    ("attention*", "schedule.compiler_params.lowering_semantics", lambda s, m, _: m.value == "lane",
     "the Pallas attention is written for lane semantics: lane restates it"),
    ("attention*", "schedule.persistent.loop", lambda s, m, _: m.value == "none" and
     "loop" not in s.schedule.persistent.model_fields_set,
     "attention launches a block a tile unless persistent.loop is written: none restates that"),
    ("attention*", "schedule.persistent.tile_order", lambda s, m, _: m.value == "lpt" and s.op.causal and
     "tile_order" not in s.schedule.persistent.model_fields_set,
     "causal attention goes longest-first unless persistent.tile_order is written: lpt restates that"),
    ("*", "schedule.*", lambda s, m, _: _picked(s, tuple(m.path)) == m.value,
     "the value the planner picks where the field is not written (explain lists it), written out: e.g. the "
     "attention backward's pipeline.kind warp_specialized, a 16-bit rowwise op's approx_math true"),
    ("matmul_bf16_256x8192x8192", "schedule.persistent.loop", lambda s, m, same: m.value == "none" and
     same == ["pallas"], "64 tiles on 132 SMs: the Pallas kernel's persistent grid is a block a tile already"),
    ("*", "schedule.out_specs.*.memory_space", lambda s, m, _: m.value == "tmem" and s.schedule.target == "sm_100a",
     "on sm_100a the output tile accumulates in tensor memory whatever its block says: tmem restates where the "
     "tcgen05 accumulator lives (smem, the default, names the epilogue's side of it)"),
    ("attention*", "op.causal", lambda s, m, _: {repr(m.value), repr(s.op.causal)} == {"True", "'bottom_right'"},
     "causal: true means bottom_right (the last query sees the last key)"),
    # the backward section asks for the backward graph's kernels (built as sub-packages backward/<step>/ and tested
    # per family in tests/autodiff), which the forward's products walked here do not show; a value the family's
    # hook cannot take is a located error when the package is built (tests/autodiff: wrt / save errors)
    ("*", "backward*", lambda s, m, _: families.of(s).backward is not None,
     "the backward section asks for the backward graph's kernels, not a different forward"),
    ("*", "schedule.backends", lambda s, m, _: m.value == ["cuda"] and
     s.schedule.persistent.decomposition == "stream_k" and "backends" not in s.schedule.model_fields_set,
     "stream_k is the CUDA kernel's: with backends not written the planner picks [cuda] for it (the Pallas matmul "
     "has no stream-K), so [cuda] restates the pick"),
    ("collective_matmul*", "schedule.collective", lambda s, m, _: m.value is None,
     "the spec's collective section restates the defaults (the gather ring, its semaphores)"),
    ("*", "schedule.num_warpgroups", lambda s, m, same: same == ["pallas"] and s.op.kind in ("map", "rowwise"),
     "the CUDA kernel's warpgroups: the Pallas map and rowwise kernels' block is Mosaic GPU's (it reads no thread "
     "count); written with no cuda backend it is a located error (plan/unread.py CUDA_WARPGROUPS)"),
    ("attention_backward*", "schedule.pipeline.delta", lambda s, m, same: same == ["pallas"],
     "where the wgmma CUDA kernel's delta comes from: the Pallas backward computes delta before its kernels (a jnp "
     "step); where the wgmma kernel is not built it is a located error (attention_backward/unread.py)"),
]


def allowed(stem: str, spec, m, same: list[str]) -> str | None:
    for spec_pat, path_pat, when, why in ALLOWED:
        if fnmatch.fnmatchcase(stem, spec_pat) and fnmatch.fnmatchcase(m.field, path_pat) and \
                (when is None or when(spec, m, same)):
            return why
    return None


# ------------------------------------------------------------------------------------------------ the schema walk


@functools.cache
def _schema() -> dict:
    return schema()


def _resolve(node: dict) -> dict:
    """A subschema with its local $ref ("#/$defs/X", "#/definitions/X") followed, its own keys kept."""
    while "$ref" in node:
        target: Any = _schema()
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        rest = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **rest}
    return node


def _alternatives(node: dict) -> list[dict]:
    """The schemas a value may match: the members of anyOf / oneOf, or the branches of a draft-07 type union
    (if {type: A} then ... else if {type: B} then ... else {type: [A, B]}: the last, the catch-all that reports a
    wrong type, matches nothing legal), each resolved (allOf merged)."""
    node = _resolve(node)
    members = node.get("anyOf") or node.get("oneOf")
    if members:
        return [alt for m in members for alt in _alternatives(m)]
    if "if" in node and "then" in node:
        return _alternatives(node["then"]) + (_alternatives(node["else"]) if "else" in node else [])
    if isinstance(node.get("type"), list):
        return []
    for part in node.get("allOf", ()):
        node = {**node, **_resolve(part)}
    return [node]


def _kind_of(node: dict) -> str | None:
    kind = node.get("properties", {}).get("kind", {})
    if "const" in kind:
        return kind["const"]
    enum = kind.get("enum")
    return enum[0] if enum and len(enum) == 1 else None


def _op_schema(kind: str) -> dict:
    """The op model of one family, wherever the schema puts the union (oneOf, anyOf, if/then)."""
    seen: list[dict] = []

    def visit(node):
        if isinstance(node, dict):
            if "$ref" in node:
                node = _resolve(node)
            if _kind_of(node) == kind:
                seen.append(node)
                return
            for v in node.values():
                visit(v)
        elif isinstance(node, list):
            for v in node:
                visit(v)

    visit(_schema()["properties"]["op"])
    assert seen, f"no op model of kind {kind!r} in the schema"
    return max(seen, key=lambda n: len(n.get("properties", {})))   # the model, not an if: {kind: const} test


def _schedule_schema(kind: str) -> dict:
    """The schedule model of one family: the `then` of the root's `if` op.kind is `kind` (the spec is a union on
    op.kind)."""
    for branch in _schema().get("allOf", ()):
        if branch["if"]["properties"]["op"]["properties"]["kind"].get("const") == kind:
            return branch["then"]["properties"]["schedule"]
    raise AssertionError(f"no schedule model of kind {kind!r} in the schema")


def _section_schema(name: str, sub: dict, kind: str) -> dict:
    """The schema of a top-level section of a spec of `kind` (op and schedule: the family's models)."""
    return _op_schema(kind) if name == "op" else _schedule_schema(kind) if name == "schedule" else sub


@dataclass(frozen=True)
class Mutation:
    path: tuple            # where the value goes (field names, mapping keys, list indices)
    value: Any

    @property
    def field(self) -> str:
        return format_path(self.path)


def _ints(alt: dict, cur: Any) -> list[int]:
    lo, hi = alt.get("minimum", 0), alt.get("maximum", 1 << 31)
    if isinstance(cur, int) and not isinstance(cur, bool):
        cands = [cur - 1, cur + 1, cur * 2, cur // 2, lo]
    else:
        cands = [lo, lo + 1, 2 * max(lo, 1), 64]
    out = []
    for c in cands:
        if lo <= c <= hi and c != cur and c not in out:
            out.append(c)
    return out


def _names(alt: dict, cur: Any) -> list[str]:
    pattern = alt.get("pattern")
    out = [n for n in NAMES if n != cur and (pattern is None or re.search(pattern, n))]
    return out if cur is None else out[:1]


def _first_value(node: dict) -> Any:
    """One legal value of a schema that has no current value (an element to add to a list)."""
    for alt in _alternatives(node):
        t = alt.get("type")
        if "enum" in alt or "const" in alt:
            return alt.get("enum", [alt.get("const")])[0]
        if t == "integer":
            return max(alt.get("minimum", 1), 1)
        if t == "string":
            return NAMES[0]
        if t == "boolean":
            return True
        if t == "number":
            return 0.5
        if t == "array":
            first = _first_value(alt.get("items", {}))
            return None if first is None else [first] * max(alt.get("minItems", 1), 1)
    return None


def mutations(node: dict, path: tuple, cur: Any) -> Iterator[Mutation]:
    """Every mutation of the value `cur` (the validated spec's, defaults filled in) of a field of schema `node`."""
    alts = _alternatives(node)
    for alt in alts:
        t = alt.get("type")
        if "const" in alt or "enum" in alt:
            for v in alt.get("enum", [alt.get("const")]):
                if v != cur or type(v) is not type(cur):
                    if not (v == cur and type(v) is type(cur)):
                        yield Mutation(path, v)
        elif t == "null":
            if cur is not None:
                yield Mutation(path, None)
        elif t == "boolean":
            if isinstance(cur, bool):
                yield Mutation(path, not cur)
            else:   # a boolean the planner picks when absent: both values (one of them may be its pick)
                yield Mutation(path, True)
                yield Mutation(path, False)
        elif t == "integer":
            for v in _ints(alt, cur):
                yield Mutation(path, v)
        elif t == "number":
            if isinstance(cur, float) or cur is None:
                yield Mutation(path, cur * 2 if cur else 0.5)
        elif t == "string":
            if cur is None or isinstance(cur, str):
                for v in _names(alt, cur):
                    yield Mutation(path, v)
        elif t == "array":
            yield from _list_mutations(alt, path, cur)
        elif t == "object" or "properties" in alt:
            yield from _object_mutations(alt, path, cur)


def _list_mutations(alt: dict, path: tuple, cur: Any) -> Iterator[Mutation]:
    lo, hi = alt.get("minItems", 0), alt.get("maxItems", 8)
    items = alt.get("items", {})
    if not isinstance(cur, list):
        if cur is None:
            first = _first_value(items)
            if first is not None:
                yield Mutation(path, [first] * max(lo, 1))
        return
    for i, v in enumerate(cur):
        for m in mutations(items, (*path, i), v):
            new = list(cur)
            new[i] = m.value
            yield Mutation(m.path, new)     # the whole list, so that a default list is written out
    if len(cur) > lo:
        yield Mutation(path, cur[:-1])
    if len(cur) < hi:
        if cur:
            yield Mutation(path, [*cur, cur[-1]])
        else:
            for name in NAMES if _first_value(items) == NAMES[0] else [_first_value(items)]:
                yield Mutation(path, [name])


def _object_mutations(alt: dict, path: tuple, cur: Any) -> Iterator[Mutation]:
    if cur is None:
        if not alt.get("required"):
            yield Mutation(path, {})          # the section written with its defaults
        return
    if not isinstance(cur, dict):
        return
    props = alt.get("properties")
    if props:
        for name, sub in props.items():
            if name in cur:
                yield from mutations(sub, (*path, name), cur[name])
        return
    extra = alt.get("additionalProperties")
    if isinstance(extra, dict):
        for key, value in cur.items():
            yield from mutations(extra, (*path, key), value)
        value_schema = _alternatives(extra)[0]
        if NEW_KEY in cur:
            return
        for key in _ENTRY_KEYS.get(path, ()):    # an entry for an operand the spec gives none
            if key not in cur:
                entry = {r: _first_value(value_schema["properties"][r]) for r in value_schema.get("required", ())}
                yield Mutation((*path, key), entry)
        if value_schema.get("type") == "object":
            required = value_schema.get("required", ())
            entry = {r: _first_value(value_schema["properties"][r]) for r in required}
            if all(v is not None for v in entry.values()):
                yield Mutation((*path, NEW_KEY), entry)
        elif _first_value(extra) is not None:
            yield Mutation((*path, NEW_KEY), _first_value(extra))


_ENTRY_KEYS: dict[tuple, tuple] = {}   # mapping path -> keys of new entries to try (the spec's operand names)


def spec_mutations(spec) -> Iterator[Mutation]:
    root = _schema()
    # a BlockSpec's key names an operand: try one for each operand the spec leaves to the planner
    _ENTRY_KEYS.clear()
    _ENTRY_KEYS.update({("schedule", "in_specs"): tuple(spec.op.inputs), ("schedule", "out_specs"): tuple(spec.op.outputs)})
    cur = spec.model_dump()
    for name, sub in root["properties"].items():
        yield from mutations(_section_schema(name, sub, spec.op.kind), (name,), cur.get(name))


# ------------------------------------------------------------------------------------------------ building


def _assign(data: dict, m: Mutation) -> dict:
    """A copy of the file's data with `m.value` at `m.path` (missing sections created; a list is written whole)."""
    out = copy.deepcopy(data)
    path = _group(m)
    node = out
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[path[-1]] = m.value
    return out


KERNEL = "<kernel>"             # every kernel's name in the products compared (normalize)


def normalize(text: str, kernel_name: str) -> str:
    """`text` with the kernel's name (and the names made from it: `<name>_pre`) written as KERNEL: kernel names
    carry field values (map_<spec>_<block>_wg<n>), so a field that only renames the kernel would otherwise count as
    changing it (issue 42: schedule.num_warpgroups on the Pallas map and rowwise kernels was silent that way)."""
    return text.replace(kernel_name, KERNEL) if kernel_name else text


def products(p) -> dict[str, str]:
    """What a build of the plan gives each backend: the rendered source, and the part of the launch record that
    backend's call path reads (CUDA: all of it; Pallas: the operands and sizes its arguments are checked against),
    the kernel's name normalized (`normalize`)."""
    record = json.loads(launch_record(p).to_json())
    read = {"cuda": record, "pallas": {k: record[k] for k in PALLAS_READS}}
    return {b: normalize(render(p, b) + "\n# launch.json\n" + json.dumps(read[b], sort_keys=True),
                         p.launch.kernel_name) for b in p.launch.backends}


@dataclass
class Outcome:
    mutation: Mutation
    kind: str                  # "changed" | "problems" | "alias" | "silent" | "crash" | "unlocated"
    detail: str = ""
    same: tuple = ()           # a silent one: the backends whose products did not change


def _built(data, src):
    spec = validate_data(data, src)
    return spec, products(plan(spec, src))


def check_spec(path: Path):
    """The spec and the outcome of each of its mutations."""
    data, src = load_file(str(path))
    return check_data(data, src)


def check_data(data: dict, src, skip: tuple = ()):
    """The spec of `data` and the outcome of each of its mutations (but those under the path `skip`)."""
    spec = validate_data(data, src)
    base = products(plan(spec, src))
    dump = spec.model_dump()
    outcomes = []
    seen: set = set()
    for m in spec_mutations(spec):
        key = (m.path, repr(m.value))
        if key in seen or (skip and m.path[:len(skip)] == skip):
            continue
        seen.add(key)
        new = _assign(data, m)
        try:
            new_spec, got = _built(new, src)
        except SpecErrors as exc:
            unlocated = not exc.problems or any(not p.path and p.pos is None for p in exc.problems)
            outcomes.append(Outcome(m, "unlocated" if unlocated else "problems",
                                    exc.lines()[0] if exc.problems else "planning failed with no problem"))
            continue
        except Exception as exc:   # noqa: BLE001  (a crash is what the test reports)
            outcomes.append(Outcome(m, "crash", f"{type(exc).__name__}: {exc}"))
            continue
        same = [b for b in got if b in base and got[b] == base[b]]
        if same and _at(new_spec.model_dump(), _group(m)) == _at(dump, _group(m)):
            outcomes.append(Outcome(m, "alias"))    # a spelling the model reads as the current value (bfloat16)
            continue
        outcomes.append(Outcome(m, "silent" if same else "changed", ", ".join(same), same))
    return spec, outcomes


def modes(stem: str) -> list[Mutation]:
    """The spec's other modes: each scalar field (a boolean, an enum member, a schedule's integer; dtypes and sizes
    aside) it plans with another value of, e.g. epilogue.store: direct, pipeline.kind: none, persistent.loop: none,
    op.causal, pipeline.num_compute_wgs: 1. A field may be read in one mode and not
    in another (the epilogue's tile with store: direct), so every field is probed again in each mode."""
    _, outcomes = outcomes_of(stem)
    return [o.mutation for o in outcomes if o.kind == "changed" and o.mutation.path[0] in ("schedule", "op")
            and o.mutation.path[-1] != "dtype"
            and (isinstance(o.mutation.value, bool) or (isinstance(o.mutation.value, int) and
                                                        o.mutation.path[0] == "schedule") or
                 (isinstance(o.mutation.value, str) and o.mutation.value not in NAMES))]


@functools.cache
def mode_outcomes(path: Path) -> list[tuple]:
    """(mode, spec, outcomes) of every other mode of the spec (cached: the mode tests and the allowance check)."""
    data, src = load_file(str(path))
    return [(mode, *check_data(_assign(data, mode), src, skip=_group(mode))) for mode in modes(path.stem)]


def mode_failures(path: Path) -> list[str]:
    out = []
    for mode, spec, outcomes in mode_outcomes(path):
        out += [f"[{mode.field} = {mode.value!r}] {line}" for line in failures_of(path.stem, spec, outcomes)]
    return out


@functools.cache
def outcomes_of(stem: str) -> tuple:
    """(spec, outcomes) of the bundled spec `stem` (cached: each spec's walk is seconds; a test of one spec walks
    that spec alone)."""
    return check_spec(next(p for p in SPECS if p.stem == stem))


def all_outcomes() -> dict[str, tuple]:
    return {p.stem: outcomes_of(p.stem) for p in SPECS}


def _group(m: Mutation) -> tuple:
    """The field a mutation belongs to: its path without list indices (a list is mutated whole)."""
    path = m.path
    while path and isinstance(path[-1], int):
        path = path[:-1]
    return path


def _at(tree: Any, path: tuple) -> Any:
    for part in path:
        if isinstance(tree, dict) and part in tree:
            tree = tree[part]
        else:
            return None
    return tree


def failures(stem: str) -> list[str]:
    spec, outcomes = outcomes_of(stem)
    return failures_of(stem, spec, outcomes)


def failures_of(stem: str, spec, outcomes: list[Outcome]) -> list[str]:
    """Each mutation the test fails on: silent and not allowed, a crash, or problems with no location."""
    dump = spec.model_dump()
    effective = {_group(o.mutation) for o in outcomes if o.kind in ("changed", "problems")}
    picks: dict[tuple, int] = {}    # silent values of a field the planner picks: the pick is one of them
    out = []
    for o in outcomes:
        m = o.mutation
        if o.kind in ("changed", "problems", "alias"):
            continue
        if o.kind == "silent":
            if allowed(stem, spec, m, list(o.same)):
                continue
            if m.value in PICKS and _group(m) in effective:
                continue   # the spec's value is the planner's pick (other values of the field change the kernel)
            if _at(dump, _group(m)) in PICKS and _group(m) in effective:
                picks[_group(m)] = picks.get(_group(m), 0) + 1
                if picks[_group(m)] == 1:
                    continue   # the value the planner picks, written out (one value can be it, not two)
        out.append(f"{stem}: {m.field} = {m.value!r}: {o.kind}"
                   f"{' (' + o.detail + ' unchanged)' if o.kind == 'silent' else ': ' + o.detail}")
    return out


# ------------------------------------------------------------------------------------------------ the tests
# One xdist worker runs them all (scripts/test.sh: --dist loadfile): the walks are cached in the process, and the
# allowance check needs every spec's walk in every mode (the mode tests' own work): spread over workers, each did
# that work again.


@pytest.mark.parametrize("stem", [p.stem for p in SPECS])
def test_every_field_changes_every_backend_or_is_a_located_error(stem):
    bad = failures(stem)
    assert not bad, "silently accepted (make the field work, or report it where it is set):\n" + "\n".join(bad)


# The mode walk re-probes every field in each other mode of a spec (quadratic in the fields): the default run walks
# the modes of one or two specs a family (each family's schedule forms: static and dynamic sizes, fp8 and block
# scales, sm_100a, causal and GQA, each rowwise kind); the other specs' modes are the slow campaign (--slow).
MODE_SPECS = ("add_bf16", "scale_f32", "matmul_bf16_4096", "matmul_bf16_dynamic", "matmul_fp8_blockscaled_4096x7168x16384",
              "matmul_bf16_4096_sm100", "attention_bf16_4096", "attention_gqa_causal_bf16_dynamic",
              "attention_backward_bf16_4096", "layernorm_bf16", "crossentropy_bf16", "softmax_bf16",
              "grouped_moe_mixtral_bf16_train", "collective_matmul_bf16_1024x4096")


@pytest.mark.parametrize("stem", [p.stem if p.stem in MODE_SPECS else pytest.param(p.stem, marks=pytest.mark.slow)
                                  for p in SPECS])
def test_every_field_in_every_mode_of_the_spec(stem):
    assert modes(stem), "no other mode planned"
    bad = mode_failures(ROOT / "specs" / next(p.name for p in SPECS if p.stem == stem))
    assert not bad, "silently accepted in a mode of the spec:\n" + "\n".join(bad)


@pytest.mark.parametrize("kind", sorted(families.kinds()))
def test_every_field_of_the_schema_is_mutated(kind):
    """The walk reaches every field the schema gives the family (a new field is probed without editing this file)."""
    assert any(spec.op.kind == kind for spec, _ in all_outcomes().values()), f"no bundled {kind} spec"
    assert not uncovered(kind)


def test_the_default_mode_walk_covers_every_family():
    kinds = {outcomes_of(stem)[0].op.kind for stem in MODE_SPECS}
    assert kinds == set(families.kinds()), sorted(set(families.kinds()) - kinds)


@pytest.mark.slow    # it needs every mode of every spec: the slow campaign's walk
def test_every_allowance_is_used():
    """A stale entry of ALLOWED (the field now changes the kernel, or is an error) is a defect of this file."""
    used = set()
    runs = [(stem, spec, outcomes) for stem, (spec, outcomes) in all_outcomes().items()]
    runs += [(p.stem, spec, outcomes) for p in SPECS for _, spec, outcomes in mode_outcomes(p)]   # an entry may
    for stem, spec, outcomes in runs:                                                            # serve a mode only
        for o in outcomes:
            if o.kind == "silent":
                for i, (spec_pat, path_pat, when, _) in enumerate(ALLOWED):
                    if fnmatch.fnmatchcase(stem, spec_pat) and fnmatch.fnmatchcase(o.mutation.field, path_pat) \
                            and (when is None or when(spec, o.mutation, list(o.same))):
                        used.add(i)
    assert sorted(set(range(len(ALLOWED))) - used) == [], [ALLOWED[i][:2] for i in range(len(ALLOWED)) if i not in used]


def test_the_probe_reports_a_field_no_kernel_reads(monkeypatch):
    """Without the map family's table of unread values, planar_snake's shape without planar_snake is silent again,
    and this test says so (the probe can fail). (The fields the map schedule does not have, as the matmul's register
    budgets and epilogue, are unknown keys: test_42_family_fields.)"""
    from schedgen.families.map import unread
    monkeypatch.setattr(unread, "TABLE", unread.UnreadTable("map"))
    path = ROOT / "specs" / "add_bf16.yaml"
    spec, outcomes = check_spec(path)
    bad = failures_of(path.stem, spec, outcomes)
    for field in ("schedule.persistent.minor_dim", "schedule.persistent.tile_width"):
        assert any(f": {field} = " in line and ": silent (cuda, pallas unchanged)" in line for line in bad), bad


def test_a_crash_and_an_unlocated_error_are_failures(monkeypatch):
    import schedgen.families.map.plan as map_plan
    real = map_plan._plan_sync

    def broken(sch, *args):
        if sch.pipeline.max_concurrent_steps == 5:
            raise RuntimeError("planner bug")
        if sch.pipeline.max_concurrent_steps == 3:
            return None
        return real(sch, *args)

    monkeypatch.setattr(map_plan, "_plan_sync", broken)
    path = ROOT / "specs" / "add_bf16.yaml"
    bad = failures_of(path.stem, *check_spec(path))
    assert any("max_concurrent_steps = 5: crash: RuntimeError: planner bug" in line for line in bad), bad
    assert any("max_concurrent_steps = 3: crash" in line or "max_concurrent_steps = 3: unlocated" in line
               for line in bad), bad


if __name__ == "__main__":
    for p in SPECS:
        for line in failures(p.stem) + mode_failures(p):
            print(line)


# ------------------------------------------------------------------------------------------------ coverage


def schema_fields(node: dict, path: tuple = ()) -> Iterator[tuple]:
    """Every field of a schema as a path ('*' for any key of a mapping); a list is one field."""
    leaf = True
    alts = _alternatives(node)
    if all("const" in a or len(a.get("enum", ())) == 1 for a in alts):
        return   # one legal value (op.kind): nothing to mutate
    for alt in alts:
        if alt.get("properties"):
            leaf = False
            for name, sub in alt["properties"].items():
                yield from schema_fields(sub, (*path, name))
        elif isinstance(alt.get("additionalProperties"), dict):
            leaf = False
            yield from schema_fields(alt["additionalProperties"], (*path, "*"))
    if leaf:
        yield path


def _generic(path: tuple, spec) -> tuple:
    """A mutation's path with mapping keys as '*' (the keys of in_specs, sizes, ...: whatever the spec names)."""
    out, node = [], _schema()
    for part in path:
        if not out and part in ("op", "schedule"):
            out.append(part)
            node = _section_schema(part, {}, spec.op.kind)
            continue
        alts = _alternatives(node) if node else []
        props = next((a["properties"] for a in alts if a.get("properties") and part in a["properties"]), None)
        if props is not None:
            out.append(part)
            node = props[part]
            continue
        extra = next((a["additionalProperties"] for a in alts if isinstance(a.get("additionalProperties"), dict)),
                     None)
        if extra is not None:
            out.append("*")
            node = extra
            continue
        out.append(part)
        node = None
    return tuple(out)


def uncovered(kind: str) -> list[str]:
    """The fields of a family's specs that no bundled spec of the family had mutated (nor replaced as a whole)."""
    root = _schema()
    fields = set()
    for name, sub in root["properties"].items():
        fields.update(schema_fields(_section_schema(name, sub, kind), (name,)))
    mutated = set()
    for spec, outcomes in all_outcomes().values():
        if spec.op.kind != kind:
            continue
        for o in outcomes:
            g = _generic(_group(o.mutation), spec)
            mutated.add(g)
    out = []
    for f in sorted(fields, key=str):
        if f in mutated or any(f[:i] in mutated for i in range(1, len(f))):   # or replaced whole
            continue
        out.append(format_path(f))
    return out
