"""The grouped_matmul family on the CPU: the plan of the bundled MoE specs (the one-group product the matmul family
plans, the tile space over the groups, the kernel arguments: x's tensor map, w's 3-D one, the output's tensor map and
pointer, the int32 group operand's pointer, T), the planner's picks, every located error (what is wrong, what is
legal), the Pallas limit, explain, the tune knobs, and the launch record through the real call path with a fake
driver (the int32 operand packed as a pointer, T bound from x's rows)."""
from __future__ import annotations

import numpy as np
import pytest

from grouped_specs import DEEPSEEK, MIXTRAL, error_about, plan_spec, spec_errors
from runtime.fake_driver import FakeDriver
from schedgen import families
from schedgen.explain import explain
from schedgen.frontend.validate import load_spec
from schedgen.plan import launch as L
from schedgen.render import render
from schedgen.runtime import driver
from schedgen.runtime.arrays import ArgumentError
from schedgen.runtime.kernel import load_package



# ------------------------------------------------------------------------------------------------ planning

def test_family_is_registered_with_its_hooks():
    fam = families.get("grouped_matmul")
    assert "grouped_matmul" in families.kinds() and fam.metric == "tflops"
    assert fam.random_inputs is not None and fam.peers.endswith("grouped_matmul.peers")


def test_mixtral_plan_walks_the_groups_tiles():
    p = plan_spec(MIXTRAL)
    assert (p.launch.family, p.groups, p.n, p.k, p.transpose_rhs) == ("grouped_matmul", 8, 14336, 4096, True)
    assert (p.tile_m, p.tile_n, p.tile_k, p.mm.pipeline.stages, p.mm.warps.num_consumers) == (128, 256, 64, 4, 2)
    assert p.tiles_n == 56 and p.tile_order == "planar_snake" and p.epi_store == "tma"
    assert p.mm.cluster.cluster_size == 1 and p.mm.cluster.multicast == "" and p.mm.cluster.split_k == 1
    assert p.launch.backends == ("cuda",) and p.launch.auto_blocks and p.launch.num_blocks == 132
    assert [r.name for r in p.launch.dynamic_sizes] == ["T"]
    assert p.offsets_format == "offsets" and p.offsets_len == 9
    assert [(o.name, o.role, o.dtype) for o in p.inputs] == [("x", "lhs", "bf16"), ("w", "rhs", "bf16"),
                                                            ("offsets", "offsets", "i32")]
    assert p.launch.smem_bytes + p.table_bytes <= 232448


def test_kernel_arguments_and_launch_record():
    p = plan_spec(MIXTRAL)
    kinds = [(a.kind, a.operand) for a in p.launch.kernel_args]
    assert kinds == [("tmap", 0), ("tmap", 1), ("tmap", 3), ("ptr", 3), ("ptr", 2), ("i32", -1)]
    w = p.launch.kernel_args[1]
    assert w.shape == (8, 14336, 4096) and w.box == (1, 256, 64) and w.swizzle == 128
    assert w.strides == (14336 * 4096 * 2, 4096 * 2, 2)
    rec = L.launch_record(p)
    assert rec.inputs[2] == L.Operand("offsets", "i32", (9,), 4, "offsets")
    assert rec.outputs[0].shape == ("T", 14336) and rec.cluster == (1, 1, 1)
    assert L.loads(rec.to_json()) == rec


def test_deepseek_plan_takes_torch_grouped_mm_ends():
    p = plan_spec(DEEPSEEK)
    assert (p.groups, p.n, p.k, p.offsets_format, p.offsets_len, p.offsets_name) == (64, 4096, 7168, "ends", 64,
                                                                                     "offs")
    assert p.tiles_n == 16 and p.table_bytes == 4 * (3 * 64 + 1)
    cu = render(p, "cuda")
    assert "__ldg(sg_offs + g - 1)" in cu and "__shared__ int sg_row0[64], sg_row1[64], sg_tile0[65];" in cu


def test_rendered_kernel_reads_the_group_operand_and_clips_the_stores():
    cu = render(plan_spec(MIXTRAL), "cuda")
    assert "const int* __restrict__ sg_offs, const int sz_T)" in cu
    assert "sg_tma_load_3d(sb + 0u, &tm_b, full, k0 + 0, n0, grp);" in cu     # w[grp]: a box of one group
    assert "sg_tma_load_2d(sa + 0u, &tm_a, full, k0 + 0, m0);" in cu
    assert "while (t >= sg_tile0[grp + 1]) ++grp;" in cu
    assert "if (blk0 + 64 <= row_end) {" in cu and "if (r >= row_end) continue;" in cu
    assert "sg_tma_store_2d(&tm_out, stage_buf, n0 + n_off + ch * 64, blk0);" in cu
    direct = render(plan_spec(MIXTRAL, {"schedule.epilogue.store": "direct"}), "cuda")
    assert "sg_tma_store" not in direct.split("extern \"C\"")[1] and "tm_out" not in direct


@pytest.mark.parametrize("fmt, want", [("offsets", "__ldg(sg_offs + g + 1)"), ("ends", "__ldg(sg_offs + g - 1)"),
                                       ("counts", "sg_warp_scan(count, lane)")])
def test_offsets_formats(fmt, want):
    p = plan_spec(MIXTRAL, {"op.offsets_format": fmt})
    assert p.offsets_len == (9 if fmt == "offsets" else 8) and want in render(p, "cuda")


def test_weights_k_n_layout_and_epilogue():
    p = plan_spec(MIXTRAL, {"op.transpose_rhs": False, "op.inputs.w.shape": [8, "K", "N"],
                     "schedule.in_specs.w.block_shape": [64, 256], "op.epilogue":
                            "out = silu(acc) * alpha", "op.constants": {"alpha": 0.5}, "op.outputs.out.dtype": "f32"})
    assert not p.mm.layout.k_major_b and p.out_dtype == "f32"
    assert p.launch.kernel_args[1].shape == (8, 4096, 14336)
    cu = render(p, "cuda")
    assert "sg_tma_load_3d(sb + 0u, &tm_b, full, n0 + 0, k0, grp);" in cu
    assert "sg_silu(v_acc)" in cu and "#define c_alpha" in cu and "st.global.v2.f32" in cu


def test_picks_for_a_spec_without_schedule(tmp_path):
    import yaml
    data = yaml.safe_load(MIXTRAL.read_text())
    data.pop("schedule")
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(data))
    from schedgen.plan import plan_with_picks
    spec, src = load_spec(str(path))
    p, picks = plan_with_picks(spec, src)
    got = {tuple(pk.path): pk.value for pk in picks}
    assert got[("schedule", "backends")] == ["cuda"] and got[("schedule", "persistent", "tile_order")] == "planar_snake"
    assert got[("schedule", "pipeline", "max_concurrent_steps")] == 4
    bundled = plan_spec(MIXTRAL)     # the bundled spec writes the picks out
    assert (p.tile_m, p.tile_n, p.tile_k, p.mm.pipeline.stages) == (bundled.tile_m, bundled.tile_n, bundled.tile_k, 4)
    data["op"]["sizes"]["N"] = 2048 + 128          # no multiple of 256: 128-wide tiles
    path.write_text(yaml.safe_dump(data))
    spec, src = load_spec(str(path))
    assert plan_with_picks(spec, src)[0].tile_n == 128


def test_explain_describes_the_groups():
    text = explain(plan_spec(MIXTRAL))
    assert "kernel grouped_moe_up_mixtral_bf16_128x256x64_s4_wg2_g8" in text
    assert "offsets: int32 offsets [G + 1]" in text and "TMA        w       box [1, 256, 64]" in text
    assert "masked stores from registers" in text and "the product of one group" in text


def test_tune_aliases_drop_the_knobs_the_kernel_does_not_take():
    spec, _ = load_spec(str(MIXTRAL))
    al = families.get("grouped_matmul").tune_aliases(spec)
    assert {"tile_m", "tile_n", "tile_k", "stages", "cluster_n"} <= set(al)      # cluster_n: the [1, 2] pair
    assert not {"cluster_m", "split_k", "consumer_schedule"} & set(al)


# --------------------------------------------------------------------------------------------- located errors

@pytest.mark.parametrize("overrides, field, text", [
    ({"schedule.cluster": [2, 1]}, "schedule.cluster", "takes cluster [1] or [1, 2]"),
    ({"schedule.pipeline.consumer_schedule": "pingpong"}, "schedule.pipeline.consumer_schedule", "use cooperative"),
    ({"schedule.persistent.loop": "none"}, "schedule.persistent.loop", "use loop: nd_loop"),
    ({"schedule.persistent.tile_order": "lpt"}, "schedule.persistent.tile_order", "row_major or planar_snake"),
    ({"schedule.in_specs.w": {"block_shape": [256, 64], "out_of_bounds": "zero"}},
     "schedule.in_specs.w.out_of_bounds", "legal: reject"),
    ({"op.group_offsets": "x"}, "op.group_offsets", "already used in op.inputs"),
    ({"op.inputs.w.shape": [4, "N", "K"]}, "op.inputs.w.shape[0]", "op.groups is 8"),
    ({"op.inputs.w.shape": ["N", "K"]}, "op.inputs.w.shape", "3-D [G, N, K]"),
    ({"op.inputs.x.shape": ["T", "K", "K"]}, "op.inputs.x.shape", "2-D [T, K]"),
    ({"op.outputs.out.shape": ["T", "K"]}, "op.outputs.out.shape[1]", "N (w's columns) = 14336"),
    ({"op.sizes": {"T": {"dynamic": True, "max": 32768}, "N": {"dynamic": True, "max": 14336}, "K": 4096}},
     "op.inputs.w.shape", "N is dynamic"),
    ({"op.epilogue": "out = foo(acc)"}, "op.epilogue", "allowed: abs"),
    ({"schedule.epilogue.tile": [32, 64]}, "schedule.epilogue.tile[0]", "64 rows, got 32"),
])
def test_errors_are_located_and_say_what_is_legal(overrides, field, text):
    line = error_about(spec_errors(MIXTRAL, overrides), field)
    assert text in line and line.split(":")[0].endswith(MIXTRAL.name)


def test_pallas_backend_takes_tiles_one_warpgroup_holds():
    """The Pallas rendering runs one warpgroup a tile: with backends naming pallas the planner picks 128 x 128; a
    written 128 x 256 tile, or a T that may not be a multiple of 8, is one error at schedule.backends saying why."""
    rows8 = {"op.sizes.T": {"dynamic": True, "max": 32768, "multiple_of": 8}}
    p = plan_spec(MIXTRAL, {"schedule.backends": ["cuda", "pallas"], "schedule.in_specs": {}, "schedule.out_specs": {},
                            **rows8})
    assert (p.tile_m, p.tile_n) == (128, 128) and p.launch.backends == ("cuda", "pallas")
    line = error_about(spec_errors(MIXTRAL, {"schedule.backends": ["cuda", "pallas"], **rows8}), "schedule.backends")
    assert "one warpgroup a tile" in line and "at most 16384" in line and "128 x 256" in line
    # T must be a multiple of the SMEM tiling's 8 rows (Mosaic GPU cannot round a partial one up)
    line = error_about(spec_errors(MIXTRAL, {"schedule.backends": ["cuda", "pallas"], "schedule.in_specs": {},
                                             "schedule.out_specs": {}}), "schedule.backends")
    assert "declare multiple_of: 8 on T" in line


def test_jax_store_lowering_takes_no_mask():
    """Why the Pallas kernel stores a group's rows by predicated TMA stores of power-of-two row counts, pinned to
    jax: Mosaic GPU's store (swap_p) lowering has no mask operand and copy_smem_to_gmem only a whole-copy predicate
    (when a jax release adds either, a masked store can replace them)."""
    import inspect
    from jax._src.pallas.mosaic_gpu import lowering, primitives
    assert "mask" not in inspect.signature(lowering._swap_lowering_rule_wg).parameters
    params = inspect.signature(primitives.copy_smem_to_gmem).parameters
    assert "predicate" in params and not any("mask" in p for p in params)


def test_too_many_groups_for_smem_is_located():
    lines = spec_errors(MIXTRAL, {"op.groups": 1024, "op.inputs.w.shape": [1024, "N", "K"],
                                   "schedule.pipeline.max_concurrent_steps": 4})
    assert "group tables" in error_about(lines, "schedule.pipeline.max_concurrent_steps")


# ------------------------------------------------------------------------------- the call path (fake driver)

def _kernel(tmp_path, p):
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "launch.json").write_text(L.launch_record(p).to_json())
    (folder / "kernel.cubin").write_bytes(b"CUBIN")
    return load_package(folder)


def test_call_path_packs_the_offsets_pointer_and_t(tmp_path, monkeypatch):
    fake = FakeDriver(monkeypatch, sm_count=132)
    p = plan_spec(MIXTRAL)
    kernel = _kernel(tmp_path, p)
    rec = kernel.launch
    shapes = [(3000, 4096), (8, 14336, 4096), (9,)]
    assert kernel.bind(shapes) == {"T": 3000}
    assert kernel.output_shapes({"T": 3000}) == ((3000, 14336),)
    ptrs = [0x7F0000000000 + (i << 32) for i in range(len(rec.operands))]
    kernel._launcher(ptrs[:3], ptrs[3:], stream=0, sizes={"T": 3000})()
    (go,) = fake.launches
    assert go["grid"] == (132, 1, 1) and go["cluster"] is None
    args = go["args"]
    assert args[3] == driver.Arg.ptr(ptrs[3]) and args[4] == driver.Arg.ptr(ptrs[2]) and args[5] == driver.Arg.i32(3000)
    (x_map, w_map, o_map) = fake.encoded
    assert x_map[2] == (3000, 4096) and w_map[2] == (8, 14336, 4096) and o_map[2] == (3000, 14336)


def test_arguments_check_the_int32_operand(tmp_path):
    import ml_dtypes
    small = {"op.sizes": {"T": {"dynamic": True, "max": 32768}, "N": 256, "K": 64}}
    kernel = _kernel(tmp_path, plan_spec(MIXTRAL, small))
    x, w = np.zeros((64, 64), ml_dtypes.bfloat16), np.zeros((8, 256, 64), ml_dtypes.bfloat16)
    assert kernel.check_args([x, w, np.zeros(9, np.int32)], None) == {"T": 64}
    with pytest.raises(ArgumentError, match="offsets"):
        kernel.check_args([x, w, np.zeros(9, np.float32)], None)
    with pytest.raises(ArgumentError, match="offsets"):
        kernel.check_args([x, w, np.zeros(8, np.int32)], None)


def test_tune_space_candidates_plan():
    """The default tune space (tile_n, stages, the [1, 2] cluster, the band width); its candidates that keep the
    constraint plan."""
    spec, _ = load_spec(str(MIXTRAL))
    fam = families.get("grouped_matmul")
    space = fam.tune_space(spec)
    assert set(space.params) == {"tile_n", "stages", "cluster_n", "tile_width"} and space.constraints
    for tn, stages in ((128, 6), (256, 4), (256, 3)):
        assert (128 + tn) * 128 * stages <= 196608
        p = plan_spec(MIXTRAL, {"schedule.in_specs.w.block_shape": [tn, 64],
                                "schedule.out_specs.out.block_shape": [128, tn],
                                "schedule.pipeline.max_concurrent_steps": stages})
        assert (p.tile_n, p.mm.pipeline.stages) == (tn, stages)
