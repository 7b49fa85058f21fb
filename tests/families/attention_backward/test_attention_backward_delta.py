"""The wgmma attention backward with `pipeline.delta: preprocess` (issue 19; wgmma.delta_of): delta = rowsum(dO * O)
computed once by the launch's first blocks (by ticket) into the workspace, which also zero the dQ sums, and a ring
stage of Q, dO, lse and delta instead of Q, dO, O and lse.

On the CPU: the variant compiles with NVRTC for sm_90a at head_dim 64 and 128, causal both ways, GQA, bhsd / f16,
1 and 2 consumers, with dQ summed by red.global.add and by the bulk reduce-add; its SASS no longer has the producer's
delta loop (no LDS.128 of dO and O, no plain mbarrier arrival of the delta warps, one mbarrier a stage less), loads
one tile a step less by TMA and delta by a second bulk copy, and has the preprocessing's 16-byte global loads and
the flag wait; its plan record (a stage of 2 tiles + 1 KiB, the stage count the SMEM allows rising from 2 to 3 at
head_dim 128 with 2 consumers, the workspace's layout and zeroed prefix, the launch's arguments); the rendered
preprocessing loop and flag formula, evaluated, cover every 64-query tile once and set the flag the key blocks wait
for; its loads, lane products and shuffle butterfly, run in numpy for every thread, give each row's sum of dO * O;
each tile still expects the arrivals the key blocks make; the refused combinations are located errors.
On the GPU (`-m gpu`): `verify` against the float64 reference (fresh random inputs, outputs poisoned) at D64 and
D128, causal and not, GQA, both dq_reduce modes, and the bench sizes; two eager calls, a CUDA graph replay and
torch.compile (the zeroed prefix of the workspace re-zeroed each launch)."""
from __future__ import annotations

import collections
import re

import pytest

from conftest import opcodes
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.toolchain.nvrtc import resource_usage, sass
from test_attention_backward_wgmma import CASES, CAUSAL_SPEC, SPEC, WS, _c_expr, _check_arrivals, _dq_paths

PRE = {"schedule.pipeline.delta": "preprocess"}
NAMES = [*CASES, "bench", "bench_causal"]
LIMIT = 232448


def _bulk(mp):
    from schedgen.families.attention_backward import wgmma as wgmma_plan
    mp.setattr(wgmma_plan, "dq_reduce_of", lambda nc, d: "bulk")


def _build_all(cache, delta: dict) -> dict:
    out = {name: build_spec(str(SPEC), {**ov, **WS, **delta}, cache=cache) for name, ov in CASES.items()}
    out["bench"] = build_spec(str(SPEC), {**WS, **delta}, cache=cache)
    out["bench_causal"] = build_spec(str(CAUSAL_SPEC), {**WS, **delta}, cache=cache)
    return out


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{(dq_reduce, delta): {case: Built}}: each case in the four combinations."""
    cache = Cache(tmp_path_factory.mktemp("cache_delta"))
    out = {("red", "in_kernel"): _build_all(cache, {}), ("red", "preprocess"): _build_all(cache, PRE)}
    with pytest.MonkeyPatch.context() as mp:
        _bulk(mp)
        out[("bulk", "in_kernel")] = _build_all(cache, {})
        out[("bulk", "preprocess")] = _build_all(cache, PRE)
    return out


@pytest.mark.parametrize("reduce", ["red", "bulk"])
@pytest.mark.parametrize("name", NAMES)
def test_preprocess_variant_compiles_without_the_delta_loop(built, name, reduce):
    b, old = built[(reduce, "preprocess")][name], built[(reduce, "in_kernel")][name]
    p, w = b.plan, b.plan.wgmma
    assert w.delta == "preprocess" and w.dq_reduce == reduce and old.plan.wgmma.delta == "in_kernel"
    text, old_text = sass(b.files["kernel.cubin"]), sass(old.files["kernel.cubin"])
    ops, old_ops = collections.Counter(opcodes(text)), collections.Counter(opcodes(old_text))
    kind = ".BF16" if p.dtype == "bf16" else ""
    assert set(re.findall(r"HGMMA\.(\S+)", text)) == {f"64x64x16.F32{kind}", f"64x{p.head_dim}x16.F32{kind}"}
    # the producer's delta loop: its 16-byte SMEM reads of the stage's dO and O (LDS.128) and the delta warps'
    # arrival on a delta barrier a stage (a plain mbarrier arrive, besides the consumers' release of a stage) are
    # gone, and so is that barrier's initialisation
    assert old_ops["LDS.128"] > 0 and ops["LDS.128"] == 0
    assert ops["SYNCS.ARRIVE.TRANS64.A1T0"] == old_ops["SYNCS.ARRIVE.TRANS64.A1T0"] - 1
    assert ops["SYNCS.EXCH.64"] < old_ops["SYNCS.EXCH.64"]                  # mbarrier inits: no delta[stage]
    # a step's TMA: Q, dO (not O: head_dim / 64 boxes fewer); lse and delta by two bulk copies
    assert ops["UTMALDG.3D"] == old_ops["UTMALDG.3D"] - p.head_dim // 64
    assert ops["UBLKCP.S.G"] == 2 and old_ops["UBLKCP.S.G"] == 1
    # the preprocessing: 16-byte read-only loads of dO and O, the tile's flag waited for with an acquire
    assert ops["LDG.E.128.CONSTANT"] >= 2 and not old_ops["LDG.E.128.CONSTANT"]
    assert ops["NANOSLEEP"] >= 1 and "LDG.E.STRONG.GPU" in ops and "STG.E.STRONG.GPU" in ops
    assert not [o for o in ops if o.startswith(("LDL", "STL", "HMMA", "LDGSTS"))]
    u = resource_usage(b.files["kernel.cubin"])[p.launch.kernel_name]
    assert u["STACK"] == 0 and u["LOCAL"] == 0
    assert b.warnings == []                                        # ptxas: no wgmma serialization, no spill


@pytest.mark.parametrize("reduce", ["red", "bulk"])
@pytest.mark.parametrize("name", NAMES)
def test_plan_record_stage_and_workspace(built, name, reduce):
    """A stage of 2 tiles + 1 KiB (lse and delta, 512 B, padded to keep the tiles 1024-aligned); max_stages the most
    that fit (the SMEM formula at max_stages within the limit, one more over it); the workspace: tickets and flags
    (zeroed by the runtime), delta, the sums, the counters; the launch: preprocessing blocks then key blocks."""
    b, old = built[(reduce, "preprocess")][name], built[(reduce, "in_kernel")][name]
    p, w, ow = b.plan, b.plan.wgmma, old.plan.wgmma
    assert w.dkv_stage == 2 * w.tile64 + 1024 and ow.dkv_stage == 3 * w.tile64 + 1024
    assert w.ds_offset == w.dkv_ring + p.stages * w.dkv_stage and w.ds_offset % 1024 == 0
    assert w.smem_bytes == ow.smem_bytes - p.stages * w.tile64 == p.launch.smem_bytes <= LIMIT
    per_stage = w.smem_bytes + (w.max_stages - p.stages) * w.dkv_stage
    assert per_stage <= LIMIT < per_stage + w.dkv_stage or w.max_stages == 15
    assert w.max_stages >= ow.max_stages >= p.stages
    tiles = p.batch * p.heads_q * p.seq_q // 64
    assert (w.pre_tiles, w.pre_blocks) == (tiles, min(tiles, 132))
    assert w.delta_offset == w.workspace_zero == -(-4 * (1 + tiles) // 128) * 128
    assert w.acc_offset == w.delta_offset + 4 * p.batch * p.heads_q * p.seq_q and w.acc_offset % 128 == 0
    assert w.workspace_bytes == w.acc_offset + ow.workspace_bytes
    assert p.launch.num_blocks == w.pre_blocks + w.dkv_blocks and p.launch.kernel_name == old.plan.launch.kernel_name + "_pre"
    args = p.launch.kernel_args
    assert [a.kind for a in args] == ["tmap"] * 4 + ["ptr"] * 6 + ["workspace"]
    assert [a.operand for a in args] == [0, 1, 2, 4, 3, 4, 5, 6, 7, 8, -1]   # o's map gone: o, do by pointer
    assert (args[-1].value, args[-1].zero) == (w.workspace_bytes, w.workspace_zero)
    from schedgen.plan.launch import launch_record
    rec = launch_record(p).kernel_args[-1]
    assert (rec.kind, rec.value, rec.zero) == ("workspace", w.workspace_bytes, w.workspace_zero)


def test_more_stages_fit_at_head_dim_128():
    """Head_dim 128, 2 consumers (the bench spec): the in-kernel form fits 2 stages (3 is a located error), the
    preprocess form 3, with dQ by red and by bulk reduce-add; head_dim 64 fits more still."""
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan

    def planned(ov):
        spec, src = load_spec(str(SPEC), {**ov, **WS})
        return plan(spec, src)
    three = {"schedule.pipeline.max_concurrent_steps": 3}
    assert planned({}).wgmma.max_stages == 2
    with pytest.raises(SpecErrors) as exc:
        planned(three)
    assert "legal: at most 2 stages" in str(exc.value)
    p = planned({**PRE, **three})
    assert (p.stages, p.wgmma.max_stages, p.wgmma.smem_bytes) == (3, 3, 1024 + 2 * 32768 + 3 * 33792 + 2 * 16384 + 1024)
    with pytest.raises(SpecErrors) as exc:
        planned({**PRE, "schedule.pipeline.max_concurrent_steps": 4})
    msg = str(exc.value)
    assert "schedule.pipeline.max_concurrent_steps" in msg and "Q, dO (delta: preprocess)" in msg
    assert "legal: at most 3 stages" in msg
    with pytest.MonkeyPatch.context() as mp:
        _bulk(mp)
        assert planned({}).wgmma.max_stages == 2 and planned({**PRE, **three}).wgmma.max_stages == 3
    d64 = {**CASES["plain_d64"]}
    assert planned({**d64, **PRE}).wgmma.max_stages > planned(d64).wgmma.max_stages


@pytest.mark.parametrize("name", ["gqa_causal_d128", "bhsd_scale_f16_stages1", "one_consumer_gqa4_causal_stages3",
                                  "top_left_sq_lt_skv"])
def test_preprocessing_covers_every_tile_once_and_flags_what_the_producer_waits_for(built, name):
    """The rendered preprocessing loop (tiles pre, pre + pre_blocks, ... of each preprocessing block), its tile
    decoding, the flag index it sets and the one the producer waits for (sg_flag), the delta row it writes and the
    one the producer's bulk copy reads, evaluated: each (batch, q head, 64-query tile) is computed by exactly one
    preprocessing block, its flag set by it is the flag of that tile, and its delta lands where that tile's is read."""
    b = built[("red", "preprocess")][name]
    p, w, cu = b.plan, b.plan.wgmma, b.files["kernel.cu"].decode()
    m = re.search(r"for \(int t = pre; t < (\d+); t \+= (\d+)\)", cu)
    assert m and (int(m.group(1)), int(m.group(2))) == (w.pre_tiles, w.pre_blocks)
    bh_e = _c_expr(cu, r"const int bh = (t % \d+), qb = t / \d+;")
    qb_e = _c_expr(cu, r"const int bh = t % \d+, qb = (t / \d+);")
    flag_e = _c_expr(cu, r"return reinterpret_cast<unsigned int\*>\(work\) \+ (.+);")
    set_args = re.search(r"sg_flag\(work, (.+?), (.+?), qb\)\), \"r\"\(1u\)", cu)
    b_e, hq_e = (_c_expr(set_args.group(k), r"(.+)") for k in (1, 2))
    row_e = _c_expr(cu, r"float\* delta = work \+ (.+);")
    read_e = _c_expr(cu, r"g_delta \+ (.+), 256u, BAR_FULL")
    flag_e = flag_e.replace("(long long)", "")
    row_e, read_e = (e.replace("(long long)", "").replace("LL", "") for e in (row_e, read_e))
    seen = {}
    for pre in range(w.pre_blocks):
        for t in range(pre, w.pre_tiles, w.pre_blocks):
            env = {"t": t}
            bh, qb = eval(bh_e, env), eval(qb_e, env)
            bb, hq = eval(b_e, {"bh": bh}), eval(hq_e, {"bh": bh})
            key = (bb, hq, qb)
            assert key not in seen
            seen[key] = eval(flag_e, {"b": bb, "hq": hq, "qb": qb})
            assert eval(row_e, {"bh": bh, "qb": qb}) == w.delta_offset // 4 + eval(read_e, {"b": bb, "hq": hq,
                                                                                            "q0": qb * 64})
    tiles = {(bb, h, qb) for bb in range(p.batch) for h in range(p.heads_q) for qb in range(p.seq_q // 64)}
    assert set(seen) == tiles
    assert sorted(seen.values()) == list(range(1, 1 + len(tiles)))      # one flag a tile, after the ticket
    assert "sg_wait_flag(sg_flag(g_work, b, hq, q0 / 64));" in cu


@pytest.mark.parametrize("name", ["gqa_causal_d128", "bhsd_scale_f16_stages1", "one_consumer_gqa4_causal_stages3",
                                  "plain_d64"])
def test_preprocessing_loads_and_sums_are_the_row_sums_of_do_times_o(built, name):
    """The rendered preprocessing of one tile, run for every thread of a block on random dO and O (numpy, float64):
    its chunk loop (a warp's chunks all valid or none), the 16-byte load addresses (base of the tile's (batch, q
    head, 64-query block) in the layout's strides, row and column chunk), the 8 products a lane, the butterfly of
    __shfl_xor_sync over the lanes of a row and the one lane that stores: each of the tile's 64 rows gets
    sum_d dO * O, written once."""
    import numpy as np
    b = built[("red", "preprocess")][name]
    p, w, cu = b.plan, b.plan.wgmma, b.files["kernel.cu"].decode()

    def c_expr(pattern):
        return _c_expr(cu, pattern).replace("(long long)", "").replace("LL", "")
    base_e, at_e = c_expr(r"const long long base = (.+);"), c_expr(r"const long long at = (.+);")
    c_e, valid = c_expr(r"const int c = (tid \+ k \* \d+);\n      if"), c_expr(r"if \((c < \d+)\) \{\n")
    nk = int(re.search(r"uint4 x\[(\d+)\], y\[", cu).group(1))
    offsets = [int(x) for x in re.search(r"for \(int m = (\d+); m > 0; m >>= 1\) sum \+=", cu).groups()]
    lanes = int(re.search(r"if \(c % (\d+) == 0\) delta\[c / (\d+)\] = sum;", cu).group(1))
    rng = np.random.default_rng(11)
    shape = p.inputs[0].shape
    do, o = rng.standard_normal(shape), rng.standard_normal(shape)
    flat_do, flat_o = do.reshape(-1), o.reshape(-1)
    tiles = p.batch * p.heads_q * p.seq_q // 64
    for t in (0, tiles // 2 + 1, tiles - 1):
        bh, qb = t % (p.batch * p.heads_q), t // (p.batch * p.heads_q)
        bb, hq = divmod(bh, p.heads_q)
        base = eval(base_e, {"bh": bh, "qb": qb})
        got = {}
        for warp in range(w.threads // 32):
            for k in range(nk):
                sums, cs = [], []
                for lane in range(32):
                    tid = warp * 32 + lane
                    c = eval(c_e, {"tid": tid, "k": k})
                    cs.append(c)
                    if not eval(valid, {"c": c}):
                        sums.append(None)
                        continue
                    at = eval(at_e, {"base": base, "c": c})
                    sums.append(float(np.dot(flat_do[at:at + 8], flat_o[at:at + 8])))
                if all(x is None for x in sums):
                    continue
                assert None not in sums, (warp, k)               # the shuffle needs every lane of the warp
                m = offsets[0]
                while m > 0:                                     # __shfl_xor_sync: every lane reads lane ^ m's
                    sums = [sums[i] + sums[i ^ m] for i in range(32)]
                    m >>= 1
                for lane in range(32):
                    if cs[lane] % lanes == 0:
                        assert cs[lane] // lanes not in got
                        got[cs[lane] // lanes] = sums[lane]
        qs = slice(qb * 64, qb * 64 + 64)
        if p.layout == "bshd":
            want = (do[bb, qs, hq] * o[bb, qs, hq]).sum(-1)
        else:
            want = (do[bb, hq, qs] * o[bb, hq, qs]).sum(-1)
        assert sorted(got) == list(range(64))
        assert np.allclose([got[r] for r in range(64)], want, rtol=1e-12, atol=1e-12), (name, t)


@pytest.mark.parametrize("reduce", ["red", "bulk"])
@pytest.mark.parametrize("name", [*CASES, "bench_causal"])
def test_each_tile_still_expects_the_arrivals_the_key_blocks_make(built, name, reduce):
    """As the in-kernel form's test: the key blocks (numbered by ticket less the preprocessing blocks) arrive at
    exactly the tiles and as often as sg_arrivals expects."""
    b = built[(reduce, "preprocess")][name]
    assert "const int kt = bid / " in b.files["kernel.cu"].decode()
    _check_arrivals(b, per_block=1 if reduce == "bulk" else b.plan.wgmma.consumers)


def test_the_default_stays_in_kernel_and_its_plan_json_has_no_preprocess_fields(built):
    from schedgen.families.attention_backward.model import AttentionBackwardPipeline
    from schedgen.plan import to_dict
    assert AttentionBackwardPipeline().delta == "in_kernel"
    for b in built[("red", "in_kernel")].values():
        w = to_dict(b.plan)["wgmma"]
        assert "delta" not in w and "pre_blocks" not in w and "max_stages" in w
        cu = b.files["kernel.cu"].decode()
        assert "sg_preprocess" not in cu and "BAR_DELTA" in cu and "tm_o" in cu


def test_explain_says_where_delta_comes_from(built):
    from schedgen.families.attention_backward.explain import explain_attention_backward
    b = built[("red", "preprocess")]["bench"]
    text = explain_attention_backward(b.plan)
    for word in ("pipeline.delta: preprocess", f"first {b.plan.wgmma.pre_blocks} blocks", "(Q, dO, lse, delta)",
                 "up to 3 stages fit", f"zeroes {b.plan.wgmma.workspace_zero} B"):
        assert word in text, word
    old = explain_attention_backward(built[("red", "in_kernel")]["bench"].plan)
    assert "(Q, dO, O, lse)" in old and "up to 2 stages fit" in old and "warps 1-2" in old


# (overrides, path, text): preprocess where no kernel reads it
ERRORS = {
    "pallas_only": ({**WS, **PRE, "schedule.backends": ["pallas"]}, "schedule.pipeline.delta",
                    "the Pallas backward always computes it before its kernel(s)"),
    "mma_sync": ({**PRE, "schedule.backends": ["cuda"], "schedule.pipeline.kind": "emit_pipeline"},
                 "schedule.pipeline.delta", "legal: in_kernel (the default), or kind: warp_specialized with cuda"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_preprocess_where_no_kernel_reads_it_is_a_located_error(case):
    from schedgen.frontend.validate import load_spec
    from schedgen.plan import plan
    ov, path, text = ERRORS[case]
    spec, src = load_spec(str(SPEC), ov)
    with pytest.raises(SpecErrors) as exc:
        plan(spec, src)
    msg = str(exc.value)
    assert path in msg and text in msg and "attention_backward_bf16_4096.yaml:" in msg, msg


@pytest.mark.parametrize("spec_name", ["matmul_bf16_4096.yaml", "attention_bf16_4096.yaml"])
@pytest.mark.parametrize("value", ["preprocess", "in_kernel"])
def test_delta_on_another_op_is_an_unknown_key(spec_name, value):
    """pipeline.delta is the attention backward schedule's field (issue 42): on another op it is an unknown key at
    its location, whatever its value, naming the family that has it."""
    from conftest import SPECS_DIR
    from schedgen.frontend.validate import load_spec
    path = SPECS_DIR / spec_name
    if not path.exists():
        pytest.skip(f"{spec_name} is not bundled")
    with pytest.raises(SpecErrors) as exc:
        load_spec(str(path), {"schedule.pipeline.delta": value})
    msg = str(exc.value)
    assert "schedule.pipeline.delta: unknown key 'delta'" in msg, msg
    assert "schedule.pipeline.delta is an attention_backward field" in msg, msg


# ------------------------------------------------------------------------------ on the GPU

GPU_CASES = ["plain_d64", "causal_d128", "gqa_causal_d128", "causal_sq_lt_skv", "top_left_sq_lt_skv",
             "bhsd_scale_f16_stages1", "one_consumer_gqa4_causal_stages3"]


@pytest.mark.gpu
@pytest.mark.parametrize("reduce", ["red", "bulk"])
@pytest.mark.parametrize("case", GPU_CASES)
def test_preprocess_matches_float64_on_gpu(case, reduce, monkeypatch):
    """`verify --backend cuda`: fresh random inputs (o and lse the forward's), outputs poisoned, dq, dk, dv against
    the float64 reference within the dtype's tolerance (a tile's delta read before it was written, or its sums
    zeroed after a block added to them, fails)."""
    from schedgen.verify import verify_file
    if reduce == "bulk":
        _bulk(monkeypatch)
    checks = verify_file(str(SPEC), ["cuda"], {**CASES[case], **WS, **PRE}, seed=7)
    assert {c.backend for c in checks} == {"cuda"}, checks
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


@pytest.mark.gpu
@pytest.mark.parametrize("reduce", ["red", "bulk"])
@pytest.mark.parametrize("spec", [SPEC, CAUSAL_SPEC], ids=["bench", "bench_causal"])
def test_preprocess_at_bench_sizes_on_gpu(spec, reduce, monkeypatch):
    """The bundled sizes (B2 S4096 H16 D128: 2048 tiles over 132 preprocessing blocks), 3 stages (what now fits)."""
    from schedgen.verify import verify_file
    if reduce == "bulk":
        _bulk(monkeypatch)
    checks = verify_file(str(spec), ["cuda"], {**WS, **PRE, "schedule.pipeline.max_concurrent_steps": 3}, seed=8)
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


@pytest.mark.gpu
@pytest.mark.parametrize("extra", [["preprocess"], ["bulk", "preprocess"]], ids=["red", "bulk"])
@pytest.mark.parametrize("case", ["gqa_causal_d128", "plain_d64"])
def test_preprocess_on_every_call_path_on_gpu(tmp_path, case, extra):
    """wgmma_dq_paths.py ... preprocess: two eager calls in a row (the tickets and flags zeroed again), a CUDA graph
    replay (the zeroed prefix a memset node), torch.compile; each gradient against float64."""
    _dq_paths(tmp_path, case, extra)
