"""Kernel candidates against the defaults they would replace, in one process on the GPU.

    python -m bench.candidates [--only NAME ...] [--iters N] [--out FILE.json]

A candidate is a schedule field value (`-D`) or a planner choice that is not the default yet. Each is built next to
the default from the same spec, both verified against float64 on the same fresh inputs (outputs poisoned), then
timed interleaved (rounds of blocks of launches, CUPTI kernel time, CUDA events beside it). `ratio` is
default time / candidate time: above 1 the candidate is faster. The verdict: `wins` at >= 1.02 and verified, `loses`
at <= 0.98 or when it does not verify, else `even` (within the noise: the default stays). A candidate that wins
becomes the default; one that loses is deleted with its field and tests (issue 40).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

WIN, LOSE = 1.02, 0.98


@dataclass(frozen=True)
class Candidate:
    name: str
    spec: str                                       # bundled spec (repository path)
    what: str                                       # one line: what changes
    define: dict[str, Any] = field(default_factory=dict)        # -D overrides of the candidate
    patch: dict[str, Any] = field(default_factory=dict)         # "module:function" -> the value it returns
    base: dict[str, Any] = field(default_factory=dict)          # -D overrides of both (sizes, the form)


CANDIDATES = (
    Candidate("epilogue_smem_operands", "specs/matmul_bias_gelu_bf16.yaml",
              "the fused epilogue's bias row staged in SMEM during the k-loop (epilogue.operands: smem)",
              define={"schedule.epilogue.operands": "smem"}, base={"schedule.backends": ["cuda"]}),
    Candidate("map_register_path", "specs/gelu_bias_bf16.yaml",
              "the map's CUDA kernel reading through registers, no TMA ring (pipeline.data_path: registers)",
              define={"schedule.pipeline.data_path": "registers", "schedule.pipeline.max_concurrent_steps": 2},
              base={"schedule.backends": ["cuda"]}),
    Candidate("attention_fwd_desc_offsets", "specs/attention_bf16_4096.yaml",
              "the attention forward's wgmma descriptors built once, each k-step's offset added",
              patch={"schedgen.families.attention.plan:desc_offsets_of": True}),
    Candidate("attention_bwd_desc_offsets", "specs/attention_backward_bf16_4096.yaml",
              "the wgmma backward's descriptors by offset",
              patch={"schedgen.families.attention_backward.wgmma:desc_offsets_of": True}),
    Candidate("attention_bwd_delta_preprocess", "specs/attention_backward_bf16_4096.yaml",
              "delta = rowsum(dO * O) by the launch's first blocks, a stage without O (pipeline.delta: preprocess)",
              define={"schedule.pipeline.delta": "preprocess"}),
    Candidate("attention_bwd_fa3_waits", "specs/attention_backward_bf16_4096.yaml",
              "FlashAttention-3's wgmma waits in the backward's consumers",
              patch={"schedgen.families.attention_backward.wgmma:overlap_of": True}),
    Candidate("attention_bwd_dq_bulk", "specs/attention_backward_bf16_4096.yaml",
              "dQ partials staged in SMEM and added by cp.reduce.async.bulk",
              patch={"schedgen.families.attention_backward.wgmma:dq_reduce_of": "bulk"}),
)


@contextlib.contextmanager
def patched(patch: dict[str, Any]):
    """The planner functions named "module:function" returning the given values while building."""
    saved = []
    try:
        for target, value in patch.items():
            mod_name, fn = target.split(":")
            mod = importlib.import_module(mod_name)
            saved.append((mod, fn, getattr(mod, fn)))
            setattr(mod, fn, lambda *a, _v=value, **k: _v)
        yield
    finally:
        for mod, fn, old in reversed(saved):
            setattr(mod, fn, old)


def build(c: Candidate, which: str, folder: Path):
    from schedgen.build import build_spec, package
    from schedgen.runtime.kernel import load_package
    defines = {"schedule.backends": ["cuda"], **c.base, **(c.define if which == "candidate" else {})}
    with patched(c.patch if which == "candidate" else {}):
        built = build_spec(c.spec, defines)
    return built, load_package(package(built, folder / which))


def run(c: Candidate, iters: int) -> dict:
    """The candidate's row: both verified, then timed interleaved (CUDA backend)."""
    from schedgen.bench.case import our_cuda
    from schedgen.bench.environment import ClockSampler
    from schedgen.bench.timing import block_for, interleaved
    from schedgen.reference import random_inputs
    from schedgen.verify import verify_built
    row: dict[str, Any] = {"candidate": c.name, "spec": c.spec, "what": c.what}
    folder = Path(tempfile.mkdtemp(prefix=f"schedgen-cand-{c.name}-"))
    try:
        built = {w: build(c, w, folder) for w in ("default", "candidate")}
    except Exception as exc:
        return {**row, "verdict": "error", "error": f"build: {type(exc).__name__}: {str(exc).splitlines()[0]}"}
    contenders, held = [], []
    for which, (b, kernel) in built.items():
        checks = verify_built(b, ["cuda"], kernel=kernel, seed=7)
        row[f"{which}_verified"] = bool(checks) and all(x.ok for x in checks)
        row[f"{which}_rel_error"] = max((x.rel_error for x in checks), default=None)
        row[f"{which}_kernel"] = b.plan.launch.name
        host = random_inputs(b.spec, b.plan.sizes, seed=1)
        con, keep = our_cuda(kernel, b.plan, host, 2)
        contenders.append(con.__class__(which, con.call, con.stream, con.sync, con.scope))
        held.append(keep)
    with ClockSampler() as clocks:
        timed = interleaved(contenders, block=block_for(iters), rounds=9)
    row["gpu_during"] = clocks.summary()
    for which in ("default", "candidate"):
        row[f"{which}_ms"] = timed[which].get("time_ms")
        row[f"{which}_timing"] = timed[which].get("timing")
        row[f"{which}_events_ms"] = timed[which].get("events_ms")
        row[f"{which}_spread"] = timed[which].get("spread")
    d, k = row["default_ms"], row["candidate_ms"]
    row["ratio"] = d / k if d and k else None
    if not row["candidate_verified"]:
        row["verdict"] = "loses (does not verify)"
    elif row["ratio"] is None:
        row["verdict"] = "error"
    else:
        row["verdict"] = "wins" if row["ratio"] >= WIN else "loses" if row["ratio"] <= LOSE else "even"
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.candidates", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--iters", type=int, default=90, help="launches of each contender over the 9 rounds")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = []
    for c in CANDIDATES:
        if args.only and not any(o in c.name for o in args.only):
            continue
        t0 = time.monotonic()
        try:
            row = run(c, args.iters)
        except Exception as exc:
            row = {"candidate": c.name, "verdict": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
        row["seconds"] = time.monotonic() - t0
        rows.append(row)
        print(line(row), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(rows, indent=1, default=str) + "\n")
    print("\n| candidate | default ms | candidate ms | default / candidate | verified | verdict |\n|---|---|---|---|---|---|")
    for r in rows:
        print(line(r, table=True))
    return 0


def line(r: dict, table: bool = False) -> str:
    def ms(x):
        return f"{x:.4f}" if isinstance(x, (int, float)) else "-"
    ratio = f"{r['ratio']:.3f}" if r.get("ratio") else "-"
    ver = f"{r.get('default_verified')}/{r.get('candidate_verified')}"
    if table:
        return (f"| {r['candidate']} | {ms(r.get('default_ms'))} | {ms(r.get('candidate_ms'))} | {ratio} | {ver} | "
                f"{r['verdict']}{' ' + r['error'][:120] if r.get('error') else ''} |")
    return (f"  {r['candidate']:32} default {ms(r.get('default_ms'))} ms, candidate {ms(r.get('candidate_ms'))} ms, "
            f"ratio {ratio}, verified {ver}: {r['verdict']} {r.get('error', '')[:160]}")


if __name__ == "__main__":
    sys.exit(main())
