"""`bench_built`: our backends of one built spec against the family's peers, verified first, timed side by side.

The family's peers come from its manifest (`Family.peers`: the module `schedgen/families/<kind>/peers.py`).
Such a module may define (each optional):

- `peers(case) -> {name: Peer}`: the peers, each ready to time or skipped with the reason;
- `sets(in_bytes) -> int`: input copies to rotate through (default `timing.sets_for`: 3 x the L2);
- `rates(plan, time_ms) -> dict`: the rate fields of a row or peer (default: gbps or tflops by `Family.metric`);
- `row_fields(case) -> dict`: the family's own fields of every row;
- `FLAT_PEER`: the peer named in the row's flat peer / peer_time_ms / ratio fields;
- `NESTED_PEERS` (default True): whether rows carry the `peers` object;
- `markdown(rows) -> str`: the family's table.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from types import ModuleType
from typing import Any, Mapping, Sequence

from .. import registry as families
from .case import OURS, Case, Peer, in_bytes, why
from .rows import base_row, family_peers, skip_row
from .timing import block_for, interleaved, ratio_of, sets_for

# torch and jax share the GPU in one process here: keep XLA from taking 75% of the memory up front.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _hook(peers: ModuleType | None, name: str, default: Any = None) -> Any:
    return getattr(peers, name, default) if peers is not None else default


def input_sets(plan) -> int:
    """Input copies to rotate through for this plan (its family's rule), as bench and tune's measurement use."""
    rule = _hook(family_peers(families.of(plan)), "sets", sets_for)
    return rule(in_bytes(plan))


def default_rates(metric: str):
    def rates(plan, ms: float | None) -> dict:
        if not ms:
            return {}
        if metric == "tflops":
            return {"tflops": plan.flops / (ms * 1e-3) / 1e12}
        return {"gbps": plan.bytes_moved / (ms * 1e-3) / 1e9}
    return rates


def gpu_missing() -> str | None:
    """Why nothing can be timed here (no usable GPU), or None."""
    try:
        from ..runtime import driver
        ok, reason = driver.available()
    except Exception as exc:
        return f"CUDA unavailable: {why(exc)}"
    return None if ok else reason


def check_at(plan, at: Mapping[str, int]) -> list[str]:
    """What is wrong with `at` as the sizes to time a dynamic package at (each one a phrase), [] when it is legal:
    every name one of the plan's dynamic sizes, every value in its range."""
    ranges = {r.name: r for r in plan.launch.dynamic_sizes}
    if not ranges:
        return [f"{plan.launch.name} has no dynamic size (its sizes are fixed: -D NAME=VALUE rebuilds it at others)"]
    problems = []
    for name, value in at.items():
        if name not in ranges:
            problems.append(f"{name} is not a dynamic size of {plan.launch.name} (its dynamic sizes: {', '.join(ranges)})")
        elif (why := ranges[name].check(value)) is not None:
            problems.append(f"{name}={value}: {name} {why}")
    return problems


def bench_built(built, backends: Sequence[str], *, iters: int = 50, warmup: int = 10,
                env: dict | None = None, at: Mapping[str, int] | None = None) -> list[dict]:
    """One row per backend of the plan in `backends`: verified, then timed interleaved with the family's peers.
    A dynamic-size package is timed at `at` (its dynamic sizes; those not named: their max; check_at says whether
    `at` is legal). Without a GPU every backend's row is a skip row (`skipped`: the reason) and nothing is built or
    timed."""
    plan = built.plan
    family = families.of(plan)
    if family.multi_device:
        raise ValueError(f"{plan.launch.name}: a multi-device kernel ({plan.num_devices} GPUs); bench/multi_gpu.py times it")
    backends = [b for b in backends if b in plan.launch.backends]
    missing = gpu_missing()
    if missing is not None:
        return [skip_row(plan, b, missing) for b in backends]
    return _bench(built, family, backends, iters=iters, warmup=warmup, env=env, at=at)


def _bench(built, family, backends: list[str], *, iters: int, warmup: int, env: dict | None,
           at: Mapping[str, int] | None = None) -> list[dict]:
    from ..build import package
    from ..reference import random_inputs
    from ..runtime.kernel import load_package
    from .. import plan as planner
    from ..verify import verify_built
    from .environment import ClockSampler, environment, gpu_state
    mod = family_peers(family)
    kernel = load_package(package(built, tempfile.mkdtemp(prefix="schedgen-bench-")))
    env = env or environment()
    # a dynamic package is timed (and verified) at `at`, else its sizes' max: its peers see the spec at those sizes
    at = {r.name: int((at or {}).get(r.name, r.max)) for r in built.plan.launch.dynamic_sizes}
    checks = {c.backend: c for c in verify_built(built, backends, kernel=kernel, backward=False,
                                                 **({"count": 1, "small": at} if at else {}))}
    if at:
        built = dataclasses.replace(built, spec=spec_at_sizes(built.spec, at))
        built = dataclasses.replace(built, plan=planner.plan(built.spec, built.source))
    plan = built.plan
    case = Case(built, random_inputs(built.spec, plan.sizes, seed=1), 0, iters, warmup)
    case.sets = _hook(mod, "sets", sets_for)(in_bytes(plan))
    peers: dict[str, Peer] = _hook(mod, "peers", lambda c: {})(case)
    before = gpu_state()
    with ClockSampler() as clocks:
        timed, errors = _time_all(kernel, case, backends, peers, at)
    after = gpu_state()
    rates = _hook(mod, "rates", None) or default_rates(family.metric)
    infos = {name: _peer_info(name, p, timed, rates, plan) for name, p in peers.items()}
    extra = _hook(mod, "row_fields", lambda c: {})(case)
    rows = []
    for backend in backends:
        row = base_row(plan, backend, checks.get(backend), env, **extra, gpu_before=before, gpu_after=after,
                       gpu_during=clocks.summary())
        ours = timed.get(backend) or {"time_ms": None, "error": errors.get(backend, "not timed")}
        rows.append(_finish_row(row, ours, infos, rates, plan, mod))
    return rows


def spec_at_sizes(spec, at: dict):
    """The spec with its dynamic sizes fixed at `at` (the shapes of one call of a dynamic package)."""
    sizes = {**spec.op.sizes, **{k: int(v) for k, v in at.items()}}
    return spec.model_copy(update={"op": spec.op.model_copy(update={"sizes": sizes})})


def _time_all(kernel, case: Case, backends: list[str], peers: dict[str, Peer],
              sizes: dict | None = None) -> tuple[dict, dict]:
    """Our backends (a dynamic package at `sizes`) and the peers, in one interleaved timing; then the peers' memory
    released."""
    plan = case.plan
    contenders, keep, errors = [], [], {}
    for backend in backends:
        try:
            c, held = OURS[backend](kernel, plan, case.host, case.sets, *([sizes] if sizes else []))
        except Exception as exc:
            errors[backend] = why(exc)
            continue
        contenders.append(c)
        keep.append(held)
    contenders += [p.contender for p in peers.values() if p.contender is not None]
    try:
        timed = interleaved(contenders, block=block_for(case.iters), warmup=case.warmup) if contenders else {}
    finally:
        for p in peers.values():
            if p.close is not None:
                p.close()
        del keep
    return timed, errors


def _peer_info(name: str, peer: Peer, timed: dict, rates, plan) -> dict:
    info = dict(peer.info)
    if peer.contender is None:
        return info
    got = timed.get(peer.contender.name, {})
    if got.get("error"):
        return {**info, "skipped": f"{name} failed: {got['error']}"}
    info.update(got)
    info.update(rates(plan, info.get("time_ms")))
    return info


def _finish_row(row: dict, ours: dict, infos: dict, rates, plan, mod) -> dict:
    if ours.get("error"):
        row.update(time_ms=None, error=ours["error"])
        if _hook(mod, "NESTED_PEERS", True) and infos:
            row["peers"] = {k: dict(v) for k, v in infos.items()}
        return row
    row.update(ours)
    row.update(rates(plan, ours["time_ms"]))
    row_peers = {}
    for name, info in infos.items():
        entry = dict(info)
        if info.get("time_ms"):
            entry["ratio"], entry["ratio_basis"] = ratio_of(ours, info)
        row_peers[name] = entry
    if _hook(mod, "NESTED_PEERS", True) and row_peers:
        row["peers"] = row_peers
    flat = _hook(mod, "FLAT_PEER")
    if flat is not None:
        p = row_peers.get(flat, {})
        row.update(peer=flat, peer_time_ms=p.get("time_ms"), ratio=p.get("ratio"))
    return row
