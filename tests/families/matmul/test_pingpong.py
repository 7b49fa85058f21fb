"""Ping-pong consumers (issue 17: schedule.pipeline.consumer_schedule): each of the two consumer warpgroups owns a whole
tile and they take alternate tiles of the block's persistent sequence, so one's epilogue runs under the other's
wgmma. On the CPU: the plan (whole-tile wgmma shapes, one empty-barrier arrival per CTA, the kernel name), every
located error (num_compute_wgs, wg_axis, a tile too big for one consumer's registers, the Pallas backend, the
families that take cooperative only), explain, the tune knob, the rendered CUDA (a golden; the ordering barrier's
handshake), and NVRTC builds of every variant with their SASS (wgmma of the tile's width, no local-memory spills,
the named-barrier arrive of the ordered form). On the GPU (marked gpu): pingpong kernels against float64 at awkward
shapes."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, SPECS_DIR, opcodes, plan_errors, plan_spec
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.explain import explain
from schedgen.families.matmul.tune import matmul_aliases
from schedgen.frontend.validate import load_spec
from schedgen.plan import dims as D
from schedgen.render import render
from schedgen.toolchain.nvrtc import resource_usage, sass

BASE = ROOT / "tests" / "data" / "matmul_base.yaml"          # 4096^3 bf16, 128x256x64, cooperative, cluster 2x1
PINGPONG = ROOT / "tests" / "data" / "matmul_pingpong.yaml"  # f16 -> f32 gelu(acc + bias), dynamic M, cluster 2x1
GOLDEN = Path(__file__).resolve().parent / "golden"
CUDA = {"schedule.backends": ["cuda"]}
# the base spec as ping-pong: 128 x 128 tiles (each consumer m64n128 x 2 M-blocks), no wg_axis
PP = {**CUDA, "schedule.pipeline.consumer_schedule": "pingpong", "schedule.pipeline.wg_axis": None,
      "schedule.in_specs.b.block_shape": [64, 128], "schedule.out_specs.out.block_shape": [128, 128],
      "schedule.pipeline.max_concurrent_steps": 6}
NOCLUSTER = {"schedule.cluster": [1, 1], "schedule.in_specs.b.collective_axes": []}
RAGGED = {"op.sizes": {"M": 3000, "N": 5000, "K": 1000}, **NOCLUSTER,
          "schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero"}


# ------------------------------------------------------------------------------------------------ planning

def test_each_consumer_owns_the_whole_tile():
    p = plan_spec(BASE, PP)
    assert p.warps.consumer_schedule == "pingpong" and p.warps.pingpong
    assert (p.warps.num_consumers, p.warps.wg_tile_m, p.warps.wg_tile_n, p.mma.m_blocks, p.mma.wgmma_regs, p.warps.acc_regs) == (2, 128, 128, 2, 64, 128)
    # a stage is read by one consumer in each CTA of the 2-CTA cluster (cooperative: both consumers of both)
    assert p.pipeline.empty_arrivals == 2 and plan_spec(BASE, CUDA).pipeline.empty_arrivals == 4
    assert p.launch.kernel_name.endswith("_c2x1_pp")
    # each consumer has its own epilogue staging buffers
    (epi,) = [b for b in p.pipeline.smem_buffers if b.name == "epi"]
    assert epi.count == 2 * p.staging.epi_buffers


def test_a_64_row_tile_is_one_m_block_of_n256():
    p = plan_spec(BASE, {**PP, "schedule.in_specs.a.block_shape": [64, 64], "schedule.in_specs.b.block_shape": [64, 256],
                     "schedule.out_specs.out.block_shape": [64, 256], "schedule.pipeline.max_concurrent_steps": 4})
    assert (p.warps.wg_tile_m, p.warps.wg_tile_n, p.mma.m_blocks, p.mma.wgmma_regs, p.warps.acc_regs) == (64, 256, 1, 128, 128)


def test_pingpong_errors_are_located_and_reported_together():
    lines = plan_errors(BASE, {**CUDA, "schedule.pipeline.consumer_schedule": "pingpong",
                           "schedule.pipeline.num_compute_wgs": 1})
    by_field = {re.search(r": (schedule\.[\w.]+):", ln).group(1): ln for ln in lines}
    assert "matmul_base.yaml:" in lines[0]
    assert "write num_compute_wgs: 2" in by_field["schedule.pipeline.num_compute_wgs"]
    assert "leave wg_axis out" in by_field["schedule.pipeline.wg_axis"]
    regs = by_field["schedule.pipeline.compute_registers"]
    assert "256 f32 accumulators (128 x 256 / 128)" in regs and "128 x 128 or 64 x 256" in regs


def test_the_pallas_backend_is_a_located_error():
    (line,) = [ln for ln in plan_errors(BASE, {**PP, "schedule.backends": ["cuda", "pallas"]})
               if "consumer_schedule" in ln.split(":")[3]]
    assert "schedule.pipeline.consumer_schedule" in line and "emit_pipeline_warp_specialized" in line
    assert "schedule.backends: [cuda]" in line


@pytest.mark.parametrize("spec", ["attention_bf16_4096.yaml", "add_bf16.yaml", "collective_matmul_bf16_1024x4096.yaml"])
def test_families_without_pingpong_refuse_it(spec):
    """The collective matmul has the field and takes cooperative only; attention and map have no consumer_schedule
    (an unknown key, issue 42)."""
    lines = plan_errors(SPECS_DIR / spec, {"schedule.pipeline.consumer_schedule": "pingpong"})
    assert len(lines) == 1 and "schedule.pipeline.consumer_schedule" in lines[0], lines
    assert "cooperative" in lines[0] if spec.startswith("collective") else "unknown key" in lines[0], lines


def test_explain_says_pingpong():
    text = explain(plan_spec(BASE, PP))
    assert "ping-pong (pingpong)" in text and "alternate tiles" in text and "take turns" in text
    assert "one consumer reads a stage" in text
    assert "ping-pong" not in explain(plan_spec(BASE, CUDA))


def test_no_unordered_pingpong():
    """Regression (H200, 2026-12-04): ping-pong without the ordering barrier failed at launch (unspecified launch
    failure): a consumer a ring round ahead of the other waits on a stage's full-barrier parity that an earlier
    round already completed. The value is gone; it is a validation error naming the legal ones."""
    with pytest.raises(SpecErrors, match="cooperative.*pingpong"):
        plan_spec(BASE, {**PP, "schedule.pipeline.consumer_schedule": "pingpong_unordered"})


def test_tune_knob_sets_the_field():
    spec, _ = load_spec(str(BASE))
    ((path, index),) = matmul_aliases(spec)["consumer_schedule"]
    assert path == ("schedule", "pipeline", "consumer_schedule") and index is None


# -------------------------------------------------------------------------------------------------- render

def test_rendered_pingpong_cuda_matches_golden(update_golden):
    for stem, overrides in (("matmul_pingpong", {}),
                            ("matmul_pingpong_direct", {**RAGGED, "schedule.epilogue.store": "direct"})):
        text = render(plan_spec(PINGPONG, overrides), "cuda")
        golden = GOLDEN / f"{stem}.cu"
        if update_golden:
            golden.write_text(text)
            continue
        assert text == golden.read_text(), f"{golden.name} differs (pytest --update-golden)"


def test_consumers_take_alternate_tiles_and_the_ordered_form_takes_turns():
    cu = render(plan_spec(BASE, PP), "cuda")
    # consumer w starts at its CTA's w-th tile (of 512 cluster tiles), steps two tiles, and finds its ring position
    # from the tile index (64 k-steps a tile)
    assert "for (int t = cluster_id + w * num_clusters, lt = w; t < 512; t += 2 * num_clusters, lt += 2)" in cu
    assert "int it = lt * 64;" in cu and "const int m_off = 0, n_off = 0;" in cu
    assert "if (lt > 0) sg_named_sync(4 + w, 256);" in cu
    assert "if (t + num_clusters < 512) sg_named_arrive(5 - w, 256);" in cu
    # dynamic sizes: the ring position uses the call's k-steps
    dyn = render(plan_spec(BASE, {**PP, "op.sizes.K": {"dynamic": True, "max": 8192, "multiple_of": 64}}), "cuda")
    assert "int it = lt * k_iters;" in dyn and "const int k_iters = " in dyn
    cooperative = render(plan_spec(BASE, CUDA), "cuda")
    assert "lt = w" not in cooperative and "int it = 0;" in cooperative


# ------------------------------------------------------------------------------------- NVRTC builds and SASS

VARIANTS = {
    "cluster2x1_multicast": {},
    "nocluster": NOCLUSTER,
    "tile64x256": {"schedule.in_specs.a.block_shape": [64, 64], "schedule.in_specs.b.block_shape": [64, 256],
                   "schedule.out_specs.out.block_shape": [64, 256], "schedule.pipeline.max_concurrent_steps": 4},
    "dynamic_m": {"op.sizes.M": {"dynamic": True, "max": 8192, "multiple_of": 256}},
    "dynamic_mnk": {"op.sizes": {"M": {"dynamic": True, "max": 8192, "multiple_of": 256},
                                 "N": {"dynamic": True, "min": 128, "max": 8192, "multiple_of": 128},
                                 "K": {"dynamic": True, "min": 64, "max": 8192, "multiple_of": 64}}},
    "ragged": RAGGED,
    "f32_out_bias_residual": {**RAGGED, "op.outputs.out.dtype": "f32", "schedule.epilogue.tile": [64, 32],
                              "op.inputs.bias": {"shape": ["N"], "dtype": "f32"},
                              "op.inputs.res": {"shape": ["M", "N"], "dtype": "bf16"},
                              "op.epilogue": "out = acc + bias + res"},
    "direct_store": {**NOCLUSTER, "schedule.epilogue.store": "direct", "schedule.epilogue.tile": None},
    "batched": {"op.sizes": {"M": 512, "N": 512, "K": 256, "B": 2}, "op.inputs.a.shape": ["B", "M", "K"],
                "op.inputs.b.shape": ["B", "K", "N"], "op.outputs.out.shape": ["B", "M", "N"]},
    "delay_release0": {"schedule.in_specs.a.delay_release": 0, "schedule.in_specs.b.delay_release": 0},
}
SPECS = {"spec_matmul_pingpong": PINGPONG,
         **{f"user_{p.stem}": p for p in sorted((ROOT / "tests" / "data" / "pingpong").glob("*.yaml"))}}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    out = {name: build_spec(BASE, {**PP, **ov}, cache=cache) for name, ov in VARIANTS.items()}
    out.update({name: build_spec(path, CUDA, cache=cache) for name, path in SPECS.items()})
    return {name: (b, sass(b.files["kernel.cubin"])) for name, b in out.items()}


@pytest.mark.parametrize("name", list(VARIANTS) + list(SPECS))
def test_sass_has_the_tiles_wgmma_and_no_spills(built, name):
    b, text = built[name]
    p = b.plan
    assert p.warps.pingpong
    ops = opcodes(text)
    want = f"HGMMA.64x{p.tiles.tile_n}x16.F32" + (".BF16" if p.in_dtype == "bf16" else "")
    assert want in set(re.findall(r"\bHGMMA\.[0-9A-Za-z_.]+", text))
    assert not [op for op in ops if op.split(".")[0] in ("LDL", "STL")], "local-memory spills"
    usage = resource_usage(b.files["kernel.cubin"])[p.launch.kernel_name]
    assert usage["STACK"] == 0 and usage["LOCAL"] == 0 and usage["REG"] <= 65536 // p.launch.threads
    # the ordering barrier's arrive (bar.arrive) is the ordered form's only
    assert "BAR.ARV" in ops                  # the ordering handshake
    assert ("UTMALDG.%dD.MULTICAST" % len(p.launch.kernel_args[1 if p.cluster.multicast == "rhs" else 0].shape) in ops) == bool(p.cluster.multicast)
    assert any(op.startswith("UTMASTG") for op in ops) == (p.staging.epi_store == "tma")


def test_bench_specs_are_pingpong_and_cuda_only():
    assert len(SPECS) >= 4
    for name, path in SPECS.items():
        p = plan_spec(path)
        assert p.warps.pingpong and p.launch.backends == ("cuda",), name


# ---------------------------------------------------------------------------------------------- on the GPU

def _verify(path, overrides=None, count=1):
    from schedgen.verify import verify_built
    b = build_spec(str(path), overrides or {}, cache=Cache(Path(tempfile.mkdtemp(prefix="schedgen-pp-"))))
    checks = verify_built(b, ["cuda"], count=count)
    assert checks and all(c.ok for c in checks), checks
    return checks


GPU_CASES = {
    # ragged thousands (issue 17's 3000x5000x1000, bf16), 128 x 128 tiles
    "ragged_3000x5000x1000": (BASE, {**PP, **RAGGED}),
    # f16 in, f32 out, gelu(acc + bias), 4096 x 4096 x 1024: Linear with a heavy epilogue
    "gelu_bias_f16_f32": (ROOT / "tests/data/pingpong/linear_bias_gelu_f16_4096x4096x1024_pp.yaml", {}),
    # 2-CTA cluster multicasting rhs, 4096^3
    "cluster2x1": (BASE, PP),
    # 15 tiles over 2 blocks: 8 and 7 local tiles (an odd count: the last tile's handshake has no partner)
    "few_blocks_odd_tiles": (BASE, {**PP, **NOCLUSTER, "op.sizes": {"M": 640, "N": 384, "K": 512},
                                    "schedule.persistent.num_blocks": 2}),
    "tile64x256_direct_ragged": (BASE, {**PP, **RAGGED, "schedule.epilogue.store": "direct", "schedule.epilogue.tile": None,
                                        "schedule.in_specs.a.block_shape": [64, 64],
                                        "schedule.in_specs.b.block_shape": [64, 256],
                                        "schedule.out_specs.out.block_shape": [64, 256],
                                        "schedule.pipeline.max_concurrent_steps": 4}),
    "batched_delay0": (BASE, {**PP, **VARIANTS["batched"], **VARIANTS["delay_release0"]}),
    "f32_out_bias_residual_ragged": (BASE, {**PP, **VARIANTS["f32_out_bias_residual"]}),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_pingpong_matches_float64_on_gpu(case):
    path, overrides = GPU_CASES[case]
    _verify(path, overrides)


@pytest.mark.gpu
def test_pingpong_dynamic_m_at_three_sizes_on_gpu():
    """One cubin (cluster 2x1, dynamic M) at three token counts."""
    checks = _verify(PINGPONG, count=3)
    assert len({tuple(sorted(c.shape.items())) for c in checks}) == 3, checks


def test_gpu_cases_plan_on_the_cpu():
    """What the GPU tests build is legal (so a GPU run fails only on numbers)."""
    for case, (path, overrides) in GPU_CASES.items():
        p = plan_spec(path, overrides)
        assert p.warps.pingpong, case
    p = plan_spec(BASE, GPU_CASES["few_blocks_odd_tiles"][1])
    assert p.tiles.num_tiles == 15 and p.launch.num_blocks == 2          # 8 and 7 tiles per block: an odd count in one
    assert D.is_static(p.tiles.num_tiles)


# ------------------------------------------------------------------------------------------------- the tuner

def test_tuner_sweeps_consumer_schedule(tmp_path):
    """The knob expands into each schedule; a ping-pong point whose tile is too big for one consumer's registers is
    pruned with its located reason, the rest are distinct kernels."""
    from schedgen import tune as T
    text = (SPECS_DIR / "matmul_bf16_4096_tune.yaml").read_text()
    text = text.split("tune:\n")[0].replace("    wg_axis: m\n", "").replace("  cluster: [1, 1]\n",
                                                                            "  cluster: [1, 1]\n  backends: [cuda]\n")
    spec = tmp_path / "sweep.yaml"
    spec.write_text(text + "tune:\n  params:\n    tile_n: [128, 256]\n"
                           "    consumer_schedule: [cooperative, pingpong]\n")
    space = T.load_space(spec)
    (knob,) = [k for k in space.knobs if k.name == "consumer_schedule"]
    assert [str(t) for t in knob.targets] == ["schedule.pipeline.consumer_schedule"]
    pruning = T.prune(space)
    assert pruning.total == 4 and len(pruning.kept) == 3
    (group,) = pruning.groups
    assert group.field == "schedule.pipeline.compute_registers" and group.count == 1
    assert {(c.plan.tiles.tile_n, c.plan.warps.consumer_schedule) for c in pruning.kept} == {
        (128, "cooperative"), (256, "cooperative"), (128, "pingpong")}


def test_explain_draw_model_gives_alternate_tiles_to_the_consumers():
    """`explain --draw`'s pipeline model: tile 0 is consumer 0's, tile 1 consumer 1's, and consumer 1's k-loop runs
    while consumer 0's epilogue does (cooperative: both consumers on every k-step)."""
    from schedgen.families.matmul.draw import simulate_matmul, summary
    p = plan_spec(BASE, PP)
    spans, k = simulate_matmul(p)
    rows = {(s.row, s.kind): [] for s in spans}
    for s in spans:
        rows[(s.row, s.kind)].append(s)
    assert [s.label for s in rows[("consumer 0", "epilogue")]] == ["epilogue t0"]
    assert [s.label for s in rows[("consumer 1", "epilogue")]] == ["epilogue t1"]
    assert len(rows[("consumer 0", "mma")]) == len(rows[("consumer 1", "mma")]) == k
    epi0 = rows[("consumer 0", "epilogue")][0]
    assert any(m.start < epi0.end and m.end > epi0.start for m in rows[("consumer 1", "mma")])
    assert "ping-pong (pingpong)" in " ".join(summary(p))
    coop_spans, coop_k = simulate_matmul(plan_spec(BASE, CUDA))
    assert sum(s.row == "consumer 1" and s.kind == "mma" for s in coop_spans) == 2 * coop_k


# ------------------------------------------------------------------- the barrier protocol, as a model on the CPU

class _Mbar:
    """An mbarrier: `count` arrivals complete a phase; wait(parity) passes once the phase of that parity is done
    (the current phase's parity differs), as PTX's mbarrier.try_wait.parity."""

    def __init__(self, count: int):
        self.count, self.pending, self.phases = count, 0, 0

    def arrive(self):
        self.pending += 1
        if self.pending == self.count:
            self.pending, self.phases = 0, self.phases + 1

    def done(self, parity: int) -> bool:
        return (self.phases & 1) != parity


def _run_protocol(seed: int, num_tiles: int, cluster_id: int, num_clusters: int, k_iters: int, stages: int,
                  delay: int, ordered: bool, mutant: str = "") -> dict[int, list[int]]:
    """The rendered kernel's producer and two ping-pong consumers of one CTA (the loops of templates/matmul/cuda.cu.j2:
    ring positions, full/empty parities, delay_release, the named-barrier handshake), run in a random interleaving.
    Checks that every read finds the ring position it expects, that a named barrier never holds two arrivals nor
    one left over at exit, and that nothing deadlocks; returns the tiles each consumer computed. `mutant` breaks
    one rule (to show the checks can fail)."""
    import random
    rng = random.Random(seed)
    full = [_Mbar(1) for _ in range(stages)]
    empty = [_Mbar(1) for _ in range(stages)]
    slot = [None] * stages            # what a stage holds once landed: (ring position, tile, k-step)
    named = {4: 0, 5: 0}              # bar.arrive tokens not yet taken by a bar.sync
    done: dict[int, list[int]] = {0: [], 1: []}

    def producer():
        it = 0
        for t in range(cluster_id, num_tiles, num_clusters):
            for kb in range(k_iters):
                s, phase = it % stages, (it // stages) & 1
                yield lambda s=s, phase=phase: empty[s].done(phase ^ 1)
                slot[s] = (it, t, kb)         # the TMA lands (expect_tx + complete_tx: the one arrival)
                full[s].arrive()
                it += 1

    def release(q):
        assert slot[q % stages][0] == q, "a stage refilled before its release"
        empty[q % stages].arrive()

    def consumer(w):
        lt, it = w, 0
        for t in range(cluster_id + w * num_clusters, num_tiles, 2 * num_clusters):
            it = it if mutant == "cooperative_it" else lt * k_iters
            if ordered and (lt > 0 or mutant == "sync_first"):
                yield lambda: named[4 + w] > 0
                named[4 + w] -= 1
            for kb in range(k_iters):
                s = it % stages
                yield lambda s=s, it=it: full[s].done((it // stages) & 1)
                assert slot[s][1:] == (t, kb), f"consumer {w} read {slot[s]} for tile {t} k-step {kb}"
                if delay:
                    if kb > 0:
                        release(it - 1)
                else:
                    release(it)
                it += 1
            if ordered and (t + num_clusters < num_tiles or mutant == "arrive_last"):
                assert named[5 - w] == 0, "a second arrival on a named barrier before its sync"
                named[5 - w] += 1
            if delay:
                release(it - 1)
            yield lambda: True                # the epilogue: any length
            done[w].append(t)
            lt += 2

    agents = [producer(), consumer(0), consumer(1)]
    waits = [lambda: True] * 3
    while agents:
        ready = [i for i, a in enumerate(agents) if waits[i]()]
        assert ready, "deadlock"
        i = rng.choice(ready)
        try:
            waits[i] = next(agents[i])
        except StopIteration:
            del agents[i], waits[i]
    assert named == {4: 0, 5: 0}, "an arrival left on a named barrier at exit"
    return done


CASES = [(seed, 1 + seed % 11, seed % (1 + seed % 4), 1 + seed % 4, 1 + seed % 5, 2 + seed % 5) for seed in range(40)]


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("delay", [0, 1])
def test_pingpong_protocol_never_deadlocks_and_reads_the_right_stages(ordered, delay):
    for seed, num_tiles, cluster_id, num_clusters, k_iters, stages in CASES:
        done = _run_protocol(seed, num_tiles, cluster_id, num_clusters, k_iters, stages, delay, ordered)
        mine = list(range(cluster_id, num_tiles, num_clusters))
        assert done[0] == mine[0::2] and done[1] == mine[1::2]


@pytest.mark.parametrize("mutant, message", [
    ("cooperative_it", "consumer 1 read|deadlock"),  # each consumer counting its own ring position from 0
    ("sync_first", "deadlock"),                    # consumer 0 waiting for a turn before its first tile
    ("arrive_last", "left on a named barrier"),    # the last tile's consumer handing a turn to nobody
])
def test_the_protocol_model_catches_a_broken_rule(mutant, message):
    with pytest.raises(AssertionError, match=message):
        for seed, num_tiles, cluster_id, num_clusters, k_iters, stages in CASES:
            _run_protocol(seed, num_tiles, cluster_id, num_clusters, k_iters, stages, 1, True, mutant)
