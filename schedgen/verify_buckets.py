"""`schedgen verify --tuned`: every variant of a bucketed build (schedgen/bucketed.py) checked against the float64
reference at both edges of each bucket it serves (the bucket's lower edge and its bound), called through the
package's own dispatch (runtime/buckets.py), which must pick that variant there."""
from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from .bucketed import bucket_label, build_derived, package_bucketed
from .verify import Check, call_sizes, legal_size, small_overrides, verify_here


def bucket_edges(bb, base: Mapping[str, int], inside: int = 0) -> list[tuple[int, str, dict[str, int]]]:
    """(variant index, what, sizes) for the lower edge and the bound of every bucket, in the dispatch table's
    order, with `inside` sizes between them (`verify --tuned --sizes N`: N - 1; evenly spaced, each size rounded
    down to its multiple_of, those that round onto an edge or onto each other dropped); `base` gives every
    other size (fixed ones and dynamic ones the buckets do not split)."""
    ranges = {r.name: r for r in bb.variants[0].plan.launch.dynamic_sizes}
    out = []
    for cell, (info, vi) in enumerate(zip(bb.record.buckets, bb.record.table)):
        bounds = info["range"]
        label = bucket_label(bb.record, cell)
        lows = {s: lo for s, (lo, hi) in bounds.items()}
        highs = {s: hi for s, (lo, hi) in bounds.items()}
        edges = [("lower edge", lows)] if highs != lows else []
        for j in range(1, inside + 1):
            mid = {s: legal_size(ranges[s], lo + (hi - lo) * j // (inside + 1)) if s in ranges else lo
                   for s, (lo, hi) in bounds.items()}
            if mid not in [lows, highs] + [e for _, e in edges]:
                edges.append((f"inside ({', '.join(f'{s}={v}' for s, v in mid.items())})", mid))
        edges.append(("bound", highs))
        for what, edge in edges:
            sizes = {**{k: edge.get(k, v) for k, v in base.items()}, **edge}
            out.append((vi, f"bucket {label}, {what}", sizes))
    return out


def verify_bucketed(bb, backends: Sequence[str], *, interpret: bool = False, seed: int | None = None,
                    small: Mapping[str, int] | None = None, inside: int = 0) -> list[Check]:
    """Package `bb` into a temporary folder, load it, and verify each variant at the edges of its buckets (and at
    `inside` sizes between them); a row's spec is `<name>/<variant>` and its note says which bucket size it is. A
    size assignment the dispatch would hand to another variant is a FAIL row."""
    from .runtime.buckets import load_bucketed
    root = package_bucketed(bb, Path(tempfile.mkdtemp(prefix="schedgen-verify-buckets-")))
    kernel = load_bucketed(root)
    base = call_sizes(bb.variants[0].plan, 1, small)[0]
    checks: list[Check] = []
    for vi, what, sizes in bucket_edges(bb, base, inside):
        vid = bb.record.variants[vi]
        built = bb.variants[vi]
        tag = f"{built.name}/{vid}"
        picked = kernel.variant_for(sizes)
        if picked is not kernel.variants[vi]:
            checks += [Check(tag, "/".join(backends), o.name, dict(sizes), o.dtype, math.inf, 0.0, False,
                             f"{what}: the dispatch picks {picked.root.name}, not {vid}") for o in built.plan.outputs]
            continue
        rows = verify_here(built, backends, interpret=interpret, seed=seed, kernel=picked, at=[sizes])
        checks += [dataclasses.replace(c, spec=tag, note="; ".join(x for x in (what, c.note) if x)) for c in rows]
    return checks


def _small_sizes(bb, overrides: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """The family's few-tiles sizes of a bucketed build, and those of them that are fixed sizes the user did not
    set (what the package is built again at: the buckets' dynamic edges stay)."""
    dynamic = {r.name for r in bb.variants[0].plan.launch.dynamic_sizes}
    few = small_overrides(bb.variants[0])
    return few, {n: v for n, v in few.items() if n not in dynamic and n not in overrides}


def verify_tuned_file(path: str, backends: Sequence[str], overrides: Mapping[str, Any] | None = None, *,
                      buckets_cli: Mapping[str, Sequence[int]] | None = None, db: Any = None,
                      interpret: bool = False, small: bool = False, seed: int | None = None,
                      sizes: int = 1) -> list[Check]:
    """verify_bucketed of the spec's bucketed build (what `schedgen build --tuned` packages), each bucket at its
    two edges and `sizes - 1` sizes between them (`verify --tuned --sizes N`). With `small` the fixed sizes shrink
    to the family's few-tiles sizes (the buckets' edges stay: they are what the variants serve); the database
    lookup is at the spec's own sizes."""
    from .tune.buckets import build_tuned, load
    overrides = dict(overrides or {})
    buckets, _ = load(path, overrides, buckets_cli)
    bb = build_tuned(path, overrides, buckets, db=db, require_result=True)
    few = None
    if small:
        few, fixed_small = _small_sizes(bb, overrides)
        if fixed_small:
            bb = build_tuned(path, overrides, buckets, db=db, extra=fixed_small, require_result=True)
    return verify_bucketed(bb, backends, interpret=interpret, seed=seed, small=few, inside=max(0, sizes - 1))


def verify_derived_file(path: str, backends: Sequence[str], overrides: Mapping[str, Any] | None = None, *,
                        interpret: bool = False, small: bool = False, seed: int | None = None,
                        sizes: int = 1) -> list[Check]:
    """verify_bucketed of the package `schedgen build` makes of a spec with a derived dispatch table
    (`schedule.dispatch: auto`, bucketed.build_derived): each variant at the two edges of every bucket it serves and
    `sizes - 1` sizes between them, through the package's own dispatch. With `small` the fixed sizes shrink to the
    family's few-tiles sizes and the table is derived again at them (its buckets follow N and K)."""
    overrides = dict(overrides or {})
    bb = build_derived(path, overrides)
    few = None
    if small:
        few, fixed_small = _small_sizes(bb, overrides)
        if fixed_small:
            bb = build_derived(path, {**overrides, **fixed_small})
    return verify_bucketed(bb, backends, interpret=interpret, seed=seed, small=few, inside=max(0, sizes - 1))
