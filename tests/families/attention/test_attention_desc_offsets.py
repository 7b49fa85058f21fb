"""The attention forward's wgmma descriptors by offset (records.AttentionPlan.desc_offsets, chosen by
plan.desc_offsets_of): off by default (today's rendering, out of plan.json); switched on, the same HGMMAs, waits and
exponentials in SASS with far fewer instructions between a group's HGMMAs, no local memory; and on the GPU, the
outputs against float64."""
from __future__ import annotations

import re

import pytest

from conftest import hgmma_gaps, opcodes, plan_spec
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.plan import to_dict
from schedgen.plan.hardware import Hardware
from schedgen.toolchain.nvrtc import resource_usage, sass
from test_attention_plan import BASE, CUDA, VARIANTS

# D128 and D64, causal and not, GQA, 3 consumers, persistent D256, a dynamic grid with dynamic sizes
CASES = ["base", "causal", "d64", "gqa", "three_consumers", "persistent_d256", "dyn_gqa_causal_dynamic_lse"]


def _desc_offsets(mp):
    from schedgen.families.attention import plan as attn_plan
    mp.setattr(attn_plan, "desc_offsets_of", lambda nc, d: True)


@pytest.fixture(scope="module")
def built_pair(tmp_path_factory):
    """Each case built as today and with plan.desc_offsets_of patched to True."""
    cache = Cache(tmp_path_factory.mktemp("cache_desc"))
    ref = {name: build_spec(BASE, {**CUDA, **VARIANTS[name]}, cache=cache) for name in CASES}
    with pytest.MonkeyPatch.context() as mp:
        _desc_offsets(mp)
        desc = {name: build_spec(BASE, {**CUDA, **VARIANTS[name]}, cache=cache) for name in CASES}
    return ref, desc


def _instructions(text: str) -> tuple[list[str], dict[str, int]]:
    """The SASS instructions in order and the index each label stands before."""
    ins, labels = [], {}
    for line in text.splitlines():
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", line)
        if m:
            ins.append(m.group(1).strip())
    return ins, labels


def _steady_loop(text: str) -> str:
    """The consumers' steady-state loop (S_j and P_(j-1) V_(j-1) issued, the softmax of S_j): the smallest
    backward branch around an O += P V HGMMA, as nvdisasm-like lines for hgmma_gaps and opcodes."""
    ins, labels = _instructions(text)
    pv = [i for i, s in enumerate(ins) if "HGMMA" in s and "tnspB" in s]
    loops = [(labels[m.group(1)], i) for i, s in enumerate(ins)
             if (m := re.search(r"BRA `\((\.L_x_\d+)\)", s)) and labels.get(m.group(1), i) < i]
    a, b = min(((a, b) for a, b in loops if any(a <= k <= b for k in pv)), key=lambda ab: ab[1] - ab[0])
    return "\n".join(f"/*{k:04x}*/ {s};" for k, s in enumerate(ins[a:b + 1]))


def _hgmma_kinds(text: str) -> list[tuple]:
    """Each HGMMA's shape, A's source (registers or a descriptor), transposed B, accumulate and group end."""
    pat = r"HGMMA\.(\S+) R\d+, (R\d+, )?gdesc\[UR\d+\](\.tnspB)?, (RZ, !UPT|R\d+)(, gsb0)?"
    return [(m.group(1), m.group(2) is not None, m.group(3), m.group(4) == "RZ, !UPT", m.group(5))
            for m in re.finditer(pat, text)]


def _events(text: str) -> list[str]:
    """HGMMA, wgmma waits (WARPGROUP.DEPBAR.LE n), arrives and exponentials, in order."""
    return [o for o in opcodes(text) if o.startswith(("HGMMA", "WARPGROUP", "MUFU.EX2"))]


def test_desc_offsets_is_off_by_default_and_out_of_the_plan_json(built_pair):
    from schedgen.families.attention import plan as attn_plan
    assert {attn_plan.desc_offsets_of(nc, d) for nc in (1, 2, 3) for d in (64, 128, 256)} == {False}
    ref, desc = built_pair
    for name in CASES:
        assert ref[name].plan.desc_offsets is False and "desc_offsets" not in to_dict(ref[name].plan)
        assert "sg_desc_at" not in ref[name].files["kernel.cu"].decode()
        assert desc[name].plan.desc_offsets is True and to_dict(desc[name].plan)["desc_offsets"] is True


@pytest.mark.parametrize("name", CASES)
def test_desc_offsets_keep_the_hgmmas_and_cut_their_issue_cost(built_pair, name):
    """desc_offsets True: the same HGMMAs (shapes, A from registers or SMEM, transposed B, groups), the same waits and
    exponentials in the same order, and at most half the instructions between a group's HGMMAs, in the whole kernel
    and in the steady-state loop (each k-step's descriptor an add to the tile's, Q's in uniform registers: at most
    half the loop's R2UR moves, none at D64/D128); no local memory, no ptxas warning."""
    ref, b = built_pair[0][name], built_pair[1][name]
    t_ref, t = sass(ref.files["kernel.cubin"]), sass(b.files["kernel.cubin"])
    kinds = _hgmma_kinds(t_ref)
    assert kinds == _hgmma_kinds(t) and len(kinds) == t_ref.count("HGMMA.")
    assert _events(t) == _events(t_ref)
    loop_ref, loop = _steady_loop(t_ref), _steady_loop(t)
    assert _events(loop) == _events(loop_ref) and loop.count("HGMMA.") == loop_ref.count("HGMMA.") > 0
    assert sum(hgmma_gaps(t)) <= 0.5 * sum(hgmma_gaps(t_ref)), (hgmma_gaps(t_ref), hgmma_gaps(t))
    assert sum(hgmma_gaps(loop)) <= 0.5 * sum(hgmma_gaps(loop_ref)), (hgmma_gaps(loop_ref), hgmma_gaps(loop))
    assert opcodes(loop).count("R2UR") <= opcodes(loop_ref).count("R2UR") // 2
    if b.plan.head_dim <= 128:
        assert "R2UR" not in opcodes(loop)
    assert len(opcodes(loop)) < len(opcodes(loop_ref))
    u = resource_usage(b.files["kernel.cubin"])[b.plan.launch.kernel_name]
    assert u["STACK"] == 0 and u["LOCAL"] == 0 and b.warnings == []
    assert not [o for o in opcodes(t) if o.startswith(("LDL", "STL"))]


def _desc(addr: int, lbo: int) -> int:
    """hopper.cuh.j2's sg_desc(addr, lbo, 1024, 1)."""
    return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((1024 >> 4) << 32) | (1 << 62)


def _desc_at(d: int, nbytes: int) -> int:
    """hopper.cuh.j2's sg_desc_at(d, nbytes): the low word plus nbytes >> 4, modulo 2^32, the high word kept."""
    return (d & ~0xFFFFFFFF) | ((d + (nbytes >> 4)) & 0xFFFFFFFF)


@pytest.mark.parametrize("name", CASES)
def test_offsets_cannot_carry_out_of_the_address_field(name):
    """Every descriptor the flag makes equals the one built from the address (the same bits), for each tile a
    consumer reads (its Q rows, every stage's K and V) and each k-step's offset, with the block's SMEM at the bottom
    of the shared window (after the 1 KiB the driver keeps) and at the top (the 228 KiB of an SM)."""
    p, hw = plan_spec(BASE, {**CUDA, **VARIANTS[name]}), Hardware()
    buf = {b.name: b.offset for b in p.smem_buffers}
    qk = [((kk * 16) // 64, (kk * 16) % 64 * 2) for kk in range(p.qk_steps)]
    for base in (hw.smem_reserved_per_block, (hw.smem_per_sm - p.launch.smem_bytes) // 1024 * 1024):
        tiles = [(base + buf["q"] + w * p.consumer_slab_bytes, 16, [a * p.q_slab_bytes + o for a, o in qk])
                 for w in range(p.num_consumers)]
        for st in range(p.stages):
            tiles.append((base + buf["k"] + st * p.kv_stage_bytes, 16, [a * p.kv_slab_bytes + o for a, o in qk]))
            tiles.append((base + buf["v"] + st * p.kv_stage_bytes, p.kv_slab_bytes,
                          [t * p.pv_step_bytes for t in range(p.pv_steps)]))
        for tile, lbo, offsets in tiles:
            assert tile % 1024 == 0 and all(o % 16 == 0 for o in offsets)
            assert [_desc_at(_desc(tile, lbo), o) for o in offsets] == [_desc(tile + o, lbo) for o in offsets]
            assert tile + max(offsets) < base + p.launch.smem_bytes <= hw.smem_per_sm < 1 << 18


GPU_CASES = ["base", "causal", "d64", "gqa", "three_consumers", "ragged_causal", "top_left_sq_gt_skv",
             "persistent_d256", "dyn_gqa_causal_dynamic_lse"]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES)
def test_desc_offsets_match_float64_on_gpu(case, monkeypatch):
    """The forward built with plan.desc_offsets_of patched to True, under `verify`: fresh random inputs, outputs
    poisoned, o (and lse) against float64 (a wrong offset reads another k-step's Q, K or V columns)."""
    from schedgen.verify import verify_file
    _desc_offsets(monkeypatch)
    checks = verify_file(str(BASE), ["cuda"], {**CUDA, **VARIANTS[case]}, seed=6)
    assert {c.backend for c in checks} == {"cuda"}, checks
    assert checks and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]
