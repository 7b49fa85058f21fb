"""Every bundled map spec compiles (NVRTC, no GPU) to an sm_90a cubin whose SASS is what the design promises:
TMA loads/stores, mbarrier waits, 16-byte SMEM accesses, no local-memory spills, no generic or per-thread
global accesses, and an empty stack frame."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import SPECS_DIR, spec_files, opcodes
from schedgen.build import build_spec
from schedgen.cache import Cache
from schedgen.toolchain.nvrtc import resource_usage, sass

def _variant(tmp: Path, dtype: str) -> Path:
    """add_bf16 with another element type (f16, fp8): a different vector width and conversion path."""
    text = (SPECS_DIR / "add_bf16.yaml").read_text().replace("bf16", dtype)
    path = tmp / f"add_{dtype}.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = Cache(tmp_path_factory.mktemp("cache"))
    tmp = tmp_path_factory.mktemp("variants")
    out = {}
    for path in spec_files("map") + [_variant(tmp, "f16"), _variant(tmp, "f8e4m3")]:
        b = build_spec(path, cache=cache)
        out[path.stem] = (b, sass(b.files["kernel.cubin"]))
    return out


NAMES = [p.stem for p in spec_files("map")] + ["add_f16", "add_f8e4m3"]


def test_opcode_parser_sees_instructions(built):
    b, text = built["add_bf16"]
    ops = opcodes(text)
    assert len(ops) > 50 and "EXIT" in ops
    assert opcodes("        /*0010*/                   LDS.128 R4, [R2] ;\n"
                   "        /*0020*/              @!P0 STL [R1], R3 ;\n") == ["LDS.128", "STL"]


@pytest.mark.parametrize("name", NAMES)
def test_cubin_is_sm90a_elf(built, name):
    b, text = built[name]
    cubin = b.files["kernel.cubin"]
    assert cubin[:4] == b"\x7fELF"
    assert b.plan.launch.kernel_name in text
    ptx = b.files["kernel.ptx"].decode()
    assert re.search(r"^\.target sm_90a\b", ptx, re.M)


@pytest.mark.parametrize("name", NAMES)
def test_sass_uses_tma_mbarriers_and_16B_smem_accesses(built, name):
    b, text = built[name]
    ops = set(opcodes(text))
    rank = {len(o.tma_dims) for o in b.plan.inputs}
    for r in rank:
        assert f"UTMALDG.{r}D" in ops, sorted(ops)
    assert {f"UTMASTG.{len(o.tma_dims)}D" for o in b.plan.outputs} <= ops
    assert any(op.startswith("SYNCS.") for op in ops)                 # mbarrier init / arrive / try_wait
    assert "SYNCS.PHASECHK.TRANS64.TRYWAIT" in ops
    assert "LDS.128" in ops and "STS.128" in ops


@pytest.mark.parametrize("name", NAMES)
def test_sass_has_no_spills_or_generic_accesses(built, name):
    _, text = built[name]
    ops = opcodes(text)
    assert not [op for op in ops if op.split(".")[0] in ("LDL", "STL")], "local-memory spills"
    assert not [op for op in ops if op.split(".")[0] in ("LD", "ST")], "generic LD/ST (SMEM not recognised as shared)"
    assert not [op for op in ops if op.split(".")[0] in ("LDG", "STG")], "per-thread global accesses bypass TMA"
    # no SMEM access narrower than 16 B in the element loop (the only LDS/STS are the vector ones)
    narrow = [op for op in ops if op.split(".")[0] in ("LDS", "STS") and op not in ("LDS.128", "STS.128")]
    assert not narrow, narrow


@pytest.mark.parametrize("name", NAMES)
def test_resource_usage_has_no_stack(built, name):
    b, _ = built[name]
    usage = resource_usage(b.files["kernel.cubin"])
    assert set(usage) == {b.plan.launch.kernel_name}
    u = usage[b.plan.launch.kernel_name]
    assert u["STACK"] == 0 and u["LOCAL"] == 0
    assert 0 < u["REG"] <= 65536 // b.plan.launch.threads
    manifest = json.loads(b.files["manifest.json"])
    assert manifest["resources"]["stack"] == 0 and manifest["resources"]["reg"] == u["REG"]


@pytest.mark.parametrize("name", NAMES)
def test_ptx_uses_bulk_tensor_copies_and_try_wait(built, name):
    b, _ = built[name]
    ptx = b.files["kernel.ptx"].decode()
    assert "cp.async.bulk.tensor" in ptx
    assert "mbarrier.try_wait" in ptx
    assert "mbarrier.arrive.expect_tx" in ptx
    assert ptx.count(".entry ") == 1 and f".entry {b.plan.launch.kernel_name}(" in ptx
