"""The bench package on the CPU: the interleaved-rounds timing primitive (with fake clocks), bench_built's row
building through a family's peers module (fakes for the GPU parts), and the cuBLAS peer with a fake torch."""
from __future__ import annotations

import gc
import sys
import types
import weakref

import numpy as np
import pytest

from conftest import SPECS_DIR
import schedgen.verify  # noqa: F401  (imported before any test patches schedgen.runtime.kernel.load_package:
#                          imported first under the patch, verify kept the fake for the rest of the session)
from schedgen import bench
from schedgen.bench import run, timing
from schedgen.bench.case import Peer
from schedgen.bench.timing import Contender, interleaved


def _clocks(log: list, times: dict, cupti: bool = True):
    """Fake clocks: each logs (clock, contender, first call, calls), runs the calls, answers from `times`."""
    def make(clock):
        def block(c, start, n):
            log.append((clock, c.name, start, n))
            for j in range(n):
                c.call(start + j)
            if clock == "cupti" and not cupti:
                return None
            seq = times[(clock, c.name)]
            return seq[len([x for x in log if x[:2] == (clock, c.name)]) - 1]
        return block
    return {k: make(k) for k in ("cuda-events", "cupti", "wall")}


def test_contenders_interleave_within_each_round_and_the_median_is_kept():
    log, calls = [], {"a": [], "b": []}
    a = Contender("a", calls["a"].append, stream=0, sync=lambda: None)
    b = Contender("b", calls["b"].append, stream=None, sync=lambda: None)
    times = {("cuda-events", "a"): [5.0, 1.0, 3.0], ("cupti", "a"): [0.9, 0.8, 0.7],
             ("cupti", "b"): [2.0, 9.0, 4.0], ("wall", "b"): [3.0, 3.0, 3.0]}
    got = interleaved([a, b], block=4, rounds=3, warmup=2, clocks=_clocks(log, times))
    # round r: a (events, cupti) then b (cupti, wall); call indices continue over rounds (input sets rotate)
    assert [(k, n, s) for k, n, s, _ in log] == [
        ("cuda-events", "a", 2), ("cupti", "a", 2), ("cupti", "b", 2), ("wall", "b", 2),
        ("cuda-events", "a", 6), ("cupti", "a", 6), ("cupti", "b", 6), ("wall", "b", 6),
        ("cuda-events", "a", 10), ("cupti", "a", 10), ("cupti", "b", 10), ("wall", "b", 10)]
    assert calls["a"][:2] == [0, 1] and len(calls["a"]) == 2 + 3 * 2 * 4
    # kernel time is the primary clock where CUPTI answers (the rate then stands on the ratios' clock); events beside
    assert got["a"] == {"time_ms": 0.8, "timing": "cupti", "events_ms": 3.0, "cupti_ms": 0.8, "rounds": 3,
                        "block": 4, "spread": pytest.approx(0.2 / 0.8)}
    assert got["b"]["time_ms"] == 4.0 and got["b"]["timing"] == "cupti" and got["b"]["wall_ms"] == 3.0


def test_without_cupti_a_stream_contender_is_timed_by_events():
    log = []
    a = Contender("a", lambda i: None, stream=0, sync=lambda: None)
    got = interleaved([a], block=2, rounds=2, warmup=0,
                      clocks=_clocks(log, {("cuda-events", "a"): [2.0, 4.0]}, cupti=False))
    assert got["a"]["timing"] == "cuda-events" and got["a"]["time_ms"] == 3.0 and "cupti_ms" not in got["a"]


def test_without_cupti_jax_contenders_fall_back_to_wall_clock():
    log = []
    b = Contender("b", lambda i: None, stream=None, sync=lambda: None)
    got = interleaved([b], block=2, rounds=2, warmup=0,
                      clocks=_clocks(log, {("wall", "b"): [2.0, 4.0]}, cupti=False))
    assert got["b"]["timing"] == "wall" and got["b"]["time_ms"] == 3.0 and "cupti_ms" not in got["b"]
    assert [k for k, *_ in log].count("cupti") == 1        # asked once, then known to be missing


def test_a_contender_that_raises_leaves_and_the_others_go_on():
    def boom(i):
        if i >= 3:
            raise RuntimeError("illegal address\nmore")
    log = []
    a = Contender("a", boom, stream=0, sync=lambda: None)
    b = Contender("b", lambda i: None, stream=0, sync=lambda: None)
    times = {(k, n): [1.0] * 3 for k in ("cuda-events", "cupti") for n in "ab"}
    got = interleaved([a, b], block=2, rounds=3, warmup=1, clocks=_clocks(log, times))
    assert got["a"] == {"time_ms": None, "error": "RuntimeError: illegal address"}
    assert got["b"]["time_ms"] == 1.0 and got["b"]["rounds"] == 3


def test_a_contenders_scope_is_entered_once_per_block_outside_its_clocks():
    """A scope (SDPA's backend restriction) is entered around the warm-up and around each block of each clock, not
    per launch, and every launch of the contender runs inside it; a contender without one runs outside any."""
    import contextlib
    state = {"inside": False, "entered": 0}

    @contextlib.contextmanager
    def scope():
        state["entered"] += 1
        state["inside"] = True
        try:
            yield
        finally:
            state["inside"] = False
    seen = {"a": [], "b": []}
    a = Contender("a", lambda i: seen["a"].append(state["inside"]), stream=0, sync=lambda: None, scope=scope)
    b = Contender("b", lambda i: seen["b"].append(state["inside"]), stream=0, sync=lambda: None)
    times = {(k, n): [1.0] * 3 for k in ("cuda-events", "cupti") for n in "ab"}
    got = interleaved([a, b], block=4, rounds=3, warmup=2, clocks=_clocks([], times))
    assert got["a"]["time_ms"] == 1.0 and got["b"]["time_ms"] == 1.0
    assert len(seen["a"]) == 2 + 3 * 2 * 4 and all(seen["a"])         # every launch inside its scope
    assert state["entered"] == 1 + 3 * 2                              # warm-up, then once per block and clock
    assert seen["b"] and not any(seen["b"])


def test_time_stream_fn_is_the_primitive_with_one_contender(monkeypatch):
    seen = {}

    def fake(contenders, *, block, warmup, **kw):
        seen.update(names=[c.name for c in contenders], block=block, warmup=warmup)
        contenders[0].call(7)
        return {"x": {"time_ms": 1.0}}
    monkeypatch.setattr(timing, "interleaved", fake)
    calls = []
    assert timing.time_stream_fn(calls.append, 3, warmup=4, iters=50)["time_ms"] == 1.0
    assert seen == {"names": ["x"], "block": 10, "warmup": 4} and calls == [7 % 3]


def test_input_sets_follow_the_family_rule():
    from schedgen.build import build_spec
    mm = build_spec(str(SPECS_DIR / "matmul_bf16_4096.yaml")).plan
    add = build_spec(str(SPECS_DIR / "add_bf16.yaml")).plan
    assert bench.input_sets(mm) == bench.matmul_sets(2 * 4096 * 4096 * 2) == 4
    assert bench.input_sets(add) == bench.sets_for(2 * 4096 * 4096 * 2) == 3


# ---------------------------------------------------------------------------------------------- bench_built

class _Check:
    def __init__(self, backend):
        self.backend, self.ok, self.rel_error = backend, True, 1e-3


def test_bench_built_rows_from_the_family_peers(monkeypatch, tmp_path):
    """bench_built with the GPU parts faked: ours and the peers timed in one interleaved call, rows carrying the
    family's fields, the peers' ratios, the flat peer, an unusable peer skipped with its reason, peers closed."""
    from schedgen import families
    from schedgen.build import build_spec
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    built = build_spec(str(SPECS_DIR / "add_bf16.yaml"))
    closed = []
    fake = types.SimpleNamespace(
        FLAT_PEER="copy",
        peers=lambda case: {"copy": Peer(Contender("copy", lambda i: None), {"note": "n"},
                                         close=lambda: closed.append("copy")),
                            "gone": Peer.skipped("gone not available: no module")},
        row_fields=lambda case: {"sets": case.sets})
    monkeypatch.setattr(run, "family_peers", lambda fam: fake)
    monkeypatch.setattr(run, "gpu_missing", lambda: None)
    monkeypatch.setattr("schedgen.build.package", lambda b, d: d)
    monkeypatch.setattr("schedgen.runtime.kernel.load_package", lambda d: "kernel")
    monkeypatch.setattr("schedgen.verify.verify_built",
                        lambda b, backends, kernel, backward: [_Check(x) for x in backends])
    monkeypatch.setattr(run, "OURS", {"cuda": lambda k, p, h, s: (Contender("cuda", lambda i: None), []),
                                      "pallas": lambda k, p, h, s: (_ for _ in ()).throw(ImportError("no jax"))})
    timed = {"cuda": {"time_ms": 0.5, "timing": "cuda-events"}, "copy": {"time_ms": 0.4, "timing": "cuda-events"}}
    seen = []

    def fake_interleaved(contenders, **kw):
        seen.append([c.name for c in contenders])
        return {c.name: timed[c.name] for c in contenders}
    monkeypatch.setattr(run, "interleaved", fake_interleaved)
    states = iter([{"sm_clock_mhz": 1980.0, "power_limit_w": 700.0}, {"sm_clock_mhz": 1755.0, "power_limit_w": 700.0}])
    import importlib
    monkeypatch.setattr(importlib.import_module("schedgen.bench.environment"), "gpu_state", lambda: next(states))
    rows = bench.bench_built(built, ["cuda", "pallas"], iters=20, env={"gpu": "fake"})
    assert seen == [["cuda", "copy"]] and closed == ["copy"]
    # the SM clock and power limit read just before and just after the timing, in every row
    assert all(r["gpu_before"] == {"sm_clock_mhz": 1980.0, "power_limit_w": 700.0} for r in rows)
    assert all(r["gpu_after"] == {"sm_clock_mhz": 1755.0, "power_limit_w": 700.0} for r in rows)
    cuda, pallas = rows
    plan = built.plan
    assert cuda["family"] == "map" and cuda["sets"] == 3 and cuda["verified"] and cuda["env"] == {"gpu": "fake"}
    assert cuda["time_ms"] == 0.5 and cuda["gbps"] == pytest.approx(plan.bytes_moved / 0.5e-3 / 1e9)
    assert cuda["peer"] == "copy" and cuda["peer_time_ms"] == 0.4 and cuda["ratio"] == pytest.approx(0.8)
    assert cuda["peers"]["copy"]["ratio_basis"] == "cuda-events"
    assert cuda["peers"]["gone"] == {"skipped": "gone not available: no module"}
    assert pallas["time_ms"] is None and pallas["error"] == "ImportError: no jax"
    assert families.get("map").peers == "schedgen.families.map.peers"


def test_every_single_device_family_names_an_importable_peers_module():
    from schedgen import families
    for fam in families.all_families():
        if fam.multi_device:
            continue
        mod = bench.family_peers(fam)
        assert callable(mod.peers) and callable(getattr(mod, "markdown", bench.markdown_bandwidth)), fam.kind


# ---------------------------------------------------------------------------------------------- cuBLAS peer

class _T:
    """A fake torch tensor: numpy data, tracked by weak references."""
    live: "weakref.WeakSet[_T]" = weakref.WeakSet()

    def __init__(self, data):
        self.data = np.asarray(data)
        _T.live.add(self)

    def transpose(self, a, b):
        return _T(np.swapaxes(self.data, a, b))

    def clone(self):
        return _T(self.data.copy())

    def dim(self):
        return self.data.ndim

    def to(self, dev):
        return self

    def view(self, dtype):
        """bf16 <-> its int16 bits (as torch's .view between them)."""
        if dtype == "bf16":
            bits = self.data.astype(np.uint16).astype(np.uint32) << 16
            return _T(bits.view(np.float32))
        if dtype == "i16":
            return _T((np.ascontiguousarray(self.data, np.float32).view(np.uint32) >> 16).astype(np.uint16)
                      .view(np.int16))
        return self

    def detach(self):
        return self

    def contiguous(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.data


def _fake_torch(mixed_ok: bool):
    t = types.ModuleType("torch")
    t.__version__ = "0.fake"
    t.bfloat16, t.float16, t.float32, t.int16 = "bf16", "f16", "f32", "i16"
    t.from_numpy = lambda x: _T(x if x.dtype == np.int16 else np.asarray(x, dtype=np.float32))
    t.empty = lambda shape, dtype=None, device=None: _T(np.zeros(shape, np.float32))

    def matmul(a, b, out=None):
        r = a.data @ b.data
        if out is None:
            return _T(r)
        out.data[...] = r
        return out

    def mm(a, b, out_dtype=None):
        if not mixed_ok:
            raise TypeError("mm() got an unexpected keyword argument 'out_dtype'")
        return _T(a.data @ b.data)
    t.matmul, t.mm, t.bmm = matmul, mm, mm
    empties = []
    t.cuda = types.SimpleNamespace(synchronize=lambda: None, empty_cache=lambda: empties.append(len(_T.live)),
                                   current_stream=lambda: types.SimpleNamespace(cuda_stream=7))
    return t, empties


@pytest.mark.parametrize("out_dtype, mixed_ok", [("bf16", True), ("f32", True), ("f32", False)])
def test_cublas_peer_with_a_fake_torch(out_dtype, mixed_ok, monkeypatch):
    """The cuBLAS peer's three paths (out= into the input dtype, out_dtype=, the input dtype's product): it checks
    its result, its call runs after it was made (the tensors it uses are still there), and once closed none of its
    tensors is alive when the cache is emptied (the old code's `del` of closure variables, F821, left the
    mixed path's first product alive through empty_cache)."""
    from schedgen.build import build_spec
    from schedgen.families.matmul import peers as mm
    from schedgen.reference import random_inputs, reference
    from schedgen.runtime import driver
    torch, empties = _fake_torch(mixed_ok)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(driver, "ensure_context", lambda: None)
    ov = {"M": 256, "N": 256, "K": 128, "op.outputs.out.dtype": out_dtype}
    if out_dtype == "f32":
        ov.update({"schedule.pipeline.max_concurrent_steps": 3, "schedule.epilogue.tile": [64, 32]})
    built = build_spec(str(SPECS_DIR / "matmul_bf16_4096.yaml"), ov)
    plan = built.plan
    host = random_inputs(built.spec, plan.sizes, seed=1)
    ref = reference(mm.product_only(built.spec), plan.sizes, host)[plan.outputs[0].name]
    peer = mm.cublas_peer(plan, host, 2, ref)
    assert peer.info["verified"] and peer.info["rel_error"] < 1e-2, peer.info   # bf16 rounding at most
    assert ("no f32 output" in peer.info["note"]) == (not mixed_ok)
    assert peer.contender.stream == 7
    for i in range(4):
        peer.contender.call(i)                      # the timing loop calls it after cublas_peer returned
    peer.close()
    gc.collect()
    assert empties == [0]


def test_bench_built_times_a_dynamic_package_at_its_max(monkeypatch, tmp_path):
    """A dynamic package (bundled linear_gelu: M in 1..65536) is verified and timed at M = 65536: ours get the
    call's sizes, the case (and so the peers) the spec at those sizes."""
    from schedgen.build import build_spec
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    built = build_spec(str(SPECS_DIR / "linear_gelu_bf16_dynamic.yaml"))
    got = {}
    fake = types.SimpleNamespace(FLAT_PEER=None, peers=lambda case: got.setdefault("case_plan", case.plan) and {},
                                 row_fields=lambda case: {})
    monkeypatch.setattr(run, "family_peers", lambda fam: fake)
    monkeypatch.setattr(run, "gpu_missing", lambda: None)
    monkeypatch.setattr("schedgen.reference.random_inputs", lambda spec, sizes, seed: {"sizes": dict(sizes)})
    monkeypatch.setattr("schedgen.build.package", lambda b, d: d)
    monkeypatch.setattr("schedgen.runtime.kernel.load_package", lambda d: "kernel")
    monkeypatch.setattr("schedgen.verify.verify_built",
                        lambda b, backends, kernel, backward, count, small: got.setdefault("verified_at", (count, small)) and
                        [_Check(x) for x in backends])
    monkeypatch.setattr(run, "OURS", {"cuda": lambda k, p, h, s, sizes: got.setdefault("ours", (p.m, sizes)) and
                                      (Contender("cuda", lambda i: None), [])})
    monkeypatch.setattr(run, "interleaved", lambda contenders, **kw: {c.name: {"time_ms": 0.5, "timing": "ev"}
                                                                      for c in contenders})
    (row,) = bench.bench_built(built, ["cuda"], iters=5, env={"gpu": "fake"})
    assert got["verified_at"] == (1, {"M": 65536}) and got["ours"] == (65536, {"M": 65536})
    assert got["case_plan"].m == 65536 and row["shape"]["M"] == 65536 and row["time_ms"] == 0.5
