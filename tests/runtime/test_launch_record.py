"""The launch record (schedgen/plan/launch.py) on the CPU: built from every family's plan, round-tripped through
launch.json, refused with one clear error naming the file when missing / of another version / malformed, and the
single-GPU call path (kernel arguments, tensor maps, grid, cluster, tile counter) driven from it alone through a fake
driver, with no plan.json in the package."""
from __future__ import annotations

import json

import pytest

from conftest import SPECS_DIR, spec_files
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan, to_dict
from schedgen.plan import dims
from schedgen.plan import launch as L
from schedgen.runtime import driver
from schedgen.runtime.kernel import load_package

from runtime.fake_driver import FakeDriver   # (tests/ is on the path: runs alone or imported by other tests)


def _plan(name):
    spec, src = load_spec(str(SPECS_DIR / name))
    return plan(spec, src)


def _folder(tmp_path, p):
    (tmp_path / "launch.json").write_text(L.launch_record(p).to_json())
    return tmp_path


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.stem)
def test_record_of_every_bundled_plan_round_trips(path, tmp_path):
    spec, src = load_spec(str(path))
    p = plan(spec, src)
    rec = L.launch_record(p)
    assert L.load(_folder(tmp_path, p)) == rec and rec.version == L.LAUNCH_VERSION
    d = to_dict(p)
    assert (rec.kernel_name, rec.threads, rec.smem_bytes, dims.to_json(rec.num_blocks)) == (
        d["kernel_name"], d["threads"], d["smem_bytes"], d["num_blocks"])
    assert [o.name for o in rec.inputs] == [o["name"] for o in d["inputs"]]
    assert [(a.kind, a.box, a.swizzle) for a in rec.kernel_args] == [
        (a["kind"], tuple(a["box"]), a["swizzle"]) for a in d["kernel_args"]]
    assert (rec.ring is not None) == (d["family"] == "collective_matmul")
    assert rec.cluster == tuple(d.get("cluster_dims", (1, 1, 1)))


def _broken(rec: dict, how) -> dict:
    rec = json.loads(json.dumps(rec))
    how(rec)
    return rec


GOOD = L.launch_record(_plan("matmul_bf16_4096.yaml")).to_dict()
BAD = {
    "no version": (lambda r: r.pop("version"), "version: missing"),
    "version 1": (lambda r: r.__setitem__("version", 1), "version: launch record version 1; this schedgen reads "
                                                         "version 2 only: rebuild the package"),
    "version true": (lambda r: r.__setitem__("version", True), "version: launch record version True"),
    "field missing": (lambda r: r.pop("threads"), "threads: missing"),
    "unknown field": (lambda r: r.__setitem__("grid", [1]), "grid: unknown field"),
    "threads a string": (lambda r: r.__setitem__("threads", "384"), "threads: must be an integer, got '384'"),
    "auto_blocks a number": (lambda r: r.__setitem__("auto_blocks", 1), "auto_blocks: must be true or false"),
    "cluster of 2": (lambda r: r.__setitem__("cluster", [2, 1]), "cluster: must be 3 dims"),
    "blocks not a cluster multiple": (lambda r: r.update(cluster=[2, 1, 1], num_blocks=131),
                                      "num_blocks: 131 is not a multiple of cluster[0] = 2"),
    "arg kind": (lambda r: r["kernel_args"][1].__setitem__("kind", "texture"),
                 "kernel_args[1].kind: 'texture' is not one of tmap, ptr, counter, u32, i32"),
    "extent names no size": (lambda r: r["kernel_args"][0].__setitem__("shape", ["M", 4096]),
                             "kernel_args[0].shape[0]: 'M' is not a dynamic size of this kernel (it has none)"),
    "shape names no size": (lambda r: r["inputs"][0].__setitem__("shape", ["M", 4096]),
                            "inputs[0].shape[0]: 'M' is not a dynamic size of this kernel"),
    "extent operator": (lambda r: r.update(sizes=[{"name": "M", "min": 1, "max": 8, "multiple_of": 1}],
                                           num_blocks=["**", "M", 2]) or r["inputs"][0].__setitem__("shape",
                                                                                                   ["M", 4096]),
                        "num_blocks: must be an integer, a size name or [op, a, b] with op one of"),
    "size bound by no input": (lambda r: r.update(sizes=[{"name": "M", "min": 1, "max": 8, "multiple_of": 1}]),
                               "sizes: the dynamic size 'M' is no input's dimension"),
    "size range upside down": (lambda r: r.update(sizes=[{"name": "M", "min": 9, "max": 8, "multiple_of": 1}]),
                               "sizes[0]: min 9 is above max 8"),
    "arg operand out of range": (lambda r: r["kernel_args"][0].__setitem__("operand", 9),
                                 "kernel_args[0].operand: 9 is not an operand (the kernel has 3)"),
    "tmap box rank": (lambda r: r["kernel_args"][0].__setitem__("box", [64]),
                      "kernel_args[0]: shape, strides and box of a tensor map have one entry per dimension"),
    "operand dtype": (lambda r: r["inputs"][0].__setitem__("dtype", "int4"), "inputs[0].dtype: 'int4' is not one of"),
    "operand shape zero": (lambda r: r["inputs"][0].__setitem__("shape", [0, 4]),
                           r"inputs[0].shape[0]: must be >= 1, got 0"),
    "no outputs": (lambda r: r.__setitem__("outputs", []), "outputs: a kernel has at least one"),
    "ring malformed": (lambda r: r.__setitem__("ring", {"num_devices": 2}), "ring.send_to: missing"),
    "a list": (lambda r: r.clear(), "version: missing"),
}


@pytest.mark.parametrize("case", BAD)
def test_malformed_record_is_one_error_naming_file_and_field(tmp_path, case):
    how, message = BAD[case]
    (tmp_path / "launch.json").write_text(json.dumps(_broken(GOOD, how)))
    with pytest.raises(L.LaunchRecordError) as info:
        load_package(tmp_path)
    assert str(info.value).startswith(f"{tmp_path / 'launch.json'}: ")
    assert message in str(info.value)


@pytest.mark.parametrize("text, message", [(b"{oops", "not valid JSON"), (b"\xff\xfe", "not valid JSON"),
                                           (b"[1, 2]", "must hold a JSON object, got list")])
def test_unparsable_record(tmp_path, text, message):
    (tmp_path / "launch.json").write_bytes(text)
    with pytest.raises(L.LaunchRecordError, match=message) as info:
        load_package(tmp_path)
    assert str(tmp_path / "launch.json") in str(info.value)


def test_missing_record_names_the_file_even_with_plan_json(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps(to_dict(_plan("add_bf16.yaml"))))
    with pytest.raises(L.LaunchRecordError) as info:
        load_package(tmp_path)
    assert str(info.value) == (f"{tmp_path / 'launch.json'}: missing: a schedgen package holds its launch record "
                               f"here (rebuild it with this schedgen)")


# ------------------------------------------------------------------------------------------------ the call path

def _kernel(tmp_path, name):
    p = _plan(name)
    folder = _folder(tmp_path, p)
    (folder / "kernel.cubin").write_bytes(b"CUBIN")
    assert not (folder / "plan.json").exists()
    return load_package(folder), L.launch_record(p)


def _ptrs(rec):
    return [0x7F0000000000 + (i << 32) for i in range(len(rec.operands))]


def test_tensor_maps_grid_and_cluster_from_the_record(tmp_path, monkeypatch):
    fake = FakeDriver(monkeypatch, clusters=60)
    kernel, rec = _kernel(tmp_path, "matmul_bf16_8192.yaml")        # cluster 2x1, persistent (auto) grid
    assert rec.cluster == (2, 1, 1) and rec.auto_blocks
    ptrs = _ptrs(rec)
    kernel._launcher(ptrs[:len(rec.inputs)], ptrs[len(rec.inputs):], stream=5)()
    assert fake.cubin == b"CUBIN" and fake.functions == [(rec.kernel_name, rec.smem_bytes)]
    assert fake.encoded == [(ptrs[a.operand], a.dtype, a.shape, a.strides, a.box, a.swizzle, a.oob_nan)
                            for a in rec.kernel_args]
    (go,) = fake.launches
    blocks = min(rec.num_blocks // 2, 60) * 2
    assert go["grid"] == (blocks, 1, 1) and go["block"] == (rec.threads, 1, 1) and go["smem"] == rec.smem_bytes
    assert go["cluster"] == (2, 1, 1) and go["stream"] == 5 and len(go["args"]) == len(rec.kernel_args)


def test_dynamic_tile_counter_and_pointer_arguments(tmp_path, monkeypatch):
    fake = FakeDriver(monkeypatch, sm_count=100)
    kernel, rec = _kernel(tmp_path, "attention_causal_bf16_4096_dynamic.yaml")
    kinds = [a.kind for a in rec.kernel_args]
    assert kinds.count("counter") == 1 and rec.cluster == (1, 1, 1)
    ptrs = _ptrs(rec)
    for stream in (0, 0, 7):
        kernel._launcher(ptrs[:len(rec.inputs)], ptrs[len(rec.inputs):], stream=stream)()
    # one pool per device, zeroed once; a counter per stream out of it
    assert [b.nbytes for b in fake.buffers] == [driver.COUNTER_SLOT * driver.COUNTER_SLOTS]
    assert not fake.buffers[0].uploaded.any() and driver.COUNTER_SLOT >= L.COUNTER_BYTES
    go = fake.launches[0]
    assert go["grid"] == (min(rec.num_blocks, 100 * rec.blocks_per_sm), 1, 1) and go["cluster"] is None
    counters = [g["args"][kinds.index("counter")] for g in fake.launches]
    base = fake.buffers[0].ptr
    assert counters[0] == counters[1] == driver.Arg.ptr(base)
    assert counters[2] == driver.Arg.ptr(base + driver.COUNTER_SLOT)


def test_pointer_argument_of_an_operand(tmp_path, monkeypatch):
    FakeDriver(monkeypatch)
    kernel, rec = _kernel(tmp_path, "matmul_bias_gelu_bf16.yaml")
    ptr_args = [a for a in rec.kernel_args if a.kind == "ptr"]
    assert ptr_args
    ptrs = _ptrs(rec)
    args = kernel._arguments(ptrs)
    for i, a in enumerate(rec.kernel_args):
        if a.kind == "ptr":
            assert args[i] == driver.Arg.ptr(ptrs[a.operand])
    with pytest.raises(ValueError, match="operand pointers needed"):
        kernel._arguments(ptrs[:-1])


def test_argument_checks_come_from_the_record(tmp_path):
    import numpy as np
    from schedgen.runtime.arrays import ArgumentError
    kernel, rec = _kernel(tmp_path, "add_bf16.yaml")
    x = rec.inputs[0]
    assert repr(kernel).startswith(f"<schedgen kernel {rec.name}({x.name}: {x.dtype}{list(x.shape)}")
    with pytest.raises(ArgumentError, match=f"{x.name}: expected shape"):
        kernel.check_args([np.zeros((3, 3), np.float32)] * len(rec.inputs), None)
    with pytest.raises(ValueError, match="backend 'pallas' was not built"):
        load_package(_folder(tmp_path, _plan("attention_bf16_d64_4096.yaml")))(*[None] * 3, backend="pallas")
