"""Issue 42, step 7: two fields were accepted and changed nothing but the kernel's name, and test_every_field missed
them because kernel names carry field values: `schedule.num_warpgroups` on the Pallas map and rowwise kernels (they
read no thread count) and `pipeline.delta: preprocess` on the Pallas attention backward (it computes delta before
its kernels). test_every_field now compares the products with the kernel's name normalized; num_warpgroups written
with no cuda backend is a located error (the CUDA kernel's warpgroups are what it sets), and delta where the wgmma
CUDA kernel is not built already was one. With both backends each changes the CUDA kernel, and the bundled specs
(which write num_warpgroups with both backends) stay valid."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import ROOT, SPECS_DIR
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan

sys.path.insert(0, str(ROOT / "tests" / "frontend"))
from test_every_field import KERNEL, normalize, products  # noqa: E402


def _problems(name: str, overrides: dict) -> list[str]:
    spec, src = load_spec(str(SPECS_DIR / name), overrides)
    try:
        plan(spec, src)
    except SpecErrors as exc:
        return exc.lines()
    return []


@pytest.mark.parametrize("name, line", [("add_bf16.yaml", 21), ("softmax_bf16.yaml", 19)])
def test_num_warpgroups_without_cuda_is_a_located_error(name, line):
    got = _problems(name, {"schedule.backends": ["pallas"]})
    assert got == [f"{SPECS_DIR / name}:{line}:19: schedule.num_warpgroups: the pallas backend does not read "
                   f"num_warpgroups: it sets the CUDA kernel's warpgroups (128 threads each, 1 to 4); the Pallas "
                   f"kernel's block is Mosaic GPU's and reads no thread count; legal: leave it out, or add cuda to "
                   f"schedule.backends"], got


@pytest.mark.parametrize("name", ["add_bf16.yaml", "softmax_bf16.yaml"])
def test_num_warpgroups_with_cuda_or_picked_is_legal(name):
    assert _problems(name, {}) == []
    assert _problems(name, {"schedule.backends": ["cuda"]}) == []


@pytest.mark.parametrize("name", ["add_bf16.yaml", "softmax_bf16.yaml"])
def test_left_out_it_is_no_error_without_cuda(tmp_path, name):
    """Left out (the planner may pick it: a pick is not written), the Pallas-only spec plans."""
    text = (SPECS_DIR / name).read_text()
    line = next(ln for ln in text.splitlines(keepends=True) if ln.lstrip().startswith("num_warpgroups:"))
    path = tmp_path / name
    path.write_text(text.replace(line, ""))
    spec, src = load_spec(str(path), {"schedule.backends": ["pallas"]})
    assert list(plan(spec, src).launch.backends) == ["pallas"]


def test_delta_preprocess_without_the_wgmma_kernel_is_a_located_error():
    got = _problems("attention_backward_bf16_4096.yaml", {"schedule.backends": ["pallas"],
                                                          "schedule.pipeline.kind": "warp_specialized",
                                                          "schedule.pipeline.delta": "preprocess"})
    assert len(got) == 1 and ": schedule.pipeline.delta: " in got[0] and "legal: in_kernel" in got[0], got


def test_a_field_that_only_renames_the_kernel_changes_no_product():
    spec, src = load_spec(str(SPECS_DIR / "add_bf16.yaml"), {})
    one = plan(spec, src)
    spec3, src3 = load_spec(str(SPECS_DIR / "add_bf16.yaml"), {"schedule.num_warpgroups": 3})
    three = plan(spec3, src3)
    assert one.launch.kernel_name != three.launch.kernel_name
    a, b = products(one), products(three)
    assert a["pallas"] == b["pallas"] and KERNEL in a["pallas"] and one.launch.kernel_name not in a["pallas"]
    assert a["cuda"] != b["cuda"]
    assert normalize("k_wg2 k_wg2_pre", "k_wg2") == f"{KERNEL} {KERNEL}_pre"


def test_the_bundled_specs_stay_valid():
    """Every bundled spec writing num_warpgroups builds cuda (or both): none is Pallas-only."""
    for path in sorted(SPECS_DIR.iterdir()):
        if path.suffix in (".yaml", ".yml", ".toml") and "num_warpgroups" in path.read_text():
            spec, _ = load_spec(str(path))
            assert "cuda" in spec.schedule.backends, Path(path).name
