"""Defect group 13 (issue 41): runtime argument checks and package loading, minor.

Before: a read-only numpy `out=` passed the argument checks (the CUDA path then copied the result into it through
ctypes, past the flag: into an np.memmap opened read-only, a crash); `stream=2**70` passed them too (a CUstream
is a 64-bit pointer); a launch.json or dispatch.json nested thousands deep was a RecursionError naming no file;
backward.json's step names were not checked at load, so `../../x` loaded `backward/../../x` (a package outside
this one); dispatch.json `"version": true` (or 1.0) read as version 1.

Now out= arrays the kernel may not write are refused (numpy's writeable flag, a read-only
__cuda_array_interface__), a stream handle is 0 <= h < 2**64, package JSON is refused past 64 levels of nesting
(schedgen/boundedjson.py) with the file named, backward.json is checked at load like at build (identifier step
names, every reference resolving), and version fields are ints of the exact value (true and 1.0 are not 1).
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from schedgen import boundedjson
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.plan import dispatch, launch
from schedgen.runtime.arrays import ArgumentError
from schedgen.runtime.kernel import load_package

ROOT = Path(__file__).resolve().parents[2]
BF16 = ml_dtypes.bfloat16
MAP_BACKWARD = """\
name: mul_train
op:
  kind: map
  sizes: {M: 64, N: 256}
  inputs:
    x: {shape: [M, N], dtype: f32}
    y: {shape: [M, N], dtype: f32}
  outputs:
    o: {shape: [M, N], dtype: f32}
  body: o = x * y
backward:
  wrt: [x, y]
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """gelu_bias_bf16 at M=64, N=512 (x, w, b -> y) and a map with a backward pass, packaged."""
    tmp = tmp_path_factory.mktemp("rt41")
    cache = Cache(tmp / "cache")
    gelu = package(build_spec(ROOT / "specs" / "gelu_bias_bf16.yaml", {"M": 64, "N": 512}, cache=cache), tmp / "out")
    spec = tmp / "mul_train.yaml"
    spec.write_text(MAP_BACKWARD)
    train = package(build_spec(spec, cache=cache), tmp / "out")
    return gelu, train


def _args():
    return np.zeros((64, 512), BF16), np.zeros((64, 512), BF16), np.zeros((512,), BF16)


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


# ------------------------------------------------------------------------------------------------ out= and stream=

@pytest.mark.parametrize("backend", ["cuda", "pallas"])
def test_read_only_out_is_refused(built, backend):
    k = load_package(built[0])
    out = np.zeros((64, 512), BF16)
    out.setflags(write=False)
    with pytest.raises(ArgumentError) as exc:
        k(*_args(), out=out, backend=backend)
    assert str(exc.value).startswith("out[y]: is read-only (a numpy array whose flags.writeable is False)")
    with pytest.raises(ArgumentError, match=r"^out\[y\]: is read-only"):
        k.check_args(_args(), [out])
    k.check_args(_args(), [np.zeros((64, 512), BF16)])            # a writable one passes


def test_read_only_cuda_array_interface_out_is_refused(built):
    class ReadOnlyDeviceArray:
        __cuda_array_interface__ = {"shape": (64, 512), "typestr": "<f4", "data": (1 << 20, True), "version": 3}
    k = load_package(built[0])
    with pytest.raises(ArgumentError, match=r"^out\[y\]: is read-only \(its __cuda_array_interface__ marks"):
        k.check_args(_args(), [ReadOnlyDeviceArray()])


class _Proto:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.mark.parametrize("stream", [2 ** 64, 2 ** 70, 10 ** 5000, -1, _Proto(2 ** 70), _Proto("7")],
                         ids=["2**64", "2**70", "10**5000", "-1", "protocol-2**70", "protocol-str"])
def test_stream_outside_the_handle_range_is_refused(built, stream):
    k = load_package(built[0])
    with pytest.raises(ArgumentError) as exc:
        k(*_args(), stream=stream, backend="cuda")
    text = str(exc.value)
    assert text.startswith("stream: ") and len(text) < 300, text[:300]
    assert any(w in text for w in ("is below 2**64", "is >= 0, got -1", "__cuda_stream__() must return (version, "
                                                                          "handle)")), text


def test_the_largest_handle_is_a_handle():
    from schedgen.runtime import driver
    assert driver.stream_handle(2 ** 64 - 1) == 2 ** 64 - 1 and driver.stream_handle(_Proto(5)) == 5


# ------------------------------------------------------------------------------------------------ package files

def test_a_deep_launch_json_is_a_located_error(built, tmp_path):
    root = _copy(built[0], tmp_path)
    for text in ("[" * 100_000, '{"version": ' + "[" * 500 + "]" * 500 + "}"):
        (root / launch.FILE_NAME).write_text(text)
        with pytest.raises(launch.LaunchRecordError) as exc:
            load_package(root)
        assert str(exc.value).startswith(f"{root / launch.FILE_NAME}: not valid JSON: nested")


def test_a_deep_dispatch_json_is_a_located_error(tmp_path):
    (tmp_path / dispatch.FILE_NAME).write_text('{"buckets": ' + "[" * 100_000)
    with pytest.raises(dispatch.DispatchRecordError) as exc:
        dispatch.load(tmp_path)
    assert str(exc.value).startswith(f"{tmp_path / dispatch.FILE_NAME}: not valid JSON: nested 100001 levels deep")


def test_bounded_json_counts_brackets_outside_strings():
    assert boundedjson.depth('{"a": "[[[[", "b": [[1], {"c": "]"}]}') == 3
    assert boundedjson.loads(b'{"a": "[[[[\\"[[[["}') == {"a": '[[[["[[[['}
    assert boundedjson.loads("[" * 64 + "]" * 64) is not None
    with pytest.raises(ValueError, match="nested 65 levels deep"):
        boundedjson.loads("[" * 65 + "]" * 65)


GOOD_DISPATCH = {"version": 1, "name": "k", "sizes": ["M"], "bounds": [[64, 128]], "variants": ["v0", "v1"],
                 "table": [0, 1], "buckets": [{}, {}]}


@pytest.mark.parametrize("version", [True, 1.0, "1", None])
def test_dispatch_version_is_the_int_1(version):
    assert dispatch.from_dict(GOOD_DISPATCH).variants == ("v0", "v1")
    with pytest.raises(dispatch.DispatchRecordError, match=r"^dispatch.json: version: "):
        dispatch.from_dict(dict(GOOD_DISPATCH, version=version))


@pytest.mark.parametrize("version", [True, float(launch.LAUNCH_VERSION)])
def test_launch_version_is_the_exact_int(built, version):
    data = json.loads((built[0] / launch.FILE_NAME).read_text())
    assert launch.from_dict(data).name == "gelu_bias_bf16"
    with pytest.raises(launch.LaunchRecordError, match=r"^launch.json: version: launch record version "):
        launch.from_dict(dict(data, version=version))


@pytest.mark.parametrize("name", ["../../x", "a/b", "", "1st", "x y"])
def test_backward_step_names_are_checked_at_load(built, tmp_path, name):
    root = _copy(built[1], tmp_path)
    assert load_package(root).backward is not None
    rec = json.loads((root / "backward.json").read_text())
    rec["graph"]["steps"][0]["name"] = name
    (root / "backward.json").write_text(json.dumps(rec))
    with pytest.raises(RuntimeError) as exc:
        load_package(root)
    text = str(exc.value)
    assert f"{root / 'backward.json'} is not a backward of this kernel" in text and "not an identifier" in text


@pytest.mark.parametrize("change", ["reference", "grads", "deep", "not a list"])
def test_backward_json_that_does_not_fit_the_kernel_is_refused(built, tmp_path, change):
    root = _copy(built[1], tmp_path)
    rec = json.loads((root / "backward.json").read_text())
    step = rec["graph"]["steps"][0]
    if change == "reference":
        step["inputs"][next(iter(step["inputs"]))] = "in:nobody"
    elif change == "grads":
        rec["graph"]["grads"] = ["nobody"]
    elif change == "deep":
        rec["graph"]["meta"] = json.loads("[" * 70 + "]" * 70)
    else:
        rec["graph"]["steps"] = [[1, 2]]
    (root / "backward.json").write_text(json.dumps(rec))
    with pytest.raises(RuntimeError) as exc:
        load_package(root)
    assert str(root / "backward.json") in str(exc.value) and "rebuild the package" in str(exc.value)


@pytest.mark.parametrize("text, said", [("[" * 100_000, "nested 100000 levels deep"),
                                        ("[" + "9" * 5000 + "]", "is too large (integers: at most 19 digits")])
def test_deep_or_huge_benchmark_records_are_record_errors(tmp_path, capsys, text, said):
    """The same class in the benchmark records `bench --json` merges into and the report reads: a RecursionError
    and int()'s ValueError were tracebacks."""
    from _cli import run_cli
    from schedgen.report import RecordError, load_record
    record = tmp_path / "record.json"
    record.write_text(text)
    code, lines = run_cli(capsys, "bench", str(ROOT / "specs" / "add_bf16.yaml"), "--json", str(record))
    assert code == 2 and len(lines) == 1 and said in lines[0], lines
    with pytest.raises(RecordError, match=re.escape(said)):
        load_record(record)
