"""Issue 15's GPU run, in steps that fit the device tool's 10-minute calls; a short table last.

    python -m bench.integration_gpu [--out DIR] STEP [STEP...]   (steps: graphs torch verify overhead dynamic)

- graphs:   CUDA-graph capture and replay of every bundled kernel, checked against the reference: DIR/graphs.log
- torch:    the torch custom op's GPU tests but the per-spec one, jax and torch on the Pallas backend, every array
            kind, the tile counter: DIR/torch.log
- opcheck:  torch.library.opcheck and eager / compiled / out= results for every bundled spec (a dynamic one at three
            sizes): DIR/opcheck.log, or DIR/opcheck-I.log for each of --shards processes (verify too)
- readme:   the README's first example (build the dynamic linear_gelu, call it from torch.compile): DIR/readme.log
- verify-dynamic: the dynamic-size specs only (each package at three sizes, both backends): DIR/verify-dynamic.log
- verify:   every bundled spec on both backends at three sizes each (a dynamic-size package called at three sizes,
            one of them not a multiple of the tile where the spec allows it; a fixed-size spec rebuilt at up to two
            more): DIR/verify.txt
- overhead: bench/overhead.py, per-call wall time against torch's own ops, eager and in CUDA graphs
- dynamic:  bench/dynamic_vs_static.py, runtime extents against the specialized kernel at every bundled shape
- peers:    each bundled dynamic-size package against its peers (schedgen bench --at) at the shapes of PEER_SHAPES:
            DIR/peers.json, DIR/peers.md
Each step runs in its own process under a time limit (--budget seconds per step), so one that hangs cannot take
the table with it. --parallel runs the listed steps at once (the checking steps are bound by the host's CPUs, not
the GPU); never list a timing step (overhead, dynamic) with it.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def _specs() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in list((ROOT / "specs").glob("*.yaml")) +
                  list((ROOT / "specs").glob("*.toml")) if "_tune" not in p.stem)


def _dynamic_specs() -> list[str]:
    """The bundled specs that declare a dynamic size (read as data: no schedgen import in this process)."""
    import yaml
    out = []
    for path in _specs():
        if path.endswith(".yaml"):
            sizes = (yaml.safe_load((ROOT / path).read_text()).get("op") or {}).get("sizes") or {}
            if any(isinstance(v, dict) for v in sizes.values()):
                out.append(path)
    return out


def _opcheck_ids(shards: int) -> list[list[str]]:
    """The per-spec opcheck test's node ids, dealt round-robin into `shards` lists (the slow specs spread out)."""
    test = "tests/runtime/test_torch_op.py::test_opcheck_and_results_on_gpu"
    ids = [f"{test}[{Path(p).stem}]" for p in _specs()]
    return [ids[i::shards] for i in range(shards)]


# the shapes users bring to each dynamic package (bench's default, every size at its max, is a quarter-hour
# attention launch): decode-like and prefill-like token counts, a ragged length where the spec allows one
PEER_SHAPES = {
    "specs/linear_gelu_bf16_dynamic.yaml": ["M=77", "M=4096", "M=16384"],
    "specs/matmul_bf16_dynamic.yaml": ["M=512", "M=4096", "M=16384"],
    "specs/attention_bf16_dynamic.yaml": ["B=1,S=4096", "B=8,S=2048"],
    "specs/attention_gqa_causal_bf16_dynamic.yaml": ["B=1,S=8192", "B=4,S=2000"],
    "specs/gelu_bias_bf16_dynamic.yaml": ["M=8192", "M=65536"],
    "specs/bias_add_bf16_dynamic.yaml": ["M=32768,N=16384", "M=4097,N=4096"],
}


def commands(out: Path, shards: int = 1) -> dict[str, list[str]]:
    pytest = [PY, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "--durations=8"]
    opcheck = {f"opcheck-{i}": [*pytest, *ids] for i, ids in enumerate(_opcheck_ids(shards))}
    verify = [PY, "-m", "schedgen", "verify", "--sizes", "3", "--timeout", "300"]
    verify_shards = {f"verify-{i}": [*verify, *_specs()[i::shards]] for i in range(shards)}
    readme = ("set -e; rm -rf build/linear_gelu; {py} -m schedgen build specs/linear_gelu_bf16_dynamic.yaml -o build/;"
              " {py} examples/linear_gelu_torch.py").format(py=PY)
    peers = "; ".join(f"{PY} -m schedgen bench {spec} " + " ".join(f"--at {a}" for a in ats) +
                      f" --json {out / 'peers.json'} --markdown {out / 'peers.md'}" for spec, ats in PEER_SHAPES.items())
    return {**opcheck, **verify_shards, "peers": ["bash", "-c", peers], "readme": ["bash", "-c", readme],
        # the GPU tests issue 15 added: CUDA graphs of every bundled kernel, the torch op (opcheck, eager /
        # compiled / out= results), jax and torch on the Pallas backend, every array kind and the tile counter
        "graphs": [*pytest, "tests/runtime/test_graphs.py"],
        "torch": [*pytest, "tests/runtime/test_torch_op.py", "tests/runtime/test_pallas_call.py",
                  "tests/runtime/test_gpu.py", "-k", "not sanitizer_clean and not spec_verifies and not opcheck_and"],
        "verify": [*verify, *_specs()],
        "verify-fixed3": [PY, "-m", "schedgen", "verify", "--sizes", "3", "--timeout", "300", "specs/add_bf16.yaml",
                          "specs/matmul_bf16_4096.yaml", "specs/attention_bf16_4096.yaml"],
        "verify-dynamic": [PY, "-m", "schedgen", "verify", "--timeout", "300", *_dynamic_specs()],
        "overhead": [PY, "bench/overhead.py", "--out", str(out)],
        "dynamic": [PY, "bench/dynamic_vs_static.py", "--out", str(out)],
    }


def summary(step: str, text: str, rc: int) -> str:
    if step in ("graphs", "torch") or step.startswith("opcheck"):
        m = re.findall(r"^=*\s*(\d+ (?:passed|failed|skipped).*?) in [\d.]+s", text, re.M)
        return m[-1] if m else f"rc {rc}"
    if step.startswith("verify"):
        rows = [ln for ln in text.splitlines() if re.search(r"\s(ok|SKIP|FAIL)(\s|$)", ln)]
        n = {k: sum(1 for ln in rows if re.search(rf"\s{k}(\s|$)", ln)) for k in ("ok", "SKIP", "FAIL")}
        return f"{n['ok']} ok, {n['SKIP']} skipped, {n['FAIL']} failed"
    tail = [ln for ln in text.splitlines() if ln.strip()]
    return tail[-1][:160] if tail else f"rc {rc}"


def _finish(step: str, proc: subprocess.Popen, log, t0: float, budget: float) -> tuple:
    """Wait for a step's process (what is left of its budget, counted from its start), print its log's tail and
    return its table row."""
    try:
        rc = proc.wait(timeout=max(1.0, budget - (time.time() - t0)))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)   # the step and what it started (pytest's subprocesses)
        proc.wait()
        rc = "timeout"
    log.close()
    text = Path(log.name).read_text(errors="replace")
    dt = min(time.time(), Path(log.name).stat().st_mtime) - t0 if rc != "timeout" else time.time() - t0
    print(f"--- {step} (rc {rc}, {dt:.0f} s): last lines of {Path(log.name).name}")
    print("\n".join(text.splitlines()[-(6 if rc == 0 else 25):]), flush=True)
    return step, rc, dt, summary(step, text, rc if isinstance(rc, int) else -1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("steps", nargs="+", choices=["graphs", "torch", "opcheck", "readme", "verify", "verify-dynamic",
                                              "verify-fixed3", "overhead", "dynamic", "peers"])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results/raw/integration"))
    ap.add_argument("--budget", type=float, default=540.0, help="seconds per step")
    ap.add_argument("--budgets", default="", help="per-step limits, e.g. overhead=60,graphs=200 (over --budget)")
    ap.add_argument("--shards", type=int, default=1, help="processes the opcheck step is split into")
    ap.add_argument("--parallel", action="store_true", help="run the steps at once (checking steps only)")
    args = ap.parse_args(argv)
    if args.parallel and {"overhead", "dynamic", "peers"} & set(args.steps):
        ap.error("--parallel with a timing step: timings must have the GPU to themselves")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1")
    cmds = commands(out, max(1, args.shards))
    limits = {k: float(v) for k, v in (x.split("=") for x in args.budgets.split(",") if x)}
    def budget(step: str) -> float:   # opcheck-2 takes opcheck's limit
        return limits.get(step, limits.get(re.sub(r"-\d+$", "", step), args.budget))

    steps = [name for step in args.steps
             for name in ([n for n in cmds if re.fullmatch(rf"{step}-\d+", n)] if step in ("opcheck", "verify")
                          and args.shards > 1 else [step])]
    results, running = [], []
    for step in steps:
        log = (out / f"{step}.log").open("w")
        running.append((step, subprocess.Popen(cmds[step], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True), log, time.time()))
        if not args.parallel:
            results.append(_finish(*running.pop(), budget(step)))
    while any(proc.poll() is None and time.time() - t0 < budget(step) for step, proc, _, t0 in running):
        time.sleep(0.5)   # each step's own end: _finish reads its time from the log's last write
    results += [_finish(*r, budget(r[0])) for r in running]
    print("\n| step | rc | s | result |\n|---|---|---:|---|")
    for step, rc, dt, what in results:
        print(f"| {step} | {rc} | {dt:.0f} | {what} |")
    return 0 if all(rc == 0 for _, rc, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
