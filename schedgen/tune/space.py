"""The search space: a spec's tune.params resolved into knobs (field paths or family aliases, checked against the
spec), counted without expanding, and enumerated lazily (every point, or a seeded random sample of them). A spec
with no tune section gets its family's default space around the planner's picks (picked.py)."""
from __future__ import annotations

import copy
import math
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..cache import key_of
from ..errors import Problem, SourceMap, SpecErrors, format_path
from ..registry import TuneSpace
from ..frontend import expr as ex
from ..frontend.load import load_file
from ..frontend.specfile import SpecFile
from ..frontend.validate import apply_overrides, validate_data
from .aliases import aliases_for
from .constraints import Constraint, parse_constraint
from .db import canonical
from .knobs import Knob, Target
from .picked import default_space, nothing_to_tune, picked_overrides

# The most points a run expands and plans (planning takes about 0.5 ms a point, so ~10 s); a larger space is
# refused with a located error unless a random sample is asked for (`schedgen tune --budget N`, N <= this).
MAX_SPACE = 20_000

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


def resolve_knobs(spec: SpecFile, problems: list[Problem]) -> list[Knob]:  # noqa: C901
    """tune.params -> knobs, each with the fields it sets (checked against the spec: fields exist, list entries are
    in range, no two knobs set one field)."""
    assert spec.tune is not None
    base = spec.model_dump(mode="python")
    aliases = aliases_for(spec)
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
        targets, follow = [], []
        for t in wanted:
            found, value = _lookup(base, t.path)
            if t.follows:
                if found:
                    follow.append(t)            # kept unless another knob sets the field (_unshadowed)
                continue
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
                limit = _max_length(spec, t.path)
                if idx >= len(value) and t.path[-1] == "cluster" and limit is not None and idx >= limit:
                    problems.append(Problem(where, f"{key}: {format_path(t.path)} has at most {limit} entries; no "
                                                   f"entry [{t.index}]"))
                    continue
                if idx < 0 or (idx >= len(value) and (t.path[-1] != "cluster" or limit is None)):
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
        knobs.append(Knob(key, name, values, tuple(targets + follow), alias))
    return _unshadowed(knobs, {p for p, _ in owner})


def _unshadowed(knobs: list[Knob], owned: set) -> list[Knob]:
    """The knobs without the following fields (Target.values) that another knob sets: that knob's value wins."""
    return [replace(k, targets=tuple(t for t in k.targets if not (t.follows and t.path in owned))) for k in knobs]


def _max_length(spec: SpecFile, path: Sequence[str]) -> int | None:
    """The list field's own length limit (its pydantic max_length), found by walking the validated spec."""
    node: Any = spec
    for part in path[:-1]:
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
        if node is None:
            return None
    info = getattr(type(node), "model_fields", {}).get(path[-1])
    for meta in getattr(info, "metadata", ()):
        if getattr(meta, "max_length", None) is not None:
            return int(meta.max_length)
    return None


def field_overrides(base: Mapping, knobs: Sequence[Knob], values: Sequence[Any]) -> dict[str, Any]:
    """Whole-field overrides (dotted path -> value) for one point of the space; list fields are copied from the
    base spec and the knobs' entries replaced (a cluster is padded with 1s)."""
    out: dict[tuple, Any] = {}
    for knob, value in zip(knobs, values):
        for t in knob.targets:
            sets, v = t.value_for(value)
            if not sets:
                continue
            if t.index is None:
                out[t.path] = v
                continue
            if t.path not in out:
                out[t.path] = list(_lookup(base, t.path)[1])
            lst = out[t.path]
            while len(lst) <= t.index:
                lst.append(1)
            lst[t.index] = v
    return {".".join(p): v for p, v in out.items()}

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
    budget: int | None = None   # with a space larger than this: a random sample of this many points
    seed: int = 0               # the sample's seed
    picked: dict = field(default_factory=dict)   # a spec with no tune section: the planner's picks, as overrides
    default: TuneSpace | None = None             # ... and the family's default space (its tune section, in `spec`)

    @property
    def size(self) -> int:
        """The number of points: the product of the knobs' value counts (nothing is expanded)."""
        return math.prod(len(k.values) for k in self.knobs)

    @property
    def sampled(self) -> bool:
        return self.budget is not None and self.budget < self.size

    @property
    def points(self) -> int:
        """How many points a run takes: every one, or the sample's."""
        return min(self.size, self.budget) if self.budget is not None else self.size

    @property
    def sizes(self) -> dict:
        return dict(self.spec.op.sizes)


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


def _parse_constraints(texts: Iterable[tuple[int, str]], int_names: Sequence[str], str_names: Sequence[str],
                       problems: list[Problem]) -> list[Constraint]:
    """Each (index, text) of tune.constraints parsed over these names; one located problem for each that does
    not parse."""
    out = []
    for i, text in texts:
        try:
            out.append(parse_constraint(text, int_names, str_names))
        except ex.ExprError as err:
            problems.append(Problem(("tune", "constraints", i), err.message, inner_line=err.line, inner_col=err.col))
    return out


def tune_section(spec: SpecFile, src: SourceMap, budget: int | None = None
                 ) -> tuple[list[Knob], list[Constraint], list[Problem]]:
    """The knobs and constraints of a validated spec's tune section, and every located problem with them (unknown
    fields, bad values, constraints that do not parse, a space too large without a budget): what `tune` refuses
    and `validate` reports."""
    problems: list[Problem] = []
    knobs = resolve_knobs(spec, problems)
    int_names = list(spec.op.sizes) + [k.name for k in knobs if k.kind == "int"]
    str_names = [k.name for k in knobs if k.kind == "str"]
    constraints = _parse_constraints(enumerate(spec.tune.constraints), int_names, str_names, problems)
    size = math.prod(len(k.values) for k in knobs)
    if budget is None and size > MAX_SPACE:
        problems.append(Problem(("tune", "params"), pos=src.key_positions.get(("tune", "params")), message=(
                                f"the space has {size} points ("
                                f"{' x '.join(f'{k.name} {len(k.values)}' for k in knobs)}), over the {MAX_SPACE} a "
                                f"run expands and plans; narrow it (fewer values per knob, or a family alias that "
                                f"ties fields) or pass --budget N (N <= {MAX_SPACE}) to tune a random sample of N "
                                f"points")))
    return knobs, constraints, problems


def raw_constraint_problems(data: Any) -> list[Problem]:
    """The tune section's constraints checked on the file's raw data, for a file that fails the schema (no
    validated spec to resolve knobs against): each constraint must parse and name only sizes and tune.params keys
    (their short names), as `tune_section` requires. What needs the validated spec (knob targets, values) waits
    for the schema to pass."""
    tune = data.get("tune") if isinstance(data, dict) else None
    op = data.get("op") if isinstance(data, dict) else None
    if not isinstance(tune, dict) or not isinstance(tune.get("constraints"), list):
        return []
    sizes = list(op["sizes"]) if isinstance(op, dict) and isinstance(op.get("sizes"), dict) else []
    params = tune.get("params") if isinstance(tune.get("params"), dict) else {}
    keys = [str(k) for k in params]
    shorts = [_short_name(k) if "." in k else k for k in keys]
    int_names, str_names = list(map(str, sizes)), []
    for name, values in zip(shorts, params.values()):
        if shorts.count(name) > 1 or not isinstance(values, list) or not values:
            continue
        if all(isinstance(v, (int, bool)) for v in values):
            int_names.append(name)
        elif all(isinstance(v, str) for v in values):
            str_names.append(name)
    problems: list[Problem] = []
    texts = [(i, t) for i, t in enumerate(tune["constraints"]) if isinstance(t, str)]   # others: the schema's
    _parse_constraints(texts, int_names, str_names, problems)
    return problems


def _with_picks(spec: SpecFile, data: dict, src: SourceMap, overrides: Mapping[str, Any]
                ) -> tuple[SpecFile, dict[str, Any]]:
    """A spec with a tune section, completed with the planner's picks for the fields it leaves out (so an alias
    such as tile_n over a schedule without BlockSpecs sets the picked ones), and the picks as overrides; the spec
    as it is where it picks nothing or does not plan by itself (its points may: each is planned on its own)."""
    try:
        picked = picked_overrides(spec, src)
    except SpecErrors:
        return spec, {}
    if not picked:
        return spec, {}
    done, problems = apply_overrides(data, {**overrides, **picked}, src)
    if problems:
        raise SpecErrors(problems, src)
    return validate_data(done, src), picked


def load_space(path: str | Path, overrides: Mapping[str, Any] | None = None, *, budget: int | None = None,
               seed: int = 0) -> Space:
    """Read a spec, its tune section and the user's overrides; raises SpecErrors (located) for any problem. A space
    of more than MAX_SPACE points is refused unless `budget` (at most MAX_SPACE) asks for a seeded random sample."""
    if budget is not None and not 1 <= budget <= MAX_SPACE:
        raise ValueError(f"--budget: at most {MAX_SPACE} points (and at least 1), got {budget}")
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
    picked, default = {}, None
    if spec.tune is None or (not spec.tune.params and spec.tune.buckets):
        # tuned around the planner's picks, written in as fields (picked.py); a section of buckets alone too
        spec, picked, default = default_space(spec, data, src, overrides)
    elif not spec.tune.params:
        raise nothing_to_tune(spec, src, "the tune section has no params")
    else:                       # a written section over fields the planner picks: the knobs set the picked ones
        spec, picked = _with_picks(spec, data, src, overrides)
    knobs, constraints, problems = tune_section(spec, src, budget)
    if problems:
        raise SpecErrors(problems, src)
    return Space(path, data, src, spec, overrides, knobs, constraints, _spec_key(spec, knobs), budget, seed, picked,
                 default)


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


def indices(space: Space) -> Iterable[int]:
    """The points a run takes, in order: range(size), or a seeded uniform sample of `budget` of them without
    replacement, drawn over the index space (random.sample of a range: the product is never built)."""
    if not space.sampled:
        return range(space.size)
    return sorted(random.Random(space.seed).sample(range(space.size), space.budget))


def point(space: Space, index: int) -> tuple:
    """The knob values at `index`, read as a mixed-radix number (the last knob fastest: itertools.product order)."""
    digits = []
    for knob in reversed(space.knobs):
        index, d = divmod(index, len(knob.values))
        digits.append(knob.values[d])
    return tuple(reversed(digits))


def expand(space: Space) -> Iterator[Candidate]:
    """The space's candidates, one at a time (lazily: a large space is never held in memory)."""
    base = space.spec.model_dump(mode="python")
    for i in indices(space):
        combo = point(space, i)
        fields = field_overrides(base, space.knobs, combo)
        yield Candidate(i, {k.name: v for k, v in zip(space.knobs, combo)},
                        {**space.user_overrides, **copy.deepcopy(space.picked), **fields})
