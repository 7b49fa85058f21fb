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

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...errors import Problem, SpecErrors
from ...frontend.model import DynamicSize
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


def wanted(spec) -> bool:
    """Whether the spec asks for a derived dispatch table (`schedule.dispatch: auto`)."""
    return getattr(spec.schedule, "dispatch", "single") == "auto"


def dynamic_m(spec) -> str | None:
    """The name of the dynamic M the table splits; None when M is fixed (one shape: nothing to dispatch)."""
    op = spec.op
    a = op.inputs[op.lhs].shape
    name = a[-1] if op.transpose_lhs else a[-2]
    return name if isinstance(name, str) and isinstance(op.sizes.get(name), DynamicSize) else None


def derive(spec, src) -> list[Bucket]:
    """The dispatch table of a matmul spec with a dynamic M: buckets contiguous, increasing and covering M's min..max.
    SpecErrors (at schedule.dispatch) where the spec is not one the table takes."""
    from ...plan import plan_with_picks
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
    problems = Problems()
    out_name, extras = check_names(spec, problems)
    dims = problem_dims(op, out_name, extras, problems, sch.target)
    own, _ = plan_with_picks(spec, src)                # the large schedule; SpecErrors when the spec does not plan
    hw = for_target(sch.target)
    size: DynamicSize = op.sizes[m_name]
    lo, hi, q = size.lowest, size.max, size.multiple_of
    n, k, batch = int(dims.n), int(dims.k), int(D_upper(dims.batch))
    S = hw.sm_count

    tile_pinned = any(written(spec, ("schedule", side, nm)) for side, nm in
                      (("in_specs", op.lhs), ("in_specs", op.rhs), ("out_specs", out_name)))
    cluster_pinned = written(spec, ("schedule", "cluster"))
    large = Choice(own.tiles.tile_m, own.tiles.tile_n, own.tiles.tile_k, own.cluster.split_k,
                   own.cluster.multicast == "rhs" and own.cluster.cluster_m == 2, large=True)
    split_ok = (not cluster_pinned and "pallas" not in own.launch.backends
                and sch.pipeline.consumer_schedule == "cooperative" and getattr(op, "block_scales", None) is None)

    def planned(c: Choice) -> Choice | None:
        """`c` when it plans over the whole range (a split: at the deepest ring that fits), else None."""
        depths = (None,) if c.split == 1 or written(spec, ("schedule", "pipeline", "max_concurrent_steps")) else \
            range(DF.STAGES.get(c.tn, 4), 1, -1)
        for d in depths:
            cd = Choice(c.tm, c.tn, c.tk, c.split, c.shared, stages=d)
            try:
                plan_with_picks(*_with(spec, src, _overrides(cd, spec, op, out_name, dims, tile_pinned,
                                                             cluster_pinned)))
                return cd
            except SpecErrors:
                continue
        return None

    cands = [large]
    nc_written = written(spec, ("schedule", "pipeline", "num_compute_wgs"))
    nc = sch.pipeline.num_compute_wgs if nc_written else None
    tiles = [(large.tm, large.tn, large.tk)] if tile_pinned or getattr(op, "block_scales", None) is not None else \
        [(tm, tn, _tk(tm, k, dims.isz)) for tm, tn in CANDIDATE_TILES
         if nc is None or (tm % (WGMMA_M * nc) == 0 and tm * tn // (128 * nc) + REG_OVERHEAD <= DF.MAX_CONSUMER_REGS)]
    for tm, tn, tk in tiles:
        shared = (not tile_pinned and not cluster_pinned and DF._clusters(op, dims, tm, tn, hw)) or \
            (cluster_pinned and large.shared)
        for s in (1, *(SPLITS if split_ok else ())):
            if s > 1 and -(-k // tk) // s < MIN_K_ITERS:
                continue
            c = Choice(tm, tn, tk, s, shared and s == 1)
            if c not in cands and (c.tm, c.tn, c.tk, c.split, c.shared) != (large.tm, large.tn, large.tk,
                                                                              large.split, large.shared):
                cands.append(c)
    cands = [large] + [c for c in map(planned, cands[1:]) if c is not None]

    def cost(c: Choice, m: int) -> float:
        """Estimated time over a balanced one's at M = m (>= 1)."""
        count = batch * -(-m // c.tm) * -(-n // c.tn)
        slots = max(S // c.csize(), 1) * (c.csize() if c.shared else 1)   # tiles a wave runs
        waves = -(-count // slots)
        tile = c.tm * c.tn / DF.TILE_RATE.get((c.tm, c.tn), 0.4) * (DF.CLUSTER_GAIN if c.shared else 1.0)
        if c.split > 1:
            tile = tile / c.split * (1 + SPLIT_COST)
        return waves * tile / (batch * m * n / S)

    bounds = _bounds(lo, hi, q, large, n, batch, S)
    rows: list[tuple[int, int, Choice, str]] = []
    for i, b in enumerate(bounds):
        a = lo if i == 0 else bounds[i - 1] + q
        if i == len(bounds) - 1 and len(bounds) > 1 or len(cands) == 1:
            c = large
            why = (f"M >= {a}: {_waves(large, a, n, batch, S)}, at least {FULL_WAVES} waves of the large tile "
                   f"(a partial last wave costs at most 1/{FULL_WAVES})" if i == len(bounds) - 1 and
                   len(bounds) > 1 else "every schedule field the heuristics set is written (the tile and the "
                                        "cluster): the written schedule serves every M")
        else:
            ms = _sample(a, b, q)
            score = {cc: sum(cost(cc, m) for m in ms) / len(ms) for cc in cands}
            best = min(cands, key=lambda cc: score[cc])
            c = best if score[best] < DF.SWITCH * score[large] else large
            why = (f"at M = {b}: {_waves(c, b, n, batch, S)}; est. {score[c]:.2f}x a balanced run's time over the "
                   f"bucket" + (f", against {score[large]:.2f}x for the large schedule" if c != large else
                                " (no candidate 2% faster)"))
        if rows and rows[-1][2] == c:
            first = rows[-1][3].split("; the same schedule wins", 1)[0]
            rows[-1] = (rows[-1][0], b, c, f"{first}; the same schedule wins up to M = {b}")
        else:
            rows.append((a, b, c, why))
    return [Bucket(a, b, c, {} if c.large else _overrides(c, spec, op, out_name, dims, tile_pinned, cluster_pinned),
                   why) for a, b, c, why in rows]


def D_upper(x) -> int:
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
    from ...frontend.overrides import apply_overrides
    from ...frontend.validate import validate_data
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
