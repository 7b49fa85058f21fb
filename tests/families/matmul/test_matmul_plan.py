"""The matmul planner: the numbers the templates use, and every illegal schedule rejected before compiling
with a located message that says what would be legal."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen.errors import SpecErrors
from schedgen.plan import plan
from schedgen.frontend.validate import load_spec

BASE = SPECS_DIR.parent / "tests" / "data" / "matmul_base.yaml"
CUDA = {"schedule.backends": ["cuda"]}


def _plan(overrides=None, path=BASE):
    spec, src = load_spec(str(path), {**CUDA, **(overrides or {})})
    return plan(spec, src)


def _errors(overrides, path=BASE) -> list[str]:
    with pytest.raises(SpecErrors) as info:
        _plan(overrides, path)
    return info.value.lines()


def test_base_plan_numbers():
    p = _plan()
    assert (p.m, p.n, p.k) == (4096, 4096, 4096)
    assert (p.tiles.tile_m, p.tiles.tile_n, p.tiles.tile_k, p.pipeline.stages) == (128, 256, 64, 4)
    assert (p.warps.num_consumers, p.warps.wg_axis, p.warps.wg_tile_m, p.warps.wg_tile_n, p.warps.acc_regs) == (2, "m", 64, 256, 128)
    assert p.layout.k_major_a and not p.layout.k_major_b                 # [M, K] lhs, [K, N] rhs: wgmma transposes B
    assert (p.layout.swizzle_a, p.layout.swizzle_b, p.layout.atom_a, p.layout.atom_b) == (128, 128, 64, 64)
    assert p.layout.b_lbo == 64 * 128 and p.layout.b_sbo == 1024         # N-major: next 64-column slab / next 8 K rows
    assert p.layout.a_sbo == 1024
    assert p.pipeline.stage_tx_bytes == 128 * 64 * 2 + 64 * 256 * 2
    assert (p.cluster.cluster_m, p.cluster.cluster_n, p.cluster.multicast, p.pipeline.empty_arrivals) == (2, 1, "rhs", 4)
    assert p.tiles.num_tiles == (4096 // 256) * (4096 // 256)    # in cluster units
    assert p.launch.num_blocks == 132 and p.launch.auto_blocks
    assert p.launch.threads == 384 and 128 * (p.warps.producer_regs + 2 * p.warps.consumer_regs) <= 65536
    assert p.launch.smem_bytes <= 232448
    # the rhs box is half the tile's columns per CTA slab: 64 K rows x 64 columns; the output box is the epilogue chunk
    assert [a.box for a in p.launch.kernel_args] == [(128, 64), (64, 64), (64, 64)]
    assert p.flops == 2 * 4096 ** 3


def test_smem_buffers_disjoint_and_1k_aligned():
    p = _plan()
    spans = sorted((b.offset, b.offset + b.bytes * b.count, b.name) for b in p.pipeline.smem_buffers)
    for (_, e0, n0), (s1, _, n1) in zip(spans, spans[1:]):
        assert e0 <= s1, (n0, n1)
    for b in p.pipeline.smem_buffers:
        if b.name in ("a", "b", "epi"):
            assert b.offset % 1024 == 0 and b.bytes % 1024 == 0


def test_transposed_operands_and_batch():
    p = _plan({"op.transpose_rhs": True, "op.inputs.b.shape": ["N", "K"], "schedule.in_specs.b.block_shape": [256, 64]})
    assert p.layout.k_major_b and p.layout.b_lbo == 1 and p.launch.kernel_args[1].box == (128, 64)   # half of 256 rows per CTA
    p = _plan({"op.transpose_lhs": True, "op.inputs.a.shape": ["K", "M"], "schedule.in_specs.a.block_shape": [64, 128]})
    assert not p.layout.k_major_a and p.launch.kernel_args[0].box == (64, 64)
    p = _plan({"op.sizes": {"M": 512, "N": 512, "K": 256, "B": 3}, "op.inputs.a.shape": ["B", "M", "K"],
               "op.inputs.b.shape": ["B", "K", "N"], "op.outputs.out.shape": ["B", "M", "N"]})
    assert p.batch == 3 and p.lhs_batched and p.rhs_batched
    assert p.tiles.num_tiles == 3 * 2 * 2 and [len(a.shape) for a in p.launch.kernel_args] == [3, 3, 3]


def test_epilogue_operands_and_code():
    p = _plan({"op.inputs.bias": {"shape": ["N"], "dtype": "f32"}, "op.inputs.c": {"shape": ["M", "N"], "dtype": "bf16"},
               "op.constants": {"beta": 0.5}, "op.epilogue": "t = acc + bias\nout = gelu(t) + beta * c"})
    assert [(e.name, e.bcast) for e in p.extras] == [("bias", "row"), ("c", "full")]
    # the plan keeps the validated statements over the spec's names and the role of each name; no backend syntax
    assert p.epilogue == (("t", "acc + bias"), ("out", "gelu(t) + beta * c"))
    assert p.epilogue_roles == {"acc": "accumulator", "bias": "operand", "c": "operand", "beta": "constant",
                                "t": "temporary", "out": "output"}
    assert [a.kind for a in p.launch.kernel_args] == ["tmap", "tmap", "tmap", "ptr", "ptr"]
    assert not p.identity_epilogue and _plan().identity_epilogue
    assert _plan({"op.epilogue": "out = +acc"}).identity_epilogue
    assert not _plan({"op.constants": {"s": 2.0}, "op.epilogue": "out = s * acc"}).identity_epilogue


def test_the_plan_json_holds_no_backend_syntax():
    from schedgen.plan import to_json
    p = _plan({"op.inputs.bias": {"shape": ["N"], "dtype": "f32"}, "op.constants": {"beta": 0.5},
               "op.epilogue": "t = acc + bias\nout = gelu(t) * beta"})
    text = to_json(p)
    for syntax in ('"v_acc', "v_bias", "c_beta", '"t_t"', "r_out", "sg_gelu", "jax.nn", "0x1.", "0.5f"):
        assert syntax not in text, syntax
    assert '"t",\n   "acc + bias"' in text and '"gelu(t) * beta"' in text
    for gone in ("epilogue_cxx", "epilogue_jnp", "temporaries", "constants_cxx"):
        assert f'"{gone}"' not in text


def test_the_templates_spell_the_epilogue_trees():
    from schedgen.families.matmul.epilogue import epilogue_jnp
    from schedgen.render import render
    p = _plan({"op.inputs.bias": {"shape": ["N"], "dtype": "f32"}, "op.inputs.c": {"shape": ["M", "N"], "dtype": "bf16"},
               "op.constants": {"beta": 0.5}, "op.epilogue": "t = acc + bias\nout = gelu(t) + beta * c",
               "schedule.backends": ["cuda", "pallas"]})
    cu, py = render(p, "cuda"), render(p, "pallas")
    assert "#define c_beta 0x1.0000000000000p-1f\n" in cu
    assert cu.count("const float t_t = (v_acc + v_bias);\n") == 1
    assert cu.count("const float r_out = (sg_gelu(t_t) + (c_beta * v_c));\n") == 1
    assert "_c_beta = 0.5\n" in py
    # the helper bench reads gives what the Pallas template writes
    assert epilogue_jnp(p) == (("t_t", "(v_acc + v_bias)"),
                               ("r_out", "(jax.nn.gelu(t_t, approximate=True) + (_c_beta * v_c))"))
    for target, value in epilogue_jnp(p):
        assert f"{target} = {value}\n" in py


def test_plan_expressions_pickle_with_their_trees():
    import ast
    import pickle

    from schedgen.plan.exprs import PlanExpr
    p = _plan({"op.constants": {"s": 2.0}, "op.epilogue": "out = s * acc"})
    (target, value), = p.epilogue
    back = pickle.loads(pickle.dumps(value))
    assert isinstance(back, PlanExpr) and back == "s * acc" and back.ranges is None
    assert ast.dump(back.expr.tree) == ast.dump(value.expr.tree) and back.expr.names == {"s", "acc"}


@pytest.mark.parametrize("overrides, needle", [
    ({"schedule.in_specs.b.block_shape": [64, 512], "schedule.out_specs.out.block_shape": [128, 512]},
     "schedule.in_specs.b.block_shape: each consumer's wgmma N is 512; it must be a multiple of 8 between 8 and 256"),
    ({"schedule.in_specs.a.block_shape": [96, 64], "schedule.out_specs.out.block_shape": [96, 256]},
     "wgmma needs a multiple of 64"),
    ({"schedule.pipeline.max_concurrent_steps": 6},
     "schedule.pipeline.max_concurrent_steps: SMEM needed is"),
    ({"schedule.pipeline.compute_registers": 256},
     "schedule.pipeline.compute_registers: register budgets 40 + 2 x 256 need 70656 registers; a block of 384 "
     "threads holds 64512 (at most 232 per consumer with 40 for the producer)"),
    # the block's registers, not the SM's: 32 + 2 x 240 is the SM's 65536 but setmaxnreg.inc would wait forever for
    # the 1024 registers a block launched with __launch_bounds__(384, 1) (168 a thread) does not hold
    ({"schedule.pipeline.compute_registers": 240, "schedule.pipeline.memory_registers": 32},
     "schedule.pipeline.compute_registers: register budgets 32 + 2 x 240 need 65536 registers; a block of 384 "
     "threads holds 64512 (at most 232 per consumer with 32 for the producer)"),
    ({"schedule.pipeline.compute_registers": 232, "schedule.pipeline.memory_registers": 40}, None),   # 64512: fits
    ({"schedule.pipeline.num_compute_wgs": 1, "schedule.pipeline.compute_registers": 256,
      "schedule.pipeline.memory_registers": 256, "schedule.in_specs.b.block_shape": [64, 128],
      "schedule.out_specs.out.block_shape": [128, 128]}, None),    # 256 threads hold 256 each: 65536
    ({"schedule.pipeline.compute_registers": 132, "schedule.pipeline.memory_registers": 24},
     "each consumer thread holds 128 f32 accumulators"),
    ({"schedule.cluster": [2, 2]}, "schedule.cluster: clusters of 1x1, 2x1, 1x2 or 1x1xS (split-K) CTAs are supported"),
    ({"op.inputs.b.shape": ["N", "K"], "M": 4096, "N": 2048}, "contraction sizes differ"),
    ({"op.inputs.a.dtype": "f32"}, "op.inputs.a.dtype: lhs dtype f32 is not supported by this family yet"),
    ({"M": 4000}, "set out_of_bounds: zero on the lhs/rhs BlockSpecs"),
    ({"schedule.in_specs.a.transforms.swizzle": 32}, None),  # legal: 32 B slabs of K
    ({"schedule.in_specs.b.transforms.swizzle": 0}, "use a swizzled layout"),
    ({"schedule.pipeline.kind": "emit_pipeline"}, "set pipeline.kind: warp_specialized"),
    ({"schedule.epilogue.tile": [32, 64]}, "schedule.epilogue.tile[0]: epilogue chunks are one wgmma M block tall"),
    ({"schedule.epilogue.tile": [64, 128]}, "at most 64 columns"),
    ({"op.lhs": "x"}, "op.lhs: op.lhs names input 'x', which is not among the inputs (a, b)"),
    ({"schedule.in_specs.a.delay_release": 2}, "delay_release 0 or 1"),
    ({"schedule.in_specs.a.memory_space": "tmem"}, "tmem (tensor memory) exists on Blackwell (sm_100a) only"),
    ({"schedule.in_specs.a.memory_space": "gmem"}, "wgmma cannot read"),
    ({"schedule.in_specs.a.memory_space": "regs"}, "takes both operands from SMEM"),
    # issue 16: fields the matmul kernels do not read are located errors
    ({"schedule.grid": [256]}, "schedule.grid: the cuda and pallas matmul kernels do not read grid"),
    ({"schedule.grid_names": ["m", "n"]}, "schedule.grid_names: unknown key 'grid_names': schedule.grid_names is a map "
                                         "field"),
    ({"schedule.num_warpgroups": 3}, "set pipeline.num_compute_wgs"),
    ({"schedule.persistent.tile_order": "row_major", "schedule.persistent.tile_width": 8},
     "schedule.persistent.tile_width: the cuda and pallas matmul kernels do not read"),
    ({"schedule.out_specs.out.transforms": {"swizzle": 64}}, "schedule.out_specs.out.transforms.swizzle: the cuda"),
    ({"schedule.out_specs.out.delay_release": 1}, "an output block is written, not released"),
    ({"schedule.out_specs.out.collective_axes": ["cluster"]}, "each CTA stores its own output tile"),
    ({"schedule.out_specs.out.out_of_bounds": "zero"}, "a TMA store clips a ragged edge"),
    # the cluster's axis is named, and the name is checked
    ({"schedule.in_specs.b.collective_axes": ["x"]}, "the cluster has one axis, 'cluster'; got ['x']"),
    ({"schedule.in_specs.b.collective_axes": ["cluster", "cluster"]}, "the cluster has one axis"),
    # one stage holds both blocks: their delay_release must agree
    ({"schedule.in_specs.a.delay_release": 0}, "give 'a' and 'b' the same delay_release (got 0 and 1)"),
])
def test_illegal_schedules_are_located(overrides, needle):
    if needle is None:
        _plan(overrides)
        return
    lines = _errors(overrides)
    assert any(needle in line for line in lines), lines
    for line in lines:
        path, row, col = line.split(":")[:3]
        assert path.endswith("matmul_base.yaml") and int(row) >= 1 and int(col) >= 1, line


def test_all_problems_reported_at_once():
    lines = _errors({"schedule.pipeline.max_concurrent_steps": 6, "schedule.cluster": [2, 2],
                     "schedule.epilogue.tile": [32, 64]})
    assert len(lines) >= 3


def test_tag_error_names_the_kind_line(tmp_path):
    text = BASE.read_text().replace("kind: matmul", "kind: matmull")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecErrors) as info:
        load_spec(str(path))
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "kind: matmull" in l)
    from schedgen import families
    (got,) = info.value.lines()
    assert got.startswith(f"{path}:{line}:9: op.kind: unknown kind 'matmull'; legal kinds: "
                          f"{', '.join(families.kinds())} (a new kind of kernel is a family: a folder "
                          f"schedgen/families/<kind>/ registering a Family manifest, plus its line in _FAMILIES of "
                          f"schedgen/registry.py, see docs/architecture.md); map: "), got


def test_unknown_matmul_key_lists_matmul_fields(tmp_path):
    text = BASE.read_text().replace("  epilogue: out = acc", "  epilog: out = acc")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecErrors) as info:
        load_spec(str(path))
    (msg,) = info.value.lines()
    assert "op.epilog: unknown key 'epilog' (did you mean 'epilogue'?)" in msg and "transpose_rhs" in msg


@pytest.mark.parametrize("overrides, line", [
    # 384 threads launched with __launch_bounds__(384, 1) hold 168 a thread: 64512, not the SM's 65536
    ({}, "64512 of the block's 64512 registers (__launch_bounds__(384, 1))"),
    # 256 threads hold 256 a thread: the whole 65536
    ({"schedule.pipeline.num_compute_wgs": 1, "schedule.pipeline.compute_registers": 240,
      "schedule.pipeline.memory_registers": 56, "schedule.in_specs.b.block_shape": [64, 128],
      "schedule.out_specs.out.block_shape": [128, 128]},
     "37888 of the block's 65536 registers (__launch_bounds__(256, 1))"),
])
def test_explain_prints_the_blocks_register_budget(overrides, line):
    from schedgen.explain import explain
    p = _plan(overrides)
    assert p.warps.block_regs == {384: 64512, 256: 65536}[p.launch.threads]
    assert line in explain(p)


def test_derived_numbers_the_templates_print_come_from_the_plan():
    p = _plan()      # 128 x 256 x 64, lhs K-major, rhs N-major and multicast by a 2x1 cluster, 64 x 64 bf16 chunks
    assert p.layout.a_boxes == ((0, 0),) and p.layout.b_boxes == tuple((i * p.layout.b_sub_bytes, i * 64) for i in range(4))
    assert (p.cluster.mc_rank_boxes, p.cluster.mc_rank_bytes, p.cluster.mc_rank_elems) == (2, 0, 0)     # MN-major: half of the boxes
    assert (p.mma.wgmma_regs, p.mma.k_wgmmas, p.mma.a_mblock_bytes) == (128, 4, 64 * 128)
    assert (p.tiles.cluster_tiles_m, p.tiles.cluster_tiles_n) == (p.tiles.tiles_m // 2, p.tiles.tiles_n)
    assert (p.staging.epi_chunks_m, p.staging.epi_chunks_n, p.staging.epi_n8, p.mma.wg_n8) == (1, 4, 8, 32)
    assert (p.staging.epi_row_bytes, p.staging.epi_swizzle_mask, p.staging.epi_pending, p.staging.epi_uneven) == (128, 7, 1, False)
    q = _plan({"op.transpose_rhs": True, "op.inputs.b.shape": ["N", "K"], "schedule.in_specs.b.block_shape": [256, 64],
               "schedule.epilogue.buffers": 3, "schedule.pipeline.max_concurrent_steps": 3})
    # K-major multicast: every box, each CTA half of its rows (128 of 256, 128 x 128 B into the stage)
    assert (q.cluster.mc_rank_boxes, q.cluster.mc_rank_bytes, q.cluster.mc_rank_elems) == (0, 128 * 128, 128)
    assert q.layout.b_boxes == ((0, 0),) and q.staging.epi_uneven      # 4 chunks a tile through 3 buffers


def test_direct_store_is_cuda_only():
    """issue 16: store: direct changed the CUDA kernel only (the Pallas one kept its TMA stores)."""
    spec, src = load_spec(str(BASE), {"schedule.epilogue": {"store": "direct"}, "schedule.backends": ["cuda", "pallas"]})
    with pytest.raises(SpecErrors) as info:
        plan(spec, src)
    assert any("schedule.epilogue.store: the Pallas matmul stages its output through SMEM" in line
               for line in info.value.lines()), info.value.lines()
    assert _plan({"schedule.epilogue": {"store": "direct"}}).staging.epi_store == "direct"    # cuda only: fine
