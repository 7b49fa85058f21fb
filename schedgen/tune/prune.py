"""Pruning: drop the points the constraints or the plan stage reject (grouped by reason), and duplicate plans."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from ..cache import digest
from ..errors import Problem, SpecErrors, format_path
from ..frontend import expr as ex
from ..frontend.specfile import SpecFile
from ..frontend.validate import apply_overrides, validate_data
from .space import Candidate, Space, config_key, expand


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
    total: int                  # the points examined: the whole space, or the --budget sample
    kept: list[Candidate]
    groups: list[PruneGroup]
    space_size: int = 0         # the whole space's points (more than `total` when sampled)

    @property
    def pruned(self) -> int:
        return sum(g.count for g in self.groups)


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
    """Expand the space (lazily) and keep what passes the constraints and the plan stage (planning is cheap: no
    compile). Rejections are grouped by field and message (numbers normalised); identical plans are kept once."""
    from .. import plan as planner
    total = 0
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

    for cand in expand(space):
        total += 1
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
    return Pruning(total, kept, out, space.size)
