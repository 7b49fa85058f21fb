"""The matmul family's benchmark peers: `cublas` (torch.matmul, the bare product) and `jax_pallas` (JAX's own Pallas
Hopper matmul, hopper_matmul_mgpu, at the plan's tuning); for a spec whose epilogue is not `out = acc`, also
`torch_eager` (torch.matmul, then the same epilogue in eager torch ops, rendered from the spec's parsed epilogue:
schedgen/bench/torch_expr.py) and `torch_compile` (torch.compile(mode="max-autotune-no-cudagraphs") of that same
function; compiling and autotuning are not timed; a compile that fails is a skipped peer with the reason). Each is
checked against the float64 reference on sampled rows (the whole epilogue, or the product where the peer times only
that). Rows add flops, tflops, pct_peak (of the datasheet dense peak, schedgen/plan/hardware.py), sets and iters;
the flat peer / peer_time_ms / ratio fields name cuBLAS."""
from __future__ import annotations

import sys
import time
import types

import numpy as np

from ...bench.case import (Peer, from_torch, guard, to_torch, torch_dtypes, torch_fn_peer, torch_release,
                           torch_sync, why)
from ...bench.timing import Contender, jax_contender, matmul_sets
from ...plan.hardware import PEAK_TFLOPS
from .fp8_peers import FP8_PEERS, LABELS as FP8_LABELS, fp8_peers, is_fp8
from ...plan.gemm import peak_tflops
from .reference import check_peer, epilogue_body, epilogue_operands

FLAT_PEER = "cublas"
PEER_LABELS = {"cublas": "cuBLAS", "jax_pallas": "JAX Pallas", "torch_eager": "torch eager",
               "torch_compile": "torch.compile", **FP8_LABELS}
# the torch_compile peer's mode; None: that peer is skipped, saying so (the caller's choice)
TORCH_COMPILE_MODE: str | None = "max-autotune-no-cudagraphs"
sets = matmul_sets


def rates(plan, ms: float | None) -> dict:
    if not ms:
        return {}
    tf = plan.flops / (ms * 1e-3) / 1e12
    return {"tflops": tf, "pct_peak": 100.0 * tf / peak_tflops(plan)}


def row_fields(case) -> dict:
    p = case.plan
    return {"dtype": p.out_dtype, "flops": p.flops, "peak_tflops": peak_tflops(p), "sets": case.sets, "iters": case.iters}


def peer_names(plan) -> list[str]:
    """The peers of a plan: cuBLAS and JAX's kernel always; torch eager and torch.compile of the same function
    where the epilogue is not `out = acc` (the bare product is cuBLAS there). fp8 inputs: torch._scaled_mm (fast
    and exact accumulation) and cuBLAS's bf16 GEMM of the same values (fp8_peers.py)."""
    if is_fp8(plan):
        return list(FP8_PEERS)
    return ["cublas", "jax_pallas"] + ([] if plan.identity_epilogue else ["torch_eager", "torch_compile"])


def peers(case) -> dict[str, Peer]:
    from ...reference import reference
    plan = case.plan
    full_ref = reference(case.spec, plan.sizes, case.host, sample=True, seed=2)[plan.outputs[0].name]
    # peers are checked on the same sampled rows: against the whole epilogue, or the product where they time only that
    product_ref = reference(product_only(case.spec), plan.sizes, case.host, rows=full_ref.rows)[plan.outputs[0].name]
    if is_fp8(plan):
        return fp8_peers(case, full_ref, product_ref)
    make = {"cublas": lambda: guard("torch", lambda: cublas_peer(plan, case.host, case.sets, product_ref)),
            "jax_pallas": lambda: guard("jax hopper_matmul_mgpu",
                                        lambda: jax_pallas_peer(plan, case.host, case.sets, full_ref, product_ref)),
            "torch_eager": lambda: guard("torch", lambda: torch_epilogue_peer(case, full_ref, compiled=False)),
            "torch_compile": lambda: guard("torch", lambda: torch_epilogue_peer(case, full_ref, compiled=True))}
    return {name: make[name]() for name in peer_names(plan)}


# ---------------------------------------------------------------------------------------------- JAX's tuning

def _jax_incompatible(plan) -> list[str]:
    """Why JAX's kernel has no equivalent of the plan ([] when it has one)."""
    why_not = []
    if plan.warps.num_consumers != 2:
        why_not.append(f"JAX's kernel runs 2 consumer warpgroups, the plan {plan.warps.num_consumers}")
    if plan.warps.pingpong:
        why_not.append(f"JAX's kernel's consumers split each tile (cooperative), the plan's {plan.warps.consumer_schedule} "
                       f"consumers take whole tiles in turn")
    if plan.batch > 1:
        why_not.append("JAX's kernel is not batched")
    if plan.transpose_lhs or plan.transpose_rhs:
        why_not.append("JAX's kernel takes lhs [M, K] and rhs [K, N] (no transposed operands)")
    if plan.in_dtype not in ("bf16", "f16"):
        why_not.append(f"input dtype {plan.in_dtype}")
    if plan.cluster.cluster_size > 2:
        why_not.append(f"cluster of {plan.cluster.cluster_size} CTAs (JAX: 1 or 2)")
    cm_tile, cn_tile = plan.tiles.tile_m * plan.cluster.cluster_m, plan.tiles.tile_n * plan.cluster.cluster_n
    if plan.m % cm_tile or plan.n % cn_tile or plan.k % plan.tiles.tile_k:
        why_not.append(f"M, N, K = {plan.m}, {plan.n}, {plan.k} are not multiples of the cluster tile "
                       f"{cm_tile} x {cn_tile} x {plan.tiles.tile_k} (JAX's kernel has no ragged edges)")
    if plan.staging.epi_rows != 64 and plan.warps.wg_tile_m % plan.staging.epi_rows:
        why_not.append(f"epilogue tile rows {plan.staging.epi_rows}")
    return why_not


def _jax_notes(plan) -> list[str]:
    """What differs between the plan and JAX's kernel at its equivalent tuning (not the kernel's structure)."""
    notes = []
    if plan.warps.producer_regs != 40:
        notes.append(f"producer registers 40 (JAX's fixed value; the plan has {plan.warps.producer_regs})")
    notes.append("consumer registers as JAX's compiler chooses")
    isz = 2
    jax_swizzle = max((s for s in (32, 64, 128) if (plan.tiles.tile_k * isz) % s == 0), default=0)
    if jax_swizzle != plan.layout.swizzle_a or jax_swizzle != plan.layout.swizzle_b:
        notes.append(f"operand swizzle {jax_swizzle} B for both (the plan: lhs {plan.layout.swizzle_a}, rhs {plan.layout.swizzle_b})")
    slots = min(2, (plan.warps.wg_tile_m * plan.warps.wg_tile_n) // (plan.staging.epi_rows * plan.staging.epi_cols))
    if plan.staging.epi_store == "direct":
        notes.append(f"epilogue staged through SMEM in {plan.staging.epi_rows} x {plan.staging.epi_cols} chunks and stored by TMA "
                     f"(the plan stores directly from registers)")
    elif slots != plan.staging.epi_buffers:
        notes.append(f"{slots} epilogue buffers per consumer (the plan: {plan.staging.epi_buffers})")
    if not plan.launch.auto_blocks:
        notes.append(f"grid of all SMs (the plan: {plan.launch.num_blocks} blocks)")
    if plan.pipeline.delay_release:
        notes.append(f"delay_release {plan.pipeline.delay_release}")
    return notes


def jax_tuning(plan) -> tuple[dict | None, list[str]]:
    """The `hopper_matmul_mgpu.TuningConfig` fields (dimensions as "M"/"N") equivalent to a matmul plan, plus notes.

    JAX's kernel counts tile_m/tile_n per consumer warpgroup (its CTA tile is twice that along wg_dimension) and
    always runs two consumer warpgroups, takes lhs [M, K] and rhs [K, N] unbatched, M/N/K multiples of the
    cluster tile, and an out = acc (+ C) epilogue. Returns (None, [reason]) when the plan has no equivalent;
    otherwise notes name what differs but does not decide the kernel's structure. Pure: needs no jax."""
    why_not = _jax_incompatible(plan)
    if why_not:
        return None, why_not
    notes = []
    cn_tile = plan.tiles.tile_n * plan.cluster.cluster_n
    n_iters = plan.n // cn_tile
    if plan.tiles.tile_order == "planar_snake":
        minor, width = ("M" if plan.tiles.minor_dim == 0 else "N"), plan.tiles.tile_width
    else:
        minor, width = "N", n_iters
        notes.append(f"row_major order as planar_snake(minor N, width {n_iters})")
    cfg = {
        "tile_m": plan.warps.wg_tile_m, "tile_n": plan.warps.wg_tile_n, "tile_k": plan.tiles.tile_k,
        "max_concurrent_steps": plan.pipeline.stages,
        "epi_tile_n": plan.staging.epi_cols, "epi_tile_m": plan.staging.epi_rows,
        "grid_minor_dim": minor, "grid_tile_width": width,
        "wg_dimension": "M" if plan.warps.wg_axis == "m" else "N",
        "cluster_dimension": "M" if plan.cluster.cluster_m == 2 else "N" if plan.cluster.cluster_n == 2 else None,
    }
    return cfg, notes + _jax_notes(plan)


def jax_fuses_epilogue(plan) -> str | None:
    """The name of C when the epilogue is exactly `out = acc + C` (C a full [M, N] of the output dtype: what JAX's
    kernel fuses), "" for the identity, None for any other epilogue (JAX times the product only)."""
    import ast
    from .epilogue import epilogue_jnp
    if plan.identity_epilogue:
        return ""
    stmts = epilogue_jnp(plan)
    if len(stmts) != 1:
        return None
    try:
        tree = ast.parse(stmts[0][1], mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.Add)
            and isinstance(tree.left, ast.Name) and isinstance(tree.right, ast.Name)):
        return None
    names = {tree.left.id, tree.right.id}
    for e in plan.extras:
        if names == {"v_acc", f"v_{e.name}"} and e.bcast == "full" and e.dtype == plan.out_dtype:
            return e.name
    return None


def import_hopper_matmul():
    """jax.experimental.pallas.ops.gpu.hopper_matmul_mgpu. It imports jax._src.test_util (only for its own tests),
    which needs absl; where absl is missing that module is stubbed for the import and removed again."""
    try:
        from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm
        return hm
    except ModuleNotFoundError as exc:
        if "absl" not in str(exc):
            raise
    name = "jax._src.test_util"
    saved = sys.modules.get(name)
    sys.modules[name] = types.ModuleType(name)
    try:
        from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm
        return hm
    finally:
        if saved is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved


def jax_tuning_config(plan):
    """(hopper_matmul_mgpu.TuningConfig or None, notes) for a plan."""
    cfg, notes = jax_tuning(plan)
    if cfg is None:
        return None, notes
    hm = import_hopper_matmul()
    dim = hm.MatmulDimension
    conv = {k: (dim[v] if k in ("grid_minor_dim", "wg_dimension", "cluster_dimension") and v is not None else v)
            for k, v in cfg.items()}
    return hm.TuningConfig(**conv), notes


def jax_hopper_matmul(plan, config, delay_release: int = 0, with_c: bool = False):
    """JAX's hopper matmul kernel at `config` as a jitted f(a, b[, c]) -> out, built as its `matmul()` builds it
    but with the plan's output dtype and delay_release."""
    import functools

    import jax
    import jax.experimental.pallas.mosaic_gpu as plgpu
    import jax.numpy as jnp
    hm = import_hopper_matmul()
    out_dtype = {"bf16": jnp.bfloat16, "f16": jnp.float16, "f32": jnp.float32}[plan.out_dtype]
    cluster_size = 1 + (config.cluster_dimension is not None)
    f = plgpu.kernel(
        functools.partial(hm.kernel, config=config, delay_release=delay_release),
        out_type=jax.ShapeDtypeStruct((plan.m, plan.n), out_dtype),
        grid=(hm.get_num_sms() // cluster_size,),
        grid_names=("cluster_grid",),
        cluster=(cluster_size,),
        cluster_names=("cluster",),
        num_threads=3,
        thread_name="wg",
        compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Warpgroup),
    )
    if with_c:
        return jax.jit(lambda a, b, c: f(a, b, c))
    return jax.jit(lambda a, b: f(a, b, None))



# ---------------------------------------------------------------------------------------------- the peers

def product_only(spec):
    """The spec with its epilogue dropped (out = acc, extras removed): the reference of a peer timing the product."""
    op = spec.op
    inputs = {k: v for k, v in op.inputs.items() if k in (op.lhs, op.rhs)}
    update = {"epilogue": None, "inputs": inputs, "constants": {}}
    if getattr(op, "block_scales", None) is not None:      # the bare product of the fp8 values: no scales
        update["block_scales"] = None
    return spec.model_copy(update={"op": op.model_copy(update=update)})


def _cublas_call(torch, plan, held: dict, notes: list[str]):
    """(call(i), the first call's output as numpy, its dtype): torch.matmul into the output dtype where cuBLAS
    writes it (out= when it is the input dtype), else the input dtype's product."""
    tdt = torch_dtypes(torch)
    n = len(held["views"])
    if plan.out_dtype == plan.in_dtype:
        held["outs"] = [torch.empty(plan.outputs[0].shape, dtype=tdt[plan.out_dtype], device="cuda")
                        for _ in range(n)]

        def into(i: int) -> None:
            a, b = held["views"][i % n]
            torch.matmul(a, b, out=held["outs"][i % n])
        into(0)
        return into, from_torch(torch, held["outs"][0], plan.out_dtype), plan.out_dtype

    def mixed(i: int):
        a, b = held["views"][i % n]
        if a.dim() == 2:
            return torch.mm(a, b, out_dtype=tdt[plan.out_dtype])
        return torch.bmm(a, b if b.dim() == 3 else b.expand(a.shape[0], *b.shape), out_dtype=tdt[plan.out_dtype])
    try:
        return mixed, from_torch(torch, mixed(0), plan.out_dtype), plan.out_dtype
    except (TypeError, RuntimeError) as exc:
        notes.append(f"{plan.in_dtype} output (no {plan.out_dtype} output: {type(exc).__name__})")

    def plain(i: int):
        return torch.matmul(*held["views"][i % n])
    return plain, from_torch(torch, plain(0), plan.in_dtype), plan.in_dtype


def cublas_peer(plan, host: dict, sets: int, product_ref) -> Peer:
    """torch.matmul (cuBLAS) on device copies of the same inputs, transposed views per the plan's flags. Times the
    product only (plus the cast to the output dtype where cuBLAS cannot write it). Its tensors live in `held`
    until the peer is closed (nothing of them outlives close(), so the cache it empties is really freed)."""
    import torch
    from ...runtime import driver
    lhs = next(o for o in plan.inputs if o.role == "lhs")
    rhs = next(o for o in plan.inputs if o.role == "rhs")
    a0, b0 = to_torch(torch, host[lhs.name], lhs.dtype), to_torch(torch, host[rhs.name], rhs.dtype)
    copies = [(a0, b0)] + [(a0.clone(), b0.clone()) for _ in range(sets - 1)]
    held = {"views": [(a.transpose(-1, -2) if plan.transpose_lhs else a, b.transpose(-1, -2) if plan.transpose_rhs
                       else b) for a, b in copies]}
    del copies, a0, b0
    notes = [] if plan.identity_epilogue else ["product only: cuBLAS does not fuse this epilogue"]
    call, result, out_dtype = _cublas_call(torch, plan, held, notes)
    torch.cuda.synchronize()
    driver.ensure_context()
    info = check_peer(result, product_ref, out_dtype, plan.k)
    info["note"] = "; ".join(notes + [f"torch {torch.__version__}"])
    info.update(backend="cuBLAS (torch.matmul)", config={"output": out_dtype, "epilogue": "none (the bare product)"})

    def close() -> None:
        held.clear()
        torch.cuda.empty_cache()
    return Peer(Contender("cublas", call, stream=int(torch.cuda.current_stream().cuda_stream)), info, close)


def jax_pallas_peer(plan, host: dict, sets: int, full_ref, product_ref) -> Peer:
    """JAX's Pallas Hopper matmul (hopper_matmul_mgpu) at the plan's tuning, on device copies of the inputs."""
    import jax
    cfg, notes = jax_tuning_config(plan)
    if cfg is None:
        return Peer.skipped("; ".join(notes))
    c_name = jax_fuses_epilogue(plan)
    if c_name is None:
        notes.insert(0, "product only: JAX's kernel fuses only out = acc + C")
    lhs = next(o for o in plan.inputs if o.role == "lhs")
    rhs = next(o for o in plan.inputs if o.role == "rhs")
    base = [jax.device_put(host[nm]) for nm in [lhs.name, rhs.name] + ([c_name] if c_name else [])]
    arg_sets = [base] + [[jax.numpy.array(x, copy=True) for x in base] for _ in range(sets - 1)]
    fn, used_delay, err = None, plan.pipeline.delay_release, ""
    for delay in dict.fromkeys((plan.pipeline.delay_release, 0)):
        try:
            fn = jax_hopper_matmul(plan, cfg, delay, with_c=bool(c_name))
            out = jax.block_until_ready(fn(*arg_sets[0]))
            used_delay = delay
            break
        except Exception as exc:
            err, fn = why(exc), None
    if fn is None:
        return Peer.skipped(f"JAX's kernel failed at this tuning: {err}", note="; ".join(notes))
    if used_delay != plan.pipeline.delay_release:
        notes.append(f"delay_release {used_delay} (the plan's {plan.pipeline.delay_release} failed: {err})")
    info = check_peer(np.asarray(out), full_ref if c_name is not None else product_ref, plan.out_dtype, plan.k)
    info["note"] = "; ".join(notes)
    info["backend"] = "jax hopper_matmul_mgpu"
    info["config"] = {k: (str(v) if v is not None else None) for k, v in vars(cfg).items()}
    return Peer(jax_contender("jax_pallas", fn, arg_sets), info, close=arg_sets.clear)


# ---------------------------------------------------------------------------------------------- torch eager / compile

def epilogue_source(spec) -> str:
    """The epilogue's statements as its checked trees read (the spec's function names; for records and notes)."""
    import ast
    return "; ".join(f"{target} = {ast.unparse(value.tree)}" for target, value in epilogue_body(spec).statements)


def torch_product(torch, out_dtype=None):
    """The product as a torch user writes it: torch.matmul (its output in the input dtype), or with `out_dtype`
    (a torch dtype) cuBLAS writing that dtype straight (torch.mm / torch.bmm's out_dtype: f16 / bf16 in, f32 out)."""
    if out_dtype is None:
        return torch.matmul

    def mixed(a, b):
        if a.dim() == 2 and b.dim() == 2:
            return torch.mm(a, b, out_dtype=out_dtype)
        batch = a.shape[0] if a.dim() == 3 else b.shape[0]
        return torch.bmm(a.expand(batch, *a.shape[-2:]), b.expand(batch, *b.shape[-2:]), out_dtype=out_dtype)
    return mixed


def torch_epilogue_fn(torch, spec, out_dtype, product=None):
    """f(lhs, rhs, *epilogue operands) -> out: `product` (default torch.matmul), then the spec's epilogue in eager
    torch ops (schedgen/bench/torch_expr.py: the checked tree walked, nothing eval'ed), cast to `out_dtype`."""
    from ...bench.torch_expr import as_output, torch_body
    op = spec.op
    out_name = next(iter(op.outputs))
    run = torch_body(torch, epilogue_body(spec), {c: float(v) for c, v in op.constants.items()})
    names = epilogue_operands(spec)
    product = product or torch.matmul

    def fn(a, b, *operands):
        acc = product(a, b)
        env = dict(zip(names, operands))
        env["acc"] = acc
        return as_output(torch, run(env)[out_name], acc.shape, out_dtype, acc.device)
    return fn


def torch_operands(torch, plan, host: dict, sets: int, device: str = "cuda") -> list[list]:
    """`sets` device copies of every input, as the function takes them: lhs, rhs (transposed views per the plan's
    flags), then the epilogue operands in the spec's order."""
    lhs = next(o for o in plan.inputs if o.role == "lhs")
    rhs = next(o for o in plan.inputs if o.role == "rhs")
    extras = [o for o in plan.inputs if o.role not in ("lhs", "rhs")]
    first = [to_torch(torch, host[o.name], o.dtype, device) for o in [lhs, rhs, *extras]]
    out = []
    for i in range(sets):
        ts = first if i == 0 else [t.clone() for t in first]
        a, b = ts[0], ts[1]
        out.append([a.transpose(-1, -2) if plan.transpose_lhs else a, b.transpose(-1, -2) if plan.transpose_rhs
                    else b, *ts[2:]])
    return out


def _torch_function(torch, case, args0: list) -> tuple:
    """(the eager function, the dtype its output is checked at, how it computes the product): the product in the
    output dtype where cuBLAS writes it, else in the input dtype (checked at that dtype's tolerance, as the cuBLAS
    peer is)."""
    plan = case.plan
    tdt = torch_dtypes(torch)
    if plan.out_dtype == plan.in_dtype:
        return torch_epilogue_fn(torch, case.spec, tdt[plan.out_dtype]), plan.out_dtype, "torch.matmul (cuBLAS)"
    product = torch_product(torch, tdt[plan.out_dtype])
    try:
        product(args0[0], args0[1])
    except (TypeError, RuntimeError) as exc:
        return (torch_epilogue_fn(torch, case.spec, tdt[plan.out_dtype]), plan.in_dtype,
                f"torch.matmul in {plan.in_dtype} (no {plan.out_dtype} output: {type(exc).__name__})")
    return (torch_epilogue_fn(torch, case.spec, tdt[plan.out_dtype], product), plan.out_dtype,
            f"torch.mm(out_dtype={plan.out_dtype}) (cuBLAS)")


def _compiled(torch, fn, args0: list, device: str = "cuda"):
    """torch.compile(TORCH_COMPILE_MODE, fullgraph, static shapes) of `fn`, compiled and autotuned by a first call
    (not timed): (the compiled function, its first output, seconds it took)."""
    torch._dynamo.reset()          # a fresh cache per spec: no recompile limit reached across specs, no stale graph
    t0 = time.perf_counter()
    compiled = torch.compile(fn, mode=TORCH_COMPILE_MODE, fullgraph=True, dynamic=False)
    out = compiled(*args0)
    torch_sync(torch, device)
    return compiled, out, time.perf_counter() - t0


def torch_epilogue_peer(case, full_ref, *, compiled: bool, device: str = "cuda") -> Peer:
    """torch.matmul + the epilogue in eager torch ops (`compiled`: torch.compile of that function) on device copies of
    the same inputs, checked against the float64 reference of the whole epilogue, then timed (`device` "cpu": the
    same construction on CPU tensors, for the tests)."""
    import torch
    plan = case.plan
    name = "torch_compile" if compiled else "torch_eager"
    if compiled and TORCH_COMPILE_MODE is None:
        return Peer.skipped("torch.compile not asked for (the caller's choice)")
    held = {"args": torch_operands(torch, plan, case.host, case.sets, device)}
    fn, check_dtype, product = _torch_function(torch, case, held["args"][0])
    epilogue = epilogue_source(case.spec)
    what = f"{product}, then `{epilogue}` in eager torch ops"
    info: dict = {"backend": "torch eager", "product": product, "epilogue": epilogue}
    if compiled:
        info.update(backend="torch.compile", config={"mode": TORCH_COMPILE_MODE, "fullgraph": True, "dynamic": False})
        what = f"torch.compile(mode={TORCH_COMPILE_MODE!r}) of: {what}"
        try:
            fn, out, info["compile_s"] = _compiled(torch, fn, held["args"][0], device)
        except Exception as exc:
            held.clear()
            torch_release(torch, device)
            return Peer.skipped(f"torch.compile(mode={TORCH_COMPILE_MODE!r}) failed: {why(exc)}", **info)
    else:
        out = fn(*held["args"][0])
    torch_sync(torch, device)
    info.update(check_peer(from_torch(torch, out, plan.out_dtype), full_ref, check_dtype, plan.k))
    info["note"] = f"{what}; torch {torch.__version__}"
    return torch_fn_peer(name, fn, held, torch, device, info)


# ---------------------------------------------------------------------------------------------- the table

def markdown(rows: list[dict]) -> str:
    """Matmul rows as a Markdown table (ratio: peer time / our time, above 1 means ours is faster), notes after."""
    found = [n for r in rows for n in (r.get("peers") or {})]
    names = ["cublas", "jax_pallas"] + [n for n in PEER_LABELS if n in found and n not in ("cublas", "jax_pallas")]
    names += list(dict.fromkeys(n for n in found if n not in names))
    head = (["spec", "variant", "backend", "kernel", "shape", "time (ms)", "TFLOP/s", "% peak"]
            + [f"vs {PEER_LABELS.get(n, n)}" for n in names] + ["verified", "rel. error"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: dict[str, str] = {}
    for r in rows:
        lines.append(_markdown_row(r, names, notes))
    out = "\n".join(lines) + "\n"
    peaks = sorted({float(r.get("peak_tflops") or PEAK_TFLOPS) for r in rows}) or [PEAK_TFLOPS]
    peak = " / ".join(f"{x:.0f}" for x in peaks) + (" (bf16 / fp8)" if len(peaks) > 1 else "")
    out += (f"\nvs a peer: its time / ours (above 1: ours is faster), both timed the same way where possible (CUDA "
            f"events; CUPTI kernel time where jax launches); peer TFLOP/s in brackets; % peak of {peak} "
            f"TFLOP/s.\n")
    if notes:
        out += "\n".join(f"- {k}: {v}" for k, v in notes.items()) + "\n"
    return out


def _markdown_row(r: dict, names: list[str], notes: dict[str, str]) -> str:
    where = r["spec"] + (f" ({r['variant']})" if r.get("variant", "default") != "default" else "")
    shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
    t = f"{r['time_ms']:.4f}" if r.get("time_ms") else "-"
    tf = f"{r['tflops']:.0f}" if r.get("tflops") else "-"
    pk = f"{r['pct_peak']:.1f}" if r.get("pct_peak") else "-"
    cells = []
    for n in names:
        p = (r.get("peers") or {}).get(n)
        if not p:
            cells.append("-")
        elif p.get("skipped"):
            cells.append("skipped")
            notes.setdefault(f"{where} {n}", p["skipped"])
        else:
            ratio = f"{p['ratio']:.2f}x" if p.get("ratio") else "-"
            pt = f"{p['tflops']:.0f} TFLOP/s" if p.get("tflops") else "-"
            bad = "" if p.get("verified", True) else ", UNVERIFIED"
            cells.append(f"{ratio} ({pt}{bad})")
            if p.get("note"):
                notes.setdefault(f"{where} {n}", p["note"])
    err = f"{r['rel_error']:.2e}" if r.get("rel_error") is not None else "-"
    if r.get("error"):
        notes[f"{where} {r['backend']}"] = r["error"]
    return "| " + " | ".join([r["spec"], r.get("variant", "default"), r["backend"], f"`{r.get('kernel', '')}`",
                              shape, t, tf, pk, *cells, "yes" if r["verified"] else "NO", err]) + " |"


matmul_markdown = markdown
