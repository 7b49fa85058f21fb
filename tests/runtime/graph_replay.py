"""Capture every given bundled kernel into a CUDA graph through torch.cuda.graph and replay it on fresh inputs,
checked against the float64 numpy reference: run by test_graphs.py in a fresh interpreter (importing torch inside
the pytest process on the GPU machine fails in torch's own custom-op registration), one JSON line per spec.

    python graph_replay.py CACHE_DIR OUT_DIR SPEC...     (CACHE_DIR "-": the default build cache, shared with
                                                          `schedgen build` / verify, so nothing is compiled twice)

It may also be run by hand on a subset of the specs, e.g. where one command's time is limited.
"""
from __future__ import annotations

import importlib
import json
import math
import sys
import traceback
from pathlib import Path

import numpy as np
import torch

from schedgen import families
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.plan import dims
from schedgen.reference import random_inputs, reference, rel_error, tolerance
from schedgen.runtime import arrays, driver
from schedgen.verify import call_sizes

TORCH = {n: getattr(torch, t) for n, t in arrays._TORCH.items()}


def to_torch(a: np.ndarray, dtype: str) -> torch.Tensor:
    flat = torch.from_numpy(np.ascontiguousarray(a).reshape(-1).view(np.uint8).copy())
    return flat.cuda().view(TORCH[dtype]).reshape(a.shape)


def to_numpy(t: torch.Tensor, dtype: str) -> np.ndarray:
    raw = t.contiguous().reshape(-1).view(torch.uint8).cpu().numpy()
    return raw.view(arrays.DTYPES[dtype]).reshape(tuple(t.shape))


def replay(spec: str, cache: Cache | None, out_dir: Path, overrides: dict | None = None) -> dict:
    built = build_spec(spec, overrides or {}, cache=cache)
    plan = built.plan
    if families.of(plan).multi_device:
        return {"skip": "a multi-device kernel: its ring host launches on every GPU, not one captured stream"}
    if "cuda" not in plan.launch.backends:
        return {"skip": f"built for {', '.join(plan.launch.backends)} only"}
    dest = package(built, out_dir)
    sys.path.insert(0, str(dest.parent))
    try:
        mod = importlib.import_module(plan.launch.name)
    finally:
        sys.path.remove(str(dest.parent))
    fn = getattr(mod, plan.launch.name)
    # a fixed-size kernel at its sizes; a dynamic-size one at verify's second assignment (3/4 of the large one plus
    # one: not a multiple of the tile where the range allows it)
    picks = call_sizes(plan, 3)
    sizes = picks[1] if len(picks) > 1 else picks[0]
    inputs = random_inputs(built.spec, sizes, seed=1)
    ins = [to_torch(inputs[o.name], o.dtype) for o in plan.inputs]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                 # warm-up: loads the cubin, encodes maps, allocates counters
        for _ in range(2):
            fn(*ins)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    refused = ""
    with torch.cuda.graph(graph):
        try:                                      # numpy cannot be captured: a CaptureError, the capture intact
            fn(*(inputs[o.name] for o in plan.inputs))
        except driver.CaptureError as e:
            refused = str(e)
        out = fn(*ins)
    outs = out if isinstance(out, tuple) else (out,)
    k = dims.evaluate(families.of(plan).accumulation(plan), sizes)
    errors = []
    for seed in (2, 3):                           # two replays on new inputs: the graph reads the static tensors
        fresh = random_inputs(built.spec, sizes, seed=seed)
        for t, o in zip(ins, plan.inputs):
            t.copy_(to_torch(fresh[o.name], o.dtype))
        for t in outs:
            t.view(torch.uint8).fill_(0xFF)       # NaN in every float format: an unwritten element fails
        graph.replay()
        torch.cuda.synchronize()
        refs = reference(built.spec, sizes, fresh, seed=seed)
        for t, o in zip(outs, plan.outputs):
            err = rel_error(to_numpy(t, o.dtype), refs[o.name])
            errors.append({"output": o.name, "seed": seed, "rel_error": err,
                           "tolerance": tolerance(o.dtype, plan.approx_math, k)})
    ok = all(e["rel_error"] <= e["tolerance"] for e in errors) and refused.startswith(f"{plan.launch.name}: ")
    return {"ok": ok, "errors": errors, "refused": refused}


def main() -> None:
    cache = None if sys.argv[1] == "-" else Cache(Path(sys.argv[1]))
    out_dir = Path(sys.argv[2])
    for spec in sys.argv[3:]:
        try:
            row = replay(spec, cache, out_dir)
        except Exception:
            row = {"ok": False, "error": traceback.format_exc()[-3000:]}
        row["spec"] = spec
        print("RESULT " + json.dumps(row, default=lambda x: None if isinstance(x, float) and math.isnan(x) else x),
              flush=True)


if __name__ == "__main__":
    main()
