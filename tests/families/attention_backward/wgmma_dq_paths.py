"""The wgmma attention backward's dQ workspace on every call path, on the H200 (run by
test_attention_backward_wgmma.py in a fresh interpreter: torch cannot be imported into the pytest process there),
one JSON line per path, each output against the float64 reference of fresh random inputs, outputs poisoned (NaN):

- eager: two calls in a row into the same poisoned outputs (the runtime zeroes the workspace again for the second:
  a stale one would double dq);
- graph: torch.cuda.graph capture after a warm-up, replayed twice on new inputs (graph_replay.replay: the
  workspace's allocation, memset and free are the graph's nodes);
- compile: torch.compile(fullgraph=True) of a function calling the package (the custom op's real implementation).

    python wgmma_dq_paths.py OUT_DIR CASE [bulk] [preprocess]
        (CASE: a key of test_attention_backward_wgmma.CASES; bulk: with wgmma.dq_reduce_of patched to "bulk", the
        TMA reduce-add form; preprocess: pipeline.delta preprocess, delta from the launch's first blocks)
"""
from __future__ import annotations

import importlib
import json
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "runtime"), str(HERE.parents[1])]

import torch  # noqa: E402

from graph_replay import replay, to_numpy, to_torch  # noqa: E402
from schedgen.build import build_spec, package  # noqa: E402
from schedgen.reference import random_inputs, reference, rel_error, tolerance  # noqa: E402
from schedgen.verify import call_sizes  # noqa: E402
from test_attention_backward_wgmma import CASES, SPEC, WS  # noqa: E402


def _errors(built, sizes, inputs, outs, seed) -> list[dict]:
    plan = built.plan
    refs = reference(built.spec, sizes, inputs, seed=seed)
    return [{"output": o.name, "seed": seed, "rel_error": rel_error(to_numpy(t, o.dtype), refs[o.name]),
             "tolerance": tolerance(o.dtype, plan.approx_math, plan.seq_kv)} for t, o in zip(outs, plan.outputs)]


def eager_and_compiled(overrides: dict, out_dir: Path) -> dict:
    built = build_spec(str(SPEC), overrides)
    plan = built.plan
    dest = package(built, out_dir)
    sys.path.insert(0, str(dest.parent))
    try:
        fn = getattr(importlib.import_module(plan.name), plan.name)
    finally:
        sys.path.remove(str(dest.parent))
    sizes = call_sizes(plan, 1)[0]
    errors = []
    inputs = random_inputs(built.spec, sizes, seed=5)
    ins = [to_torch(inputs[o.name], o.dtype) for o in plan.inputs]
    outs = [torch.empty(plan.outputs[i].shape, dtype=ins[0].dtype, device="cuda") for i in range(3)]
    for call in range(2):
        for t in outs:
            t.view(torch.uint8).fill_(0xFF)
        fn(*ins, out=tuple(outs))
        torch.cuda.synchronize()
        errors += [dict(e, path=f"eager call {call + 1}") for e in _errors(built, sizes, inputs, outs, 5)]
    compiled = torch.compile(lambda *a: fn(*a), fullgraph=True)
    inputs = random_inputs(built.spec, sizes, seed=6)
    ins = [to_torch(inputs[o.name], o.dtype) for o in plan.inputs]
    got = compiled(*ins)
    torch.cuda.synchronize()
    errors += [dict(e, path="torch.compile") for e in _errors(built, sizes, inputs, list(got), 6)]
    return {"ok": all(e["rel_error"] <= e["tolerance"] for e in errors), "errors": errors,
            "dq_reduce": plan.wgmma.dq_reduce, "delta": plan.wgmma.delta}


def main() -> None:
    out_dir, case = Path(sys.argv[1]), sys.argv[2]
    extra = sys.argv[3:]
    if "bulk" in extra:
        from schedgen.families.attention_backward import wgmma as wgmma_plan
        wgmma_plan.dq_reduce_of = lambda nc, d: "bulk"
    overrides = {**CASES[case], **WS}
    if "preprocess" in extra:
        overrides["schedule.pipeline.delta"] = "preprocess"
    for path, run in (("eager+compile", lambda: eager_and_compiled(overrides, out_dir / "a")),
                      ("graph", lambda: replay(str(SPEC), None, out_dir / "b", overrides))):
        try:
            row = run()
        except Exception:
            row = {"ok": False, "error": traceback.format_exc()[-3000:]}
        row["path"] = path
        print("RESULT " + json.dumps(row, default=str), flush=True)


if __name__ == "__main__":
    main()
