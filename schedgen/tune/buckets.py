"""Many shapes, one package: the buckets of a dynamic-size spec (`tune.buckets`, or `--buckets` on the command line)
checked against its sizes, tuned one bucket at a time at the bucket's upper bound (a loop over `tune()`: each bound
is the shape written to the database, as `schedgen tune SPEC -D M=<bound>` would write it), the database's winner
per bucket (what `schedgen build --tuned` packages as variants, schedgen/bucketed.py) and the final table.

Bucket i of a size takes the values in (b[i-1], b[i]]; the first starts at the size's min; the last bound is the
size's max. Several sizes: every combination of their buckets is a cell, tuned at its bounds.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..bucketed import derived_table
from ..errors import Problem, SpecErrors, clip, quoted
from ..frontend.validate import load_spec
from ..frontend.model import MAX_BUCKETS, DynamicSize
from ..frontend.specfile import SpecFile

MAX_CELLS = 64          # bucket combinations a spec may ask for (each is one tuning run and one variant at most)
MAX_BOUND_DIGITS = 19   # a --buckets bound with more digits is refused before it is read (sizes fit in 32 bits)
SHOWN_ARG = 80          # a --buckets argument echoed in a message: whole up to this many characters


class BucketsError(ValueError):
    """A `--buckets` that cannot be used: one line, ready to print."""


@dataclass(frozen=True)
class Buckets:
    sizes: tuple[str, ...]
    bounds: tuple[tuple[int, ...], ...]
    lowest: tuple[int, ...]         # each size's min: where its first bucket starts
    step: tuple[int, ...]           # each size's multiple_of

    def cells(self) -> list[dict[str, int]]:
        """Every bucket combination as the shape it is tuned at ({size: bound}), row-major (the last size
        fastest): the order of the dispatch table."""
        return [dict(zip(self.sizes, combo)) for combo in itertools.product(*self.bounds)]

    def ranges(self, cell: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        """{size: (lowest value, bound)} of a cell."""
        out = {}
        for s, bounds, low, step in zip(self.sizes, self.bounds, self.lowest, self.step):
            i = bounds.index(cell[s])
            out[s] = (low if i == 0 else bounds[i - 1] + step, bounds[i])
        return out

    def label(self, cell: Mapping[str, int]) -> str:
        """`M 257..1024` (`M 1024` for a bucket of one value), sizes joined by ', '."""
        return ", ".join(f"{s} {lo}..{hi}" if lo != hi else f"{s} {hi}" for s, (lo, hi) in self.ranges(cell).items())


def parse_cli(texts: Sequence[str]) -> dict[str, list[int]]:
    """`--buckets M=64,256,1024` (repeated for more sizes) as {"M": [64, 256, 1024]} (BucketsError when not)."""
    out: dict[str, list[int]] = {}
    for text in texts:
        name, eq, values = text.partition("=")
        name = name.strip()
        parts = [v.strip() for v in values.split(",")]
        if not eq or not name.isidentifier() or not all(p.isdigit() and p.isascii() for p in parts):
            raise BucketsError(f"--buckets {clip(text, SHOWN_ARG)}: expected SIZE=B1,B2,... with increasing positive "
                               f"integer bounds, e.g. --buckets M=64,256,1024")
        huge = next((p for p in parts if len(p.lstrip("0")) > MAX_BOUND_DIGITS), None)
        if huge is not None:                      # before int(), which refuses more than 4300 digits
            raise BucketsError(f"--buckets {clip(name)}: bound {huge[:9]}…({len(huge)} digits) is too large; a "
                               f"bound is a size (at most {MAX_BOUND_DIGITS} digits, and within the size's range)")
        if name in out:
            raise BucketsError(f"--buckets {clip(text, SHOWN_ARG)}: {clip(name)} is given twice; give each size once")
        out[name] = [int(p) for p in parts]
    return out


def problems_of(spec: SpecFile, buckets: Mapping[str, Sequence[int]]) -> list[tuple[tuple, str]]:
    """Every problem of `buckets` against the spec's sizes, as (path under tune.buckets, message)."""
    out: list[tuple[tuple, str]] = []
    sizes = spec.op.sizes
    dynamic = [n for n, v in sizes.items() if isinstance(v, DynamicSize)]
    for name, bounds in buckets.items():
        size = sizes.get(name)
        if size is None:
            out.append(((name,), f"no size named {quoted(name)}; the dynamic sizes are: {', '.join(dynamic) or 'none'}"))
            continue
        if not isinstance(size, DynamicSize):
            out.append(((name,), f"{name} is fixed ({size}) in op.sizes; buckets split a dynamic size's range "
                                 f"(declare it {{dynamic: true, max: ...}}"
                                 + (f"; the dynamic sizes are: {', '.join(dynamic)})" if dynamic else ")")))
            continue
        out += _bound_problems(name, list(bounds), size)
    cells = math.prod(len(b) for b in buckets.values())
    if not out and cells > MAX_CELLS:
        each = " x ".join(f"{n} {len(b)}" for n, b in buckets.items())
        out.append(((), f"{cells} bucket combinations ({each}), over the {MAX_CELLS} a package takes; use fewer "
                        f"bounds"))
    return out


def _bound_problems(name: str, bounds: list[int], size: DynamicSize) -> list[tuple[tuple, str]]:
    out: list[tuple[tuple, str]] = []
    legal = (f"{name} is dynamic in {size.lowest}..{size.max}"
             + (f", a multiple of {size.multiple_of}" if size.multiple_of > 1 else ""))
    if not bounds or len(bounds) > MAX_BUCKETS:
        return [((name,), f"give 1 to {MAX_BUCKETS} bounds")]
    for i, b in enumerate(bounds):
        if not size.lowest <= b <= size.max:
            out.append(((name, i), f"{b} is outside {name}'s range ({legal})"))
        elif b % size.multiple_of:
            out.append(((name, i), f"{b} is not a multiple of {size.multiple_of} ({legal}); use "
                                   f"{b // size.multiple_of * size.multiple_of or size.multiple_of} or "
                                   f"{-(-b // size.multiple_of) * size.multiple_of}"))
        elif i and b <= bounds[i - 1]:
            out.append(((name, i), f"{b} is not above the bound before it ({bounds[i - 1]}): bounds increase, "
                                   f"bucket i taking the sizes in (b[i-1], b[i]]"))
    if not out and bounds[-1] != size.max:
        out.append(((name, len(bounds) - 1), f"the last bound is {bounds[-1]}, but {name} goes up to its max "
                                             f"{size.max}: sizes above {bounds[-1]} would have no bucket; end the "
                                             f"list with {size.max}"))
    return out


def of_spec(spec: SpecFile, src, cli: Mapping[str, Sequence[int]] | None = None) -> Buckets | None:
    """The spec's buckets (`cli`, when given, instead of its tune.buckets), checked; None when there are none.
    Problems are located SpecErrors at tune.buckets for the file's, a BucketsError for `--buckets`."""
    given = dict(cli) if cli else dict(spec.tune.buckets) if spec.tune is not None else {}
    if not given:
        return None
    problems = problems_of(spec, given)
    if problems:
        if cli:
            raise BucketsError("; ".join(_cli_where(p) + m for p, m in problems))
        raise SpecErrors([Problem(("tune", "buckets", *p), m) for p, m in problems], src)
    sizes = tuple(given)
    dyn = [spec.op.sizes[s] for s in sizes]
    return Buckets(sizes, tuple(tuple(given[s]) for s in sizes), tuple(d.lowest for d in dyn),
                   tuple(d.multiple_of for d in dyn))


def _cli_where(path: tuple) -> str:
    if not path:
        return "--buckets: "
    return f"--buckets {clip(str(path[0]))}" + (f" (bound {path[1] + 1})" if len(path) > 1 else "") + ": "


def load(path: str | Path, overrides: Mapping[str, Any] | None = None,
         cli: Mapping[str, Sequence[int]] | None = None) -> tuple[Buckets | None, str]:
    """The buckets of the spec file at `path` with the user's -D overrides, and a note: a -D that fixes a bucketed
    size means one shape (the buckets are not used, and the note says so)."""
    from ..frontend.validate import load_spec
    overrides = dict(overrides or {})
    spec, src = load_spec(str(path), overrides)
    named = list(cli) if cli else list(spec.tune.buckets) if spec.tune is not None else []
    fixed = [n for n in named if n in overrides]
    if fixed:
        return None, (f"-D {fixed[0]}={overrides[fixed[0]]} fixes a bucketed size: one shape, the buckets are not "
                      f"used")
    return of_spec(spec, src, cli), ""


# ============================================================================================== tuning


@dataclass
class BucketRun:
    cell: dict                  # {size: bound}: the shape tuned
    label: str                  # `M 257..1024`
    result: Any                 # the TuneResult


@dataclass
class BucketsResult:
    buckets: Buckets
    runs: list[BucketRun] = field(default_factory=list)
    wall_s: float = 0.0


def tune_buckets(spec_path: str | Path, overrides: Mapping[str, Any] | None, buckets: Buckets, *,
                 before: Callable[[int, int, BucketRun], None] | None = None,
                 after: Callable[[BucketRun], None] | None = None, workers: int | None = None,
                 dry_run: bool = False, **tune_kw: Any) -> BucketsResult:
    """`tune()` once per bucket cell at its bounds (the user's overrides plus {size: bound}), one compile pool
    shared by the runs; `tune_kw` goes to each run (runner, db, backend, progress, ...). `before(i, n, run)` and
    `after(run)` let the caller print a header and a summary per bucket."""
    import time

    from .compile import compile_pool
    from .driver import tune
    t0 = time.monotonic()
    out = BucketsResult(buckets)
    cells = buckets.cells()
    pool = tune_kw.pop("pool", None)
    with compile_pool(workers, measuring=not dry_run) if pool is None else _Kept(pool) as ex_:
        for i, cell in enumerate(cells):
            run = BucketRun(cell, buckets.label(cell), None)
            if before is not None:
                before(i, len(cells), run)
            run.result = tune(spec_path, {**dict(overrides or {}), **cell}, workers=workers, dry_run=dry_run,
                              pool=ex_, **tune_kw)
            out.runs.append(run)
            if after is not None:
                after(run)
    out.wall_s = time.monotonic() - t0
    return out


class _Kept:
    def __init__(self, pool):
        self.pool = pool

    def __enter__(self):
        return self.pool

    def __exit__(self, *exc) -> None:
        pass


def winners(spec_path: str | Path, overrides: Mapping[str, Any] | None, buckets: Buckets, *, db: Any = None,
            backend: str = "cuda", gpu: str | None = None) -> list[tuple[dict, dict | None]]:
    """Per cell ({size: bound}), the fastest verified row the database knows at that shape (None: no result)."""
    from .db import TuneDB
    from .results import best_known
    dbh = db if isinstance(db, TuneDB) else TuneDB(db)
    try:
        return [(cell, best_known(spec_path, {**dict(overrides or {}), **cell}, db=dbh, backend=backend, gpu=gpu))
                for cell in buckets.cells()]
    finally:
        if not isinstance(db, TuneDB):
            dbh.close()


def build_tuned(spec_path: str | Path, overrides: Mapping[str, Any] | None, buckets: Buckets, *, db: Any = None,
                extra: Mapping[str, Any] | None = None, cache: Any = None, require_result: bool = False):
    """What `schedgen build --tuned` builds for a bucketed spec (and verify / explain / bench --tuned look at): each
    bucket's fastest verified result on this GPU (winners), built as the variants of one package
    (bucketed.build_bucketed). `extra`: overrides applied to the build only, not to the database lookup (verify's
    smaller fixed sizes). TuneDBError for an unusable database; with `require_result`, a TuneDBError too when no
    bucket has a result (nothing tuned: the package would be the spec's own schedule alone)."""
    from ..bucketed import build_bucketed
    from .db import TuneDBError
    from . import current_gpu          # the package's name (what a test replaces)
    from .picked import NothingToTune
    overrides = dict(overrides or {})
    try:
        choices = winners(spec_path, overrides, buckets, db=db, backend="cuda", gpu=current_gpu())
    except NothingToTune:
        choices = [(cell, None) for cell in buckets.cells()]
    if require_result and all(row is None for _, row in choices):
        at = "; ".join(", ".join(f"{k}={v}" for k, v in cell.items()) for cell, _ in choices)
        raise TuneDBError(f"{spec_path}: the tuning database has no verified result for any bucket (tuned at {at}); "
                          f"run: schedgen tune {spec_path}")
    return build_bucketed(spec_path, {**overrides, **dict(extra or {})}, buckets, choices, cache=cache,
                          fallback=_derived(spec_path, {**overrides, **dict(extra or {})}))


def _derived(spec_path: str | Path, overrides: Mapping[str, Any]):
    """With a derived dispatch table (`schedule.dispatch: auto`, bucketed.derived_table): a bucket the database has
    no result for takes the derived schedule of the M it is tuned at (the tuning database's winners override the
    heuristics per bucket); None otherwise (it takes the spec's own schedule)."""
    spec, src = load_spec(str(spec_path), overrides)
    table = derived_table(spec, src, overrides)
    if table is None:
        return None
    m, rows = table.size, table.buckets

    def pick(cell: Mapping[str, int]) -> tuple[dict, str]:
        v = cell.get(m, rows[-1].hi)
        b = next((b for b in rows if b.lo <= v <= b.hi), rows[-1])
        return b.overrides, f"the derived schedule of {m} {b.lo}..{b.hi} (schedule.dispatch: auto): {b.schedule}"
    return pick


def summary(result: BucketsResult):
    """The final table (rich): bucket -> the shape tuned, the best schedule, its time and rate."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from .space import _fmt_value
    dry = bool(result.runs) and result.runs[0].result.dry_run
    title = Text(f"{len(result.runs)} buckets" + (" (dry run: nothing measured)" if dry else "")
                 + f"; {result.wall_s:.1f} s in all")
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    heads = ("bucket", "tuned at", "compiled") if dry else ("bucket", "tuned at", "time (ms)", "rate", "best schedule")
    for h in heads:
        t.add_column(Text(h), justify="right" if h in ("time (ms)", "rate", "compiled") else "left")
    for run in result.runs:
        r = run.result
        at = ", ".join(f"{k}={v}" for k, v in run.cell.items())
        if dry:
            t.add_row(Text(run.label), Text(at), Text(f"{r.compiled} of {len(r.pruning.kept)}"))
            continue
        b = r.best
        if b is None:
            t.add_row(Text(run.label), Text(at), Text("-"), Text("-"), Text("no verified winner"))
            continue
        rate = f"{b['tflops']:.0f} TFLOP/s" if b.get("tflops") else (f"{b['gbps']:.0f} GB/s" if b.get("gbps")
                                                                       else "-")
        knobs = " ".join(f"{k}={_fmt_value(v)}" for k, v in (b.get("knobs") or {}).items())
        t.add_row(Text(run.label), Text(at), Text(f"{b['time_ms']:.4f}"), Text(rate), Text(knobs or "-"))
    return Group(title, t)
