"""Per-call host overhead of a generated package function on torch tensors, against torch's own call on the same
tensors, eager and inside a CUDA graph (issue 15 part 4). Small problems, where the host is the whole cost:

    matmul 256^3 (specs/matmul_bf16_4096.yaml at M=N=K=256)   vs torch.matmul
    map 64k elements (specs/add_bf16.yaml at M=64, N=1024)    vs torch.add
    attention B1 H1 S128 D128 (specs/attention_bf16_4096.yaml) vs F.scaled_dot_product_attention

    python -m bench.overhead [--calls N] [--rounds R] [--out bench/results/integration/overhead.json | --out DIR]

Per-call wall time: a block of N calls, the device synchronized at both ends, in interleaved rounds (the median
over rounds), through schedgen/bench/timing.py's `interleaved` with its wall clock. Rows: `torch` (the peer),
`schedgen` (the package function, output allocated per call, as a user calls it), `schedgen out=` (into a given
output), `prepared` (Kernel.prepare: the launch alone, the floor of the call path); `graph` rows replay one CUDA
graph holding GRAPH_CALLS captured calls (per call: replay time / GRAPH_CALLS). Goal: schedgen <= 1.5 x torch and <= torch + 10 us;
inside a graph, equal. This is a benchmark, not a test: it prints a table and writes the JSON record.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from schedgen.bench import timing  # noqa: E402
from schedgen.build import build_spec, package  # noqa: E402
from schedgen.cache import Cache  # noqa: E402
from schedgen.runtime import driver  # noqa: E402

CASES = [
    ("matmul 256^3", "specs/matmul_bf16_4096.yaml", {"M": 256, "N": 256, "K": 256}),
    ("map 64k", "specs/add_bf16.yaml", {"M": 64, "N": 1024}),
    ("attention B1 H1 S128", "specs/attention_bf16_4096.yaml", {"B": 1, "H": 1, "S": 128}),
    # the README's first example: a dynamic-size package (M bound from the call), 256 tokens
    ("linear_gelu M=256 (dynamic M)", "specs/linear_gelu_bf16_dynamic.yaml", {}),
]
CALL_SIZES = {"linear_gelu M=256 (dynamic M)": {"M": 256}}
RATIO_GOAL, EXTRA_GOAL_US, GRAPH_GOAL = 1.5, 10.0, 1.05   # graph: "equal", read as within 5%
GRAPH_CALLS = 20                                           # calls captured in one graph


def _peer(label: str, ins: list):
    if label.startswith("matmul"):
        return lambda: torch.matmul(ins[0], ins[1])
    if label.startswith("map"):
        return lambda: torch.add(ins[0], ins[1])
    if label.startswith("linear_gelu"):
        b16 = ins[2].to(ins[0].dtype)
        return lambda: F.gelu(F.linear(ins[0], ins[1], b16), approximate="tanh")
    q, k, v = (t.transpose(1, 2) for t in ins)                 # bshd -> bhsd views, no copy
    return lambda: F.scaled_dot_product_attention(q, k, v)


def _load(spec: str, overrides: dict, cache: Cache, out: Path):
    built = build_spec(str(ROOT / spec), overrides, cache=cache)
    dest = package(built, out)
    sys.path.insert(0, str(dest.parent))
    try:
        mod = importlib.import_module(built.plan.launch.name)
    finally:
        sys.path.remove(str(dest.parent))
    return built, mod


def _graph(fn, calls: int):
    """One CUDA graph of `calls` captured calls of fn (after a warm-up on a side stream), and its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g.replay


def _contender(name: str, fn) -> timing.Contender:
    return timing.Contender(name, lambda i: fn(), stream=None, sync=torch.cuda.synchronize)


def measure(label: str, spec: str, overrides: dict, cache: Cache, out: Path, calls: int, rounds: int) -> dict:
    built, mod = _load(spec, overrides, cache, out)
    fn, kernel = getattr(mod, built.plan.launch.name), mod.kernel
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    call = CALL_SIZES.get(label, {})
    ins = [torch.randn(kernel.shape_of(o, call), device="cuda", dtype=dt[o.dtype]) for o in kernel.inputs]
    outs = [torch.empty(kernel.shape_of(o, call), device="cuda", dtype=dt[o.dtype]) for o in kernel.outputs]
    peer = _peer(label, ins)
    ours = (lambda: fn(*ins))
    ours_out = (lambda: fn(*ins, out=outs[0] if len(outs) == 1 else tuple(outs)))
    prepared = kernel.prepare(ins, outs, stream=torch.cuda.current_stream().cuda_stream)
    expect = peer().transpose(1, 2) if label.startswith("attention") else peer()
    check = (ours().float() - expect.float()).abs().max().item()
    eager = {"torch": peer, "schedgen": ours, "schedgen out=": ours_out, "prepared": prepared}
    graphs, graph_errors = {}, {}
    for n, f in (("graph torch", peer), ("graph schedgen", ours)):
        try:
            graphs[n] = _graph(f, GRAPH_CALLS)
        except Exception as e:      # a capture that fails is recorded; the eager rows still run
            graph_errors[n] = f"{type(e).__name__}: {e}"
    contenders = [_contender(n, f) for n, f in {**eager, **graphs}.items()]
    res = timing.interleaved(contenders, block=calls, rounds=rounds, warmup=3, clocks={"wall": timing.CLOCKS["wall"]})
    us = {}
    for n, r in res.items():
        if r.get("time_ms") is None:
            us[n] = None
            continue
        per = r["time_ms"] * 1e3
        us[n] = per / GRAPH_CALLS if n.startswith("graph") else per   # a graph replay runs GRAPH_CALLS calls
    t, s = us["torch"], us["schedgen"]
    row = {"case": label, "spec": spec, "sizes": {**dict(built.plan.sizes), **call}, "us": us, "max_abs_diff_vs_torch": check,
           "errors": {**graph_errors, **{n: r["error"] for n, r in res.items() if r.get("error")}}}
    if t and s:
        row["ratio"] = s / t
        row["extra_us"] = s - t
        row["eager_goal_met"] = s <= RATIO_GOAL * t and s <= t + EXTRA_GOAL_US
    gt, gs = us.get("graph torch"), us.get("graph schedgen")
    if gt and gs:
        row["graph_ratio"] = gs / gt
        row["graph_goal_met"] = gs <= GRAPH_GOAL * gt
    return row


def _fmt(x) -> str:
    return "-" if x is None else f"{x:8.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200, help="calls (graph replays) per timed block")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "bench/results/integration/overhead.json"),
                    help="the JSON record, or a folder to write overhead.json into (bench/integration_gpu.py)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/overhead.py needs a CUDA GPU and torch with CUDA")
    tmp = Path(tempfile.mkdtemp(prefix="schedgen-overhead-"))
    cache = Cache(tmp / "cache")
    rows = []
    for label, spec, overrides in CASES:
        try:
            rows.append(measure(label, spec, overrides, cache, tmp / "pkgs" / label.split()[0], a.calls, a.rounds))
        except Exception as e:      # one case failing does not lose the others
            rows.append({"case": label, "spec": spec, "us": {}, "errors": {"case": f"{type(e).__name__}: {e}"}})
    names = ["torch", "schedgen", "schedgen out=", "prepared", "graph torch", "graph schedgen"]
    print(f"{'case':24}" + "".join(f"{n:>16}" for n in names) + f"{'ratio':>8}{'extra':>8}{'goal':>6}{'graph':>7}")
    for r in rows:
        print(f"{r['case']:24}" + "".join(f"{_fmt(r['us'].get(n)):>16}" for n in names)
              + f"{r.get('ratio', float('nan')):8.2f}{r.get('extra_us', float('nan')):8.2f}"
              + f"{'ok' if r.get('eager_goal_met') else 'MISS':>6}{'ok' if r.get('graph_goal_met') else 'MISS':>7}")
        for n, e in r["errors"].items():
            print(f"    {n}: {e}")
    try:
        from schedgen.bench.environment import environment
        env = environment()
    except Exception as e:  # a record without nvidia-smi still records the timings
        env = {"error": str(e)}
    record = {"what": "per-call wall time (us) of the package function on torch tensors vs torch, eager and in a "
                      "CUDA graph (bench/overhead.py)",
              "goal": {"ratio": RATIO_GOAL, "extra_us": EXTRA_GOAL_US, "graph_ratio": GRAPH_GOAL},
              "calls": a.calls, "rounds": a.rounds, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "direct_tensor_map_encoder": bool(driver._direct_checked), "environment": env, "rows": rows}
    dest = Path(a.out)
    if dest.is_dir() or dest.suffix != ".json":
        dest = dest / "overhead.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(record, indent=1, default=str))
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
