"""The attention_backward family's warp-specialized wgmma CUDA kernel (schedule.pipeline.kind: warp_specialized;
templates/attention_backward/cuda_wgmma.cu.j2, planned by wgmma.py). On the CPU: it renders and compiles with NVRTC
for sm_90a for each shape of problem (head_dim 64 and 128, causal both ways, GQA, bhsd, f16, 1 and 2 consumer warpgroups, 1 to 3
stages), its SASS has the wgmmas of both shapes, the TMA loads (tensor maps and the lse's bulk copy), the mbarrier
waits, dS stored by stmatrix, the dQ sums as REDG.E.ADD.F32x4 and the tiles' arrival counter, no local memory, ptxas
warns of nothing (no wgmma serialization, no spill); its plan numbers (one block a key tile, the workspace's bytes),
the default left unchanged (the mma.sync kernel) and the located errors. On the GPU (`-m gpu`): `verify` against the
float64 reference (fresh random inputs, outputs poisoned, per-dtype tolerance) at small and bench sizes, the same
gradients twice in a row (the workspace zeroed again) and under CUDA-graph capture and torch.compile.
The bulk form of dQ's sums (wgmma.dq_reduce_of patched to "bulk", FlashAttention-3's TMA reduce-add): the same CPU
checks (UBLKRED a staged tile, no REDG), its SMEM accounting, the staging order against the converter's decoding,
one arrival a block; on the GPU the float64 checks, two eager calls, a CUDA graph replay and torch.compile."""
from __future__ import annotations

import re

import pytest

from conftest import SPECS_DIR, hgmma_gaps, opcodes
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.toolchain.nvrtc import resource_usage, sass
from test_attention_backward import _bwd_overrides
from test_attention_backward_cuda import F16

SPEC = SPECS_DIR / "attention_backward_bf16_4096.yaml"
CAUSAL_SPEC = SPECS_DIR / "attention_backward_causal_bf16_4096.yaml"
WS = {"schedule.backends": ["cuda"], "schedule.pipeline.kind": "warp_specialized"}

# small problems (Sq, Skv multiples of the 128 rows of a block of 2 consumers unless num_compute_wgs is 1)
CASES = {
    "plain_d64": _bwd_overrides({"B": 1, "SQ": 128, "SKV": 128, "H": 2, "D": 64}),
    "causal_d128": _bwd_overrides({"B": 2, "SQ": 256, "SKV": 256, "H": 2, "D": 128}, causal=True, d=128),
    "gqa_causal_d128": _bwd_overrides({"B": 2, "SQ": 256, "SKV": 256, "H": 4, "G": 2, "D": 128}, causal=True,
                                      gqa=True, d=128),
    # bottom-right with more keys: the first key blocks are seen by every query, the last by the last rows only
    "causal_sq_lt_skv": _bwd_overrides({"B": 1, "SQ": 128, "SKV": 256, "H": 1, "D": 64}, causal=True),
    "top_left_sq_gt_skv": _bwd_overrides({"B": 1, "SQ": 256, "SKV": 128, "H": 1, "D": 64}, causal="top_left"),
    # top-left with more keys: keys past Sq are seen by no query (dK = dV = 0: blocks with no step)
    "top_left_sq_lt_skv": _bwd_overrides({"B": 1, "SQ": 128, "SKV": 384, "H": 1, "D": 64}, causal="top_left"),
    "bhsd_scale_f16_stages1": {**_bwd_overrides({"B": 2, "SQ": 256, "SKV": 384, "H": 3, "D": 128}, layout="bhsd",
                                                scale=0.3, d=128),
                               "schedule.pipeline.max_concurrent_steps": 1, **F16,
                               "schedule.compiler_params.approx_math": False},
    "one_consumer_gqa4_causal_stages3": {
        **_bwd_overrides({"B": 1, "SQ": 192, "SKV": 320, "H": 4, "G": 1, "D": 128}, causal=True, gqa=True, d=128),
        "schedule.pipeline.num_compute_wgs": 1, "schedule.pipeline.max_concurrent_steps": 3},
}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    out = {name: build_spec(str(SPEC), {**ov, **WS}, cache=cache) for name, ov in CASES.items()}
    out["bench"] = build_spec(str(SPEC), WS, cache=cache)
    out["bench_causal"] = build_spec(str(CAUSAL_SPEC), WS, cache=cache)
    return out


@pytest.mark.parametrize("name", [*CASES, "bench", "bench_causal"])
def test_compiles_to_wgmma_and_tma_without_local_memory(built, name):
    b = built[name]
    p = b.plan
    text = sass(b.files["kernel.cubin"])
    ops = opcodes(text)
    kind = ".BF16" if p.dtype == "bf16" else ""          # f16 prints no suffix
    # S^T, dP^T and dQ partial: m64n64k16 from SMEM; dV, dK: m64n{D}k16 with A from registers
    assert set(re.findall(r"HGMMA\.(\S+)", text)) == {f"64x64x16.F32{kind}", f"64x{p.head_dim}x16.F32{kind}"}
    assert "UTMALDG.3D" in ops and "UBLKCP.S.G" in ops            # the tiles by tensor map, the lse by bulk copy
    assert "SYNCS.PHASECHK.TRANS64.TRYWAIT" in ops                 # the ring's mbarrier waits
    assert "MUFU.EX2" in ops
    assert "STSM.16.MT88.4" in ops                                 # dS^T to SMEM, transposed (stmatrix.trans x4)
    # the dQ partials: 4 consecutive floats an instruction (the pairs traded between neighbour lanes), 8 an
    # accumulator of 64 x 64 a thread, into the workspace; then one arrival a tile
    reds = [ln for ln in text.splitlines() if "REDG." in ln]
    assert reds and all("REDG.E.ADD.F32x4" in ln for ln in reds), reds
    assert len(reds) == 8 * p.wgmma.dq_slabs
    assert "ATOMG.E.ADD.STRONG.GPU" in ops and "MEMBAR.ALL.GPU" in ops
    assert not [o for o in ops if o.startswith(("LDL", "STL", "HMMA", "LDGSTS"))]
    assert any(o.startswith("USETMAXREG") for o in ops)
    u = resource_usage(b.files["kernel.cubin"])[p.launch.kernel_name]
    assert u["STACK"] == 0 and u["LOCAL"] == 0
    assert b.warnings == []                                        # ptxas: no C7517 (wgmma serialized), no spill


def test_the_plan_is_one_launch_of_key_blocks_with_a_workspace(built):
    p = built["gqa_causal_d128"].plan
    w = p.wgmma
    assert p.cuda is None and w.consumers == 2 and w.rows == 128 and w.threads == 384 == p.launch.threads
    assert w.dkv_blocks == 256 // 128 * 2 * 2 == p.launch.num_blocks and p.launch.kernel_name.endswith("_ws2")
    assert [a.kind for a in p.launch.kernel_args] == ["tmap"] * 5 + ["ptr"] * 4 + ["workspace"]
    assert [a.operand for a in p.launch.kernel_args] == [*range(9), -1]
    # f32 sums of dQ (B x Hq x Sq x D), then a u32 counter a 64-query tile (rounded up to 16 bytes)
    assert w.counters_offset == 2 * 4 * 256 * 128 and w.counters_bytes == 2 * 4 * (256 // 64) * 4
    assert p.launch.kernel_args[-1].value == w.workspace_bytes == 4 * w.counters_offset + w.counters_bytes
    assert (w.dq_column_split, w.dq_slabs, w.dq_ksteps) == (True, 1, 8)   # 64 columns each, over all 128 keys
    rec_arg = __import__("schedgen.plan.launch", fromlist=["x"]).launch_record(p).kernel_args[-1]
    assert (rec_arg.kind, rec_arg.value) == ("workspace", w.workspace_bytes)
    q = p.launch.kernel_args[0]
    assert q.shape == (2, 256, 4 * 128) and q.box == (1, 64, 64) and q.swizzle == 128
    assert p.launch.kernel_args[1].shape == (2, 256, 2 * 128)
    assert w.q_strides == (256 * 4 * 128, 4 * 128, 128) and w.kv_strides == (256 * 2 * 128, 2 * 128, 128)
    # K, V (128 rows), 2 stages of Q, dO, O (64 rows) and lse, delta; two dS buffers (64 x 128 bf16)
    assert w.ds_offset == 1024 + 2 * 32768 + 2 * (3 * 16384 + 1024) and w.ds_bytes == 64 * 128 * 2
    assert w.smem_bytes == w.ds_offset + 2 * w.ds_bytes + 1024
    for other in built.values():   # the dS buffers start 128-byte-swizzle atoms (1024 B), as stmatrix and wgmma assume
        ow = other.plan.wgmma
        assert ow.ds_offset % 1024 == 0 and ow.ds_bytes % 1024 == 0 and ow.dkv_ring % 1024 == 0
    assert p.launch.smem_bytes == w.smem_bytes <= 232448
    assert (w.producer_regs, w.consumer_regs) == (24, 240)
    one = built["one_consumer_gqa4_causal_stages3"].plan
    assert (one.wgmma.rows, one.launch.threads, one.wgmma.dkv_blocks) == (64, 256, 5)
    assert (one.wgmma.dq_column_split, one.wgmma.dq_slabs, one.wgmma.dq_ksteps) == (False, 2, 4)
    d64 = built["plain_d64"].plan.wgmma                                   # 2 consumers, head_dim 64: by keys
    assert (d64.dq_column_split, d64.dq_slabs, d64.dq_ksteps) == (False, 1, 4)
    bh = built["bhsd_scale_f16_stages1"].plan
    assert bh.launch.kernel_args[0].shape == (2 * 3, 256, 128) and bh.wgmma.kv_strides == (3 * 384 * 128, 128, 384 * 128)


def test_rendering_reflects_the_plan(built):
    cu = built["causal_sq_lt_skv"].files["kernel.cu"].decode()
    assert "constexpr int OFFSET = 128;" in cu and "crosses" in cu and "ex2.approx.ftz.f32" in cu
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in cu and "setmaxnreg.inc.sync.aligned.u32 240" in cu
    assert "mma.sync" not in cu and "cp.async.cg" not in cu
    plain = built["plain_d64"].files["kernel.cu"].decode()
    assert "OFFSET" not in plain and "crosses" not in plain
    f16 = built["bhsd_scale_f16_stages1"].files["kernel.cu"].decode()
    assert "m64n128k16.f32.f16.f16" in f16 and "exp2f(x)" in f16 and "b * 3 + hq" in f16
    one = built["one_consumer_gqa4_causal_stages3"].files["kernel.cu"].decode()
    assert "__launch_bounds__(256, 1)" in one and "sg_mbar_init(BAR_EMPTY + 8 * s, 1);" in one
    # the arrivals a tile expects: consumers x the key blocks that reach it (causal: from the geometry)
    assert "return 2u * (uint32_t)min(2, ((qb + 1) * 64 + OFFSET + 127) / 128);" in cu
    assert "return 1u * (uint32_t)min(5, ((qb + 1) * 64 + OFFSET + 63) / 64);" in one
    # dS shared between two consumers (head_dim 128): a barrier of both; else each consumer's own (head_dim 64)
    d128 = built["causal_d128"].files["kernel.cu"].decode()
    assert "sg_named_sync(1, 256);" in d128 and "sg_named_sync(2 + w, 128);   " not in d128
    assert "return 2u;" in plain and "sg_named_sync(1, 256);" not in plain and "sg_named_sync(2 + w, 128);   " in plain
    assert "sg_named_sync(2 + w, 128);   " in one


def test_the_default_is_this_kernel_where_it_plans():
    """Without pipeline.kind the bundled spec gets this kernel (verified and timed on the H200: 1.79x the mma.sync
    one); kind emit_pipeline written keeps the mma.sync kernel; where this kernel cannot plan (block_kv 128 at
    head_dim 64) the planner picks the mma.sync one."""
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    spec, src = load_spec(str(SPEC))
    p = plan(spec, src)
    assert p.wgmma is not None and p.cuda is None and p.launch.threads == 384
    spec, src = load_spec(str(SPEC), {"schedule.pipeline.kind": "emit_pipeline"})
    p = plan(spec, src)
    assert p.wgmma is None and p.cuda is not None and p.launch.threads == 128
    ov = _bwd_overrides({"B": 1, "SQ": 256, "SKV": 256, "H": 2, "D": 64}, blocks=(64, 128))
    del ov["schedule.pipeline.kind"]
    spec, src = load_spec(str(SPEC), ov)
    p = plan(spec, src)
    assert p.wgmma is None and p.cuda is not None


def test_consumers_not_written_follow_the_planners_pick():
    """num_compute_wgs not written and Sq = 4032 (a multiple of 64, not of 128): one consumer warpgroup, as the
    planner's pick says (the kernel took 2 and failed with an error about a field the user never wrote)."""
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    spec, src = load_spec(str(SPEC), {**WS, "S": 4032})
    p = plan(spec, src)
    assert p.wgmma is not None and p.wgmma.consumers == 1 and p.wgmma.rows == 64


def test_explain_names_the_fields_it_reads(built):
    from schedgen.families.attention_backward.explain import explain_attention_backward
    text = explain_attention_backward(built["causal_d128"].plan)
    for word in ("warp_specialized", "memory_registers", "compute_registers", "num_compute_wgs 2", "2-stage",
                 "m64n128k16", "128 keys", "red.global.add.v4.f32", "64 of the columns over all 128 keys",
                 f"{built['causal_d128'].plan.wgmma.workspace_bytes} B f32 workspace"):
        assert word in text, word


# each field the wgmma kernel reads, at another legal value: the rendered kernel changes (or a located error)
FIELD_VALUES = {
    "schedule.pipeline.num_compute_wgs": [1],
    "schedule.pipeline.memory_registers": [32, 40],
    "schedule.pipeline.compute_registers": [224, 232],
    "schedule.pipeline.max_concurrent_steps": [1],
    "schedule.compiler_params.approx_math": [False],
    "schedule.pipeline.delta": ["preprocess"],
}


@pytest.mark.parametrize("field", list(FIELD_VALUES))
def test_every_field_it_reads_changes_the_kernel(field):
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    from schedgen.render import render

    def source(ov):
        spec, src = load_spec(str(SPEC), {**WS, **ov})
        return render(plan(spec, src), "cuda")
    base = source({})
    for value in FIELD_VALUES[field]:
        assert source({field: value}) != base, (field, value)


# (overrides on top of WS, path, text)
ERRORS = {
    "head_dim_256": ({"D": 256, "schedule.in_specs.q.block_shape": [64, 256],
                      "schedule.in_specs.k.block_shape": [64, 256]}, "op.inputs.q.shape[3]",
                     "takes head_dim 64 or 128"),
    "block_q_128": ({"schedule.in_specs.q.block_shape": [128, 128]}, "schedule.in_specs.q.block_shape[0]",
                    "streams 64 queries a step"),
    "three_consumers": ({"schedule.pipeline.num_compute_wgs": 3}, "schedule.pipeline.num_compute_wgs",
                        "1 or 2 consumer warpgroups"),
    "ragged_for_two": ({"S": 4032, "schedule.pipeline.num_compute_wgs": 2}, "op.inputs.q.shape[1]",
                       "use num_compute_wgs: 1"),
    "setmaxnreg_step": ({"schedule.pipeline.memory_registers": 30}, "schedule.pipeline.memory_registers",
                        "multiple of 8"),
    "register_budget": ({"schedule.pipeline.compute_registers": 256}, "schedule.pipeline.compute_registers", ""),
    "smem": ({"schedule.pipeline.max_concurrent_steps": 4}, "schedule.pipeline.max_concurrent_steps",
             "B of SMEM with 4 stages"),
    # head_dim 128, 2 consumers: 3 stages leave no room for the two dS buffers
    "smem_ds": ({"schedule.pipeline.max_concurrent_steps": 3}, "schedule.pipeline.max_concurrent_steps",
                "and two dS buffers), over the"),
    "dynamic": ({"op.sizes.S": {"dynamic": True, "max": 4096, "multiple_of": 128}}, "op.sizes.S",
                "specialized to fixed sizes"),
}


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_located_errors(case):
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    ov, path, text = ERRORS[case]
    spec, src = load_spec(str(SPEC), {**WS, **ov})
    with pytest.raises(SpecErrors) as exc:
        plan(spec, src)
    msg = str(exc.value)
    assert path in msg and text in msg, msg


def test_the_warpgroup_fields_are_errors_without_it():
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    for field, value in (("num_compute_wgs", 2), ("memory_registers", 40), ("compute_registers", 232)):
        spec, src = load_spec(str(SPEC), {"schedule.pipeline.kind": "emit_pipeline",
                                          f"schedule.pipeline.{field}": value})
        with pytest.raises(SpecErrors) as exc:
            plan(spec, src)
        assert f"schedule.pipeline.{field}" in str(exc.value) and "warp_specialized" in str(exc.value)


# ------------------------------------------------------------------------------ on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
def test_wgmma_kernel_matches_float64_on_gpu(case):
    """`schedgen verify --backend cuda`: fresh random inputs (o and lse the forward's), outputs poisoned, every
    gradient against the float64 reference within the dtype's tolerance."""
    from schedgen.verify import verify_file
    checks = verify_file(str(SPEC), ["cuda"], {**CASES[case], **WS}, seed=0)
    assert {c.backend for c in checks} == {"cuda"}, checks
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [SPEC, CAUSAL_SPEC], ids=["bench", "bench_causal"])
def test_bench_sizes_verify_on_gpu(spec):
    from schedgen.verify import verify_file
    checks = verify_file(str(spec), ["cuda"], WS, seed=1)
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


def _c_expr(cu: str, pattern: str) -> str:
    """A rendered C expression (non-negative int math) as Python: / floors, casts and unsigned suffixes dropped."""
    m = re.search(pattern, cu)
    assert m, pattern
    expr = re.sub(r"\(uint32_t\)", "", m.group(1))
    expr = re.sub(r"(\d+)u\b", r"\1", expr)
    return expr.replace("/", "//")


@pytest.mark.parametrize("name", [*CASES, "bench_causal"])
def test_each_tile_expects_exactly_the_arrivals_the_blocks_make(built, name):
    """The rendered kernel's own formulas, evaluated: every (q head, 64-query tile) gets one arrival from each
    consumer of each key block whose steps reach it (sg_block's first / n_it, enumerated) and sg_arrivals expects
    exactly that many, so the last one writes dq once it has every partial (a miscount would write early or never)."""
    _check_arrivals(built[name], per_block=built[name].plan.wgmma.consumers)


def _check_arrivals(b, per_block: int):
    p, cu = b.plan, b.files["kernel.cu"].decode()
    w = p.wgmma
    env = {"min": min, "max": max}
    m = re.search(r"constexpr int OFFSET = (\d+);", cu)
    env["OFFSET"] = int(m.group(1)) if m else 0
    first = _c_expr(cu, r"B\.first = (.+);")
    n_it = _c_expr(cu, r"B\.n_it = (.+);\s+//")
    arrivals = _c_expr(cu, r"sg_arrivals\(int qb\) \{\n(?:\{%.*\n)?\s*return (.+);")
    got: dict = {}
    for blk in range(w.dkv_blocks):
        kt, u = divmod(blk, p.heads_kv * p.batch)
        hb, hk = divmod(u, p.heads_kv)
        row0 = kt * w.rows
        f = eval(first, {**env, "B": type("B", (), {"row0": row0})})
        n = eval(n_it, {**env, "B": type("B", (), {"first": f})})
        n_qb = p.seq_q // 64 - f
        for it in range(n):
            key = (hb, hk * p.group + it // n_qb, f + it % n_qb)
            got[key] = got.get(key, 0) + per_block
    tiles = {(bb, h, qb) for bb in range(p.batch) for h in range(p.heads_q) for qb in range(p.seq_q // 64)}
    assert set(got) == tiles                               # every tile is written by someone
    for (_, _, qb), count in got.items():
        assert eval(arrivals, {**env, "qb": qb}) == count, (qb, count)


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["gqa_causal_d128", "one_consumer_gqa4_causal_stages3", "plain_d64"])
def test_dq_workspace_on_every_call_path_on_gpu(tmp_path, case):
    """wgmma_dq_paths.py in a fresh interpreter: two eager calls in a row (the workspace zeroed again), a CUDA graph
    captured and replayed on new inputs, torch.compile(fullgraph=True); each gradient against float64."""
    _dq_paths(tmp_path, case, [])


def _dq_paths(tmp_path, case: str, extra: list[str]) -> None:
    import importlib.util
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path
    from conftest import ROOT
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    script = Path(__file__).with_name("wgmma_dq_paths.py")
    res = subprocess.run([sys.executable, str(script), str(tmp_path), case, *extra], capture_output=True, text=True,
                         env=env, timeout=600)
    rows = [json.loads(ln[len("RESULT "):]) for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    assert [r["path"] for r in rows] == ["eager+compile", "graph"], res.stderr[-3000:]
    assert all(r["ok"] for r in rows), rows
    assert rows[0]["dq_reduce"] == ("bulk" if "bulk" in extra else "red"), rows[0]
    assert rows[0].get("delta") == ("preprocess" if "preprocess" in extra else "in_kernel"), rows[0]


@pytest.mark.parametrize("name", ["gqa_causal_d128", "plain_d64", "one_consumer_gqa4_causal_stages3"])
def test_stmatrix_addresses_put_ds_where_the_dq_wgmma_reads_it(built, name):
    """The rendered stmatrix addresses, evaluated for every lane of every warp of every consumer, with the
    instruction's semantics (x4: lane 8j + i gives row i of matrix j; .trans: that row holds column i of the
    fragment matrix j, whose element (a, b) is half b % 2 of register j of lane 4a + b / 2) and the 128-byte swizzle
    (16-byte chunk c of row r at c ^ (r % 8), 64-key slabs of 64 rows): the bytes land as dS[query][key], K-major,
    which is how the dQ wgmma's A descriptor (sg_desc_k over 8192-byte slabs) reads it; every element written once."""
    b = built[name]
    w_ = b.plan.wgmma
    cu = b.files["kernel.cu"].decode()
    chunk_expr = _c_expr(cu, r"const int chunk = (.+);")
    row_expr = _c_expr(cu, r"sg_stmatrix_t\(sg_chunk\(s_ds, 8192u, (.+), chunk\), pd")
    rows = w_.rows
    ds_t = {}                                    # (key, query) -> the value a thread's pd holds (a label)
    mem = {}                                     # byte offset in the dS buffer -> label
    for w in range(w_.consumers):
        for warp in range(4):
            for m in range(4):
                for lane in range(32):
                    j = lane // 8
                    env = {"w": w, "warp": warp, "lane": lane, "j": j, "m": m}
                    chunk, row = eval(chunk_expr, env), eval(row_expr, env)
                    addr = (chunk // 8) * 8192 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4)
                    i = lane % 8
                    for k in range(8):           # memory row i, column k = fragment matrix j (row k, column i)
                        src = 4 * k + i // 2     # the lane holding it; register pd[4m + j], half i % 2
                        n8, half = 2 * m + j // 2, j % 2
                        key = w * 64 + warp * 16 + src // 4 + 8 * half          # r0 (+ 8) of the source lane
                        query = n8 * 8 + 2 * (src % 4) + i % 2                 # its column c2 (+ 1)
                        label = (key, query)
                        ds_t[label] = True
                        where = addr + 2 * k
                        assert where not in mem, (name, where)
                        mem[where] = label
    assert len(mem) == 64 * rows == len(ds_t)
    for where, (key, query) in mem.items():      # read back as the K-major A of dQ: row = query, column = key
        c = key // 8
        assert where == (c // 8) * 8192 + query * 128 + (((c & 7) ^ (query & 7)) << 4) + 2 * (key % 8)


# ------------------------------------------------------------------------------ dQ by bulk reduce-add (dq_reduce "bulk")

BULK_CASES = [*CASES, "bench", "bench_causal"]


def _bulk(monkeypatch_ctx):
    from schedgen.families.attention_backward import wgmma as wgmma_plan
    monkeypatch_ctx.setattr(wgmma_plan, "dq_reduce_of", lambda nc, d: "bulk")


@pytest.fixture(scope="module")
def built_bulk(tmp_path_factory):
    """Each case built with wgmma.dq_reduce_of patched to "bulk" (as python -m bench.candidates, bulk does)."""
    cache = Cache(tmp_path_factory.mktemp("cache_bulk"))
    with pytest.MonkeyPatch.context() as mp:
        _bulk(mp)
        out = {name: build_spec(str(SPEC), {**ov, **WS}, cache=cache) for name, ov in CASES.items()}
        out["bench"] = build_spec(str(SPEC), WS, cache=cache)
        out["bench_causal"] = build_spec(str(CAUSAL_SPEC), WS, cache=cache)
    return out


def test_the_default_adds_by_red_and_its_plan_json_has_no_bulk_fields(built):
    from schedgen.families.attention_backward import wgmma as wgmma_plan
    from schedgen.plan import to_dict
    assert {wgmma_plan.dq_reduce_of(nc, d) for nc in (1, 2) for d in (64, 128)} == {"red"}
    for b in built.values():
        w = to_dict(b.plan)["wgmma"]
        assert b.plan.wgmma.dq_reduce == "red" and "dq_reduce" not in w and "dq_offset" not in w
        assert "cp.reduce.async.bulk" not in b.files["kernel.cu"].decode()


@pytest.mark.parametrize("name", BULK_CASES)
def test_bulk_variant_compiles_to_one_bulk_reduce_a_tile(built_bulk, name):
    b = built_bulk[name]
    p, w = b.plan, b.plan.wgmma
    assert w.dq_reduce == "bulk"
    text = sass(b.files["kernel.cubin"])
    ops = opcodes(text)
    kind = ".BF16" if p.dtype == "bf16" else ""
    assert set(re.findall(r"HGMMA\.(\S+)", text)) == {f"64x64x16.F32{kind}", f"64x{p.head_dim}x16.F32{kind}"}
    # the partials: one cp.reduce.async.bulk .add.f32 a staged tile (UBLKRED), no red.global from registers
    assert ops.count("UBLKRED.G.S.ADD.F32.RN") == w.dq_bulk_ops, [o for o in ops if "BLK" in o]
    assert not [ln for ln in text.splitlines() if "REDG." in ln]
    # staged by st.shared.v4 (8 a 64 x 64 accumulator), made visible to the async proxy, then the completed adds
    # (their completion: an implicit generic-async proxy fence) released by MEMBAR.GPU and counted by one atomic
    assert ops.count("STS.128") == 8 * w.dq_slabs
    assert "FENCE.VIEW.ASYNC.S" in ops and "MEMBAR.ALL.GPU" in ops
    assert ops.count("ATOMG.E.ADD.STRONG.GPU") == 1
    from schedgen.families.attention_backward.explain import explain_attention_backward
    text = explain_attention_backward(p)
    assert "cp.reduce.async.bulk" in text and "red.global" not in text and "one dS buffer" in text
    assert "BAR.ARV" in ops and "STSM.16.MT88.4" in ops and "UTMALDG.3D" in ops
    assert not [o for o in ops if o.startswith(("LDL", "STL", "HMMA", "LDGSTS"))]
    u = resource_usage(b.files["kernel.cubin"])[p.launch.kernel_name]
    assert u["STACK"] == 0 and u["LOCAL"] == 0
    assert b.warnings == []                                        # ptxas: no wgmma serialization, no spill


def test_bulk_plan_accounts_its_smem(built, built_bulk):
    """One dS buffer (freed by barrier 5 each step) and the f32 staging buffer of a step's partials after it; at
    head_dim 128 with 2 consumers and 2 stages the staging buffer does not fit beside two dS buffers."""
    limit = 232448
    for name in BULK_CASES:
        w, red = built_bulk[name].plan.wgmma, built[name].plan.wgmma
        tile = 64 * built_bulk[name].plan.head_dim * 4
        assert (w.ds_buffers, w.dq_bulk_bytes, w.dq_tile_vec4) == (1, tile, tile // 16)
        assert w.dq_bulk_ops == (1 if w.dq_column_split else w.consumers)
        assert w.dq_consumer_bytes == (64 * 64 * 4 if w.dq_column_split else tile)
        assert w.ds_offset == red.ds_offset and w.dq_offset == w.ds_offset + w.ds_bytes and w.dq_offset % 1024 == 0
        assert w.smem_bytes == w.dq_offset + w.dq_bulk_ops * w.dq_bulk_bytes + 1024 <= limit
        assert built_bulk[name].plan.launch.smem_bytes == w.smem_bytes
        assert (w.dq_sync_threads, w.dq_converters) == (32 + 128 * w.consumers, 128 * w.consumers)
        assert w.workspace_bytes == red.workspace_bytes
    w, red = built_bulk["bench"].plan.wgmma, built["bench"].plan.wgmma
    assert (w.consumers, w.dq_column_split, w.smem_bytes) == (2, True, 217088)
    assert red.smem_bytes + w.dq_bulk_bytes > limit                  # two dS buffers and the staging buffer
    one = built_bulk["one_consumer_gqa4_causal_stages3"].plan.wgmma
    assert (one.dq_bulk_ops, one.smem_bytes) == (1, 226304)


def test_bulk_smem_error_is_located(monkeypatch):
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    _bulk(monkeypatch)
    spec, src = load_spec(str(SPEC), {**WS, "schedule.pipeline.max_concurrent_steps": 3})
    with pytest.raises(SpecErrors) as exc:
        plan(spec, src)
    msg = str(exc.value)
    assert "schedule.pipeline.max_concurrent_steps" in msg and "one dS buffer and the f32 dQ staging buffer" in msg


@pytest.mark.parametrize("name", ["gqa_causal_d128", "plain_d64", "one_consumer_gqa4_causal_stages3"])
def test_bulk_staging_order_is_what_the_converter_reads(built_bulk, name):
    """The rendered staging addresses (sg_stage_dq's, at each consumer's slab) and the converter's decoding of a
    float4 of the workspace tile, evaluated: each accumulator element (thread t's acc[4 n8 + k]: row 16 (t / 32) +
    t % 32 / 4 (+ 8 for k >= 2), column 8 n8 + 2 (t % 4) + k % 2 of its 64-column slab) lands where the converter
    looks for that (row, column); the consumers' parts tile the staging buffer (split: columns side by side, else a
    tile each, summed by their bulk adds) and every element of the tile is written and read once."""
    b = built_bulk[name]
    w_ = b.plan.wgmma
    cu = b.files["kernel.cu"].decode()
    slab_expr = _c_expr(cu, r"sg_stage_dq\(S_DQ \+ (.+), dqp\[j\], wg_thread\);")
    elem_expr = _c_expr(cu, r"st\.shared\.v4\.f32 \[%0\].*:: \"r\"\(slab \+ (.+)\),\n")
    dec = re.search(r"const int t = (.+), row = (.+), col = (.+);\n", cu)
    t_e, row_e, col_e = (_c_expr(dec.group(k), r"(.+)") for k in (1, 2, 3))
    staged = {}                                       # byte offset in the staging buffer -> (part, row, column)
    for w in range(w_.consumers):
        for j in range(w_.dq_slabs):
            slab = eval(slab_expr, {"w": w, "j": j})
            col0 = 64 * (w if w_.dq_column_split else j)
            for t in range(128):
                for n8 in range(8):
                    addr = slab + eval(elem_expr, {"n8": n8, "wg_thread": t})
                    for k in range(4):
                        at = addr + 4 * k
                        assert at not in staged
                        row = 16 * (t // 32) + (t % 32) // 4 + 8 * (k // 2)
                        staged[at] = (at // w_.dq_bulk_bytes, row, col0 + 8 * n8 + 2 * (t % 4) + k % 2)
    assert sorted(staged) == list(range(0, w_.dq_bulk_ops * w_.dq_bulk_bytes, 4))
    read = {}
    for i in range(w_.dq_tile_vec4):                 # float4 i of the workspace tile: (row, col .. col + 1) and row + 8
        env = {"i": i}
        env["t"] = eval(t_e, env)
        row, col = eval(row_e, env), eval(col_e, env)
        for k, rc in enumerate(((row, col), (row, col + 1), (row + 8, col), (row + 8, col + 1))):
            read[16 * i + 4 * k] = rc
    assert sorted(set(read.values())) == [(r, c) for r in range(64) for c in range(b.plan.head_dim)]
    for at, (_, row, col) in staged.items():          # the bulk add puts byte `at % tile` of a part there
        assert read[at % w_.dq_bulk_bytes] == (row, col), (at, row, col)


@pytest.mark.parametrize("name", [*CASES, "bench_causal"])
def test_bulk_tiles_expect_one_arrival_a_block(built_bulk, name):
    """As test_each_tile_expects_exactly_the_arrivals_the_blocks_make, with warp 3's one arrival a block."""
    _check_arrivals(built_bulk[name], per_block=1)


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["gqa_causal_d128", "plain_d64", "one_consumer_gqa4_causal_stages3",
                                  "bhsd_scale_f16_stages1", "top_left_sq_lt_skv"])
def test_bulk_variant_matches_float64_on_gpu(case, monkeypatch):
    """The bulk form (wgmma.dq_reduce_of patched) under `verify`: fresh random inputs, outputs poisoned, every
    gradient against float64 (a tile converted before all its bulk adds completed, or twice, fails dq)."""
    from schedgen.verify import verify_file
    _bulk(monkeypatch)
    checks = verify_file(str(SPEC), ["cuda"], {**CASES[case], **WS}, seed=2)
    assert {c.backend for c in checks} == {"cuda"}, checks
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [SPEC, CAUSAL_SPEC], ids=["bench", "bench_causal"])
def test_bulk_variant_at_bench_sizes_on_gpu(spec, monkeypatch):
    from schedgen.verify import verify_file
    _bulk(monkeypatch)
    checks = verify_file(str(spec), ["cuda"], WS, seed=3)
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["gqa_causal_d128", "plain_d64"])
def test_bulk_variant_on_every_call_path_on_gpu(tmp_path, case):
    """wgmma_dq_paths.py ... bulk: two eager calls in a row, a CUDA graph replay, torch.compile, the bulk form."""
    _dq_paths(tmp_path, case, ["bulk"])


def _balanced(text: str, start: int) -> int:
    """The index just past the parenthesis that closes the one at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    raise AssertionError(text)


def _py(expr: str) -> str:
    expr = re.sub(r"\(uint32_t\)", "", expr)
    expr = re.sub(r"(\d+)u\b", r"\1", expr)
    return expr.replace("&&", " and ").replace("||", " or ").replace("/", "//")


def _protocol_events(lines: list[str], env: dict, slot_expr: str) -> list[tuple]:
    """The barrier-4/5 and flag events a rendered code region makes, in order, for the values in `env`: the region's
    control flow (for, if, else, braces) run as Python, its statements kept where they are barrier 4 / 5 waits or
    arrivals (sg_named_sync / sg_named_arrive), warp 3's flag stores (the slot, and the step of the sg_step before)
    and the consumers' flag reads (sg_maybe_convert: its step and slot); every other statement dropped."""
    out, body, stack = [], [], []

    def stmt(s: str) -> str | None:
        if m := re.match(r"sg_named_(sync|arrive)\(([45]), ", s):
            return f"_ev.append(('{m.group(1)}', {m.group(2)}))"
        if m := re.match(r"sg_step\(B, (.+), hq, qb\);", s):
            return f"_step = {_py(m.group(1))}"
        if m := re.search(r'st\.shared\.u32 \[%0\], %1;" :: "r"\(S_LAST \+ 4u \* (.+)\), "r"\(last\)', s):
            return f"_ev.append(('write', {_py(m.group(1))}, _step))"
        if m := re.match(r"sg_maybe_convert\(B, (.+?), S_LAST", s):
            return f"_ev.append(('read', ({slot_expr.replace('s', '_s')}), _s)) if (_s := {_py(m.group(1))}) is not None else None"
        return None

    def emit(code: str):
        body.append("    " * (len(stack) + 1) + code)

    def open_block(header: list[str], loop):
        for h in header:
            emit(h)
        stack.append(loop)
        emit("pass")
    pending = None                                       # a header without braces: it governs the next line
    for raw in lines:
        line = re.sub(r"\s*//.*$", "", raw).strip()
        if not line or line.startswith("#pragma"):
            continue
        if line.startswith("} else {"):
            stack.pop()
            open_block(["else:"], "if")
            continue
        if line == "}":
            kind = stack.pop()
            if isinstance(kind, tuple):                  # a for loop: its increment at the end of its body
                body.append("    " * (len(stack) + 2) + kind[1])
            continue
        if line == "{":
            open_block(["if True:"], "if")
            continue
        m = re.match(r"(for|if) \(", line)
        if m:
            close = _balanced(line, len(m.group(1)) + 1)
            head, rest = line[len(m.group(1)) + 2:close - 1], line[close:].strip()
            if m.group(1) == "for":
                init, cond, inc = (x.strip() for x in head.split(";"))
                var = re.match(r"int (\w+) = ", init).group(1)
                step = {"++": f"{var} += 1", "--": f"{var} -= 1"}.get(inc[:2], _py(inc))
                header = [f"{var} = {_py(init.split('=', 1)[1])}", f"while {_py(cond)}:"]
                loop = (var, step)
            else:
                header, loop = [f"if {_py(head)}:"], "if"
            if rest == "{":
                open_block(header, loop)
            elif rest.startswith("{") or rest.endswith(";") or not rest:
                inner = stmt(rest.strip("{} ")) if rest else None
                if rest and inner is None and "sg_named" not in rest:
                    continue                             # nothing of the protocol in it (a one-line loop or if)
                if not rest:
                    pending = (header, loop)
                    continue
                open_block(header, loop)
                emit(inner)
                if isinstance(loop, tuple):
                    emit(loop[1])
                stack.pop()
            continue
        code = stmt(line)
        if pending is not None:                          # the body of a braceless header: kept only if relevant
            header, loop = pending
            pending = None
            if code is not None:
                open_block(header, loop)
                emit(code)
                if isinstance(loop, tuple):
                    emit(loop[1])
                stack.pop()
            continue
        if code is not None:
            emit(code)
    assert not stack, stack
    src = "def _run():\n    _step = None\n" + "\n".join(body) + "\n    return _ev\n"
    scope = dict(env, _ev=out)
    exec(src, scope)
    return scope["_run"]()


def _interleavings_ok(consumer: list[tuple], issuer: list[tuple]) -> None:
    """Every interleaving of the two event lists under named-barrier semantics (a phase completes when both have
    arrived; a wait blocks until then): no one arrives twice in a phase, no deadlock, every flag read sees the
    flag of the step it asks for (the last write to its slot)."""
    progs = (consumer, issuer)
    seen, todo = set(), [((0, 0), (frozenset(), frozenset()), (None,) * 4, frozenset())]
    while todo:
        state = todo.pop()
        if state in seen:
            continue
        seen.add(state)
        pcs, bars, slots, waiting = state
        if all(pcs[i] >= len(progs[i]) for i in (0, 1)):
            continue
        moved = False
        for who in (0, 1):
            if pcs[who] >= len(progs[who]) or who in waiting:
                continue
            ev = progs[who][pcs[who]]
            npcs, nbars, nslots, nwait = list(pcs), list(bars), list(slots), set(waiting)
            if ev[0] in ("sync", "arrive"):
                b = ev[1] - 4
                assert who not in nbars[b], ("a second arrival in one phase of barrier", ev[1], who, pcs)
                arrived = nbars[b] | {who}
                if len(arrived) == 2:
                    arrived = frozenset()
                    for other in list(nwait):
                        if progs[other][pcs[other]] == ("sync", ev[1]):
                            nwait.discard(other)
                            npcs[other] += 1
                    npcs[who] += 1
                elif ev[0] == "sync":
                    nwait.add(who)
                else:
                    npcs[who] += 1
                nbars[b] = arrived
            elif ev[0] == "write":
                nslots[ev[1]] = ev[2]
                npcs[who] += 1
            else:
                assert nslots[ev[1]] == ev[2], ("a stale flag", ev, nslots)
                npcs[who] += 1
            moved = True
            todo.append((tuple(npcs), tuple(nbars), tuple(nslots), frozenset(nwait)))
        assert moved, ("deadlock", pcs, progs)


@pytest.mark.parametrize("name", ["plain_d64", "bhsd_scale_f16_stages1"])
def test_bulk_barrier_protocol_has_no_race_or_deadlock(built_bulk, name):
    """Warp 3's rounds and a consumer's steps, as the rendered kernel spells them (its loops and conditions run for
    n_it 1 to 8), under every interleaving: barriers 4 and 5 strictly alternate (no warp arrives twice in one phase,
    which would complete a phase early), nothing deadlocks, and every "last arrival" flag a consumer reads is the
    one warp 3 stored for that step (not an older step's in the same slot)."""
    cu = built_bulk[name].files["kernel.cu"].decode()
    lines = cu.splitlines()
    slot = _c_expr(cu, r"flags \+ 4u \* (\(uint32_t\)\(s & 3\))\)")
    i0 = next(i for i, ln in enumerate(lines) if "lane = wg_thread - 96;" in ln) + 1
    i1 = next(i for i in range(i0, len(lines)) if lines[i].strip() == "return;") - 1   # the producer branch's "}"
    issuer = lines[i0:i1]
    c0 = next(i for i, ln in enumerate(lines) if "for (int it = 0; it < n_it; ++it) {" in ln and i > i1)
    c1 = next(i for i in range(c0, len(lines)) if "const long long base" in lines[i])
    consumer = [ln for ln in lines[c0:c1] if "crosses" not in ln]
    for n_it in range(1, 9):
        env = {"n_it": n_it, "lane": 0, "wg_thread": 0, "w": 0}
        ev_i = _protocol_events(issuer, env, slot)
        ev_c = _protocol_events(consumer, env, slot)
        assert [e for e in ev_i if e[0] == "write"] == [("write", s % 4, s) for s in range(n_it)]
        assert sorted(e[2] for e in ev_c if e[0] == "read") == list(range(n_it))
        _interleavings_ok(ev_c, ev_i)


# ------------------------------------------------------------------------------ FlashAttention-3's waits (overlap)

OVERLAP_CASES = ["plain_d64", "causal_d128", "bhsd_scale_f16_stages1", "one_consumer_gqa4_causal_stages3"]


def _overlap(monkeypatch_ctx):
    from schedgen.families.attention_backward import wgmma as wgmma_plan
    monkeypatch_ctx.setattr(wgmma_plan, "overlap_of", lambda nc, d: True)


@pytest.fixture(scope="module")
def built_overlap(tmp_path_factory):
    """Cases built with wgmma.overlap_of patched to True (as bench.candidates does); "bulk" also with
    dq_reduce_of "bulk", "pre" with pipeline.delta preprocess."""
    cache = Cache(tmp_path_factory.mktemp("cache_overlap"))
    with pytest.MonkeyPatch.context() as mp:
        _overlap(mp)
        out = {name: build_spec(str(SPEC), {**CASES[name], **WS}, cache=cache) for name in OVERLAP_CASES}
        out["bench"] = build_spec(str(SPEC), WS, cache=cache)
        out["bench_causal"] = build_spec(str(CAUSAL_SPEC), WS, cache=cache)
        out["pre"] = build_spec(str(SPEC), {**WS, "schedule.pipeline.delta": "preprocess"}, cache=cache)
        _bulk(mp)
        out["bulk"] = build_spec(str(SPEC), WS, cache=cache)
    return out


def _wait_sequence(text: str) -> str:
    """The consumer's wgmma schedule in the SASS, from its first HGMMA to its last WARPGROUP.DEPBAR, one token an
    instruction of interest: h / H an HGMMA m64n64 / m64nD ("|": it ends a commit group, gsb0), wN a wait for at most
    N groups in flight, e MUFU.EX2, s STSM, bK a named barrier K (bR: by register), a the ring's empty arrival; runs
    of one letter counted (h8: eight HGMMAs)."""
    out = []
    for s in re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", text):
        if m := re.search(r"HGMMA\.64x(\d+)x16", s):
            out.append(("h" if m.group(1) == "64" else "H") + ("|" if "gsb0" in s else ""))
        elif m := re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x(\d)", s):
            out.append(f"w{m.group(1)}")
        elif out and "MUFU.EX2" in s:
            out.append("e")
        elif out and "STSM" in s:
            out.append("s")
        elif out and (m := re.search(r"BAR\.SYNC\S* (?:0x(\d)|R\d+)", s)):
            out.append("b" + (m.group(1) or "R"))
        elif out and "SYNCS.ARRIVE.TRANS64.A1T0" in s:
            out.append("a")
    seq = "".join(out)
    seq = seq[:seq.rindex("w") + 2]
    return re.sub(r"([heHs])\1+", lambda m: m.group(1) + str(len(m.group(0))), seq)


def _expected_waits(p, overlap: bool) -> str:
    """The schedule the template means: S^T, dP^T (head_dim / 16 k-steps each), the red form's arrival barriers,
    P^T (32 exp2 a thread), dV, dK (4 k-steps of 16 queries), the bulk form's barrier 5, dS by stmatrix, the dS
    barrier (both consumers where they share it), dQ (dq_slabs x dq_ksteps), the empty arrival."""
    w, k, kv = p.wgmma, p.head_dim // 16, "h" if p.head_dim == 64 else "H"    # dV, dK: m64n{head_dim}
    arrive = "bRbR" if w.dq_reduce == "red" else ""
    bulk = "b5" if w.dq_reduce == "bulk" else ""
    ds = "b1" if w.dq_column_split else "bR"
    dq = f"h{w.dq_slabs * w.dq_ksteps}|"
    if overlap:
        return f"h{k}|h{k}|{arrive}w1e32{kv}4|w1{kv}4|{bulk}s4{ds}{dq}w1aw0"
    return f"h{2 * k}|{arrive}w0e32{kv}4|{kv}4|{bulk}s4{ds}w0a{dq}w0"


@pytest.mark.parametrize("name", [*OVERLAP_CASES, "bench", "bench_causal"])
def test_default_waits_each_wgmma_group_before_the_math_that_follows(built, name):
    """Today's schedule (overlap False): S^T and dP^T one group, waited for (wait_group 0) before P^T; dV, dK waited
    for before dQ's wgmma is issued; dQ waited for before its adds."""
    b = built[name]
    assert b.plan.wgmma.overlap is False
    assert _wait_sequence(sass(b.files["kernel.cubin"])) == _expected_waits(b.plan, overlap=False)


@pytest.mark.parametrize("name", [*OVERLAP_CASES, "bench", "bench_causal", "pre", "bulk"])
def test_overlap_moves_the_waits_as_flashattention3(built_overlap, name):
    """overlap True: S^T and dP^T two groups and wait_group 1 before P^T (its 32 exp2 while dP^T runs), wait_group 1
    after dV's issue (dS^T's math while dV runs), dQ's wgmma issued right after the dS barrier with dK still in
    flight, then wait_group 1 (dV, dK done: the empty arrival) and wait_group 0 (dQ). No local memory, no ptxas
    warning (a wgmma it had to serialize), the same HGMMAs as the default."""
    b = built_overlap[name]
    p = b.plan
    assert p.wgmma.overlap is True
    text = sass(b.files["kernel.cubin"])
    assert _wait_sequence(text) == _expected_waits(p, overlap=True)
    u = resource_usage(b.files["kernel.cubin"])[p.launch.kernel_name]
    assert u["STACK"] == 0 and u["LOCAL"] == 0 and b.warnings == []
    assert not [o for o in opcodes(text) if o.startswith(("LDL", "STL"))]


def test_overlap_is_off_by_default_and_out_of_the_plan_json(built):
    from schedgen.families.attention_backward import wgmma as wgmma_plan
    from schedgen.plan import to_dict
    assert {wgmma_plan.overlap_of(nc, d) for nc in (1, 2) for d in (64, 128)} == {False}
    for b in built.values():
        assert "overlap" not in to_dict(b.plan)["wgmma"]
        assert "wgmma_wait<1>" not in b.files["kernel.cu"].decode()


def _desc_offsets(monkeypatch_ctx):
    from schedgen.families.attention_backward import wgmma as wgmma_plan
    monkeypatch_ctx.setattr(wgmma_plan, "desc_offsets_of", lambda nc, d: True)


DESC_CASES = ["plain_d64", "bhsd_scale_f16_stages1", "one_consumer_gqa4_causal_stages3", "bench", "bulk"]


@pytest.fixture(scope="module")
def built_desc(tmp_path_factory):
    """DESC_CASES built as built_overlap's and with wgmma.desc_offsets_of patched to True too."""
    cache = Cache(tmp_path_factory.mktemp("cache_desc"))
    with pytest.MonkeyPatch.context() as mp:
        _overlap(mp)
        _desc_offsets(mp)
        out = {name: build_spec(str(SPEC), {**CASES[name], **WS}, cache=cache) for name in DESC_CASES if name in CASES}
        out["bench"] = build_spec(str(SPEC), WS, cache=cache)
        _bulk(mp)
        out["bulk"] = build_spec(str(SPEC), WS, cache=cache)
    return out


@pytest.mark.parametrize("name", DESC_CASES)
def test_desc_offsets_halve_the_issue_cost_of_the_smem_wgmmas(built_overlap, built_desc, name):
    """desc_offsets True: the same HGMMAs (shapes, operand kinds, transposes, groups) and the same waits, with at
    most 70% of the instructions between a group's HGMMAs (each k-step's descriptor an add to the tile's, not
    rebuilt from the address: 13 -> ~7 an SMEM HGMMA at the bench size); no local memory, no ptxas warning."""
    ref, b = built_overlap[name], built_desc[name]
    assert b.plan.wgmma.desc_offsets is True and ref.plan.wgmma.desc_offsets is False
    t_ref, t = sass(ref.files["kernel.cubin"]), sass(b.files["kernel.cubin"])
    shape = r"HGMMA\.\S+ R\d+, (?:R\d+, )?gdesc\[UR\d+\](\.tnspB)?, (RZ, !UPT|R\d+)(, gsb0)?"
    kinds = [[(m.group(1), m.group(2) == "RZ, !UPT", m.group(3)) for m in re.finditer(shape, x)] for x in (t_ref, t)]
    assert kinds[0] == kinds[1] and len(kinds[0]) == len(re.findall("HGMMA", t_ref))
    assert re.findall(r"HGMMA\.(\S+)", t_ref) == re.findall(r"HGMMA\.(\S+)", t)
    assert _wait_sequence(t) == _wait_sequence(t_ref) == _expected_waits(b.plan, overlap=True)
    assert sum(hgmma_gaps(t)) <= 0.7 * sum(hgmma_gaps(t_ref)), (hgmma_gaps(t_ref), hgmma_gaps(t))
    u = resource_usage(b.files["kernel.cubin"])[b.plan.launch.kernel_name]
    assert u["STACK"] == 0 and u["LOCAL"] == 0 and b.warnings == []


def test_desc_offsets_is_off_by_default_and_out_of_the_plan_json(built):
    from schedgen.families.attention_backward import wgmma as wgmma_plan
    from schedgen.plan import to_dict
    assert {wgmma_plan.desc_offsets_of(nc, d) for nc in (1, 2) for d in (64, 128)} == {False}
    for b in built.values():
        assert "desc_offsets" not in to_dict(b.plan)["wgmma"] and "sg_desc_at" not in b.files["kernel.cu"].decode()


@pytest.mark.gpu
@pytest.mark.parametrize("case", OVERLAP_CASES + ["gqa_causal_d128", "top_left_sq_lt_skv"])
@pytest.mark.parametrize("desc", [False, True], ids=["", "desc_offsets"])
def test_overlap_variant_matches_float64_on_gpu(case, desc, monkeypatch):
    """The overlap form (wgmma.overlap_of patched; desc_offsets: desc_offsets_of too) under `verify`: fresh random
    inputs, outputs poisoned, every gradient against float64 (a wait moved too far would read S^T, dP^T or dQ's
    accumulators unfinished; a wrong descriptor reads the wrong k-step)."""
    from schedgen.verify import verify_file
    _overlap(monkeypatch)
    if desc:
        _desc_offsets(monkeypatch)
    checks = verify_file(str(SPEC), ["cuda"], {**CASES[case], **WS}, seed=4)
    assert {c.backend for c in checks} == {"cuda"}, checks
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [SPEC, CAUSAL_SPEC], ids=["bench", "bench_causal"])
@pytest.mark.parametrize("extra", ["", "bulk", "preprocess", "desc_offsets"])
def test_overlap_variant_at_bench_sizes_on_gpu(spec, extra, monkeypatch):
    from schedgen.verify import verify_file
    _overlap(monkeypatch)
    if extra == "bulk":
        _bulk(monkeypatch)
    if extra == "desc_offsets":
        _desc_offsets(monkeypatch)
    ov = {**WS, "schedule.pipeline.delta": "preprocess"} if extra == "preprocess" else WS
    checks = verify_file(str(spec), ["cuda"], ov, seed=5)
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]
