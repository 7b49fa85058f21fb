"""`schedule.dispatch: auto` (issue 44, opt-in): the buckets of a dynamic M and each bucket's schedule, derived by
the planner from the tile counts against the SMs, with no tuning run.

The bounds are formulas, never a table of shapes: the first bucket ends at 64 rows (WGMMA_M: one 64-row block holds
every row of a decode step), the next ones double (128, 256, ...) up to the first power-of-two multiple of 64 at which
the large schedule (the planner's own pick at M's max, or the written one) makes FULL_WAVES waves of tiles over the
SMs, where a partial last wave costs at most 1 / FULL_WAVES; the last bucket, up to M's max, runs the large schedule.
The bounds are rounded down to multiples of M's multiple_of and clipped to its min..max.

In every other bucket the candidates are the tiles 128 x 256, 128 x 128, 64 x 128 and 64 x 64 (and the large one),
each without a split and, where the family's split-K renders (cluster [1, 1, S]: the CUDA backend only, so the spec's
backends must leave out pallas; cooperative consumers; no block scales; at least MIN_K_ITERS k-steps a CTA), split
over 2 or 4 CTAs (powers of two: the clusters pack the GPCs). A candidate that does not plan over the whole dynamic
range is dropped. Each is scored by the estimated time at the bucket's sizes (a sample of M values in it), relative
to a perfectly balanced one: whole waves of tiles (the last wave costs as much as a full one) times a tile's time at
its measured throughput (defaults.TILE_RATE), 2-CTA multicast clusters CLUSTER_GAIN faster (where the planner's rule
gives them: an even tile-row count at every M), a split tile 1 / S of the time on S CTAs plus SPLIT_COST for the
fix-up. The lowest mean wins; the large schedule is kept unless another is SWITCH faster. Neighbouring buckets with the
same schedule are one bucket.

A field the spec writes pins every variant: a written BlockSpec of lhs, rhs or the output keeps the written tile
(only the split can vary), a written cluster keeps the cluster (only the tile can vary); both written: one bucket.
The estimates are the planner's (H200 2026-12-04 tile rates); a GPU record must confirm them before this is a default.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ...errors import Problem, SpecErrors
from ...frontend.model import DynamicSize
from ...frontend.overrides import apply_overrides
from ...frontend.validate import validate_data
from ...plan import plan_with_picks
from ...plan.common import Problems
from ...plan.defaults import written
from ...plan.gemm import REG_OVERHEAD, WGMMA_M
from ...plan.hardware import for_target
from . import defaults as DF
from .operands import check_names, problem_dims
from .stream_k import MIN_K_ITERS

FIELD = ("schedule", "dispatch")
FULL_WAVES = 4            # the large schedule serves every M with at least this many waves of its tiles
CANDIDATE_TILES = ((128, 256), (128, 128), (64, 128), (64, 64))
SPLITS = (2, 4)           # split-K CTAs a tile (the family takes 2-4; powers of two pack the GPCs)
SPLIT_COST = 0.15         # a split tile's fix-up (ranks > 0 hand f32 partial tiles to rank 0 through DSMEM): an estimate
SAMPLES = 32              # M values a bucket is scored at (besides its edges)


@dataclass(frozen=True)
class Choice:
    """One schedule a bucket can run: the tile, a split-K over `split` CTAs, a 2-CTA multicast cluster along M."""
    tm: int
    tn: int
    tk: int
    split: int = 1
    shared: bool = False
    large: bool = False          # the large schedule (the planner's own at M's max, or the written one): no overrides
    stages: int | None = None    # a split tile's ring depth (its f32 partial-tile buffer takes SMEM the planner's
                                 # pick of stages does not count): the deepest that plans

    def label(self) -> str:
        cl = f", split-K over {self.split} CTAs (cluster [1, 1, {self.split}])" if self.split > 1 else \
            ", 2-CTA clusters along M multicasting the rhs (cluster [2, 1])" if self.shared else ""
        ring = f", {self.stages} stages" if self.stages else ""
        return f"{self.tm} x {self.tn} x {self.tk}{cl}{ring}"

    def csize(self) -> int:
        return self.split if self.split > 1 else 2 if self.shared else 1


@dataclass(frozen=True)
class Bucket:
    lo: int                      # the bucket's M values: lo..hi (multiples of M's multiple_of)
    hi: int
    choice: Choice
    overrides: dict = field(default_factory=dict)     # schedule field paths -> values, over the spec
    why: str = ""

    @property
    def schedule(self) -> str:
        return self.choice.label() + (" (the planner's own schedule at M's max)" if self.choice.large and
                                      not self.overrides else "")

    def row(self) -> tuple[tuple[int, int], dict, str]:
        """(M range, schedule overrides, why): the table as data."""
        return (self.lo, self.hi), dict(self.overrides), self.why


@dataclass(frozen=True)
class Table:
    """The derived table: the dynamic size it splits and its buckets (the registry's `dispatch` hook returns it)."""
    size: str
    buckets: tuple[Bucket, ...]

    def rows(self) -> list[tuple[tuple[int, int], dict, str]]:
        return [b.row() for b in self.buckets]

    def text(self) -> str:
        return table_text(list(self.buckets), self.size)


def wanted(spec) -> bool:
    """Whether the spec asks for a derived dispatch table (`schedule.dispatch: auto`)."""
    return getattr(spec.schedule, "dispatch", "single") == "auto"


def dynamic_m(spec) -> str | None:
    """The name of the dynamic M the table splits; None when M is fixed (one shape: nothing to dispatch)."""
    op = spec.op
    a = op.inputs[op.lhs].shape
    name = a[-1] if op.transpose_lhs else a[-2]
    return name if isinstance(name, str) and isinstance(op.sizes.get(name), DynamicSize) else None


def derived_table(spec, src) -> Table | None:
    """The family's `dispatch` hook: the table of a spec with `schedule.dispatch: auto`, else None."""
    if not wanted(spec):
        return None
    return Table(dynamic_m(spec) or "M", tuple(derive(spec, src)))


@dataclass(frozen=True)
class _Ctx:
    """What the derivation reads of the spec: its problem, the large schedule, what is written."""
    spec: Any
    src: Any
    out_name: str
    dims: Any
    n: int
    k: int
    batch: int
    sms: int
    large: Choice
    tile_pinned: bool
    cluster_pinned: bool
    split_ok: bool

    def overrides(self, c: Choice) -> dict[str, Any]:
        return _overrides(c, self.spec, self.spec.op, self.out_name, self.dims, self.tile_pinned,
                          self.cluster_pinned)


def _check(spec, src) -> str:
    """The dynamic M's name; SpecErrors at schedule.dispatch where the spec is not one the table takes."""
    op, sch = spec.op, spec.schedule
    m_name = dynamic_m(spec)
    bad = []
    if sch.target != "sm_90a" or for_target(sch.target).mma != "wgmma":
        bad.append("the derived dispatch table is for the Hopper kernel (target: sm_90a)")
    if m_name is None:
        bad.append("dispatch: auto splits a dynamic M's range into buckets; M is fixed here (declare it "
                   "{dynamic: true, max: ...})")
    others = [n for n, v in op.sizes.items() if isinstance(v, DynamicSize) and n != m_name]
    if others:
        bad.append(f"dispatch: auto splits a dynamic M with N, K and the batch fixed; {', '.join(others)} "
                   f"{'is' if len(others) == 1 else 'are'} dynamic too: give {'it' if len(others) == 1 else 'them'} "
                   f"a number, or leave dispatch out")
    if bad:
        raise SpecErrors([Problem(FIELD, b) for b in bad], src)
    return m_name


def _context(spec, src) -> _Ctx:
    op, sch = spec.op, spec.schedule
    problems = Problems()
    out_name, extras = check_names(spec, problems)
    dims = problem_dims(op, out_name, extras, problems, sch.target)
    own, _ = plan_with_picks(spec, src)                # the large schedule; SpecErrors when the spec does not plan
    tile_pinned = any(written(spec, ("schedule", side, nm)) for side, nm in
                      (("in_specs", op.lhs), ("in_specs", op.rhs), ("out_specs", out_name)))
    cluster_pinned = written(spec, ("schedule", "cluster"))
    large = Choice(own.tiles.tile_m, own.tiles.tile_n, own.tiles.tile_k, own.cluster.split_k,
                   own.cluster.multicast == "rhs" and own.cluster.cluster_m == 2, large=True)
    split_ok = (not cluster_pinned and "pallas" not in own.launch.backends
                and sch.pipeline.consumer_schedule == "cooperative" and getattr(op, "block_scales", None) is None)
    return _Ctx(spec, src, out_name, dims, int(dims.n), int(dims.k), D_upper(dims.batch),
                for_target(sch.target).sm_count, large, tile_pinned, cluster_pinned, split_ok)


def _tiles(ctx: _Ctx) -> list[tuple[int, int, int]]:
    """The tiles to try: the written (or block-scaled) one alone, else CANDIDATE_TILES whose accumulators fit a
    written consumer count."""
    sch, large = ctx.spec.schedule, ctx.large
    if ctx.tile_pinned or getattr(ctx.spec.op, "block_scales", None) is not None:
        return [(large.tm, large.tn, large.tk)]
    nc = sch.pipeline.num_compute_wgs if written(ctx.spec, ("schedule", "pipeline", "num_compute_wgs")) else None
    return [(tm, tn, _tk(tm, ctx.k, ctx.dims.isz)) for tm, tn in CANDIDATE_TILES
            if nc is None or (tm % (WGMMA_M * nc) == 0 and tm * tn // (128 * nc) + REG_OVERHEAD
                              <= DF.MAX_CONSUMER_REGS)]


def _planned(ctx: _Ctx, c: Choice) -> Choice | None:
    """`c` when it plans over the whole range (a split: at the deepest ring that fits), else None."""
    depths = (None,) if c.split == 1 or written(ctx.spec, ("schedule", "pipeline", "max_concurrent_steps")) else \
        range(DF.STAGES.get(c.tn, 4), 1, -1)
    for d in depths:
        cd = Choice(c.tm, c.tn, c.tk, c.split, c.shared, stages=d)
        try:
            plan_with_picks(*_with(ctx.spec, ctx.src, ctx.overrides(cd)))
            return cd
        except SpecErrors:
            continue
    return None


def _candidates(ctx: _Ctx) -> list[Choice]:
    """The large schedule, then every tile x split that plans."""
    hw = for_target(ctx.spec.schedule.target)
    large, out = ctx.large, []
    same = (large.tm, large.tn, large.tk, large.split, large.shared)
    for tm, tn, tk in _tiles(ctx):
        shared = (not ctx.tile_pinned and not ctx.cluster_pinned and DF._clusters(ctx.spec.op, ctx.dims, tm, tn, hw)) \
            or (ctx.cluster_pinned and large.shared)
        splits = (1, *(s for s in (SPLITS if ctx.split_ok else ()) if -(-ctx.k // tk) // s >= MIN_K_ITERS))
        out += [Choice(tm, tn, tk, s, shared and s == 1) for s in splits
                if (tm, tn, tk, s, shared and s == 1) != same]
    return [large] + [c for c in map(lambda c: _planned(ctx, c), out) if c is not None]


def _cost(ctx: _Ctx, c: Choice, m: int) -> float:
    """Estimated time over a balanced one's at M = m (>= 1)."""
    count = ctx.batch * -(-m // c.tm) * -(-ctx.n // c.tn)
    slots = max(ctx.sms // c.csize(), 1) * (c.csize() if c.shared else 1)   # tiles a wave runs
    tile = c.tm * c.tn / DF.TILE_RATE.get((c.tm, c.tn), 0.4) * (DF.CLUSTER_GAIN if c.shared else 1.0)
    if c.split > 1:
        tile = tile / c.split * (1 + SPLIT_COST)
    return -(-count // slots) * tile / (ctx.batch * m * ctx.n / ctx.sms)


def _choose(ctx: _Ctx, cands: list[Choice], a: int, b: int, q: int) -> tuple[Choice, str]:
    """The bucket a..b's schedule: the lowest mean estimate over its sample, the large one unless another is SWITCH
    faster; and why."""
    ms = _sample(a, b, q)
    score = {c: sum(_cost(ctx, c, m) for m in ms) / len(ms) for c in cands}
    best = min(cands, key=lambda c: score[c])
    large = ctx.large
    c = best if score[best] < DF.SWITCH * score[large] else large
    why = (f"at M = {b}: {_waves(c, b, ctx.n, ctx.batch, ctx.sms)}; est. {score[c]:.2f}x a balanced run's time over "
           f"the bucket" + (f", against {score[large]:.2f}x for the large schedule" if c != large else
                            " (no candidate 2% faster)"))
    return c, why


def derive(spec, src) -> list[Bucket]:
    """The dispatch table of a matmul spec with a dynamic M: buckets contiguous, increasing and covering M's min..max.
    SpecErrors (at schedule.dispatch) where the spec is not one the table takes."""
    size: DynamicSize = spec.op.sizes[_check(spec, src)]
    ctx = _context(spec, src)
    lo, hi, q = size.lowest, size.max, size.multiple_of
    cands = _candidates(ctx)
    bounds = _bounds(lo, hi, q, ctx.large, ctx.n, ctx.batch, ctx.sms)
    rows: list[tuple[int, int, Choice, str]] = []
    for i, b in enumerate(bounds):
        a = lo if i == 0 else bounds[i - 1] + q
        if len(cands) == 1:
            c, why = ctx.large, ("every schedule field the heuristics set is written (the tile and the cluster): the "
                                 "written schedule serves every M")
        elif i == len(bounds) - 1 and i > 0:
            c, why = ctx.large, (f"M >= {a}: {_waves(ctx.large, a, ctx.n, ctx.batch, ctx.sms)}, at least "
                                 f"{FULL_WAVES} waves of the large tile (a partial last wave costs at most "
                                 f"1/{FULL_WAVES})")
        else:
            c, why = _choose(ctx, cands, a, b, q)
        if rows and rows[-1][2] == c:
            first = rows[-1][3].split("; the same schedule wins", 1)[0]
            rows[-1] = (rows[-1][0], b, c, f"{first}; the same schedule wins up to M = {b}")
        else:
            rows.append((a, b, c, why))
    return [Bucket(a, b, c, {} if c.large else ctx.overrides(c), why) for a, b, c, why in rows]


def D_upper(x) -> int:
    """A static batch count (1 where there is none)."""
    return x if isinstance(x, int) else 1


def _tk(tm: int, k: int, isz: int) -> int:
    """K a stage, as the planner picks it: 128 bytes (a 64-row tile: 256, so the ring holds more weight bytes)."""
    tk = (DF.SKINNY_TK_BYTES if tm < 2 * WGMMA_M else 128) // isz
    while tk > 16 and k < tk:
        tk //= 2
    return tk


def _bounds(lo: int, hi: int, q: int, large: Choice, n: int, batch: int, S: int) -> list[int]:
    """The buckets' upper bounds: 64, 128, 256, ... up to the first one at which the large schedule makes FULL_WAVES
    waves, then M's max; multiples of q in lo..hi."""
    per_row = batch * -(-n // large.tn)
    m_large = large.tm * -(-FULL_WAVES * S // per_row)
    out, b = [], WGMMA_M
    while True:
        out.append(b)
        if b >= m_large:
            break
        b *= 2
    cut = sorted({x // q * q for x in out if lo <= x // q * q < hi})
    return cut + [hi]


def _sample(a: int, b: int, q: int) -> list[int]:
    """M values of the bucket a..b (multiples of q) it is scored at: its edges and up to SAMPLES between."""
    step = max(q, (b - a) // SAMPLES // q * q)
    return sorted({a, b, *range(-(-a // step) * step, b + 1, step)} - {0})


def _waves(c: Choice, m: int, n: int, batch: int, S: int) -> str:
    count = batch * -(-m // c.tm) * -(-n // c.tn)
    ctas = count * (c.split if c.split > 1 else 1)
    return (f"{count} tiles of {c.tm} x {c.tn}" + (f" x {c.split} CTAs = {ctas} CTAs" if c.split > 1 else "")
            + f" for {S} SMs ({ctas / S:.2f} waves)")


def _overrides(c: Choice, spec, op, out_name, dims, tile_pinned: bool, cluster_pinned: bool) -> dict[str, Any]:
    """The schedule fields that make `c`, over the spec (never a field the spec writes)."""
    out: dict[str, Any] = {}
    if not tile_pinned:
        for p in DF._block_specs(op, out_name, dims, c.tm, c.tn, c.tk, "", c.shared):
            out[".".join(p.path)] = p.value.model_dump(mode="json", exclude_defaults=True)
    if not cluster_pinned:
        cl = [1, 1, c.split] if c.split > 1 else [2, 1] if c.shared else [1]
        if cl != [1] or not tile_pinned:
            out["schedule.cluster"] = cl
    if c.stages:
        out["schedule.pipeline.max_concurrent_steps"] = c.stages
    return out


def _with(spec, src, overrides: Mapping[str, Any]):
    """The spec with `overrides` set (paths as -D takes them) and dispatch: single, validated: (spec, src)."""
    data = spec.model_dump(mode="json", exclude_unset=True)
    data, problems = apply_overrides(data, {**overrides, "schedule.dispatch": "single"}, src)
    if problems:
        raise SpecErrors(problems, src)
    return validate_data(data, src), src


def table_text(buckets: list[Bucket], m_name: str = "M") -> str:
    """The table as explain prints it: range, schedule, why."""
    lines = [f"  dispatch (schedule.dispatch: auto; derived, not yet timed on a GPU): {len(buckets)} bucket"
             f"{'s' if len(buckets) != 1 else ''} of {m_name}"]
    for b in buckets:
        lines.append(f"  {m_name} {b.lo}..{b.hi}: {b.schedule}")
        lines.append(f"      why: {b.why}")
    return "\n".join(lines)
