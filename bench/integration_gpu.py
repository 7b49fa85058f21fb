"""Issue 15's GPU run, in steps that fit the device tool's 10-minute calls; a short table last.

    python3 bench/integration_gpu.py [--out DIR] STEP [STEP...]   (steps: graphs torch verify overhead dynamic)

- graphs:   CUDA-graph capture and replay of every bundled kernel, checked against the reference: DIR/graphs.log
- torch:    the torch custom op (opcheck; eager, compiled and out= results), jax and torch on the Pallas backend,
            every array kind, the tile counter: DIR/torch.log
- verify-dynamic: the dynamic-size specs only (each package at three sizes, both backends): DIR/verify-dynamic.log
- verify:   every bundled spec on both backends at three sizes each (a dynamic-size package called at three sizes,
            one of them not a multiple of the tile where the spec allows it; a fixed-size spec rebuilt at up to two
            more): DIR/verify.txt
- overhead: bench/overhead.py, per-call wall time against torch's own ops, eager and in CUDA graphs
- dynamic:  bench/dynamic_vs_static.py, runtime extents against the specialized kernel at every bundled shape
Each step runs in its own process under a time limit (--budget seconds per step), so one that hangs cannot take
the table with it.
"""
from __future__ import annotations

import argparse
import os
import re
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


def commands(out: Path) -> dict[str, list[str]]:
    return {
        # the GPU tests issue 15 added: CUDA graphs of every bundled kernel, the torch op (opcheck, eager /
        # compiled / out= results), jax and torch on the Pallas backend, every array kind and the tile counter
        "graphs": [PY, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests/runtime/test_graphs.py"],
        "torch": [PY, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests/runtime/test_torch_op.py",
                  "tests/runtime/test_pallas_call.py", "tests/runtime/test_gpu.py", "-k",
                  "not sanitizer_clean and not spec_verifies"],
        "verify": [PY, "-m", "schedgen", "verify", "--sizes", "3", "--timeout", "300", *_specs()],
        "verify-fixed3": [PY, "-m", "schedgen", "verify", "--sizes", "3", "--timeout", "300", "specs/add_bf16.yaml",
                          "specs/matmul_bf16_4096.yaml", "specs/attention_bf16_4096.yaml"],
        "verify-dynamic": [PY, "-m", "schedgen", "verify", "--timeout", "300", *_dynamic_specs()],
        "overhead": [PY, "bench/overhead.py", "--out", str(out)],
        "dynamic": [PY, "bench/dynamic_vs_static.py", "--out", str(out)],
    }


def summary(step: str, text: str, rc: int) -> str:
    if step in ("graphs", "torch"):
        m = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?) in [\d.]+s", text, re.M)
        return m[-1] if m else f"rc {rc}"
    if step.startswith("verify"):
        rows = [ln for ln in text.splitlines() if re.search(r"\s(ok|SKIP|FAIL)(\s|$)", ln)]
        n = {k: sum(1 for ln in rows if re.search(rf"\s{k}(\s|$)", ln)) for k in ("ok", "SKIP", "FAIL")}
        return f"{n['ok']} ok, {n['SKIP']} skipped, {n['FAIL']} failed"
    tail = [ln for ln in text.splitlines() if ln.strip()]
    return tail[-1][:160] if tail else f"rc {rc}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("steps", nargs="+", choices=["graphs", "torch", "verify", "verify-dynamic", "verify-fixed3", "overhead",
                                              "dynamic"])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results/raw/integration"))
    ap.add_argument("--budget", type=float, default=540.0, help="seconds per step")
    ap.add_argument("--budgets", default="", help="per-step limits, e.g. overhead=60,graphs=200 (over --budget)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1")
    cmds = commands(out)
    limits = {k: float(v) for k, v in (x.split("=") for x in args.budgets.split(",") if x)}
    results = []
    for step in args.steps:
        t0 = time.time()
        log = out / f"{step}.log"
        with log.open("w") as f:
            try:
                proc = subprocess.run(cmds[step], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                      timeout=limits.get(step, args.budget))
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        text = log.read_text(errors="replace")
        results.append((step, rc, time.time() - t0, summary(step, text, rc if isinstance(rc, int) else -1)))
        print(f"--- {step} (rc {rc}, {time.time() - t0:.0f} s): last lines of {log.name}")
        print("\n".join(text.splitlines()[-25:]), flush=True)
    print("\n| step | rc | s | result |\n|---|---|---:|---|")
    for step, rc, dt, what in results:
        print(f"| {step} | {rc} | {dt:.0f} | {what} |")
    return 0 if all(rc == 0 for _, rc, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
