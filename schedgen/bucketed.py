"""A bucketed package (many shapes, one package; docs/tuning.md): one variant per distinct schedule that the tuning
database's per-bucket winners name, each built from the dynamic-size spec like any build (so each variant serves
the whole range), and the dispatch record (schedgen/plan/dispatch.py) saying which variant serves which bucket.

    out/<name>/__init__.py          the package function: picks the variant by the call's sizes (runtime/buckets.py)
    out/<name>/dispatch.json        the buckets' bounds and the variant of each, as data
    out/<name>/variants/<id>/       one whole one-kernel package per variant (importable on its own)

    out/<name>/backward.json        with a `backward` section: the backward pass, built once (its steps are
    out/<name>/backward/<step>/     dynamic-size kernels serving every size), as a one-kernel package carries it

A bucket with no verified result, or whose winner does not plan over the whole dynamic range, takes the spec's
own schedule; `notes` says which and why. Identical schedules (the same plan) are one variant. With a backward
pass every variant is built from the family's rewritten forward (build_spec does it, as for a plain spec: it writes
the saved outputs the backward reads); a winner whose forward does not (another backward graph, or no plan of the
rewritten forward) takes the spec's own schedule, whose build gives the package's backward.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .build import BackwardBuilt, Built, _write_package, build_spec, publish, write_backward
from .cache import Cache, write_new
from . import registry
from .errors import Problem, SpecErrors, printable
from .frontend.validate import load_spec
from .plan.dispatch import FILE_NAME as DISPATCH_FILE, VARIANTS_DIR, DispatchRecord

PACKAGE_TEMPLATE = "common/package_buckets.py.j2"


@dataclass(frozen=True)
class BucketedBuilt:
    record: DispatchRecord
    variants: tuple[Built, ...]      # in the record's variant order
    notes: tuple[str, ...]           # one line per bucket: its range and where its schedule came from
    backward: BackwardBuilt | None = None   # the package's one backward pass (the spec's own schedule's build)

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def cache_hit(self) -> bool:
        return all(v.cache_hit for v in self.variants)


def schedule_overrides(row: Mapping[str, Any]) -> dict[str, Any]:
    """A database row's overrides without the sizes it was tuned at (a plain name is a size: `-D M=4096`): the
    schedule fields, to apply over the dynamic spec."""
    return {k: v for k, v in row["overrides"].items() if "." in k or "[" in k}


def build_bucketed(spec_path: str | Path, overrides: Mapping[str, Any] | None, buckets: Any,
                   choices: Sequence[tuple[dict, dict | None]], cache: Cache | None = None,
                   fallback: Callable[[Mapping[str, int]], tuple[dict, str]] | None = None) -> BucketedBuilt:
    """Build each bucket's variant (`choices`: per cell of `buckets`, its database row or None), dedupe them by
    plan, and make the dispatch record. A cell without a row takes `fallback(cell)` (schedule overrides and what
    they are: the derived schedule of schedule.dispatch: auto at the cell's bound) where given, else the spec's own
    schedule."""
    cells = []
    for cell, row in choices:
        label = buckets.label(cell)
        at = ", ".join(f"{k}={v}" for k, v in cell.items())
        info = {"range": {k: list(v) for k, v in buckets.ranges(cell).items()}, "tuned_at": dict(cell)}
        if row is None and fallback is not None:
            fields, what = fallback(cell)
            cells.append((fields, f"{label}: no verified result at {at} in the tuning database: {what} (run: "
                                  f"schedgen tune {spec_path})", {**info, "derived": what, "overrides": fields},
                          (label, what), "derived"))
        elif row is None:
            cells.append((None, f"{label}: no verified result at {at} in the tuning database: the spec's own "
                                f"schedule (run: schedgen tune {spec_path})", info, None, "spec"))
        else:
            cells.append((schedule_overrides(row), f"{label}: tuned at {at}: {_label(row)} on "
                                                   f"{printable(str(row.get('gpu')))}",
                          {**info, "time_ms": row.get("time_ms"), "gpu": row.get("gpu"), "knobs": row.get("knobs")},
                          (label, f"the winner at {at}"), "tuned"))
    return _assemble(spec_path, overrides, tuple(buckets.sizes), tuple(buckets.bounds), cells, cache)


def derived_table(spec, src, overrides: Mapping[str, Any] | None = None):
    """The family's dispatch table derived by the planner (its `dispatch` hook: `schedule.dispatch: auto`), or None
    when the spec does not ask for one, its family derives none, or a -D fixes a size (one shape: today's build)."""
    hook = registry.of(spec).dispatch
    if hook is None or not asks_derived(spec, overrides):
        return None
    return hook(spec, src)


def asks_derived(spec, overrides: Mapping[str, Any] | None = None) -> bool:
    """Whether the spec asks for a derived dispatch table (`schedule.dispatch: auto`) and some size is still
    dynamic after the -D overrides (a -D that fixes the last one: one shape, today's build)."""
    fixed = any("." not in k and "[" not in k for k in (overrides or {}))
    return getattr(spec.schedule, "dispatch", "single") == "auto" and not (
        fixed and all(isinstance(v, int) for v in spec.op.sizes.values()))


def build_derived(spec_path: str | Path, overrides: Mapping[str, Any] | None,
                  cache: Cache | None = None) -> BucketedBuilt | None:
    """`schedule.dispatch: auto` (derived_table): the planner's buckets of the dynamic size, each bucket's derived
    schedule a variant (identical plans one variant), and the dispatch record; None when derived_table is."""
    overrides = dict(overrides or {})
    spec, src = load_spec(str(spec_path), overrides)
    table = derived_table(spec, src, overrides)
    if table is None:
        return None
    m = table.size
    cells = [(b.overrides, f"{m} {b.lo}..{b.hi}: {b.schedule} (derived: {b.why})",
              {"range": {m: [b.lo, b.hi]}, "derived": b.schedule, "why": b.why, "overrides": b.overrides},
              (f"{m} {b.lo}..{b.hi}", "the derived schedule"), "derived") for b in table.buckets]
    return _assemble(spec_path, overrides, (m,), (tuple(b.hi for b in table.buckets),), cells, cache)


def _assemble(spec_path, overrides: Mapping[str, Any] | None, sizes: tuple[str, ...], bounds: tuple[tuple[int, ...], ...],
              cells: Sequence[tuple[dict | None, str, dict, tuple[str, str] | None, str]],
              cache: Cache | None) -> BucketedBuilt:
    """Per bucket cell (its schedule overrides or None for the spec's own, its note, its record entry, (label, what
    its schedule is) for the notes of a fallback, where it came from: tuned / derived): build the variants, dedupe
    them by plan, make the record."""
    overrides = dict(overrides or {})
    own: list[Built] = []

    def own_schedule() -> Built:
        if not own:
            own.append(build_spec(spec_path, overrides, cache=cache))
        return own[0]
    by_plan: dict[bytes, int] = {}
    variants: list[Built] = []
    table, notes, info = [], [], []
    for fields, note, entry, named, source_name in cells:
        built, source = None, "spec"
        notes.append(note)
        if fields is not None:
            label, what = named
            try:
                built = build_spec(spec_path, {**overrides, **fields}, cache=cache)
                source = source_name
            except SpecErrors as exc:
                first = exc.problems[0]
                notes[-1] = (f"{label}: {what} does not plan over the whole dynamic range "
                             f"({'.'.join(map(str, first.path))}: {first.message}): the spec's own schedule")
            if built is not None and built.backward is not None and not _same_backward(built, own_schedule()):
                notes[-1] = (f"{label}: {what} writes other saved outputs than the backward pass reads "
                             f"({_saved(built)} against {_saved(own_schedule())}): the spec's own schedule")
                built, source = None, "spec"
        built = built or own_schedule()
        key = built.files["plan.json"]
        if key not in by_plan:
            by_plan[key] = len(variants)
            variants.append(built)
        table.append(by_plan[key])
        if source != source_name:
            entry = {k: v for k, v in entry.items() if k in ("range", "tuned_at")}
        info.append({**entry, "schedule": source, "variant": f"v{by_plan[key]}"})
    _same_backends(variants, notes, table, spec_path)
    record = DispatchRecord(variants[0].name, sizes, bounds, tuple(f"v{i}" for i in range(len(variants))),
                            tuple(table), tuple(info))
    backward = own_schedule().backward if variants[0].backward is not None else None
    return BucketedBuilt(record, tuple(variants), tuple(notes), backward)


def _graph_key(bw: BackwardBuilt) -> str:
    """What the backward reads of a forward, schedules left out (each variant's forward has its own schedule, and a
    family may derive the steps' schedules from it): the forward's op (its outputs, the saved ones included), what
    is saved and returned, and each step's op and wiring."""
    g = bw.graph.to_json()
    return json.dumps({"op": bw.forward.model_dump(mode="json")["op"], "saved": g["saved"], "grads": g["grads"],
                       "meta": g["meta"], "user": list(bw.user_outputs),
                       "steps": [{k: (v["op"] if k == "spec" else v) for k, v in st.items() if k not in ("why",)}
                                 for st in g["steps"]]}, sort_keys=True, default=str)


def _same_backward(built: Built, own: Built) -> bool:
    """Whether `built`'s forward writes what the package's backward (the spec's own schedule's) reads: the same
    graph over the same outputs."""
    return own.backward is not None and _graph_key(built.backward) == _graph_key(own.backward)


def _saved(built: Built) -> str:
    saved = built.backward.graph.saved if built.backward is not None else ()
    return "saves " + ", ".join(saved) if saved else "saves nothing"


def _label(row: Mapping[str, Any]) -> str:
    """A winner as the build prints it: its time, rate and knobs (the tuner's best_label, which this stage does not
    import)."""
    rate = f"{row['tflops']:.0f} TFLOP/s" if row.get("tflops") else (f"{row['gbps']:.0f} GB/s" if row.get("gbps")
                                                                      else "")
    knobs = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in (row.get("knobs") or {}).items())
    return f"best {row['time_ms']:.4f} ms {rate}  {knobs}"


def _same_backends(variants: list[Built], notes: list[str], table: list[int], spec_path) -> None:
    """Every variant must build the same backends (one call, one choice of backend); a tuned schedule that the
    Pallas backend cannot render makes the planner pick [cuda] for it when the spec leaves `backends` out."""
    sets = [tuple(v.plan.launch.backends) for v in variants]
    if len(set(sets)) > 1:
        which = "; ".join(f"{n.split(':')[0]}: {', '.join(sets[i])}" for n, i in zip(notes, table))
        raise SpecErrors([Problem(("tune", "buckets"), f"the buckets' schedules build different backends ({which}); "
                                                        f"write schedule.backends (e.g. [cuda]) so that every "
                                                        f"variant builds the same")], variants[0].source)


def package_bucketed(bb: BucketedBuilt, out_dir: str | Path) -> Path:
    """Write `out_dir/<name>/`: the dispatching package module, dispatch.json and variants/<id>/."""
    from .render import environment
    first = bb.variants[0]
    module = environment().get_template(PACKAGE_TEMPLATE).render(p=first.plan, record=bb.record, backward=bb.backward)
    umask = os.umask(0o022)
    os.umask(umask)

    def fill(staged: Path) -> None:
        write_new(staged / DISPATCH_FILE, bb.record.to_json().encode())
        write_new(staged / "__init__.py", module.encode())
        vdir = staged / VARIANTS_DIR
        vdir.mkdir()
        write_new(vdir / "__init__.py", f'"""The variants of {bb.name} (dispatch.json says which serves which '
                                        f'sizes)."""\n'.encode())
        for vid, built in zip(bb.record.variants, bb.variants):
            (vdir / vid).mkdir()
            # the variant's forward alone: the package's one backward (below) is wired at the package's root
            _write_package(replace(built, backward=None), vdir / vid)
            os.chmod(vdir / vid, 0o777 & ~umask)
        os.chmod(vdir, 0o777 & ~umask)
        if bb.backward is not None:
            write_backward(bb.backward, bb.name, staged)
    return publish(out_dir, bb.name, fill)


def bucket_label(record: DispatchRecord, cell: int) -> str:
    """`M 96..256` of the dispatch record's bucket `cell` (sizes joined by ', ')."""
    return ", ".join(f"{s} {lo}..{hi}" for s, (lo, hi) in record.buckets[cell]["range"].items())


def served_by(record: DispatchRecord, variant: int) -> str:
    """The buckets variant `variant` serves, as labels joined by '; '."""
    return "; ".join(bucket_label(record, c) for c, v in enumerate(record.table) if v == variant)


def describe(bb: BucketedBuilt) -> str:
    """The build's lines after the first: the buckets and their variants."""
    n = len(bb.variants)
    lines = [f"  {len(bb.record.table)} buckets, {n} variant{'s' if len(bb.variants) != 1 else ''}:",
             *(f"  {note} -> v{i}" for note, i in zip(bb.notes, bb.record.table))]
    bw = bb.backward
    if bw is not None:
        lines.append(f"  backward (one for every variant): gradients of {', '.join(bw.graph.grads) or '(none)'}; "
                     f"{len(bw.steps)} kernel{'s' if len(bw.steps) != 1 else ''} in backward/: " + ", ".join(bw.steps)
                     + "".join(f"; d{i} = d{ref[5:]} passed through, no kernel" for i, ref in bw.graph.passthrough.items()))
    return "\n".join(lines)
