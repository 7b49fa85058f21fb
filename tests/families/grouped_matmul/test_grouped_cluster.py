"""The grouped matmul's 2-CTA cluster (schedule.cluster [1, 2], issue 18) on the CPU: the plan (the matmul family's
x multicast on the one-group product: half of the x rows a CTA, a stage freed by the consumers of both CTAs; the
launch's (2, 1, 1) cluster; plan.json unchanged without the field), every located error (pairs along M, split-K,
ragged: k, the Pallas backend, an odd tile-column count, collective_axes, an odd num_blocks), explain, the tune knob
and space, the launch through the real call path with a fake driver, and the three bundled specs compiled by NVRTC
for sm_90a with the cluster: the multicast TMA load of x in the SASS, no local memory, no ptxas verdicts. (The tile
walk of the pairs is mirrored in test_grouped_walk.py; the GPU run in test_grouped_gpu.py.)"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from conftest import opcodes
from grouped_specs import DEEPSEEK, MIXTRAL, TRAIN, error_about, plan_spec, spec_errors
from runtime.fake_driver import FakeDriver
from schedgen import families
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.explain import explain
from schedgen.frontend.validate import load_spec
from schedgen.plan import launch as L
from schedgen.plan import plan, to_dict
from schedgen.runtime.kernel import load_package
from schedgen.toolchain.nvrtc import resource_usage, sass

PAIR = {"schedule.cluster": [1, 2]}


# ------------------------------------------------------------------------------------------------ the plan

@pytest.mark.parametrize("path, tiles_n", [(MIXTRAL, 56), (DEEPSEEK, 16)])
def test_pair_plan_multicasts_x_between_two_tile_columns(path, tiles_n):
    base, p = plan_spec(path), plan_spec(path, PAIR)
    assert (p.cluster_n, p.launch.cluster_dims, p.tiles_n, p.cluster_tiles_n) == (2, (2, 1, 1), tiles_n, tiles_n // 2)
    mm = p.mm
    assert (mm.cluster.cluster_m, mm.cluster.cluster_n, mm.cluster.multicast, mm.cluster.split_k) == (1, 2, "lhs", 1)
    # each CTA loads half of the x rows (its box), both halves land in both CTAs: the stage's bytes are unchanged
    assert p.launch.kernel_args[0].box == (p.tile_m // 2, base.launch.kernel_args[0].box[1]) and base.launch.kernel_args[0].box[0] == p.tile_m
    assert mm.cluster.mc_rank_elems == p.tile_m // 2 and mm.cluster.mc_rank_bytes == p.tile_m // 2 * mm.layout.swizzle_a
    assert mm.pipeline.stage_tx_bytes == base.mm.pipeline.stage_tx_bytes
    assert mm.pipeline.empty_arrivals == 2 * base.mm.pipeline.empty_arrivals          # the consumers of both CTAs free a stage
    assert p.launch.kernel_args[1:] == base.launch.kernel_args[1:]                # w's map (its own tile a CTA), out, pointers
    assert p.launch.kernel_name == base.launch.kernel_name + "_c1x2" and p.launch.num_blocks % 2 == 0
    assert L.launch_record(p).cluster == (2, 1, 1) and L.launch_record(base).cluster == (1, 1, 1)


def test_plan_json_is_unchanged_without_the_cluster():
    # cluster_dims is the launch header's (plan.launch), which every family's plan.json shows: [1, 1, 1] here
    base, p = to_dict(plan_spec(MIXTRAL)), to_dict(plan_spec(MIXTRAL, PAIR))
    assert "cluster_n" not in base and base["cluster_dims"] == [1, 1, 1]
    assert p["cluster_n"] == 2 and p["cluster_dims"] == [2, 1, 1]


def test_explain_describes_the_pair():
    text = explain(plan_spec(MIXTRAL, PAIR))
    assert "cluster    1x2 (schedule.cluster)" in text and "cdiv(M_g, 128) x 28 a group" in text
    assert "each CTA loads 64 of the 128 x rows" in text and "TMA        x       box [64, 64]" in text
    assert "cluster    " not in explain(plan_spec(MIXTRAL))


# --------------------------------------------------------------------------------------------- located errors

@pytest.mark.parametrize("path, overrides, field, text", [
    (MIXTRAL, {"schedule.cluster": [2, 1]}, "schedule.cluster", "pairs along M ([2, 1]) could straddle two groups"),
    (MIXTRAL, {"schedule.cluster": [1, 1, 2]}, "schedule.cluster", "split-K ([1, 1, S]) is not rendered"),
    # N = 1280: 5 tile columns of 256 do not pair up (the matmul family's rule, located in the grouped spec)
    (MIXTRAL, {**PAIR, "op.sizes.N": 1280}, "schedule.cluster", "divisible"),
    (MIXTRAL, {"schedule.in_specs.x": {"block_shape": [128, 64], "delay_release": 1, "collective_axes": ["cluster"]}},
     "schedule.in_specs.x.collective_axes", "cluster: [1, 2]"),
    (MIXTRAL, {**PAIR, "schedule.in_specs.w": {"block_shape": [256, 64], "delay_release": 1,
                                               "collective_axes": ["cluster"]}},
     "schedule.in_specs.w.collective_axes", "lhs with [1, 2]"),
    (MIXTRAL, {**PAIR, "schedule.persistent": {"loop": "nd_loop", "num_blocks": 131}},
     "schedule.persistent.num_blocks", "multiple of the cluster size 2"),
])
def test_cluster_errors_are_located(path, overrides, field, text):
    line = error_about(spec_errors(path, overrides), field)
    assert text in line and line.split(":")[0].endswith(path.name), line


def test_pallas_backend_with_the_cluster_is_a_located_backend_gap():
    rows8 = {"op.sizes.T": {"dynamic": True, "max": 32768, "multiple_of": 8}}
    lines = spec_errors(MIXTRAL, {**PAIR, **rows8, "schedule.backends": ["cuda", "pallas"], "schedule.in_specs": {},
                                   "schedule.out_specs": {}})
    line = error_about(lines, "schedule.backends")
    assert "Pallas kernel runs without clusters" in line and "backends: [cuda]" in line


def test_ragged_k_with_the_cluster_is_located(tmp_path):
    import yaml
    op = {"kind": "grouped_matmul", "ragged": "k", "groups": 4,
          "sizes": {"T": {"dynamic": True, "max": 4096, "multiple_of": 8}, "M": 128, "N": 256},
          "inputs": {"a": {"shape": ["T", "M"], "dtype": "bf16"}, "b": {"shape": ["T", "N"], "dtype": "bf16"}},
          "outputs": {"o": {"shape": [4, "M", "N"], "dtype": "bf16"}}, "lhs": "a", "rhs": "b",
          "group_offsets": "offs"}
    path = tmp_path / "dwk.yaml"
    path.write_text(yaml.safe_dump({"name": "dwk", "op": op, "schedule": {"backends": ["cuda"], "cluster": [1, 2]}}))
    line = error_about(spec_errors(path, {}), "schedule.cluster")
    assert "ragged: k runs without clusters" in line and "dwk.yaml:" in line
    assert plan(*load_spec(str(path), {"schedule.cluster": [1]})).cluster_n == 1


# ------------------------------------------------------------------------------------------------ tune

def test_tune_knob_and_space_sweep_the_cluster():
    spec, _ = load_spec(str(MIXTRAL))
    fam = families.get("grouped_matmul")
    al = fam.tune_aliases(spec)
    assert "cluster_n" in al and not {"cluster_m", "split_k"} & set(al)
    space = fam.tune_space(spec)
    assert space.params["cluster_n"] == (1, 2)
    # the knob writes the cluster and x's collective_axes together: candidates of both values plan
    from schedgen.tune.space import expand, load_space
    seen = {}
    for cand in expand(load_space(str(MIXTRAL))):
        v = cand.values["cluster_n"]
        if v not in seen and cand.values["tile_n"] == 256:
            seen[v] = plan_spec(MIXTRAL, cand.overrides)
    assert {v: p.cluster_n for v, p in seen.items()} == {1: 1, 2: 2}
    assert seen[2].mm.cluster.multicast == "lhs" and seen[1].mm.cluster.multicast == ""
    both, _ = load_spec(str(MIXTRAL), {"schedule.backends": ["cuda", "pallas"]})
    assert "cluster_n" not in fam.tune_space(both).params          # the Pallas kernel has no cluster


# ------------------------------------------------------------------------------- the call path (fake driver)

def test_launch_asks_for_the_clusters_the_gpu_holds(tmp_path, monkeypatch):
    fake = FakeDriver(monkeypatch, sm_count=132, clusters=60)
    p = plan_spec(MIXTRAL, PAIR)
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "launch.json").write_text(L.launch_record(p).to_json())
    (folder / "kernel.cubin").write_bytes(b"CUBIN")
    kernel = load_package(folder)
    ptrs = [0x7F0000000000 + (i << 32) for i in range(len(kernel.launch.operands))]
    kernel._launcher(ptrs[:3], ptrs[3:], stream=0, sizes={"T": 3000})()
    (go,) = fake.launches
    assert go["grid"] == (120, 1, 1) and go["cluster"] == (2, 1, 1)
    x_map = fake.encoded[0]
    assert x_map[2] == (3000, 4096) and tuple(x_map[4]) == (64, 64)      # half of the x rows a CTA


# ------------------------------------------------------------------------------------ NVRTC sm_90a, SASS

@pytest.fixture(scope="module")
def built():
    cache = Cache(Path(tempfile.mkdtemp(prefix="schedgen-grouped-cluster-")))
    return {path.stem: build_spec(str(path), PAIR, cache=cache) for path in (MIXTRAL, DEEPSEEK, TRAIN)}


@pytest.mark.parametrize("name", [MIXTRAL.stem, DEEPSEEK.stem, TRAIN.stem])
def test_bundled_specs_compile_with_the_multicast_load_and_no_local_memory(built, name):
    b = built[name]
    text = sass(b.files["kernel.cubin"])
    ops = set(opcodes(text))
    assert "UTMALDG.2D.MULTICAST" in ops, sorted(o for o in ops if o.startswith("UTMA"))   # x: half a CTA, to both
    assert "UTMALDG.3D" in ops                                                           # w[g]: its own tile
    assert not {op for op in ops if op.split(".")[0] in ("LDL", "STL")}, "local-memory spills"
    (usage,) = resource_usage(b.files["kernel.cubin"]).values()
    assert usage["STACK"] == 0 and usage["LOCAL"] == 0
    assert b.warnings == [], b.warnings                  # no C7517 (serialized wgmma) or other ptxas verdict
    # the release arrives in both CTAs' empty ring (a remote arrive), the pair syncs at entry and exit, and the only
    # GPU-scope fences are those two cluster barriers' (none in the k-loop: the arrivals are CTA-scope releases)
    assert "SYNCS.ARRIVE.TRANS64.RED.A1T0" in ops and "UCGABAR_ARV" in ops
    assert len(re.findall(r"\bMEMBAR\.ALL\.GPU\b", text)) == 2
    cu = b.files["kernel.cu"].decode() if isinstance(b.files["kernel.cu"], bytes) else b.files["kernel.cu"]
    assert cu.count("sg_cluster_sync();") == 2 and "__syncthreads();" not in cu.split("extern \"C\"")[1]
