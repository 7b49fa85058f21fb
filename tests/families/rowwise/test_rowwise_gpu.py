"""The rowwise kernels on a GPU: each bundled spec built once, its CUDA kernel run at the bundled row length and
several row counts, at ragged row lengths (N not a multiple of the vector width or of a row group's threads) and in
other schedules, its Pallas kernel at an odd row count (one Mosaic GPU compile a shape, so fewer), with fresh
random inputs and NaN-poisoned outputs, against the float64 reference; plus the torch peers' own check."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest

from conftest import SPECS_DIR
from test_rowwise import unscheduled
from schedgen.build import build_spec, package
from schedgen.reference import random_inputs, reference, rel_error, tolerance
from schedgen.runtime.kernel import load_package

pytestmark = pytest.mark.gpu

SPECS = {"softmax_bf16": 8192, "layernorm_bf16": 4096, "rmsnorm_bf16": 8192, "crossentropy_bf16": 32000}


def _inputs(built, sizes, seed):
    ins = random_inputs(built.spec, sizes, seed)
    if built.spec.name.startswith("crossentropy"):
        rng = np.random.default_rng(seed)
        ins["t"] = rng.integers(0, sizes["N"], ins["t"].shape).astype(np.float32)
    return ins


def _check(built, kernel, sizes, seed, backends):
    from schedgen.verify import run_cuda, run_pallas
    ins = _inputs(built, sizes, seed)
    ref = reference(built.spec, sizes, ins)
    for backend in backends:
        outs = run_cuda(kernel, built.plan, ins) if backend == "cuda" else run_pallas(kernel, built.plan, ins, False)[0]
        for o, got in zip(built.plan.outputs, outs):
            got = np.asarray(got)
            assert got.shape == ref[o.name].shape, (backend, o.name)
            assert np.isfinite(got.astype(np.float32)).all(), (backend, o.name, "NaN: an element was never written")
            err = rel_error(got, ref[o.name])
            assert err <= tolerance(o.dtype, built.plan.approx_math), (backend, o.name, sizes, err)


@pytest.mark.parametrize("stem", sorted(SPECS))
def test_bundled_spec_at_its_size_and_ragged_m(stem):
    """CUDA at four row counts from one package (M is a launch argument)."""
    built = build_spec(str(SPECS_DIR / f"{stem}.yaml"))
    kernel = load_package(package(built, tempfile.mkdtemp(prefix="rowwise-gpu-")))
    n = SPECS[stem]
    for m, seed in ((4096, 0), (1, 1), (777, 2), (8191, 3)):
        _check(built, kernel, {"M": m, "N": n}, seed, ["cuda"])


@pytest.mark.parametrize("stem, n", [("softmax_bf16", 1001), ("softmax_bf16", 1000), ("layernorm_bf16", 1536),
                                     ("rmsnorm_bf16", 5000), ("crossentropy_bf16", 32001),
                                     ("crossentropy_bf16", 50304), ("softmax_bf16", 256),
                                     ("crossentropy_bf16", 128256), ("crossentropy_bf16", 262147)])
def test_ragged_rows(stem, n):
    """N not a multiple of the 8-element vectors (1001, 32001: element accesses), of the 256 threads of a row
    group (1000, 5000), a short row (256: one warp a row), and vocabularies past the registers (128256, 262147:
    the row streams through them in segments, log-sum-exp merged online)."""
    built = build_spec(str(SPECS_DIR / f"{stem}.yaml"), {"op.sizes.N": n})
    kernel = load_package(package(built, tempfile.mkdtemp(prefix="rowwise-gpu-")))
    for m, seed in ((513, 5), (3, 6)):
        _check(built, kernel, {"M": m, "N": n}, seed, ["cuda"])


# Rows split across a thread-block cluster (DSMEM reductions): the bundled specs at 131072 and 262144 with the
# schedule the planner picks (the written blocking dropped), plus written clusters (16: non-portable; a streaming
# body; f32; a row slice not a multiple of a row group's threads; a ragged row count).
CLUSTERED = {
    "softmax_131k": ("softmax_bf16", {"op.sizes.N": 131072}, 131072),
    "softmax_262k": ("softmax_bf16", {"op.sizes.N": 262144}, 262144),
    "layernorm_131k": ("layernorm_bf16", {"op.sizes.N": 131072}, 131072),
    "layernorm_262k": ("layernorm_bf16", {"op.sizes.N": 262144}, 262144),
    "rmsnorm_131k": ("rmsnorm_bf16", {"op.sizes.N": 131072}, 131072),
    "rmsnorm_262k": ("rmsnorm_bf16", {"op.sizes.N": 262144}, 262144),
    "softmax_c16": ("softmax_bf16", {"op.sizes.N": 262144, "schedule.cluster": [16]}, 262144),
    "softmax_f32_c16": ("softmax_bf16", {"op.sizes.N": 131072, "op.inputs.x.dtype": "f32",
                                        "op.outputs.y.dtype": "f32", "schedule.cluster": [16]}, 131072),
    "softmax_c2_short": ("softmax_bf16", {"op.sizes.N": 5008, "schedule.cluster": [2]}, 5008),
    "xent_c2_streams": ("crossentropy_bf16", {"op.sizes.N": 262144, "schedule.cluster": [2]}, 262144),
}


@pytest.mark.parametrize("case", list(CLUSTERED))
def test_rows_split_across_a_cluster(case):
    """Each row split across the CTAs of a cluster against float64, at row counts that do and do not fill the
    row blocks (the persistent grid lowered to the clusters that fit)."""
    stem, ov, n = CLUSTERED[case]
    path = SPECS_DIR / f"{stem}.yaml"
    if "schedule.cluster" not in ov:        # the planner's picks for the long row, not the bundled blocking
        path = unscheduled(path, tempfile.mkdtemp(prefix="rowwise-spec-"))
    built = build_spec(str(path), ov)
    assert built.plan.launch.cluster_dims[0] > 1, built.plan.launch.kernel_name
    kernel = load_package(package(built, tempfile.mkdtemp(prefix="rowwise-gpu-")))
    for m, seed in ((64, 11), (3, 12)):
        _check(built, kernel, {"M": m, "N": n}, seed, ["cuda"])


def test_bundled_262k_spec():
    built = build_spec(str(SPECS_DIR / "softmax_bf16_262k.yaml"))
    kernel = load_package(package(built, tempfile.mkdtemp(prefix="rowwise-gpu-")))
    _check(built, kernel, {"M": 256, "N": 262144}, 13, ["cuda"])


SOFTMAX_VARIANTS = {
    "f32": ({"op.inputs.x.dtype": "f32", "op.outputs.y.dtype": "f32"}, 8192),
    "f16": ({"op.inputs.x.dtype": "f16", "op.outputs.y.dtype": "f16"}, 8192),
    "lse": ({"op.body": "y = exp(x - logsumexp(x))"}, 8192),
    "grid_per_block": ({"schedule.persistent.loop": "none"}, 8192),
    # pipeline.kind none: no prefetch ring, rows loaded straight into the registers (the kernel before the ring)
    "no_prefetch": ({"schedule.pipeline.kind": "none", "schedule.pipeline.max_concurrent_steps": 2}, 8192),
    "ring_one_step": ({"schedule.pipeline.max_concurrent_steps": 1}, 8192),
    # 4 rows over one warpgroup: a warp a row; a kept row of 2048 (8192 would need 128 registers a thread for it,
    # over the planner's 64: a located error, tests/families/rowwise/test_rowwise.py)
    "one_warp_a_row": ({"op.sizes.N": 2048, "schedule.num_warpgroups": 1, "schedule.pipeline.max_concurrent_steps": 1,
                        "schedule.out_specs.y": {"block_shape": [4, 2048], "out_of_bounds": "zero"}}, 2048),
}


@pytest.mark.parametrize("case", list(SOFTMAX_VARIANTS))
def test_softmax_variants(case):
    ov, n = SOFTMAX_VARIANTS[case]
    built = build_spec(str(SPECS_DIR / "softmax_bf16.yaml"), ov)
    kernel = load_package(package(built, tempfile.mkdtemp(prefix="rowwise-gpu-")))
    _check(built, kernel, {"M": 1027, "N": n}, 7, ["cuda"])


# Cross-entropy through the prefetch ring and without it: a whole row a piece (32000), a row streamed in segments
# (65536: two; 128256: four) whose last segment prefetches the next row block's first, one row block a CTA.
XENT_VARIANTS = {
    "no_prefetch": ({"schedule.pipeline.kind": "none", "schedule.pipeline.max_concurrent_steps": 2}, 32000),
    "ring_segments_65536": ({"op.sizes.N": 65536}, 65536),
    "no_prefetch_128256": ({"op.sizes.N": 128256, "schedule.pipeline.kind": "none",
                            "schedule.pipeline.max_concurrent_steps": 2}, 128256),
    "ring_grid_per_block_128256": ({"op.sizes.N": 128256, "schedule.persistent.loop": "none"}, 128256),
    # ex2.approx of one FFMA (x log2 e - m log2 e) in the sweep and the merges (sg_exp_sub)
    "approx_math": ({"schedule.compiler_params.approx_math": True}, 32000),
    "approx_math_segments_128256": ({"op.sizes.N": 128256, "schedule.compiler_params.approx_math": True}, 128256),
    # take of an expression (a vector along the row, a lower level's reduction): its one element loaded by one thread
    "take_of_an_expression": ({"op.inputs.w": {"shape": ["N"], "dtype": "bf16"},
                               "op.body": "loss = logsumexp(x) - take(x * w - mean(x), t)"}, 32000),
}


@pytest.mark.parametrize("case", list(XENT_VARIANTS))
def test_crossentropy_variants(case):
    ov, n = XENT_VARIANTS[case]
    built = build_spec(str(SPECS_DIR / "crossentropy_bf16.yaml"), ov)
    kernel = load_package(package(built, tempfile.mkdtemp(prefix="rowwise-gpu-")))
    for m, seed in ((1027, 9), (5, 10)):
        _check(built, kernel, {"M": m, "N": n}, seed, ["cuda"])


def test_pallas_ragged_step_and_f32():
    """The Pallas kernel at 128-column chunks (N = 1152) and f32, M odd."""
    built = build_spec(str(SPECS_DIR / "softmax_bf16.yaml"), {"op.sizes.N": 1152, "op.inputs.x.dtype": "f32",
                                                             "op.outputs.y.dtype": "f32"})
    kernel = load_package(package(built, tempfile.mkdtemp(prefix="rowwise-gpu-")))
    _check(built, kernel, {"M": 301, "N": 1152}, 8, ["cuda", "pallas"])


def test_torch_peers_verify():
    torch = pytest.importorskip("torch")
    from schedgen.families.rowwise import peers as P
    for stem in sorted(SPECS):
        built = build_spec(str(SPECS_DIR / f"{stem}.yaml"), {"op.sizes.M": 64})
        host = P.valid_targets(built.plan, random_inputs(built.spec, {"M": 64, "N": SPECS[stem]}, 0))
        names = [label for label, fn in P.torch_candidates(torch, built.plan, built.spec)
                 if P._checked(torch, fn, built.plan, built.spec, host, "cuda")[0]]
        assert names, stem
        assert P._checked(torch, P.torch_body_fn(torch, built.plan, built.spec), built.plan, built.spec, host,
                          "cuda")[0], stem


@pytest.mark.parametrize("stem", [s for s in sorted(SPECS) if s != "crossentropy_bf16"])
def test_bundled_pallas_at_an_odd_row_count(stem):
    """Pallas (one Mosaic GPU compile a shape: last in this file, the slow part) at an odd M, the last step partial."""
    built = build_spec(str(SPECS_DIR / f"{stem}.yaml"))
    assert "pallas" in built.plan.launch.backends
    kernel = load_package(package(built, tempfile.mkdtemp(prefix="rowwise-gpu-")))
    _check(built, kernel, {"M": 777, "N": SPECS[stem]}, 4, ["pallas"])


@pytest.mark.parametrize("approx", [True, False])
def test_crossentropy_of_large_and_masked_logits(approx):
    """Logits around +-1e4 (bf16 steps of 64 there) with a tenth of them masked to -inf (never the target's), the
    default approx_math exp and the IEEE one: the max and the sum of exp(x - max) must ignore the masked entries and
    neither overflow nor lose the target's term, at a ragged row count."""
    built = build_spec(str(SPECS_DIR / "crossentropy_bf16.yaml"), {"schedule.compiler_params.approx_math": approx})
    kernel = load_package(package(built, tempfile.mkdtemp(prefix="rowwise-gpu-")))
    from schedgen.verify import run_cuda
    sizes = {"M": 1027, "N": 32000}
    rng = np.random.default_rng(21)
    x = (rng.standard_normal((sizes["M"], sizes["N"]), dtype=np.float32) * 1e4)
    t = rng.integers(0, sizes["N"], sizes["M"])
    masked = rng.random(x.shape) < 0.1
    masked[np.arange(sizes["M"]), t] = False
    x[masked] = -np.inf
    from schedgen.runtime.arrays import DTYPES
    ins = {"x": x.astype(DTYPES["bf16"]), "t": t.astype(np.float32)}
    ref = reference(built.spec, sizes, ins)["loss"]
    got = np.asarray(run_cuda(kernel, built.plan, ins)[0], np.float64)
    assert np.isfinite(got).all() and np.isfinite(ref).all()
    assert rel_error(got, ref) <= tolerance("f32", built.plan.approx_math), rel_error(got, ref)
