"""Time built kernels on the GPU against their peers, side by side in one run, verified first.

Rows follow the benchmark record's format (bench/results/<family>.json): family, spec, backend, shape,
dtype, time_ms, gbps or tflops, peer, peer_time_ms, ratio (peer time / our time), verified, rel_error,
date, env. The elementwise peer is `copy`: a device-to-device copy of the same number of bytes.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence


from .build import Built, package, toolchain
from .reference import random_inputs
from .runtime import Kernel, load_package
from .verify import device_buffers, verify_built

L2_BYTES = 60 << 20


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"toolchain": toolchain()}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        name, driver, sm, sm_max, mem = [x.strip() for x in q.stdout.strip().split(",")]
        env.update(gpu=name, driver=driver, clocks={"sm": sm, "sm_max": sm_max, "mem": mem})
    except Exception:
        try:
            from .cuda import driver as drv
            info = drv.device_info()
            env.update(gpu=info.get("name"), driver=str(info.get("driver")))
        except Exception as exc:  # no GPU: the record says so
            env.update(gpu=None, driver=None, note=f"no GPU: {type(exc).__name__}")
    env["jax"] = env["toolchain"].get("jax")
    return env


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def _sets_for(nbytes: int) -> int:
    """How many input sets to rotate through so that L2 (60 MB) cannot hold them all."""
    return max(1, min(8, math.ceil(3 * L2_BYTES / max(1, nbytes))))


def bench_cuda(kernel: Kernel, built: Built, iters: int, warmup: int) -> tuple[float, float]:
    """(our median ms, copy-peer median ms)."""
    from .cuda import driver
    plan = built.plan
    driver.ensure_context()
    in_bytes = sum(math.prod(o.shape) * o.itemsize for o in plan.inputs)
    sets, keep = [], []
    host = random_inputs(built.spec, plan.sizes)
    for _ in range(_sets_for(in_bytes)):
        bins, bouts = device_buffers(plan, host)
        keep += bins + bouts
        sets.append(kernel._launcher([b.ptr for b in bins], [b.ptr for b in bouts], 0))
    state = {"i": 0}

    def run() -> None:
        sets[state["i"] % len(sets)]()
        state["i"] += 1
    ours = _median(driver.time_ms(run, warmup=warmup, iters=iters))
    half = plan.bytes_moved // 2
    src, dst = driver.Buffer(half), driver.Buffer(half)
    peer = _median(driver.time_ms(lambda: driver.copy_d2d(dst.ptr, src.ptr, half), warmup=warmup, iters=iters))
    return ours, peer


def bench_pallas(kernel: Kernel, built: Built, iters: int, warmup: int) -> float:
    import jax
    plan = built.plan
    mod = kernel.pallas_module()
    host = random_inputs(built.spec, plan.sizes)
    ins = [jax.device_put(host[o.name]) for o in plan.inputs]
    fn = jax.jit(mod.make())
    for _ in range(warmup):
        jax.block_until_ready(fn(*ins))
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            out = fn(*ins)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) * 1e3 / iters)
    return min(times)


def bench_built(built: Built, backends: Sequence[str], *, iters: int = 50, warmup: int = 10,
                env: dict | None = None) -> list[dict]:
    plan = built.plan
    kernel = load_package(package(built, tempfile.mkdtemp(prefix="schedgen-bench-")))
    env = env or environment()
    date = _dt.date.today().isoformat()
    checks = {c.backend: c for c in verify_built(built, backends, kernel=kernel)}
    rows = []
    peer_ms = None
    for backend in backends:
        if backend not in plan.backends:
            continue
        check = checks.get(backend)
        row: dict[str, Any] = {
            "family": plan.family, "spec": plan.name, "backend": backend, "kernel": plan.kernel_name,
            "shape": dict(plan.sizes), "dtype": plan.outputs[0].dtype,
            "verified": bool(check and check.ok), "rel_error": check.rel_error if check else None,
            "date": date, "env": env,
        }
        try:
            if backend == "cuda":
                ours, peer_ms = bench_cuda(kernel, built, iters, warmup)
            else:
                ours = bench_pallas(kernel, built, iters, warmup)
                if peer_ms is None:
                    _, peer_ms = bench_cuda(kernel, built, iters, warmup) if "cuda" in plan.backends else (0, None)
        except Exception as exc:
            row.update(time_ms=None, error=f"{type(exc).__name__}: {exc}")
            rows.append(row)
            continue
        row.update(time_ms=ours, gbps=plan.bytes_moved / (ours * 1e-3) / 1e9, peer="copy", peer_time_ms=peer_ms,
                   ratio=(peer_ms / ours) if peer_ms else None)
        rows.append(row)
    return rows


def merge_rows(path: Path, rows: list[dict]) -> list[dict]:
    """Replace rows of the same (spec, backend, shape) in a record file, keep the others."""
    old = json.loads(path.read_text()) if path.exists() else []
    keys = {(r["spec"], r["backend"], json.dumps(r["shape"], sort_keys=True)) for r in rows}
    kept = [r for r in old if (r["spec"], r["backend"], json.dumps(r["shape"], sort_keys=True)) not in keys]
    return kept + rows


def markdown(rows: list[dict]) -> str:
    lines = ["| spec | variant | backend | shape | dtype | time (ms) | GB/s or TFLOP/s | peer | peer (ms) | ratio | verified | "
             "rel. error |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        rate = f"{r['gbps']:.0f} GB/s" if r.get("gbps") else (f"{r['tflops']:.0f} TFLOP/s" if r.get("tflops") else "-")
        t = f"{r['time_ms']:.4f}" if r.get("time_ms") else "-"
        pt = f"{r['peer_time_ms']:.4f}" if r.get("peer_time_ms") else "-"
        ratio = f"{r['ratio']:.3f}" if r.get("ratio") else "-"
        err = f"{r['rel_error']:.2e}" if r.get("rel_error") is not None else "-"
        lines.append(f"| {r['spec']} | {r.get('variant', 'default')} | {r['backend']} | {shape} | {r['dtype']} | {t} | {rate} | {r.get('peer', '-')} | "
                     f"{pt} | {ratio} | {'yes' if r['verified'] else 'NO'} | {err} |")
    return "\n".join(lines) + "\n"
