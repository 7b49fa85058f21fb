"""Rows of a benchmark record restated on kernel time (issue 17): a row timed before CUPTI became the primary clock
(schedgen/bench/timing.py, 2026-12-04) has time_ms on CUDA events and cupti_ms beside it; this makes cupti_ms its
time_ms (timing: cupti) and recomputes its rate, and its peers' likewise, from the same run's numbers: nothing is
re-timed, and the ratios (already on kernel time: ratio_basis) do not move.

    python3 bench/kernel_time.py RECORD.json [-o OUT.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def restate(entry: dict) -> dict:
    """One row or peer entry on kernel time (unchanged where it has no cupti_ms or is on it already)."""
    out = dict(entry)
    cupti, ms = out.get("cupti_ms"), out.get("time_ms")
    if not cupti or not ms or out.get("timing") == "cupti":
        return out
    scale = ms / cupti
    out.update(time_ms=cupti, timing="cupti")
    for key in ("tflops", "gbps"):
        if out.get(key):
            out[key] = out[key] * scale
    if out.get("pct_peak"):
        out["pct_peak"] = out["pct_peak"] * scale
    return out


def restate_row(row: dict) -> dict:
    out = restate(row)
    if isinstance(out.get("peers"), dict):
        out["peers"] = {n: restate(p) for n, p in out["peers"].items()}
    if out.get("peer") and isinstance(out.get("peers"), dict) and out["peer"] in out["peers"]:
        out["peer_time_ms"] = out["peers"][out["peer"]].get("time_ms")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("record")
    ap.add_argument("-o", "--out", default=None)
    args = ap.parse_args(argv)
    rows = json.loads(Path(args.record).read_text())
    new = [restate_row(r) for r in rows]
    Path(args.out or args.record).write_text(json.dumps(new, indent=1) + "\n")
    moved = sum(1 for a, b in zip(rows, new) if a != b)
    print(f"{moved} of {len(rows)} rows restated on kernel time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
