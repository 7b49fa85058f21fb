"""One call on a machine with several GPUs (nvidia-h200-x2) for the collective_matmul family: build the spec, verify
both backends against float64 numpy on every device, then time them against the usual way of doing the same work,
and print a short table last.

    python -m bench.multi_gpu [--spec specs/collective_matmul_bf16_1024x4096.yaml] [-D NAME=VALUE ...]
                               [--out DIR] [--iters 30] [--rounds 5] [--warmup 5] [--phase all|cuda|pallas]
                               [--timeout 300] [--seed 0]

- CUDA phase: one process per GPU (torch.multiprocessing spawn, NCCL process group; no torchrun). Each rank
  draws the same fresh random inputs (every device's lhs and its own rhs), poisons its output with NaN, and
  checks ||out - ref|| / ||ref|| against float64 on sampled rows (and that no NaN is left anywhere), for
    * torch.distributed all_gather_into_tensor (NCCL) + torch.matmul (cuBLAS): the baseline,
    * schedgen's CUDA kernel (one launch per GPU, peer buffers shared as CUDA IPC handles, schedgen.runtime.multidevice),
      verified on its first launch and again after the timed ones (the gather buffers and semaphores reused);
  then times them interleaved (rounds in rotating order, a barrier before each, CUDA events per iteration on the
  rank's stream; an iteration's time is the slowest rank's; medians), with the baseline's all-gather and matmul
  also timed alone.
- Pallas phase (a subprocess holding every GPU, jax): the Pallas kernel under jax.shard_map (outputs poisoned
  through a ref), verified the same way, and timed by wall clock of back-to-back calls interleaved with jax's own
  lax.all_gather + dot under shard_map (XLA's NCCL all-gather and GEMM).

Target (issue 7): the CUDA kernel >= 1.2x the NCCL + cuBLAS baseline at M = 1024 per device, K = N = 4096.
NVLink multicast stays off: MULTI_GPU_ENV (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1) is set before torch, jax or NCCL load, and is inherited by every process started here;
nothing calls cuMulticastCreate. Writes DIR/multi_gpu.json (every number) and DIR/multi_gpu.md (the table).
With fewer GPUs than the spec's mesh it builds, prints `blocked: ...` and exits 3.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
from schedgen.runtime.multidevice import MULTI_GPU_ENV, apply_env  # noqa: E402

apply_env()                                                   # before torch / jax / NCCL read the environment
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
SPEC = ROOT / "specs" / "collective_matmul_bf16_1024x4096.yaml"
TARGET = 1.2
SAMPLE_ROWS = 128             # output rows checked per device (the first, the last, random others)
BASELINE = "nccl_cublas"
LABELS = {
    "nccl_cublas": "torch NCCL all_gather + cuBLAS",
    "ours_cuda": "schedgen CUDA (p2p ring)",
    "nccl_all_gather": "  (NCCL all_gather alone)",
    "cublas_matmul": "  (cuBLAS matmul alone)",
    "jax_xla": "jax all_gather + dot (XLA)",
    "ours_pallas": "schedgen Pallas (shard_map)",
}
ORDER = ["nccl_cublas", "ours_cuda", "nccl_all_gather", "cublas_matmul", "jax_xla", "ours_pallas"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default=str(SPEC))
    ap.add_argument("-D", dest="define", action="append", default=[], metavar="NAME=VALUE",
                    help="override a size or field of the spec, as schedgen's -D")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--iters", type=int, default=30, help="timed iterations per round and variant")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--phase", choices=["all", "cuda", "pallas"], default="all")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a phase may take before it is stopped")
    ap.add_argument("--worker", choices=["pallas"], help=argparse.SUPPRESS)   # internal: the Pallas subprocess
    args = ap.parse_args(argv)
    if args.iters < 1 or args.rounds < 1 or args.warmup < 0:
        ap.error("--iters and --rounds must be >= 1, --warmup >= 0")
    return args


# ----------------------------------------------------------------------------------- pure parts (tested on CPU)

def per_iteration_max(times_by_rank: Sequence[Sequence[float]]) -> list[float]:
    """Iteration i's time: the slowest rank's (a collective is done when every device is)."""
    if not times_by_rank:
        return []
    n = {len(t) for t in times_by_rank}
    if len(n) != 1:
        raise ValueError(f"ranks timed different numbers of iterations: {sorted(n)}")
    return [max(col) for col in zip(*times_by_rank)]


def summarize(ms: Sequence[float]) -> dict:
    xs = sorted(float(x) for x in ms if x is not None and math.isfinite(x))
    if not xs:
        return {"n": 0, "median_ms": None}
    q = lambda f: xs[min(len(xs) - 1, int(f * (len(xs) - 1) + 0.5))]  # noqa: E731
    return {"n": len(xs), "median_ms": statistics.median(xs), "p10_ms": q(0.1), "p90_ms": q(0.9), "min_ms": xs[0]}


def speedup(baseline_ms: float | None, ours_ms: float | None) -> float | None:
    if not baseline_ms or not ours_ms:
        return None
    return baseline_ms / ours_ms


def sample_rows(total: int, count: int, seed: int) -> list[int]:
    import numpy as np
    from schedgen.reference import sample_rows as rows
    return [int(r) for r in rows(total, count, seed)] if total > count else list(np.arange(total))


def check_rows(out, gathered, rhs, rows: Sequence[int], tol: float) -> dict:
    """||out[rows] - (gathered @ rhs)[rows]|| / ||ref|| in float64, and whether the whole output is finite (a
    NaN left from the poison means rows the kernel never wrote)."""
    import numpy as np
    out = np.asarray(out)
    finite = bool(np.all(np.isfinite(out.astype(np.float32))))
    ref = np.asarray(gathered, np.float64)[list(rows)] @ np.asarray(rhs, np.float64)
    got = out[list(rows)].astype(np.float64)
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref)) if finite else math.inf
    return {"rel_error": err, "finite": finite, "tol": tol, "ok": finite and err <= tol, "rows": len(rows)}


def merge_checks(checks: Sequence[dict]) -> dict:
    """Every device's check of one variant -> one: the worst error, ok only if all are."""
    if not checks:
        return {"ok": False, "rel_error": None, "note": "not run"}
    worst = max(checks, key=lambda c: c["rel_error"] if c.get("rel_error") is not None else math.inf)
    return {"ok": all(c.get("ok") for c in checks), "rel_error": worst.get("rel_error"),
            "devices": len(checks), "note": "; ".join(sorted({c["note"] for c in checks if c.get("note")}))}


def table(result: dict) -> str:
    """The short table printed last: verified, error, median time, TFLOP/s per device, ratio to the baseline."""
    rows = result.get("variants", {})
    flops = result.get("flops_per_device", 0)
    base = (rows.get(BASELINE) or {}).get("median_ms")
    head = (f"collective matmul {result.get('spec', '?')}: M={result.get('m')}/device, K={result.get('k')}, "
            f"N={result.get('n')}, {result.get('dtype')}, {result.get('devices')} x {result.get('gpu', '?')}")
    lines = [head, f"{'variant':34} {'verified':8} {'rel.err':>8} {'median us':>10} {'TFLOP/s/dev':>11} {'vs NCCL+cuBLAS':>15}"]
    for key in ORDER:
        r = rows.get(key)
        if r is None:
            continue
        ms = r.get("median_ms")
        err = r.get("rel_error")
        ratio = speedup(base, ms)
        v = r.get("verified")
        lines.append(f"{LABELS[key]:34} {('yes' if v else 'NO') if v is not None else '-':8} "
                     f"{(f'{err:.1e}' if err is not None and math.isfinite(err) else '-'):>8} "
                     f"{(f'{ms * 1e3:.1f}' if ms else r.get('error', '-')[:10]):>10} "
                     f"{(f'{flops / (ms * 1e-3) / 1e12:.0f}' if ms and key not in ('nccl_all_gather',) else '-'):>11} "
                     f"{(f'{ratio:.2f}x' if ratio else '-'):>15}")
    ours = speedup(base, (rows.get("ours_cuda") or {}).get("median_ms"))
    lines.append(f"target: schedgen CUDA >= {TARGET:.1f}x the NCCL + cuBLAS baseline: "
                 + ("not measured" if ours is None else f"{ours:.2f}x, {'met' if ours >= TARGET else 'NOT met'}")
                 + ("" if (rows.get("ours_cuda") or {}).get("verified") else " (CUDA kernel not verified)"))
    for key in ORDER:
        if (rows.get(key) or {}).get("error"):
            lines.append(f"{key}: {rows[key]['error']}")
    return "\n".join(lines)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env() -> dict:
    """The environment of every process started here: this one's, with multicast kept off."""
    env = dict(os.environ)
    env.update(MULTI_GPU_ENV)
    return env


# ----------------------------------------------------------------------------------- the CUDA phase (ranks)

def _rank(rank: int, world: int, port: int, cfg: dict) -> None:
    """One GPU: verify and time the NCCL + cuBLAS baseline and schedgen's CUDA kernel; write rank<r>.json."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from schedgen.runtime import multidevice as md
    out_file = Path(cfg["tmp"]) / f"rank{rank}.json"
    res: dict[str, Any] = {"rank": rank, "checks": {}, "times": {}, "errors": {}}
    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank))
        rec = md.load_launch(cfg["package"])      # launch.json: what a package promises the host
        cubin = (Path(cfg["package"]) / "kernel.cubin").read_bytes()
        inputs = md.collective_inputs(rec, cfg["seed"])                       # every rank draws the same
        lhs_name = rec.by_role("lhs").name
        rhs_name = rec.by_role("rhs").name
        lhs_all, rhs_all = inputs[lhs_name], inputs[rhs_name]
        gathered = lhs_all.reshape(-1, lhs_all.shape[-1])
        rows = sample_rows(rec.ring.m_total, SAMPLE_ROWS, cfg["seed"] + rank)
        tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
        a = torch.from_numpy(lhs_all[rank].view(np.uint16)).view(tdt[rec.ring.in_dtype]).cuda()
        b = torch.from_numpy(rhs_all[rank].view(np.uint16)).view(tdt[rec.ring.in_dtype]).cuda()
        g = torch.empty((rec.ring.m_total, rec.ring.k), dtype=a.dtype, device="cuda")
        c = torch.empty((rec.ring.m_total, rec.ring.n), dtype=tdt[rec.ring.out_dtype], device="cuda")
        stream = torch.cuda.current_stream()

        def to_np(t):
            return t.float().cpu().numpy()

        def all_gather_obj(obj):
            lst = [None] * world
            dist.all_gather_object(lst, obj)
            return lst

        def matmul():                 # cuBLAS into out's dtype (f32 out: from the bf16/f16 product, as torch does)
            if c.dtype == g.dtype:
                torch.matmul(g, b, out=c)
            else:
                c.copy_(torch.matmul(g, b))

        # --- the baseline, verified
        c.fill_(float("nan"))
        dist.all_gather_into_tensor(g, a)
        matmul()
        torch.cuda.synchronize()
        res["checks"][BASELINE] = check_rows(to_np(c), gathered, rhs_all[rank], rows, cfg["tol"])

        # --- ours, verified on its first launch
        sess = md.RankSession(rec, cubin, rank, rank, all_gather_obj)
        sess.upload(lhs_all[rank], rhs_all[rank], poison=True)
        launch = sess.launcher(stream=int(stream.cuda_stream))
        dist.barrier()
        launch()
        res["checks"]["ours_cuda"] = check_rows(sess.download().astype(np.float32), gathered, rhs_all[rank], rows,
                                                cfg["tol"])

        variants = {
            BASELINE: lambda: (dist.all_gather_into_tensor(g, a), matmul()),
            "ours_cuda": launch,
            "nccl_all_gather": lambda: dist.all_gather_into_tensor(g, a),
            "cublas_matmul": matmul,
        }
        for _ in range(cfg["warmup"]):
            for fn in variants.values():
                fn()
        torch.cuda.synchronize()
        names = list(variants)
        for r in range(cfg["rounds"]):
            for name in names[r % len(names):] + names[:r % len(names)]:
                dist.barrier()
                torch.cuda.synchronize()
                ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(cfg["iters"])]
                for s, e in ev:
                    s.record(stream)
                    variants[name]()
                    e.record(stream)
                torch.cuda.synchronize()
                res["times"].setdefault(name, []).extend(s.elapsed_time(e) for s, e in ev)
        # --- ours again, after every timed launch (buffers and semaphores reused, epoch > 1)
        sess.poison()
        dist.barrier()
        launch()
        again = check_rows(sess.download().astype(np.float32), gathered, rhs_all[rank], rows, cfg["tol"])
        again["note"] = f"re-checked at epoch {sess.epoch}"
        res["checks"]["ours_cuda_again"] = again
        res["gpu"] = torch.cuda.get_device_name(rank)
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as exc:  # recorded for the parent, which prints it in the table
        res["errors"]["rank"] = f"{type(exc).__name__}: {exc}"
    out_file.write_text(json.dumps(res))


def cuda_phase(cfg: dict, world: int, timeout: float) -> dict:
    import torch.multiprocessing as mp
    port = free_port()
    ctx = mp.start_processes(_rank, args=(world, port, cfg), nprocs=world, join=False, start_method="spawn")
    deadline = time.time() + timeout
    finished = False
    while time.time() < deadline:
        try:
            if ctx.join(timeout=5):
                finished = True
                break
        except Exception as exc:  # a rank died: the others are stopped by torch
            return {"error": f"a rank failed: {type(exc).__name__}: {str(exc).splitlines()[-1] if str(exc) else ''}",
                    "ranks": _read_ranks(cfg, world)}
    if not finished:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
        return {"error": f"the ranks did not finish within {timeout:.0f} s (a hang?) and were stopped",
                "ranks": _read_ranks(cfg, world)}
    return {"ranks": _read_ranks(cfg, world)}


def _read_ranks(cfg: dict, world: int) -> list[dict]:
    out = []
    for r in range(world):
        f = Path(cfg["tmp"]) / f"rank{r}.json"
        out.append(json.loads(f.read_text()) if f.exists() else {"rank": r, "errors": {"rank": "no result"}})
    return out


def cuda_variants(ranks: list[dict]) -> dict:
    """The CUDA phase's rows: checks merged over devices, times = slowest rank per iteration, medians."""
    rows = {}
    errors = "; ".join(f"rank {r['rank']}: {r['errors']['rank']}" for r in ranks if r.get("errors", {}).get("rank"))
    for key in ("nccl_cublas", "ours_cuda", "nccl_all_gather", "cublas_matmul"):
        checks = [r["checks"][key] for r in ranks if key in r.get("checks", {})]
        if key == "ours_cuda":
            checks += [r["checks"]["ours_cuda_again"] for r in ranks if "ours_cuda_again" in r.get("checks", {})]
        times = [r["times"][key] for r in ranks if key in r.get("times", {})]
        row = summarize(per_iteration_max(times)) if len(times) == len(ranks) and times else {"median_ms": None}
        if key in ("nccl_cublas", "ours_cuda"):
            merged = merge_checks(checks)
            row.update(verified=merged["ok"] and len(checks) >= len(ranks), rel_error=merged["rel_error"],
                       checks=checks)
        if errors and row.get("median_ms") is None:
            row["error"] = errors
        rows[key] = row
    return rows


# ----------------------------------------------------------------------------------- the Pallas phase (jax)

def pallas_worker(cfg: dict) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from schedgen.runtime import multidevice as md
    from schedgen.runtime.kernel import load_package
    rec = md.load_launch(cfg["package"])      # launch.json: what a package promises the host
    d = rec.num_devices
    mod = load_package(cfg["package"]).pallas_module()
    inputs = md.collective_inputs(rec, cfg["seed"])
    lhs_name = rec.by_role("lhs").name
    rhs_name = rec.by_role("rhs").name
    lhs_all, rhs_all = inputs[lhs_name], inputs[rhs_name]
    gathered = lhs_all.reshape(-1, lhs_all.shape[-1])
    out: dict[str, Any] = {"gpu": jax.devices()[0].device_kind, "variants": {}}
    outs = mod.run_shards(list(lhs_all), list(rhs_all), poisoned=True)
    checks = [check_rows(np.asarray(o).astype(np.float32), gathered, rhs_all[r], sample_rows(rec.ring.m_total, SAMPLE_ROWS,
                                                                                              cfg["seed"] + r), cfg["tol"])
              for r, o in enumerate(outs)]
    P = jax.sharding.PartitionSpec
    mesh = mod.make_mesh()
    axis = mod.AXIS
    devs = list(mesh.devices.flat)

    def global_array(shape, spec, parts):
        return jax.make_array_from_single_device_arrays(shape, jax.sharding.NamedSharding(mesh, spec),
                                                        [jax.device_put(x, dv) for x, dv in zip(parts, devs)])
    a = global_array((d * rec.ring.m, rec.ring.k), P(axis, None), [jnp.asarray(x) for x in lhs_all])
    b = global_array((rec.ring.k, d * rec.ring.n), P(None, axis), [jnp.asarray(x) for x in rhs_all])
    ours = mod.shard_mapped(mesh)
    xla = jax.jit(jax.shard_map(lambda x, y: lax.all_gather(x, axis, axis=0, tiled=True) @ y, mesh=mesh,
                                in_specs=(P(axis, None), P(None, axis)), out_specs=P(None, axis), check_vma=False))
    ref_out = xla(a, b)
    xla_checks = [check_rows(np.asarray(s.data).astype(np.float32), gathered, rhs_all[devs.index(s.device)],
                             sample_rows(rec.ring.m_total, SAMPLE_ROWS, cfg["seed"]), cfg["tol"])
                  for s in ref_out.addressable_shards]
    fns = {"jax_xla": xla, "ours_pallas": ours}
    for _ in range(max(1, cfg["warmup"])):
        for f in fns.values():
            jax.block_until_ready(f(a, b))
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(cfg["rounds"]):
        for name in names[r % 2:] + names[:r % 2]:
            t0 = time.perf_counter()
            for _ in range(cfg["iters"]):
                last = fns[name](a, b)
            jax.block_until_ready(last)
            times[name].append((time.perf_counter() - t0) * 1e3 / cfg["iters"])
    # ours once more after the timed calls, on NaN-poisoned outputs
    again = mod.run_shards(list(lhs_all), list(rhs_all), poisoned=True)
    checks += [check_rows(np.asarray(o).astype(np.float32), gathered, rhs_all[r], sample_rows(rec.ring.m_total,
                          SAMPLE_ROWS, cfg["seed"] + r), cfg["tol"]) for r, o in enumerate(again)]
    for name, cks in (("jax_xla", xla_checks), ("ours_pallas", checks)):
        merged = merge_checks(cks)
        out["variants"][name] = {**summarize(times[name]), "timing": "wall clock, back-to-back calls",
                                 "verified": merged["ok"], "rel_error": merged["rel_error"], "checks": cks}
    return out


def pallas_phase(cfg: dict, timeout: float) -> dict:
    cfg_file = Path(cfg["tmp"]) / "pallas_cfg.json"
    res_file = Path(cfg["tmp"]) / "pallas.json"
    cfg_file.write_text(json.dumps(cfg))
    try:
        r = subprocess.run([sys.executable, __file__, "--worker", "pallas", "--out", str(cfg_file)], env=child_env(),
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"the Pallas phase did not finish within {timeout:.0f} s (a hang?) and was stopped"}
    if res_file.exists():
        return json.loads(res_file.read_text())
    tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
    return {"error": f"the Pallas phase failed (exit {r.returncode}): {' | '.join(tail)}"}


# ----------------------------------------------------------------------------------- main

def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker == "pallas":                      # the subprocess: --out names its config file
        cfg = json.loads(Path(args.out).read_text())
        try:
            res = pallas_worker(cfg)
        except BaseException as exc:
            res = {"error": f"{type(exc).__name__}: {exc}"}
        (Path(cfg["tmp"]) / "pallas.json").write_text(json.dumps(res))
        return 0
    from schedgen.build import build_spec, package
    from schedgen.errors import SpecErrors
    from schedgen.runtime.multidevice import gpu_count
    from schedgen.reference import tolerance
    from schedgen.frontend.validate import parse_overrides
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    try:
        built = build_spec(args.spec, parse_overrides(args.define))
    except SpecErrors as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    p = built.plan
    if p.launch.family != "collective_matmul":
        print(f"{args.spec}: not a multi-device spec (family {p.launch.family})", file=sys.stderr)
        return 2
    pkg = package(built, out_dir / "pkgs")
    print(f"built {p.launch.kernel_name} -> {pkg} ({time.time() - t0:.1f} s); env {MULTI_GPU_ENV}", flush=True)
    have = gpu_count()
    if have < p.num_devices:
        print(f"blocked: {p.launch.name} needs {p.num_devices} GPUs with peer access; this machine has {have}. Nothing was "
              f"run (run this script on an nvidia-h200-x{p.num_devices} machine).")
        return 3
    cfg = {"package": str(pkg), "seed": args.seed, "iters": args.iters, "rounds": args.rounds, "warmup": args.warmup,
           "tol": tolerance(p.out_dtype, False, p.k), "tmp": tempfile.mkdtemp(prefix="schedgen-multi-gpu-")}
    result: dict[str, Any] = {"spec": p.launch.name, "kernel": p.launch.kernel_name, "m": p.m, "n": p.n, "k": p.k,
                              "dtype": p.in_dtype, "devices": p.num_devices, "flops_per_device": p.flops,
                              "iters": args.iters, "rounds": args.rounds, "env": MULTI_GPU_ENV,
                              "date": time.strftime("%Y-%m-%d"), "variants": {}}
    if args.phase in ("all", "cuda"):
        t1 = time.time()
        cres = cuda_phase(cfg, p.num_devices, args.timeout)
        result["cuda_phase"] = {"error": cres.get("error"), "seconds": round(time.time() - t1, 1),
                                "ranks": cres.get("ranks")}
        result["variants"].update(cuda_variants(cres.get("ranks", [])))
        if cres.get("error"):
            for key in ("nccl_cublas", "ours_cuda"):
                result["variants"].setdefault(key, {})["error"] = cres["error"]
        result["gpu"] = next((r.get("gpu") for r in cres.get("ranks", []) if r.get("gpu")), None)
        print(f"cuda phase: {time.time() - t1:.0f} s", flush=True)
    if args.phase in ("all", "pallas"):
        t1 = time.time()
        pres = pallas_phase(cfg, args.timeout)
        if pres.get("error"):
            result["variants"]["ours_pallas"] = {"error": pres["error"], "median_ms": None}
        result["variants"].update(pres.get("variants", {}))
        result.setdefault("gpu", pres.get("gpu"))
        result["gpu"] = result["gpu"] or pres.get("gpu")
        print(f"pallas phase: {time.time() - t1:.0f} s", flush=True)
    result["seconds"] = round(time.time() - t0, 1)
    (out_dir / "multi_gpu.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    text = table(result)
    (out_dir / "multi_gpu.md").write_text("```\n" + text + "\n```\n")
    print()
    print(text)
    ok = all((result["variants"].get(k) or {}).get("verified") for k in ("ours_cuda",) if args.phase != "pallas")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
