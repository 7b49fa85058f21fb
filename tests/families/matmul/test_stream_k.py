"""Stream-K on the Hopper matmul's persistent grid (issue 17: wave quantization; schedule.persistent.decomposition:
stream_k). On the CPU: the Python model of the k-step partition (every k-step of every tile run exactly once, one
finisher a tile, contributors of higher index whose part is their first), the rendered helpers compiled as host C++
and run against that model, the plan (workspace argument, name), every located error (here and in the families that
refuse it), explain, the default rule, NVRTC builds of the user shapes and a fused epilogue with their SASS (no
local memory, no ptxas verdict, the release / acquire hand-over). On the GPU (marked gpu): stream-K kernels against
float64 at ragged sizes with epilogues, grids that give each block several units, and a CUDA-graph replay."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, opcodes, plan_errors, plan_spec
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.explain import explain
from schedgen.families.matmul import stream_k as SK
from schedgen.plan import to_json
from schedgen.render import render
from schedgen.toolchain.nvrtc import resource_usage, sass

SHAPES = ROOT / "bench" / "user_shapes"
GEMM_1536 = SHAPES / "gemm_1536x3072x1536.yaml"     # 192 tiles of 128 x 192 on 132 SMs: 1.45 waves
GEMM_3000 = SHAPES / "gemm_3000x5000x1000.yaml"     # ragged M, N, K
BASE = ROOT / "tests" / "data" / "matmul_base.yaml"
MAP = ROOT / "specs" / "add_bf16.yaml"
SKW = {"schedule.persistent.decomposition": "stream_k"}
# the base spec without its 2-CTA cluster, CUDA only, stream-K
BASE_SK = {**SKW, "schedule.backends": ["cuda"], "schedule.cluster": [1, 1], "schedule.in_specs.b.collective_axes": []}
RAGGED = {"schedule.in_specs.a.out_of_bounds": "zero", "schedule.in_specs.b.out_of_bounds": "zero"}
BIAS_GELU = {"op.inputs.bias": {"shape": ["N"], "dtype": "f32"}, "op.epilogue": "out = gelu(acc + bias)"}


# ------------------------------------------------------------------------------------------- the partition model

PARTITIONS = [(192, 24, 132), (144, 12, 132), (648, 16, 132), (480, 16, 132), (100, 7, 132), (264, 8, 132),
              (13, 5, 4), (7, 1, 3), (50, 3, 8), (9, 64, 8), (1, 10, 1), (133, 2, 132)]


@pytest.mark.parametrize("tiles, k_iters, grid", PARTITIONS)
def test_every_k_step_runs_once_and_each_tile_has_one_finisher(tiles, k_iters, grid):
    sk = SK.sk_tiles(tiles, grid)
    s = sk * k_iters
    runs: dict[tuple[int, int], int] = {}
    parts: dict[int, list[tuple[int, int, int]]] = {}        # tile -> (block, lo, hi)
    for c in range(grid):
        us = SK.units(tiles, k_iters, grid, c)
        for n, (t, lo, hi) in enumerate(us):
            assert 0 <= lo < hi <= k_iters
            for k in range(lo, hi):
                runs[(t, k)] = runs.get((t, k), 0) + 1
            parts.setdefault(t, []).append((c, lo, hi))
            if lo != 0:
                assert n == 0, "only a block's first part can start inside a tile (one partial slot a block)"
    assert runs == {(t, k): 1 for t in range(tiles) for k in range(k_iters)}
    for t, ps in parts.items():
        finishers = [c for c, lo, _ in ps if lo == 0]
        assert len(finishers) == 1
        if t >= sk:
            assert len(ps) == 1 and ps[0][1:] == (0, k_iters), "a data-parallel tile runs whole"
            continue
        first, peers = SK.contributors(t, k_iters, grid, s)
        assert first == finishers[0] and sorted(c for c, lo, _ in ps if lo != 0) == peers
        assert all(p > first for p in peers), "a finisher waits only for blocks of higher index"
    # the hybrid: whole waves of data-parallel tiles after the stream-K ones
    assert (tiles - sk) % grid == 0 and (sk == 0 or sk >= min(tiles, grid))


def test_stream_k_tiles_are_the_tail_plus_a_wave():
    assert SK.sk_tiles(192, 132) == 192 and SK.sk_tiles(648, 132) == 120 + 132
    assert SK.sk_tiles(264, 132) == 0 and SK.sk_tiles(100, 132) == 100


def _host_harness(cu: str, grids: list[int]) -> str:
    """The rendered stream-K helpers (sg_sk_tiles .. sg_sk_owner) as host C++ with a main printing each block's
    units and each stream-K tile's finisher and last contributor, for every grid of `grids`."""
    start = cu.index("struct SgStreamK")
    end = cu.index("__device__ __forceinline__ void sg_st_global_v4")
    helpers = cu[start:end]
    body = "\n".join(f"  run({g});" for g in grids)
    return ("#include <cstdio>\n#include <algorithm>\nusing std::min;\n#define __device__\n#define __forceinline__ inline\n"
            + helpers + """
static void run(int grid) {
  const int skt = sg_sk_tiles(grid), s = skt * K_ITERS;
  for (int c = 0; c < grid; ++c) {
    SgStreamK sk = sg_stream_k(c, grid);
    int t, lo, hi;
    while (sg_sk_next(sk, t, lo, hi)) printf("U %d %d %d %d %d\\n", grid, c, t, lo, hi);
  }
  for (int t = 0; t < skt; ++t)
    printf("F %d %d %d %d\\n", grid, t, sg_sk_owner(t * K_ITERS, grid, s), sg_sk_owner((t + 1) * K_ITERS - 1, grid, s));
}
int main() {
""" + body + "\n  return 0;\n}\n")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
@pytest.mark.parametrize("path, overrides", [(GEMM_1536, SKW), (GEMM_3000, SKW)], ids=["1536", "3000"])
def test_rendered_formulas_match_the_model(tmp_path, path, overrides):
    """The helpers the kernel runs, compiled for the host and run at several grids (the runtime may lower the
    planned one), give the model's units, finishers and contributors."""
    p = plan_spec(path, overrides)
    cu = render(p, "cuda")
    grids = sorted({p.launch.num_blocks, p.launch.num_blocks - 1, 100, 64, 17, 5, 1})
    src = _host_harness(cu, grids).replace("K_ITERS", str(p.tiles.k_iters))
    (tmp_path / "h.cpp").write_text(src)
    subprocess.run(["g++", "-O1", "-std=c++17", "-o", str(tmp_path / "h"), str(tmp_path / "h.cpp")], check=True)
    out = subprocess.run([str(tmp_path / "h")], check=True, capture_output=True, text=True).stdout.split("\n")
    units = [tuple(map(int, ln.split()[1:])) for ln in out if ln.startswith("U ")]
    fins = [tuple(map(int, ln.split()[1:])) for ln in out if ln.startswith("F ")]
    t, k = p.tiles.num_tiles, p.tiles.k_iters
    want_units = [(g, c, *u) for g in grids for c in range(g) for u in SK.units(t, k, g, c)]
    assert units == want_units
    want_fins = []
    for g in grids:
        s = SK.sk_tiles(t, g) * k
        for tile in range(SK.sk_tiles(t, g)):
            first, peers = SK.contributors(tile, k, g, s)
            want_fins.append((g, tile, first, peers[-1] if peers else first))
    assert fins == want_fins


# ---------------------------------------------------------------------------------------------------- planning

def test_plan_adds_the_workspace_and_names_the_kernel():
    p = plan_spec(GEMM_1536, SKW)
    assert p.stream_k and p.launch.kernel_name.endswith("_sk") and p.cluster.cluster_size == 1
    ws = p.launch.kernel_args[-1]
    assert ws.kind == "workspace"
    assert ws.value == SK.workspace_bytes(p.launch.num_blocks, p.tiles.tile_m, p.tiles.tile_n, p.warps.num_consumers)
    # the flags first (132 blocks x 2 consumers x 4 B), the only bytes zeroed at a launch, then the 98304 B slots
    assert (ws.zero, ws.value) == (1056, 1056 + 132 * 128 * 192 * 4)
    cu = render(p, "cuda")
    assert ", float* __restrict__ sk_ws)" in cu and cu.count("sg_sk_next(sk, t, kb_lo, kb_hi)") == 2
    assert "for (int kb = kb_lo; kb < kb_hi; ++kb, ++it)" in cu      # the producer loads the unit's k-steps
    assert "for (int kb = 0; kb < kb_n; ++kb, ++it)" in cu            # the consumers count them from 0
    assert "reinterpret_cast<uint32_t*>(sk_ws)" in cu                 # the flags, then the slots after them
    assert "sk_ws + 264 + (long long)cluster_id * 24576 + frag" in cu and "sk_ws + 264 + (long long)c * 24576" in cu
    rec = json.loads(build_spec(str(GEMM_1536), SKW).files["launch.json"])
    assert rec["kernel_args"][-1]["kind"] == "workspace" and rec["kernel_args"][-1]["zero"] == 1056


def test_absent_and_data_parallel_plan_the_same_kernel():
    bare = plan_spec(GEMM_1536)
    dp = plan_spec(GEMM_1536, {"schedule.persistent.decomposition": "data_parallel"})
    assert to_json(bare) == to_json(dp) and not bare.stream_k
    assert all(a.kind != "workspace" for a in bare.launch.kernel_args)
    cu = render(bare, "cuda")
    assert "sk_ws" not in cu and "SgStreamK" not in cu


def test_without_a_written_cluster_stream_k_picks_none():
    """gemm_3000x5000x1000's planner pick is a 2-CTA cluster; with stream_k it picks a 1-CTA launch and the CUDA
    backend (the Pallas kernel has no stream-K; the user wrote neither field)."""
    assert plan_spec(GEMM_3000).cluster.cluster_size == 2
    p = plan_spec(GEMM_3000, SKW)
    assert p.stream_k and p.cluster.cluster_size == 1 and p.launch.backends == ("cuda",)


@pytest.mark.parametrize("overrides, field, says", [
    ({"schedule.cluster": [2, 1], "schedule.in_specs.b.collective_axes": ["cluster"]}, "schedule.cluster",
     "1-CTA launch"),
    ({"schedule.cluster": [1, 1, 2]}, "schedule.cluster", "1-CTA launch"),
    ({"schedule.pipeline.consumer_schedule": "pingpong", "schedule.pipeline.num_compute_wgs": 2,
      "schedule.out_specs.out.block_shape": [64, 256], "schedule.in_specs.a.block_shape": [64, 64]},
     "schedule.pipeline.consumer_schedule", "cooperative"),
    ({"schedule.persistent.num_blocks": 264}, "schedule.persistent.num_blocks", "at most 132"),
    ({"schedule.persistent.loop": "none"}, "schedule.persistent.loop", "nd_loop"),
    ({"schedule.backends": ["cuda", "pallas"]}, "schedule.backends", "no stream-K"),
    ({"op.sizes.M": {"dynamic": True, "max": 4096, "multiple_of": 128}}, "op.sizes", "static sizes"),
])
def test_what_stream_k_cannot_go_with_is_located(overrides, field, says):
    lines = plan_errors(BASE, {**BASE_SK, **overrides})
    hits = [ln for ln in lines if f"{field}:" in ln and says in ln]
    assert hits, lines
    assert re.match(r".+\.yaml:\d+:\d+: ", hits[0]), hits[0]


def test_sm100a_is_a_located_error():
    lines = plan_errors(GEMM_1536, {**SKW, "schedule.target": "sm_100a", "schedule.backends": ["cuda"]})
    assert any("schedule.persistent.decomposition:" in ln and "sm_90a" in ln for ln in lines), lines


def test_other_families_refuse_stream_k_at_the_field():
    """decomposition is the matmul schedule's field (issue 42): on a map op an unknown key naming the matmul."""
    lines = plan_errors(MAP, SKW)
    assert any("schedule.persistent.decomposition: unknown key 'decomposition': schedule.persistent.decomposition is "
               "a matmul field" in ln for ln in lines), lines


def test_explain_says_how_the_tiles_are_shared():
    text = explain(plan_spec(GEMM_1536, SKW))
    assert "stream-K   192 of the 192 tiles (60 of the last partial wave + a full wave)" in text
    assert "4608 k-steps over 132 blocks" in text and "workspace" in text
    # 32 x 33 tiles of 128 x 256 = 8 whole waves of 132: nothing to share
    whole = explain(plan_spec(BASE, {**BASE_SK, "op.sizes": {"M": 4096, "N": 8448, "K": 1024}}))
    assert "the 1056 tiles fill whole waves of 132 blocks: every tile runs data-parallel" in whole


def test_default_rule_wants_a_partial_wave_and_k_steps_to_share():
    assert SK.stream_k_pays(192, 24, 132)           # 1.45 waves: the second wave is 45 % full
    assert SK.stream_k_pays(144, 12, 132)           # 1.09 waves
    assert not SK.stream_k_pays(264, 24, 132)       # two whole waves
    assert not SK.stream_k_pays(648, 16, 132)       # 4.91 waves: 98 % full
    assert not SK.stream_k_pays(100, 24, 132)       # less than a wave: a smaller tile fills the SMs instead
    assert not SK.stream_k_pays(192, 2, 132)        # two k-steps a tile: nothing to share


# ------------------------------------------------------------------------------------- NVRTC builds and SASS

BUILDS = {
    "gemm_1536x3072x1536": (GEMM_1536, SKW),
    "gemm_3000x5000x1000": (GEMM_3000, SKW),
    "bias_gelu_ragged_direct": (GEMM_3000, {**SKW, **BIAS_GELU, "op.outputs.out.dtype": "f32", "schedule.backends": ["cuda"],
                                            "schedule.epilogue.store": "direct"}),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    return {name: build_spec(str(path), ov, cache=cache) for name, (path, ov) in BUILDS.items()}


@pytest.mark.parametrize("name", list(BUILDS))
def test_sass_hands_over_through_global_memory_without_spills(built, name):
    b = built[name]
    text = sass(b.files["kernel.cubin"])
    ops = opcodes(text)
    assert not [op for op in ops if op.split(".")[0] in ("LDL", "STL")], "local-memory spills"
    usage = resource_usage(b.files["kernel.cubin"])[b.plan.launch.kernel_name]
    assert usage["STACK"] == 0 and usage["LOCAL"] == 0
    assert json.loads(b.files["manifest.json"])["compiler_verdicts"] == []   # no C7515 / C7517 serialization
    assert "MEMBAR.ALL.GPU" in ops and "REDG.E.ADD.STRONG.GPU" in ops       # the release of a partial
    assert "LDG.E.STRONG.GPU" in ops and "BPT.TRAP" in ops                   # the acquire's bounded spin
    assert "LDG.E.128.STRONG.GPU" in ops and "STG.E.128" in ops             # partials, 16 B an access
    assert "HGMMA.64" in ops


# ---------------------------------------------------------------------------------------------- on the GPU

GPU_CASES = {
    **BUILDS,
    # 7 blocks over 256 tiles of 128 x 128: each block runs several stream-K parts and data-parallel tiles
    "few_blocks_many_units": (BASE, {**BASE_SK, "op.sizes": {"M": 2048, "N": 2048, "K": 1024},
                                     "schedule.in_specs.b.block_shape": [64, 128],
                                     "schedule.out_specs.out.block_shape": [128, 128],
                                     "schedule.persistent.num_blocks": 7}),
    # ragged short K (3 k-steps): 32 tiles over 20 blocks, all stream-K, 12 tiles finished with a peer's partial
    "short_k_ragged_bias_residual": (BASE, {**BASE_SK, **RAGGED, "op.sizes": {"M": 1000, "N": 1016, "K": 136},
                                            "op.inputs.bias": {"shape": ["N"], "dtype": "f32"},
                                            "op.inputs.res": {"shape": ["M", "N"], "dtype": "bf16"},
                                            "op.epilogue": "out = acc + bias + res",
                                            "schedule.persistent.num_blocks": 20}),
}


def _verify(path, overrides):
    from schedgen.verify import verify_built
    b = build_spec(str(path), overrides, cache=Cache(Path(tempfile.mkdtemp(prefix="schedgen-streamk-"))))
    checks = verify_built(b, ["cuda"], count=1)
    assert checks and all(c.ok for c in checks), checks
    return b


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_stream_k_matches_float64_on_gpu(case):
    path, overrides = GPU_CASES[case]
    assert _verify(path, overrides).plan.stream_k


@pytest.mark.gpu
def test_stream_k_replays_in_a_cuda_graph(tmp_path):
    """Captured with torch.cuda.graph and replayed twice on new inputs (the workspace's allocation, memset and free
    are graph nodes: each replay starts from zeroed flags), in a fresh interpreter (tests/runtime/graph_replay.py)."""
    pytest.importorskip("torch")
    spec = tmp_path / "gemm_sk.yaml"
    text = GEMM_1536.read_text().replace("  epilogue: out = acc\n", "  epilogue: out = acc\nschedule:\n  persistent: "
                                         "{decomposition: stream_k}\n  backends: [cuda]\n")
    spec.write_text(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    script = ROOT / "tests" / "runtime" / "graph_replay.py"
    res = subprocess.run([sys.executable, str(script), "-", str(tmp_path / "pkgs"), str(spec)], capture_output=True,
                         text=True, env=env, timeout=600)
    rows = [json.loads(ln[len("RESULT "):]) for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(rows) == 1 and rows[0].get("ok"), (rows, res.stderr[-3000:])


def test_gpu_cases_plan_on_the_cpu():
    """What the GPU tests build is legal and runs stream-K (so a GPU run fails only on numbers)."""
    for case, (path, overrides) in GPU_CASES.items():
        assert plan_spec(path, overrides).stream_k, case
    few = plan_spec(BASE, GPU_CASES["few_blocks_many_units"][1])
    assert few.tiles.num_tiles == 256 and few.launch.num_blocks == 7
    assert [len(SK.units(256, few.tiles.k_iters, 7, c)) for c in range(7)] == [37, 38, 37, 38, 37, 38, 37]
    short = plan_spec(BASE, GPU_CASES["short_k_ragged_bias_residual"][1])
    assert (short.tiles.num_tiles, short.tiles.k_iters, short.launch.num_blocks) == (32, 3, 20)
    s = SK.sk_tiles(32, 20) * 3
    assert sum(len(SK.contributors(t, 3, 20, s)[1]) for t in range(SK.sk_tiles(32, 20))) == 12
