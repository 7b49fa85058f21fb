"""Tuning: a schedule file's `tune` section -> candidates -> plan-stage pruning -> parallel compile -> timed runs
-> the tuning database (tunedb.py) -> the best schedule per shape.

    space   = load_space(path, overrides)     # knobs (field paths or family aliases) and constraints, checked
    pruning = prune(space)                    # expand; drop what the constraints or the plan stage reject
    result  = tune(path, overrides, runner=...)

A knob is a field path (`schedule.pipeline.max_concurrent_steps`, `schedule.in_specs.b.block_shape[1]`) or an
alias the family defines for fields that must move together (`tile_n` sets the rhs BlockSpec's N and the output
BlockSpec's N). Constraints are comparisons over knob names and the op's sizes (`tile_m * tile_n <= 32768`).
docs/tuning.md has the whole story.

Candidates that pass the plan stage are compiled in a pool of processes (NVRTC, CPU only) while the runner
measures the ones already built, so compiling overlaps measuring. The runner is pluggable: the default one
(`WorkerRunner()`) times each kernel on the GPU in one long-lived worker process with a timeout per candidate;
a kernel that hangs or faults is recorded as such, the worker is replaced, and tuning goes on. Tests pass a
runner whose functions return synthetic times, raise, or sleep past the timeout.
"""
from __future__ import annotations

import ast
import itertools
import math
import multiprocessing
import operator
import os
import re
import signal
import time
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import yaml

from .cache import Cache, digest, key_of
from .errors import Problem, SourceMap, SpecErrors, ToolchainError, format_path
from .frontend import expr as ex
from .frontend.load import load_file
from .frontend.specfile import SpecFile
from .frontend.validate import apply_overrides, validate_data
from .tunedb import TuneDB, canonical, now

DEFAULT_TIMEOUT = 30.0          # seconds per candidate run (a healthy one takes well under a second)
VERIFY_TIMEOUT = 600.0
START_TIMEOUT = 300.0           # the worker's imports and CUDA context
VERIFY_TOP = 5                  # winners tried in turn until one matches numpy


# ============================================================================================== knobs


@dataclass(frozen=True)
class Target:
    """One field a knob sets: the whole value at `path`, or its list entry `index` (negative: from the end)."""
    path: tuple[str, ...]
    index: int | None = None

    def __str__(self) -> str:
        return ".".join(self.path) + ("" if self.index is None else f"[{self.index}]")


@dataclass(frozen=True)
class Knob:
    key: str                    # as written under tune.params
    name: str                   # how constraints (and tables) refer to it
    values: tuple
    targets: tuple[Target, ...]
    alias: bool

    @property
    def kind(self) -> str:
        """'int', 'str' or 'other': which constraints can use it."""
        if all(isinstance(v, (int, bool)) for v in self.values):
            return "int"
        if all(isinstance(v, str) for v in self.values):
            return "str"
        return "other"


def _bs(*parts: str) -> tuple[str, ...]:
    return ("schedule", *parts)


def matmul_aliases(spec: SpecFile) -> dict[str, tuple[Target, ...]]:
    """The matmul family's knobs that tie several fields (absent BlockSpecs are skipped when resolving)."""
    op, sch = spec.op, spec.schedule
    out = next(iter(op.outputs))
    a, b, o = _bs("in_specs", op.lhs, "block_shape"), _bs("in_specs", op.rhs, "block_shape"), \
        _bs("out_specs", out, "block_shape")
    m_a, k_a = (-1, -2) if op.transpose_lhs else (-2, -1)
    k_b, n_b = (-1, -2) if op.transpose_rhs else (-2, -1)
    stages = (Target(_bs("pipeline", "max_concurrent_steps")),) + tuple(
        Target(_bs("barriers", nm, "num_barriers")) for nm in ("full", "empty") if nm in sch.barriers)
    return {
        "tile_m": (Target(a, m_a), Target(o, -2)),
        "tile_n": (Target(b, n_b), Target(o, -1)),
        "tile_k": (Target(a, k_a), Target(b, k_b)),
        "stages": stages,
        "consumers": (Target(_bs("pipeline", "num_compute_wgs")),),
        "wg_axis": (Target(_bs("pipeline", "wg_axis")),),
        "cluster_m": (Target(_bs("cluster"), 0),),
        "cluster_n": (Target(_bs("cluster"), 1),),
        "delay_release": (Target(_bs("in_specs", op.lhs, "delay_release")),
                          Target(_bs("in_specs", op.rhs, "delay_release"))),
        "epilogue_m": (Target(_bs("epilogue", "tile"), 0),),
        "epilogue_n": (Target(_bs("epilogue", "tile"), 1),),
        "epilogue_buffers": (Target(_bs("epilogue", "buffers")),),
        "epilogue_store": (Target(_bs("epilogue", "store")),),
        "tile_order": (Target(_bs("persistent", "tile_order")),),
        "minor_dim": (Target(_bs("persistent", "minor_dim")),),
        "tile_width": (Target(_bs("persistent", "tile_width")),),
        "num_blocks": (Target(_bs("persistent", "num_blocks")),),
    }


def map_aliases(spec: SpecFile) -> dict[str, tuple[Target, ...]]:
    """The map family: `block_<size>` ties every block dimension that runs along that output dimension (broadcast
    dimensions keep their 1), plus the pipeline and loop knobs."""
    op, sch = spec.op, spec.schedule
    out_shape = list(next(iter(op.outputs.values())).shape)
    rank = len(out_shape)
    aliases: dict[str, tuple[Target, ...]] = {}
    for d, dim in enumerate(out_shape):
        targets = []
        for group, operands in (("in_specs", op.inputs), ("out_specs", op.outputs)):
            for nm, operand in operands.items():
                r = len(operand.shape)
                di = d - (rank - r)
                if di >= 0 and operand.shape[di] == dim and dim != 1:
                    targets.append(Target(_bs(group, nm, "block_shape"), di - r))
        aliases[f"block_{dim}" if isinstance(dim, str) else f"block_{d}"] = tuple(targets)
    aliases["stages"] = (Target(_bs("pipeline", "max_concurrent_steps")),) + (
        (Target(_bs("barriers", "full", "num_barriers")),) if "full" in sch.barriers else ())
    aliases["warpgroups"] = (Target(_bs("num_warpgroups")),)
    for f in ("tile_order", "minor_dim", "tile_width", "num_blocks"):
        aliases[f] = (Target(_bs("persistent", f)),)
    return aliases


ALIASES: dict[str, Callable[[SpecFile], dict[str, tuple[Target, ...]]]] = {"matmul": matmul_aliases,
                                                                           "map": map_aliases}


def _parse_key(key: str) -> tuple[tuple[str, ...], int | None] | None:
    """`a.b.c[1]` -> (('a', 'b', 'c'), 1); None when only the last part is not the one indexed."""
    parts = key.split(".")
    for p in parts[:-1]:
        if "[" in p:
            return None
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[[0-9]+\])?)", parts[-1])
    if not m:
        return None
    index = int(m.group(2)[1:-1]) if m.group(2) else None
    return tuple(parts[:-1]) + (m.group(1),), index


def _short_name(key: str) -> str:
    last = key.split(".")[-1]
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([0-9]+)\]", last)
    return f"{m.group(1)}_{m.group(2)}" if m else last


def _lookup(base: Any, path: Sequence[str]) -> tuple[bool, Any]:
    node = base
    for part in path:
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return False, None
    return True, node


def resolve_knobs(spec: SpecFile, problems: list[Problem]) -> list[Knob]:
    """tune.params -> knobs, each with the fields it sets (checked against the spec: fields exist, list entries are
    in range, no two knobs set one field)."""
    assert spec.tune is not None
    base = spec.model_dump(mode="python")
    aliases = ALIASES.get(spec.op.kind, lambda s: {})(spec)
    knobs: list[Knob] = []
    owner: dict[tuple, str] = {}
    short = [_short_name(k) for k in spec.tune.params if "." in k]
    for key, values in spec.tune.params.items():
        where = ("tune", "params", key)
        if not values:
            problems.append(Problem(where, "give at least one value"))
            continue
        values = tuple(dict.fromkeys((type(v), v) for v in values))  # dedupe, keeping 1 and true apart
        values = tuple(v for _, v in values)
        if "." not in key and "[" not in key:
            if key not in aliases:
                problems.append(Problem(where, f"'{key}' is neither a field path (e.g. schedule.pipeline."
                                               f"max_concurrent_steps) nor a knob of the {spec.op.kind} family "
                                               f"({', '.join(aliases) or 'none'})"))
                continue
            wanted, name, alias = aliases[key], key, True
        else:
            parsed = _parse_key(key)
            if parsed is None:
                problems.append(Problem(where, "only the last part of a field path may be indexed, e.g. "
                                               "schedule.in_specs.b.block_shape[1]"))
                continue
            wanted, name, alias = (Target(*parsed),), _short_name(key), False
            if short.count(name) > 1:
                name = key  # ambiguous short name: tables show the path; constraints cannot name it
        targets = []
        for t in wanted:
            found, value = _lookup(base, t.path)
            if not found and alias and t.path[1] in ("in_specs", "out_specs"):
                continue  # an absent BlockSpec: the planner's default, nothing to keep in step
            if not found:
                problems.append(Problem(where, f"{key}: the spec has no field {format_path(t.path)}"))
                continue
            if t.index is not None:
                if value is None:
                    problems.append(Problem(where, f"{key}: {format_path(t.path)} is not set in the spec; write it "
                                                   f"out (e.g. {format_path(t.path)}: [64, 64]) to tune its entries"))
                    continue
                if not isinstance(value, list):
                    problems.append(Problem(where, f"{key}: {format_path(t.path)} is not a list"))
                    continue
                idx = t.index if t.index >= 0 else len(value) + t.index
                if idx < 0 or (idx >= len(value) and t.path[-1] != "cluster"):
                    problems.append(Problem(where, f"{key}: {format_path(t.path)} has {len(value)} entries; no "
                                                   f"entry [{t.index}]"))
                    continue
                t = Target(t.path, idx)
            clash = next((k for (p, i), k in owner.items()
                          if p == t.path and (i == t.index or i is None or t.index is None)), None)
            if clash:
                problems.append(Problem(where, f"{key} and {clash} both set {t}; tune it through one knob"))
                continue
            owner[(t.path, t.index)] = key
            targets.append(t)
        if not targets and not any(p.path == where for p in problems):
            problems.append(Problem(where, f"{key}: no field of this spec to set (write the BlockSpecs it ties)"))
            continue
        knobs.append(Knob(key, name, values, tuple(targets), alias))
    return knobs


def field_overrides(base: Mapping, knobs: Sequence[Knob], values: Sequence[Any]) -> dict[str, Any]:
    """Whole-field overrides (dotted path -> value) for one point of the space; list fields are copied from the
    base spec and the knobs' entries replaced (a cluster is padded with 1s)."""
    out: dict[tuple, Any] = {}
    for knob, value in zip(knobs, values):
        for t in knob.targets:
            if t.index is None:
                out[t.path] = value
                continue
            if t.path not in out:
                out[t.path] = list(_lookup(base, t.path)[1])
            lst = out[t.path]
            while len(lst) <= t.index:
                lst.append(1)
            lst[t.index] = value
    return {".".join(p): v for p, v in out.items()}


# ============================================================================================== constraints


_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
        ast.NotEq: operator.ne}
_CONSTRAINT_HELP = ("a constraint is a comparison of integer expressions over knob names and sizes, e.g. "
                    "'tile_m * tile_n <= 32768'; join comparisons with and / or / not; string knobs compare with "
                    "== and != against quoted strings")


@dataclass(frozen=True)
class Constraint:
    text: str
    test: Callable[[Mapping[str, Any]], bool]
    names: frozenset


def parse_constraint(text: str, int_names: Sequence[str], str_names: Sequence[str]) -> Constraint:
    """Parse one constraint with Python's ast; every arithmetic operand goes through the schedule files'
    integer-expression whitelist (spec/expr.py). Raises ExprError (column inside `text`)."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as err:
        raise ex.ExprError(f"syntax error: {err.msg}; {_CONSTRAINT_HELP}", max(0, (err.offset or 1) - 1)) from None
    used: set[str] = set()

    def operand(node: ast.expr) -> tuple[str, Callable]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
            return "str", lambda env: value
        if isinstance(node, ast.Name) and node.id in str_names:
            name = node.id
            used.add(name)
            return "str", lambda env: env[name]
        seg = ast.get_source_segment(text, node) or ""
        try:
            e = ex.parse_int_expr(seg, names=list(int_names))
        except ex.ExprError as err:
            raise ex.ExprError(err.message, node.col_offset + err.col) from None
        used.update(e.names)
        return "int", lambda env: ex.eval_int(e, env)

    def build(node: ast.expr) -> Callable[[Mapping[str, Any]], bool]:
        if isinstance(node, ast.BoolOp):
            parts = [build(v) for v in node.values]
            if isinstance(node.op, ast.And):
                return lambda env: all(p(env) for p in parts)
            return lambda env: any(p(env) for p in parts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = build(node.operand)
            return lambda env: not inner(env)
        if isinstance(node, ast.Compare):
            sides = [operand(n) for n in [node.left, *node.comparators]]
            ops = []
            for op, (lk, _), (rk, _), rnode in zip(node.ops, sides, sides[1:], node.comparators):
                if type(op) not in _CMP:
                    raise ex.ExprError(f"comparison '{type(op).__name__}' is not allowed; {_CONSTRAINT_HELP}",
                                       rnode.col_offset)
                if lk != rk:
                    raise ex.ExprError("compares a string with a number", rnode.col_offset)
                if lk == "str" and type(op) not in (ast.Eq, ast.NotEq):
                    raise ex.ExprError("strings compare with == and != only", rnode.col_offset)
                ops.append(_CMP[type(op)])
            fns = [f for _, f in sides]
            return lambda env: all(op(a(env), b(env)) for op, a, b in zip(ops, fns, fns[1:]))
        raise ex.ExprError(_CONSTRAINT_HELP, getattr(node, "col_offset", 0))

    return Constraint(text, build(tree.body), frozenset(used))


# ============================================================================================== the space


@dataclass
class Space:
    path: str
    data: dict                  # the file as loaded (plain data)
    src: SourceMap
    spec: SpecFile              # validated, with the user's overrides
    user_overrides: dict
    knobs: list[Knob]
    constraints: list[Constraint]
    spec_key: str

    @property
    def size(self) -> int:
        return math.prod(len(k.values) for k in self.knobs)

    @property
    def sizes(self) -> dict:
        return dict(self.spec.op.sizes)


class NothingToTune(SpecErrors):
    """The spec has no tune section (or no params in it)."""


def config_key(spec: SpecFile) -> str:
    """The identity of one candidate: its resolved spec, sizes included, tune section and description left out."""
    return key_of({"spec": canonical(spec.model_dump(mode="json", exclude={"tune", "description"}))})


def _spec_key(spec: SpecFile, knobs: Sequence[Knob]) -> str:
    data = spec.model_dump(mode="json", exclude={"tune", "description"})
    data["op"].pop("sizes", None)
    for k in knobs:
        for t in k.targets:
            node = data
            for part in t.path[:-1]:
                node = node.get(part, {}) if isinstance(node, dict) else {}
            if isinstance(node, dict):
                node.pop(t.path[-1], None)
    return key_of({"spec": canonical(data)})


def load_space(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Space:
    """Read a spec, its tune section and the user's overrides; raises SpecErrors (located) for any problem."""
    path = str(path)
    overrides = dict(overrides or {})
    data, src = load_file(path)
    base_data, problems = apply_overrides(data, overrides, src) if overrides else (data, [])
    try:
        spec = validate_data(base_data, src)
    except SpecErrors as exc:
        raise SpecErrors(problems + exc.problems, src) from None
    if problems:
        raise SpecErrors(problems, src)
    if spec.tune is None or not spec.tune.params:
        raise NothingToTune([Problem(("tune",) if spec.tune else (), "nothing to tune: add a tune section, e.g. "
                                  "tune: {params: {stages: [3, 4]}} (docs/tuning.md)")], src)
    problems = []
    knobs = resolve_knobs(spec, problems)
    int_names = list(spec.op.sizes) + [k.name for k in knobs if k.kind == "int"]
    str_names = [k.name for k in knobs if k.kind == "str"]
    constraints = []
    for i, text in enumerate(spec.tune.constraints):
        try:
            constraints.append(parse_constraint(text, int_names, str_names))
        except ex.ExprError as err:
            problems.append(Problem(("tune", "constraints", i), err.message, inner_line=err.line, inner_col=err.col))
    if problems:
        raise SpecErrors(problems, src)
    return Space(path, data, src, spec, overrides, knobs, constraints, _spec_key(spec, knobs))


# ============================================================================================== candidates


@dataclass
class Candidate:
    index: int                  # position in the expanded space
    values: dict                # knob name -> value
    overrides: dict             # every field it sets: the user's -D overrides, then the knobs'
    spec: SpecFile | None = None
    plan: Any = None
    config_key: str = ""
    key: str = ""               # the database key (with backend, GPU, driver, toolchain)

    @property
    def label(self) -> str:
        return " ".join(f"{k}={_fmt_value(v)}" for k, v in self.values.items())


def _fmt_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


@dataclass
class PruneGroup:
    stage: str                  # "constraint" | "plan" | "duplicate"
    field: str                  # the field path (plan), the constraint, or "plan"
    message: str
    count: int = 0
    examples: list = field(default_factory=list)   # candidate indices

    def line(self) -> str:
        return f"{self.count} x {self.field}: {self.message}"


@dataclass
class Pruning:
    total: int
    kept: list[Candidate]
    groups: list[PruneGroup]

    @property
    def pruned(self) -> int:
        return sum(g.count for g in self.groups)


def expand(space: Space) -> list[Candidate]:
    base = space.spec.model_dump(mode="python")
    out = []
    for i, combo in enumerate(itertools.product(*(k.values for k in space.knobs))):
        fields = field_overrides(base, space.knobs, combo)
        out.append(Candidate(i, {k.name: v for k, v in zip(space.knobs, combo)}, {**space.user_overrides, **fields}))
    return out


def _normalise(message: str) -> str:
    return re.sub(r"\d+", "#", message)


def summarise(messages: Sequence[str]) -> str:
    """Messages of one template (equal but for their numbers) as one, numbers that vary shown as ranges."""
    parts = [re.split(r"(\d+)", m) for m in messages]
    out = []
    for i, tok in enumerate(parts[0]):
        if i % 2 == 0:
            out.append(tok)
            continue
        vals = sorted({int(p[i]) for p in parts if len(p) > i})
        out.append(str(vals[0]) if len(vals) == 1 else f"{vals[0]}..{vals[-1]}")
    return "".join(out)


def _spec_of(space: Space, cand: Candidate) -> SpecFile:
    data, problems = apply_overrides(space.data, cand.overrides, space.src)
    if problems:
        raise SpecErrors(problems, space.src)
    return validate_data(data, space.src)


def prune(space: Space, *, dedupe: bool = True) -> Pruning:
    """Expand the space and keep what passes the constraints and the plan stage (planning is cheap: no compile).
    Rejections are grouped by field and message (numbers normalised); identical plans are kept once."""
    from . import plan as planner
    cands = expand(space)
    groups: dict[tuple, PruneGroup] = {}
    messages: dict[tuple, list[str]] = {}
    kept: list[Candidate] = []
    seen: dict[str, int] = {}
    sizes = space.sizes

    def drop(stage: str, fld: str, message: str, cand: Candidate) -> None:
        gk = (stage, fld, _normalise(message))
        g = groups.setdefault(gk, PruneGroup(stage, fld, message))
        g.count += 1
        if len(g.examples) < 5:
            g.examples.append(cand.index)
        messages.setdefault(gk, []).append(message)

    for cand in cands:
        env = {**sizes, **cand.values}
        failed = None
        for i, con in enumerate(space.constraints):
            try:
                if not con.test(env):
                    failed = (f"tune.constraints[{i}]", f"{con.text} is false")
            except (ex.ExprError, KeyError, TypeError) as exc:
                failed = (f"tune.constraints[{i}]", f"{con.text}: {exc}")
            if failed:
                break
        if failed:
            drop("constraint", *failed, cand)
            continue
        try:
            spec = _spec_of(space, cand)
            p = planner.plan(spec, space.src)
        except SpecErrors as exc:
            first = exc.problems[0] if exc.problems else Problem((), str(exc))
            drop("plan", format_path(first.path), first.message, cand)
            continue
        cand.spec, cand.plan, cand.config_key = spec, p, config_key(spec)
        if dedupe:
            pk = digest(planner.to_json(p).encode())
            if pk in seen:
                drop("duplicate", "plan", f"the same kernel as another candidate (e.g. #{seen[pk]}): a knob that "
                                          f"changes nothing here", cand)
                continue
            seen[pk] = cand.index
        kept.append(cand)
    out = []
    for gk, g in groups.items():
        g.message = summarise(messages[gk]) if g.stage == "plan" else g.message
        out.append(g)
    out.sort(key=lambda g: (("constraint", "plan", "duplicate").index(g.stage), -g.count))
    return Pruning(len(cands), kept, out)


# ============================================================================================== compiling


def _quiet_worker() -> None:
    """Pool and runner workers leave Ctrl-C to the parent, which stops them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def compile_candidate(spec_path: str, overrides: Mapping[str, Any], cache_root: str | None):
    """Build one candidate (NVRTC; runs in a pool worker): (Built, worker pid, seconds)."""
    from .build import build_spec
    t0 = time.monotonic()
    built = build_spec(spec_path, overrides, cache=Cache(Path(cache_root)) if cache_root else None)
    return built, os.getpid(), time.monotonic() - t0


def default_workers(measuring: bool = True) -> int:
    """Every CPU for a dry run; one left for the GPU worker's launches and timing otherwise."""
    return max(1, (os.cpu_count() or 2) - (1 if measuring else 0))


def compile_pool(workers: int | None = None, measuring: bool = True) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers or default_workers(measuring),
                               mp_context=multiprocessing.get_context("spawn"), initializer=_quiet_worker)


def toolchain_info() -> tuple[dict, str]:
    from .build import toolchain
    from .render import templates_hash
    tools = {k: str(v) for k, v in toolchain().items()}
    tools["templates"] = templates_hash()[:16]
    return tools, key_of(tools)


def result_key(cfg_key: str, backend: str, gpu: str, driver: str, tool_key: str) -> str:
    return key_of({"config": cfg_key, "backend": backend, "gpu": gpu, "driver": driver, "toolchain": tool_key})


# ============================================================================================== runners


@dataclass(frozen=True)
class Result:
    """What a runner says about one candidate."""
    status: str                 # "ok" | "hang" | "fault"
    time_ms: float | None = None
    detail: str = ""
    extra: dict = field(default_factory=dict)


class Runner(Protocol):
    """Measures built candidates. `env` names the machine: gpu, driver (part of every database key)."""
    env: dict

    def start(self) -> None: ...
    def measure(self, built, backend: str) -> Result: ...
    def verify(self, built, backend: str) -> Result: ...     # extra: {"ok": bool, "rel_error": float}
    def close(self) -> None: ...


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else repr(exc)


def _worker_main(conn, setup, measure, verify, options) -> None:
    """The runner's worker: set up once, then run jobs until told to stop. After an exception it reports and exits
    (a CUDA error can leave the context unusable); the parent starts a fresh worker for the next job."""
    _quiet_worker()
    try:
        if setup is not None:
            setup(options)
    except BaseException as exc:
        conn.send(("setup_error", _why(exc)))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        kind, built, backend = msg
        fn = measure if kind == "measure" else verify
        try:
            value = fn(built, backend, options)
        except BaseException as exc:
            conn.send(("error", _why(exc)))
            return
        conn.send(("ok", value))


class WorkerRunner:
    """Runs `measure(built, backend, options) -> {"time_ms": ..}` and `verify(...) -> {"ok": .., "rel_error": ..}`
    in one long-lived spawned worker (a CUDA context does not survive fork), with a timeout per job. A job that
    does not answer in time is recorded as a hang and its worker killed; one whose worker dies or raises is a
    fault; either way the next job gets a fresh worker. The functions must be importable (module level)."""

    def __init__(self, measure: Callable | None = None, verify: Callable | None = None, *,
                 setup: Callable | None = None, timeout: float = DEFAULT_TIMEOUT,
                 verify_timeout: float = VERIFY_TIMEOUT, start_timeout: float = START_TIMEOUT,
                 options: Mapping[str, Any] | None = None, env: Mapping[str, Any] | None = None):
        default = measure is None
        self.measure_fn = measure or gpu_measure
        self.verify_fn = verify or gpu_verify
        self.setup_fn = setup if setup is not None or not default else gpu_setup
        self.timeout, self.verify_timeout, self.start_timeout = timeout, verify_timeout, start_timeout
        self.options = dict(options or {})
        self.env = dict(env) if env is not None else gpu_environment()
        self.proc = None
        self.conn = None
        self.ready = False
        self.starts = 0

    def start(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            return
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, self.setup_fn, self.measure_fn, self.verify_fn,
                                                             self.options), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.starts += 1

    def _ensure(self) -> None:
        self.start()
        if self.ready:
            return
        if not self.conn.poll(self.start_timeout):
            self._kill()
            raise RuntimeError(f"the runner's worker did not start within {self.start_timeout:g} s")
        try:
            status, value = self.conn.recv()
        except EOFError:
            code = self.proc.exitcode if self.proc else None
            self._kill()
            raise RuntimeError(f"the runner's worker died while starting (exit code {code})") from None
        if status != "ready":
            self._kill()
            raise RuntimeError(f"the runner's worker could not start: {value}")
        self.ready = True

    def _kill(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(10)
        if self.conn is not None:
            self.conn.close()
        self.proc, self.conn, self.ready = None, None, False

    def _call(self, kind: str, built, backend: str, timeout: float) -> Result:
        self._ensure()
        self.conn.send((kind, built, backend))
        if not self.conn.poll(timeout):
            self._kill()
            return Result("hang", detail=f"no answer within {timeout:g} s; the worker was stopped (a kernel that "
                                         f"never completes: check barrier arrival counts and pipeline depth)")
        try:
            status, value = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(10)
            code = self.proc.exitcode
            self._kill()
            return Result("fault", detail=f"the worker process died (exit code {code})")
        if status != "ok":
            self._kill()
            return Result("fault", detail=str(value))
        value = dict(value or {})
        return Result("ok", value.pop("time_ms", None), value.pop("detail", ""), value)

    def measure(self, built, backend: str) -> Result:
        return self._call("measure", built, backend, self.timeout)

    def verify(self, built, backend: str) -> Result:
        return self._call("verify", built, backend, self.verify_timeout)

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive() and self.conn is not None:
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(5)
        self._kill()


# ---------------------------------------------------------------------------------------------- the GPU runner

_GPU: dict = {}     # the worker's state: device inputs of the current operand set, the packaging folder


def gpu_environment() -> dict:
    """GPU name, driver and clocks (nvidia-smi, else the driver API), as the bench rows record them."""
    from .bench import environment
    return environment()


def gpu_setup(options: Mapping[str, Any]) -> None:
    from .runtime import driver
    driver.ensure_context()
    try:
        from .bench import _cupti_ext
        _cupti_ext()            # jax's CUPTI hook, imported once here rather than inside the first timed job
    except Exception:
        pass


def _gpu_kernel(built):
    import tempfile

    from .build import package
    from .plan import to_json
    from .runtime.kernel import load_package
    root = Path(_GPU.setdefault("dir", tempfile.mkdtemp(prefix="schedgen-tune-")))
    return load_package(package(built, root / digest(to_json(built.plan).encode())[:16]))


def gpu_measure(built, backend: str, options: Mapping[str, Any]) -> dict:
    """Time one built candidate (runs in the worker). Device inputs are made once per operand set and reused by
    every candidate of the same op and sizes; big inputs are rotated as `schedgen bench` does."""
    import math as _m

    from . import bench
    from .runtime import driver
    from .reference import random_inputs
    from .verify import device_buffers
    plan = built.plan
    iters, warmup = int(options.get("iters", 30)), int(options.get("warmup", 5))
    kernel = _gpu_kernel(built)
    ident = canonical([[o.name, o.dtype, list(o.shape)] for o in (*plan.inputs, *plan.outputs)])
    if _GPU.get("ident") != ident:
        _GPU.pop("sets", None)
        host = random_inputs(built.spec, plan.sizes, seed=1)
        in_bytes = sum(_m.prod(o.shape) * o.itemsize for o in plan.inputs)
        n = bench.matmul_sets(in_bytes) if plan.family == "matmul" else bench._sets_for(in_bytes)
        _GPU.update(ident=ident, host=host, sets=[device_buffers(plan, host) for _ in range(n)])
    sets = _GPU["sets"]
    if backend == "cuda":
        launchers = [kernel._launcher([b.ptr for b in ins], [b.ptr for b in outs], 0) for ins, outs in sets]
        t = bench.time_stream_fn(lambda i: launchers[i](), len(launchers), warmup=warmup, iters=iters)
        driver.synchronize()
    else:
        t = bench._our_pallas(kernel, plan, _GPU["host"], len(sets), iters=iters, warmup=warmup)
    return {"time_ms": t["time_ms"], "timing": t.get("timing"), "cupti_ms": t.get("cupti_ms"), "sets": len(sets)}


def gpu_verify(built, backend: str, options: Mapping[str, Any]) -> dict:
    """The candidate against the float64 numpy reference (fresh inputs, poisoned outputs)."""
    from .verify import verify_built
    checks = verify_built(built, [backend], kernel=_gpu_kernel(built))
    return {"ok": bool(checks) and all(c.ok for c in checks),
            "rel_error": max((c.rel_error for c in checks), default=None),
            "detail": "; ".join(c.note for c in checks if c.note)}


# ============================================================================================== progress


class Progress:
    """What the tuner tells as it goes (the default says nothing). `compiled` may come from a pool thread."""

    def space(self, space: Space, pruning: Pruning) -> None: ...
    def start(self, to_compile: int, to_measure: int, reused: int, best: dict | None) -> None: ...
    def compiled(self, cand: Candidate, ok: bool) -> None: ...
    def measured(self, cand: Candidate, row: dict, best: dict | None) -> None: ...
    def verifying(self, row: dict) -> None: ...
    def finished(self, best: dict | None) -> None: ...
    def stop(self) -> None: ...


def best_label(row: dict | None) -> str:
    if not row:
        return "best: -"
    rate = f"{row['tflops']:.0f} TFLOP/s" if row.get("tflops") else (f"{row['gbps']:.0f} GB/s" if row.get("gbps")
                                                                      else "")
    knobs = " ".join(f"{k}={_fmt_value(v)}" for k, v in (row.get("knobs") or {}).items())
    return f"best {row['time_ms']:.4f} ms {rate}  {knobs}"


class RichProgress(Progress):
    """Two bars (compile, measure) on stderr, the current best beside the measure bar."""

    def __init__(self, console=None):
        from rich.console import Console
        self.console = console or Console(stderr=True)
        self.bar = None

    def space(self, space: Space, pruning: Pruning) -> None:
        self.console.print(space_text(space, pruning))

    def start(self, to_compile: int, to_measure: int, reused: int, best: dict | None) -> None:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn)
        self.bar = Bar(TextColumn("{task.description:8}"), BarColumn(bar_width=30), MofNCompleteColumn(),
                       TimeElapsedColumn(), TextColumn("[cyan]{task.fields[best]}"), console=self.console,
                       transient=False)
        if reused:
            self.console.print(f"{reused} candidate{'s' if reused != 1 else ''} already in the tuning database "
                               f"(not measured again)")
        self.bar.start()
        self.t_compile = self.bar.add_task("compile", total=to_compile, best="")
        self.t_measure = self.bar.add_task("measure", total=to_measure, best=best_label(best),
                                           visible=to_measure > 0 or best is not None)

    def compiled(self, cand: Candidate, ok: bool) -> None:
        if self.bar is not None:
            self.bar.advance(self.t_compile)

    def measured(self, cand: Candidate, row: dict, best: dict | None) -> None:
        if self.bar is not None:
            self.bar.update(self.t_measure, advance=1, best=best_label(best))
            if row["status"] != "ok":
                self.console.print(f"  #{cand.index} {cand.label}: [red]{row['status']}[/red] {row['detail'][:160]}")

    def verifying(self, row: dict) -> None:
        if self.bar is not None:
            self.bar.update(self.t_measure, best="verifying " + best_label(row))

    def finished(self, best: dict | None) -> None:
        if self.bar is not None:
            self.bar.update(self.t_measure, best=best_label(best) + (" (verified)" if best else ""))

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def space_text(space: Space, pruning: Pruning) -> str:
    knobs = ", ".join(f"{k.name} {list(k.values)}" for k in space.knobs)
    lines = [f"{space.path}: {pruning.total} candidates ({knobs}) at "
             f"{', '.join(f'{k}={v}' for k, v in space.sizes.items())}"]
    if pruning.groups:
        lines.append(f"pruned {pruning.pruned}:")
        lines += [f"  {g.line()}" for g in pruning.groups]
    lines.append(f"{len(pruning.kept)} to build and run")
    return "\n".join(lines)


# ============================================================================================== tuning


@dataclass
class TuneResult:
    space: Space
    pruning: Pruning
    rows: list[dict]            # one per kept candidate that has a result (measured now or found), fastest first
    measured: int
    reused: int
    compiled: int
    best: dict | None           # the fastest candidate that matched numpy
    wall_s: float
    compile_s: float            # from the first compile submitted to the last one done
    dry_run: bool = False
    run_id: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.rows if r["status"] != "ok"]


def _rate(plan, time_ms: float | None) -> dict:
    if not time_ms:
        return {"tflops": None, "gbps": None}
    flops = getattr(plan, "flops", None)
    return {"tflops": flops / (time_ms * 1e-3) / 1e12 if flops else None,
            "gbps": plan.bytes_moved / (time_ms * 1e-3) / 1e9}


def _sort_rows(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["status"] != "ok", r.get("verified") is False,
                                       r["time_ms"] if r.get("time_ms") is not None else math.inf, r["key"]))


def tune(spec_path: str | Path, overrides: Mapping[str, Any] | None = None, *, runner: Runner | None = None,
         db: TuneDB | str | Path | None = None, backend: str = "cuda", workers: int | None = None,
         cache: Cache | str | Path | None = None, retry_failed: bool = False, dry_run: bool = False,
         verify: bool = True, verify_top: int = VERIFY_TOP, progress: Progress | None = None,
         pool: Executor | None = None) -> TuneResult:
    """Tune one spec at one shape: expand, prune, compile in a process pool while `runner` measures what is built,
    store each result at once, then check the fastest against numpy. A rerun measures only candidates the
    database lacks (with `retry_failed`, also those that hung, faulted or failed). Raises SpecErrors for a bad spec
    or tune section; KeyboardInterrupt passes through after what was measured is saved, so the next run resumes.
    `pool` lends an executor for the compiles (kept open; several tunings in one process then share its workers);
    by default one is made for the run."""
    t0 = time.monotonic()
    progress = progress or Progress()
    spec_path = str(spec_path)
    space = load_space(spec_path, overrides)
    if backend not in space.spec.schedule.backends:
        raise ValueError(f"{spec_path}: backend '{backend}' is not among the spec's backends "
                         f"({', '.join(space.spec.schedule.backends)})")
    cache_root = str(cache.root if isinstance(cache, Cache) else cache) if cache is not None else None
    if dry_run:
        pruning = prune(space)
        progress.space(space, pruning)
        return _dry_run(space, pruning, workers, cache_root, progress, t0, pool)
    own_runner = runner is None
    runner = runner or WorkerRunner()
    try:
        if not runner.env.get("gpu"):
            raise RuntimeError("no GPU found to measure on (" + str(runner.env.get("note", "nvidia-smi found none"))
                               + "); `schedgen tune --dry-run` expands, prunes and compiles on the CPU")
        pruning = prune(space)
        progress.space(space, pruning)
        dbh = db if isinstance(db, TuneDB) else TuneDB(db)
        try:
            return _tune(space, pruning, runner, dbh, backend=backend, workers=workers, cache_root=cache_root,
                         retry_failed=retry_failed, verify=verify, verify_top=verify_top, progress=progress, t0=t0,
                         pool=pool)
        finally:
            if not isinstance(db, TuneDB):
                dbh.close()
    finally:
        if own_runner:
            runner.close()


def _tune(space: Space, pruning: Pruning, runner: Runner, dbh: TuneDB, *, backend: str, workers: int | None,
          cache_root: str | None, retry_failed: bool, verify: bool, verify_top: int, progress: Progress,
          t0: float, pool: Executor | None = None) -> TuneResult:
    gpu, driver = str(runner.env.get("gpu")), str(runner.env.get("driver"))
    tools, tool_key = toolchain_info()
    for c in pruning.kept:
        c.key = result_key(c.config_key, backend, gpu, driver, tool_key)
    kept_keys = {c.key for c in pruning.kept}
    known = dbh.lookup(kept_keys)
    todo = [c for c in pruning.kept if c.key not in known or (retry_failed and known[c.key]["status"] != "ok")]
    rows = {k: v for k, v in known.items() if k not in {c.key for c in todo}}
    reused = len(rows)
    run_id = dbh.start_run(spec_file=space.path, spec_name=space.spec.name, spec_key=space.spec_key,
                           shape=space.sizes, backend=backend, gpu=gpu, candidates=pruning.total,
                           pruned=pruning.pruned)

    def new_row(c: Candidate, **fields) -> dict:
        return {"key": c.key, "config_key": c.config_key, "spec_key": space.spec_key, "spec_name": space.spec.name,
                "spec_file": space.path, "shape": space.sizes, "backend": backend, "gpu": gpu, "driver": driver,
                "toolchain": tools, "toolchain_key": tool_key, "knobs": c.values, "overrides": c.overrides,
                "kernel": getattr(c.plan, "kernel_name", None), "created": now(), **fields}

    def current_best() -> dict | None:
        ok = [r for r in rows.values() if r["status"] == "ok" and r.get("time_ms") is not None
              and r.get("verified") is not False]
        return min(ok, key=lambda r: (r["time_ms"], r["key"])) if ok else None

    measured = compiled = 0
    compile_s = 0.0
    best = None
    status = "failed"
    try:
        progress.start(len(todo), len(todo), reused, current_best())
        if todo:
            t_c = time.monotonic()
            done_at = [t_c]

            def compiled_cb(f, c):
                done_at[0] = time.monotonic()
                if not f.cancelled():
                    progress.compiled(c, f.exception() is None)
            with _lent(pool) if pool is not None else compile_pool(workers) as ex_:
                futs = {}
                try:
                    for c in todo:
                        f = ex_.submit(compile_candidate, space.path, c.overrides, cache_root)
                        f.add_done_callback(lambda f, c=c: compiled_cb(f, c))
                        futs[f] = c
                    runner.start()              # the worker's start-up overlaps the first compiles
                    for f in as_completed(futs):
                        c = futs[f]
                        try:
                            built, _, _ = f.result()
                        except (SpecErrors, ToolchainError) as exc:   # anything else (a broken pool) stops the run
                            row = new_row(c, status="compile_error", detail=_why(exc)[:2000])
                        else:
                            compiled += 1
                            res = runner.measure(built, backend)
                            measured += 1
                            t = res.time_ms if res.status == "ok" else None
                            row = new_row(c, status=res.status, time_ms=t, detail=res.detail[:2000], **_rate(c.plan, t))
                        dbh.put(row)
                        rows[c.key] = dbh.get(c.key)
                        progress.measured(c, rows[c.key], current_best())
                finally:
                    for f in futs:
                        f.cancel()
            compile_s = done_at[0] - t_c
        if rows:
            best = _verify_winner(space.path, pruning.kept, rows, dbh, runner, backend, cache_root, verify,
                                  verify_top, progress)
        progress.finished(best)
        status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        progress.stop()
        dbh.finish_run(run_id, status=status, measured=measured, reused=reused,
                       failed=sum(1 for r in rows.values() if r["status"] != "ok"), wall_s=time.monotonic() - t0,
                       best_key=best["key"] if best else None)
    final = _sort_rows([r for k, r in rows.items() if k in kept_keys])
    return TuneResult(space, pruning, final, measured, reused, compiled, best, time.monotonic() - t0, compile_s,
                      run_id=run_id)


def _verify_winner(spec_path, kept, rows, dbh: TuneDB, runner, backend, cache_root, verify, verify_top, progress):
    """The fastest candidate that matches numpy: the first few in time order are checked until one does."""
    by_key = {c.key: c for c in kept}
    ok = _sort_rows([r for r in rows.values() if r["status"] == "ok" and r.get("time_ms") is not None
                     and r["key"] in by_key])
    if not verify:
        return ok[0] if ok else None
    from .build import build_spec
    for r in ok[:verify_top]:
        if r.get("verified") is True:
            return r
        if r.get("verified") is False:
            continue
        progress.verifying(r)
        c = by_key[r["key"]]
        built = build_spec(spec_path, c.overrides, cache=Cache(Path(cache_root)) if cache_root else None)
        res = runner.verify(built, backend)
        good = res.status == "ok" and bool(res.extra.get("ok"))
        detail = res.detail if res.status == "ok" else f"verification {res.status}: {res.detail}"
        dbh.set_verified(r["key"], good, res.extra.get("rel_error"),
                         "" if good else (detail or "does not match the numpy reference"))
        rows[r["key"]] = dbh.get(r["key"])
        if good:
            return rows[r["key"]]
    return None


class _lent:
    """A lent executor as a context manager that leaves it open."""

    def __init__(self, ex_: Executor):
        self.ex_ = ex_

    def __enter__(self) -> Executor:
        return self.ex_

    def __exit__(self, *exc) -> None:
        pass


def _dry_run(space: Space, pruning: Pruning, workers, cache_root, progress: Progress, t0: float,
             pool: Executor | None = None) -> TuneResult:
    """Expand, prune and compile every candidate; nothing is measured or stored."""
    rows = []
    compile_s = 0.0
    progress.start(len(pruning.kept), 0, 0, None)
    try:
        if pruning.kept:
            t_c = time.monotonic()
            with _lent(pool) if pool is not None else compile_pool(workers, measuring=False) as ex_:
                futs = {ex_.submit(compile_candidate, space.path, c.overrides, cache_root): c for c in pruning.kept}
                for f in as_completed(futs):
                    c = futs[f]
                    row = {"key": c.config_key, "config_key": c.config_key, "index": c.index, "knobs": c.values,
                           "overrides": c.overrides, "kernel": c.plan.kernel_name, "time_ms": None, "detail": ""}
                    try:
                        built, pid, secs = f.result()
                        row.update(status="built", pid=pid, compile_s=secs, cache_hit=built.cache_hit)
                    except (SpecErrors, ToolchainError) as exc:
                        row.update(status="compile_error", detail=_why(exc)[:2000])
                    rows.append(row)
                    progress.compiled(c, row["status"] == "built")
            compile_s = time.monotonic() - t_c
    finally:
        progress.stop()
    rows.sort(key=lambda r: r["index"])
    return TuneResult(space, pruning, rows, 0, 0, sum(r["status"] == "built" for r in rows), None,
                      time.monotonic() - t0, compile_s, dry_run=True)


# ============================================================================================== using the results


def current_gpu() -> str | None:
    """This machine's GPU name by nvidia-smi (no CUDA context is made), or None."""
    import subprocess
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=20)
        names = [line.strip() for line in q.stdout.splitlines() if line.strip()]
        return names[0] if q.returncode == 0 and names else None
    except (OSError, subprocess.SubprocessError):
        return None


def best_known(spec_path: str | Path, overrides: Mapping[str, Any] | None = None, *,
               db: TuneDB | str | Path | None = None, backend: str = "cuda", gpu: str | None = None) -> dict | None:
    """The fastest verified result in the database among this spec's candidates at this shape (its tune section
    expanded and constrained; the plan stage is not needed for the lookup). Rows measured on `gpu` and with the
    current toolchain are preferred when there are any."""
    space = load_space(spec_path, overrides)
    keys = []
    for cand in expand(space):
        env = {**space.sizes, **cand.values}
        try:
            if not all(con.test(env) for con in space.constraints):
                continue
            keys.append(config_key(_spec_of(space, cand)))
        except (SpecErrors, ex.ExprError, KeyError, TypeError):
            continue
    _, tool_key = toolchain_info()
    dbh = db if isinstance(db, TuneDB) else TuneDB(db)
    try:
        return dbh.best(keys, backend, gpu=gpu, toolchain_key=tool_key)
    finally:
        if not isinstance(db, TuneDB):
            dbh.close()


class _Dumper(yaml.SafeDumper):
    """YAML out: multi-line strings (bodies, epilogues) as | blocks."""


def _str_presenter(dumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_presenter)


def export_schedule(spec_path: str | Path, row: Mapping[str, Any], out_path: str | Path) -> Path:
    """Write a result back as a plain schedule file (YAML): the spec with the row's overrides applied and no tune
    section. The written file is loaded and planned again and must give the candidate's exact plan."""
    from . import plan as planner
    from .frontend.validate import load_spec
    out_path = Path(out_path)
    if out_path.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"{out_path}: the export is written as YAML; name it .yaml")
    data, src = load_file(spec_path)
    data, problems = apply_overrides(data, row["overrides"], src)
    if problems:
        raise SpecErrors(problems, src)
    data.pop("tune", None)
    want = planner.to_json(planner.plan(validate_data(data, src), src))
    rate = f"{row['tflops']:.0f} TFLOP/s" if row.get("tflops") else (f"{row['gbps']:.0f} GB/s" if row.get("gbps")
                                                                      else "")
    knobs = " ".join(f"{k}={_fmt_value(v)}" for k, v in (row.get("knobs") or {}).items())
    check = (f"matched numpy (rel. error {row['rel_error']:.2e})" if row.get("verified") and
             row.get("rel_error") is not None else "matched numpy" if row.get("verified") else "NOT verified")
    header = (f"# Tuned by `schedgen tune` from {spec_path}: {row['time_ms']:.4f} ms ({rate}) on {row.get('gpu')}, "
              f"driver {row.get('driver')}, {row.get('backend')} backend; {check}.\n# knobs: {knobs}\n")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(header + yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=None,
                                           width=110, allow_unicode=True))
    spec, src2 = load_spec(str(out_path))
    got = planner.to_json(planner.plan(spec, src2))
    if got != want:
        raise RuntimeError(f"{out_path}: the written schedule plans differently from the tuned candidate")
    return out_path


# ============================================================================================== the final table


def summary(result: TuneResult, top: int = 10, show_pruning: bool = True):
    """A rich renderable: the best candidates, the failures, the pruning (unless the progress already showed it),
    the totals."""
    from rich import box
    from rich.console import Group
    from rich.table import Table as _Table
    from rich.text import Text

    def Table(**kw):
        return _Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), **kw)
    knob_names = [k.name for k in result.space.knobs]
    parts: list[Any] = []
    if result.dry_run:
        t = Table(title=f"{result.space.spec.name}: {result.compiled} of {len(result.pruning.kept)} candidates "
                        f"compiled (dry run: nothing measured)", title_justify="left")
        for h in ("#", *knob_names, "status", "compile s"):
            t.add_column(h, justify="right" if h in ("#", "compile s") else "left", no_wrap=True)
        for r in result.rows[:top]:
            secs = ("cached" if r.get("cache_hit") else f"{r['compile_s']:.1f}") if "compile_s" in r else "-"
            t.add_row(str(r["index"]), *[_fmt_value(r["knobs"].get(k, "")) for k in knob_names], r["status"], secs)
        parts.append(t)
    else:
        rate_col = "TFLOP/s" if getattr(result.space.spec.op, "kind", "") == "matmul" else "GB/s"
        title = (f"{result.space.spec.name} at {', '.join(f'{k}={v}' for k, v in result.space.sizes.items())}: "
                 f"best {min(top, len(result.rows))} of {len(result.rows)}")
        t = Table(title=title, title_justify="left")
        for h in ("rank", "time (ms)", rate_col, *knob_names, "verified", "status"):
            t.add_column(h, justify="right" if h in ("rank", "time (ms)", rate_col) else "left")
        ok = [r for r in result.rows if r["status"] == "ok"]
        for i, r in enumerate(ok[:top], 1):
            rate = r.get("tflops") if rate_col == "TFLOP/s" else r.get("gbps")
            ver = {True: f"yes {r['rel_error']:.1e}" if r.get("rel_error") is not None else "yes", False: "NO",
                   None: "-"}[r.get("verified")]
            style = "bold green" if result.best and r["key"] == result.best["key"] else None
            t.add_row(str(i), f"{r['time_ms']:.4f}", f"{rate:.0f}" if rate else "-",
                      *[_fmt_value(r["knobs"].get(k, "")) for k in knob_names], ver, r["status"], style=style)
        parts.append(t)
        bad = [r for r in result.rows if r["status"] != "ok"]
        if bad:
            tb = Table(title=f"{len(bad)} failed (recorded; not measured again)", title_justify="left")
            for h in ("status", *knob_names, "detail"):
                tb.add_column(h, overflow="fold")
            for r in bad[:top]:
                tb.add_row(r["status"], *[_fmt_value(r["knobs"].get(k, "")) for k in knob_names],
                           (r.get("detail") or "")[:200])
            parts.append(tb)
    if result.pruning.groups and show_pruning:
        parts.append(Text(f"pruned {result.pruning.pruned} of {result.pruning.total}:\n" +
                          "\n".join(f"  {g.line()}" for g in result.pruning.groups)))
    lines = [f"{result.pruning.total} candidates, {result.pruning.pruned} pruned, {result.compiled} compiled "
             f"({result.compile_s:.1f} s)"]
    if not result.dry_run:
        lines[0] += f", {result.measured} measured, {result.reused} found in the database; {result.wall_s:.1f} s in all"
        if result.best:
            lines.append(f"winner: {best_label(result.best)} (verified against numpy)")
        else:
            lines.append("no verified winner")
    else:
        lines[0] += f"; {result.wall_s:.1f} s"
    parts.append(Text("\n".join(lines)))
    return Group(*parts)
