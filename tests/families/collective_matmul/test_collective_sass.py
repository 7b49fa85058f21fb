"""The CUDA rendering of the collective_matmul family, compiled with NVRTC (no GPU) to sm_90a SASS, and the NVLink
multicast entries assembled the same way (never run: NVLink multicast is not supported by this release).

The kernel must hold the matmul family's instructions (HGMMA of the planned shape, TMA loads of lhs / the gathered
chunks / rhs and TMA stores of out, setmaxnreg, mbarrier waits) and the cross-device ones: 16-byte copies to the
peer (STG.E.128), system-scope acquire polls of the semaphores (LDG.E.STRONG.SYS) followed by the generic-to-async
proxy fence before TMA reads a gathered chunk (FENCE.VIEW.ASYNC.G), system-scope signals (MEMBAR.ALL.SYS +
REDG.E.ADD.STRONG.SYS), and the wait's timeout (NANOSLEEP, the global timer, BPT.TRAP); no spills. The PTX says which
signal form each semaphore uses."""
from __future__ import annotations

import re

import pytest

from conftest import ROOT
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.toolchain.nvrtc import compile_cuda, resource_usage, sass
from schedgen.families.collective_matmul.plan import plan_multimem
from schedgen.render import render_multimem
from conftest import opcodes

BASE = ROOT / "tests" / "data" / "collective_matmul_base.yaml"
CUDA = {"schedule.backends": ["cuda"]}


def _devices(d, sign="+"):
    return {"op.mesh.num_devices": d, "M_total": d * 1024,
            "schedule.collective.remote_refs.gather.device_id": f"(x {sign} 1) % {d}"}


VARIANTS = {
    "base": {},
    # 4 devices: chunks are forwarded (gathered rows read back and sent on); a step's signals behind one fence
    "d4_parallel_row_block": {**_devices(4), "schedule.collective.semaphores.received.signal": "semaphore_signal_parallel"},
    # 3 devices, per-chunk counting, done signalled with a fence + relaxed add
    "d3_chunk_parallel_done": {**_devices(3, "-"), "schedule.collective.semaphores.received.per": "chunk",
                               "schedule.collective.semaphores.done.signal": "semaphore_signal_parallel"},
    "f32_out": {"op.outputs.out.dtype": "f32", "schedule.epilogue.tile": [64, 32]},
    "f16_wg_n": {"op.inputs.a.dtype": "f16", "op.inputs.b.dtype": "f16", "op.outputs.out.dtype": "f16",
                 "schedule.pipeline.wg_axis": "n"},
    "one_consumer": {"schedule.pipeline.num_compute_wgs": 1, "schedule.in_specs.a.block_shape": [64, 64],
                     "schedule.out_specs.out.block_shape": [64, 256], "schedule.pipeline.memory_registers": 56,
                     "schedule.pipeline.compute_registers": 256},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    out = {}
    for name, ov in VARIANTS.items():
        b = build_spec(str(BASE), {**CUDA, **ov}, cache=cache)
        out[name] = (b, sass(b.files["kernel.cubin"]))
    return out


@pytest.mark.parametrize("name", list(VARIANTS))
def test_matmul_instructions(built, name):
    b, text = built[name]
    p, mm = b.plan, b.plan.mm
    ops = opcodes(text)
    want = f"HGMMA.64x{mm.warps.wg_tile_n}x16.F32" + (".BF16" if p.in_dtype == "bf16" else "")
    hg = [l for l in text.splitlines() if "HGMMA" in l]
    assert any(want in l for l in hg), sorted(set(re.findall(r"HGMMA\.[0-9A-Za-z_.]+", text)))
    assert all("tnspB" in l and "tnspA" not in l for l in hg if "HGMMA." in l)   # rhs [K, N] is N-major, lhs K-major
    assert "UTMALDG.2D" in ops and "UTMASTG.2D" in ops and "SYNCS.PHASECHK.TRANS64.TRYWAIT" in ops
    assert "USETMAXREG.DEALLOC.CTAPOOL" in ops and "USETMAXREG.TRY_ALLOC.CTAPOOL" in ops
    ptx = b.files["kernel.ptx"].decode()
    assert f"setmaxnreg.dec.sync.aligned.u32 {p.producer_regs}" in ptx
    assert f"setmaxnreg.inc.sync.aligned.u32 {p.consumer_regs}" in ptx


@pytest.mark.parametrize("name", list(VARIANTS))
def test_cross_device_instructions(built, name):
    b, text = built[name]
    ops = opcodes(text)
    assert "STG.E.128" in ops and "LDG.E.128" in ops                  # the chunk copy, 16 B a lane
    assert "LDG.E.STRONG.SYS" in ops                                  # ld.acquire.sys polls of the semaphores
    assert "FENCE.VIEW.ASYNC.G" in ops                                # generic -> async proxy before TMA reads
    assert "REDG.E.ADD.STRONG.SYS" in ops and "MEMBAR.ALL.SYS" in ops # system-scope signals
    assert "NANOSLEEP" in ops and "BPT.TRAP" in ops and "SR_GLOBALTIMERLO" in text   # the wait's timeout
    # the polls come before the proxy fence that precedes the producer's gathered TMA loads
    first_poll = next(i for i, op in enumerate(ops) if op == "LDG.E.STRONG.SYS")
    assert first_poll < ops.index("FENCE.VIEW.ASYNC.G")


@pytest.mark.parametrize("name", list(VARIANTS))
def test_signal_forms_in_ptx(built, name):
    """received / done: semaphore_signal is `red.release.sys`; semaphore_signal_parallel is `fence.acq_rel.sys`
    followed by `red.relaxed.sys` (one fence for a step's signals)."""
    b, _ = built[name]
    p = b.plan
    ptx = b.files["kernel.ptx"].decode()
    forms = {p.received_signal, p.done_signal}
    assert ("red.release.sys.global.add.u32" in ptx) == ("semaphore_signal" in forms), forms
    assert ("red.relaxed.sys.global.add.u32" in ptx) == ("semaphore_signal_parallel" in forms), forms
    assert ("fence.acq_rel.sys" in ptx) == ("semaphore_signal_parallel" in forms), forms
    assert "ld.acquire.sys.global.u32" in ptx and "fence.proxy.async.global" in ptx
    assert "multimem" not in ptx and "cuMulticast" not in b.files["kernel.cu"].decode()


def test_forwarding_only_with_more_than_two_devices(built):
    """With 2 devices nothing is forwarded (the copy reads only lhs); from 3 on, a copy warp waits for a gathered
    chunk (another acquire poll site) before it sends it on."""
    polls = {n: opcodes(built[n][1]).count("LDG.E.STRONG.SYS") for n in ("base", "d4_parallel_row_block")}
    assert polls["d4_parallel_row_block"] > polls["base"], polls


@pytest.mark.parametrize("name", list(VARIANTS))
def test_no_spills_and_no_stack(built, name):
    b, text = built[name]
    assert not [op for op in opcodes(text) if op.split(".")[0] in ("LDL", "STL")], "local-memory spills"
    usage = resource_usage(b.files["kernel.cubin"])[b.plan.launch.kernel_name]
    assert usage["STACK"] == 0 and usage["LOCAL"] == 0
    assert usage["REG"] <= 65536 // b.plan.launch.threads
    assert b.warnings == []


# ------------------------------------------------------------------ NVLink multicast: assembled, never run

def _functions(text: str) -> dict[str, list[str]]:
    """SASS opcodes per kernel (nvdisasm sections .text.<name>)."""
    out, name, lines = {}, None, []
    for line in text.splitlines():
        m = re.match(r"\s*\.section\s+\.text\.(\w+),", line)
        if m:
            if name:
                out[name] = opcodes("\n".join(lines))
            name, lines = m.group(1), []
        elif name:
            lines.append(line)
    if name:
        out[name] = opcodes("\n".join(lines))
    return out


@pytest.mark.parametrize("dtype, vec, ldgmc", [
    ("bf16", 4, "LDGMC.E.F32ADD.BF16x8"), ("f16", 4, "LDGMC.E.F32ADD.F16x8"), ("f32", 4, "LDGMC.E.ADD.F32x4"),
    ("bf16", 1, "LDGMC.E.F32ADD.BF16x2"),
])
def test_multimem_entries_assemble(dtype, vec, ldgmc):
    mp = plan_multimem(dtype, vec)
    src = render_multimem(mp)
    c = compile_cuda(src, "multimem.cu")
    ptx = c.ptx
    assert f"multimem.st.relaxed.sys.global{'.v4' if vec == 4 else ''}.{mp.ptx_type}" in ptx
    assert f"multimem.ld_reduce.relaxed.sys.global.add{mp.acc}{'.v4' if vec == 4 else ''}.{mp.ptx_type}" in ptx
    assert "multimem.red.release.sys.global.add.u32" in ptx
    text = sass(c.cubin)
    fn = _functions(text)
    assert set(fn) == {mp.store_kernel, mp.load_reduce_kernel, mp.signal_kernel}
    assert any(op.startswith("LDGMC.") for op in fn[mp.load_reduce_kernel]), fn[mp.load_reduce_kernel]
    assert re.search(rf"\b{re.escape(ldgmc)}[.\s]", text), ldgmc     # the multicast load-reduce, its type and width
    st = "STG.E.128.STRONG.SYS" if vec == 4 else "STG.E.STRONG.SYS"
    assert st in fn[mp.store_kernel], fn[mp.store_kernel]                # the store to the multicast address
    assert "REDG.E.ADD.STRONG.SYS" in fn[mp.signal_kernel] and "MEMBAR.ALL.SYS" in fn[mp.signal_kernel]


def test_multimem_plan_rejects_what_it_cannot_spell():
    with pytest.raises(ValueError, match="not f8e4m3"):
        plan_multimem("f8e4m3")
    with pytest.raises(ValueError, match="not 2"):
        plan_multimem("bf16", 2)
