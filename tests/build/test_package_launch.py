"""launch.json in build products: every package and cache entry holds the plan's launch record; an entry whose
launch.json is missing (an entry from before the record) or another plan's is a miss, rebuilt whole."""
from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from conftest import SPECS_DIR
from schedgen.build import build_spec, expected_files, package
from schedgen.cache import INDEX, Cache
from schedgen.plan.launch import launch_record, load

ADD = SPECS_DIR / "add_bf16.yaml"
SMALL = {"M": 64, "N": 512}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("refcache")
    built = build_spec(ADD, SMALL, cache=Cache(root))
    return root, json.loads(built.files["manifest.json"])["cache_key"], built


def test_package_holds_the_plans_launch_record(reference, tmp_path):
    _, _, built = reference
    assert "launch.json" in expected_files(built.plan)
    assert built.files["launch.json"] == launch_record(built.plan).to_json().encode()
    dest = package(built, tmp_path / "out")
    assert load(dest) == launch_record(built.plan)
    assert (dest / "plan.json").exists()                      # kept for people and tools


def _rewrite(entry, name, data):
    index = json.loads((entry / INDEX).read_text())
    if data is None:
        (entry / name).unlink()
        index["files"].pop(name)
    else:
        (entry / name).write_bytes(data)
        index["files"][name] = hashlib.sha256(data).hexdigest()
    (entry / INDEX).write_text(json.dumps(index))


@pytest.mark.parametrize("data", [None, b"{}", "another"], ids=["missing", "empty object", "another plan's"])
def test_an_entry_with_a_wrong_launch_record_is_a_miss(reference, tmp_path, data):
    ref_root, key, ref = reference
    root = tmp_path / "cache"
    shutil.copytree(ref_root, root)
    cache = Cache(root)
    if data == "another":
        other = build_spec(ADD, {"M": 128, "N": 512}, cache=Cache(tmp_path / "other"))
        data = other.files["launch.json"]
        assert data != ref.files["launch.json"]
    _rewrite(cache.path(key), "launch.json", data)            # hashes consistent: only the content is wrong
    built = build_spec(ADD, SMALL, cache=cache)
    assert built.cache_hit is False and built.files == ref.files
    assert build_spec(ADD, SMALL, cache=cache).cache_hit is True


def test_the_package_module_reads_plan_json_only_when_asked(reference, tmp_path):
    import importlib
    import sys
    import numpy as np
    _, _, built = reference
    dest = package(built, tmp_path / "out")
    whole = json.loads((dest / "plan.json").read_text())
    (dest / "plan.json").rename(tmp_path / "aside.json")
    sys.path.insert(0, str(tmp_path / "out"))
    sys.modules.pop("add_bf16", None)
    try:
        mod = importlib.import_module("add_bf16")           # imports, checks arguments: no plan.json needed
        x = np.zeros(tuple(built.plan.inputs[0].shape), np.float32)
        with pytest.raises(TypeError, match="x: expected bf16"):
            mod.kernel.check_args([x, x], None)
        with pytest.raises(FileNotFoundError, match="plan.json"):
            mod.plan["sizes"]
        (tmp_path / "aside.json").rename(dest / "plan.json")
        assert mod.plan["sizes"] == SMALL and dict(mod.plan) == whole and len(mod.plan) == len(whole)
    finally:
        sys.path.remove(str(tmp_path / "out"))
        sys.modules.pop("add_bf16", None)
