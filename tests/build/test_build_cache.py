"""The content-addressed build cache and the importable package folder."""
from __future__ import annotations

import hashlib
import importlib
import json
import sys

import numpy as np
import pytest

from conftest import ROOT, SPECS_DIR, spec_files
from schedgen.build import build_spec, package
from schedgen.cache import INDEX, Cache, default_root

ADD = SPECS_DIR / "add_bf16.yaml"
SMALL = {"M": 64, "N": 512}


def entry_dir(cache: Cache, built) -> "Path":  # noqa: F821
    return cache.path(json.loads(built.files["manifest.json"])["cache_key"])


def test_second_build_is_a_cache_hit(tmp_path):
    cache = Cache(tmp_path / "c")
    first = build_spec(ADD, SMALL, cache=cache)
    second = build_spec(ADD, SMALL, cache=cache)
    assert first.cache_hit is False and second.cache_hit is True
    assert first.files == second.files
    assert set(first.files) == {"launch.json", "plan.json", "kernel.cu", "kernel.ptx", "kernel.cubin", "pallas_kernel.py",
                                "manifest.json"}
    entry = entry_dir(cache, first)
    assert entry.is_dir() and entry.parent.parent == tmp_path / "c"
    index = json.loads((entry / INDEX).read_text())
    for name, sha in index["files"].items():
        assert hashlib.sha256((entry / name).read_bytes()).hexdigest() == sha


def test_plan_change_misses_comment_change_hits(tmp_path):
    cache = Cache(tmp_path / "c")
    base = build_spec(ADD, SMALL, cache=cache)
    assert build_spec(ADD, {"M": 128, "N": 512}, cache=cache).cache_hit is False     # other sizes: other kernel
    commented = tmp_path / "add_bf16.yaml"
    commented.write_text("# a new comment\n" + ADD.read_text().replace("4-stage TMA ring", "ring of 4 stages"))
    again = build_spec(commented, SMALL, cache=cache)
    assert again.cache_hit is True                                   # same plan, same templates, same tools
    m_base, m_again = json.loads(base.files["manifest.json"]), json.loads(again.files["manifest.json"])
    assert m_base["cache_key"] == m_again["cache_key"]
    # ...but the manifest describes the file that was actually built
    assert m_again["spec_sha256"] == hashlib.sha256(commented.read_bytes()).hexdigest() != m_base["spec_sha256"]
    assert m_again["spec_file"] == str(commented)


@pytest.mark.parametrize("damage", ["truncate-cubin", "flip-byte", "delete-cubin", "bad-index"])
def test_corrupted_entry_is_detected_and_rebuilt(tmp_path, damage):
    cache = Cache(tmp_path / "c")
    first = build_spec(ADD, SMALL, cache=cache)
    entry = entry_dir(cache, first)
    cubin = entry / "kernel.cubin"
    if damage == "truncate-cubin":
        cubin.write_bytes(cubin.read_bytes()[:100])
    elif damage == "flip-byte":
        data = bytearray(cubin.read_bytes())
        data[len(data) // 2] ^= 0xFF
        cubin.write_bytes(bytes(data))
    elif damage == "delete-cubin":
        cubin.unlink()
    else:
        (entry / INDEX).write_text("{not json")
    key = json.loads(first.files["manifest.json"])["cache_key"]
    assert cache.get(key) is None                   # detected...
    assert not entry.exists()                       # ...and the bad entry removed
    rebuilt = build_spec(ADD, SMALL, cache=cache)
    assert rebuilt.cache_hit is False
    assert rebuilt.files["kernel.cubin"] == first.files["kernel.cubin"]   # NVRTC is deterministic
    assert cubin.read_bytes() == first.files["kernel.cubin"]             # the entry is whole again
    assert build_spec(ADD, SMALL, cache=cache).cache_hit is True


def test_cache_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "envcache"))
    assert default_root() == tmp_path / "envcache"
    b = build_spec(ADD, SMALL)
    assert b.cache_hit is False
    assert entry_dir(Cache(), b).is_relative_to(tmp_path / "envcache")
    assert build_spec(ADD, SMALL).cache_hit is True


def test_put_leaves_no_temporary_folders(tmp_path):
    cache = Cache(tmp_path)
    cache.put("ab" + "0" * 30, {"a.txt": b"hello"})
    cache.put("ab" + "0" * 30, {"a.txt": b"hello"})     # a second writer of the same key
    assert cache.get("ab" + "0" * 30) == {"a.txt": b"hello"}
    assert [p.name for p in (tmp_path / "ab").iterdir()] == ["ab" + "0" * 30]


# ------------------------------------------------------------------------------------------------ package()

@pytest.fixture
def pkg(tmp_path):
    b = build_spec(ADD, SMALL, cache=Cache(tmp_path / "c"))
    dest = package(b, tmp_path / "out")
    sys.path.insert(0, str(tmp_path / "out"))
    sys.modules.pop("add_bf16", None)
    try:
        yield b, dest, importlib.import_module("add_bf16")
    finally:
        sys.path.remove(str(tmp_path / "out"))
        sys.modules.pop("add_bf16", None)


def test_package_is_importable(pkg):
    b, dest, mod = pkg
    assert dest.name == "add_bf16"
    assert sorted(p.name for p in dest.iterdir()) == sorted(list(b.files) + ["__init__.py"])
    assert not any(p.name.startswith(".") for p in dest.parent.iterdir())     # no leftover temporary folder
    assert callable(mod.add_bf16)
    assert mod.kernel.launch.kernel_name == b.plan.launch.kernel_name == "map_add_bf16_32x256_s4_wg2"
    assert mod.plan["kernel_name"] == b.plan.launch.kernel_name      # plan.json: still in the package, for people and tools
    assert mod.plan["sizes"] == SMALL
    assert [o.name for o in mod.kernel.launch.inputs] == ["x", "y"]
    assert "add_bf16(x, y, *, out=None" in mod.__doc__
    assert repr(mod.kernel) == "<schedgen kernel add_bf16(x: bf16[64, 512], y: bf16[64, 512]) backends=['cuda', 'pallas']>"


def test_manifest_contents(pkg):
    b, dest, _ = pkg
    m = json.loads((dest / "manifest.json").read_text())
    assert m["spec_sha256"] == hashlib.sha256(ADD.read_bytes()).hexdigest()
    assert m["plan_sha256"] == hashlib.sha256((dest / "plan.json").read_bytes()).hexdigest()
    assert m["name"] == "add_bf16" and m["family"] == "map" and m["kernel"] == b.plan.launch.kernel_name
    tools = m["toolchain"]
    assert tools["arch"] == "sm_90a"
    assert tools["jax"] == "0.11.2"
    assert tools["nvrtc"] and tools["nvrtc"].split(".")[0].isdigit()
    assert tools["cuda_bindings"] and tools["schedgen"]
    r = m["resources"]
    assert r["smem_bytes"] == b.plan.launch.smem_bytes and r["threads"] == 256 and r["blocks"] == b.plan.launch.num_blocks == 4
    assert r["stack"] == 0 and r["reg"] > 0


def test_package_replaces_an_existing_folder(tmp_path):
    cache = Cache(tmp_path / "c")
    dest = package(build_spec(ADD, SMALL, cache=cache), tmp_path / "out")
    (dest / "stale.txt").write_text("old")
    dest2 = package(build_spec(ADD, {"M": 128, "N": 512}, cache=cache), tmp_path / "out")
    assert dest2 == dest and not (dest / "stale.txt").exists()
    assert json.loads((dest / "plan.json").read_text())["sizes"] == {"M": 128, "N": 512}


def test_package_pallas_backend_in_interpret_mode(pkg):
    from schedgen.verify import interpret_params
    _, _, mod = pkg
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 512)).astype(mod.kernel.pallas_module()._DTYPES["bf16"])
    y = rng.standard_normal((64, 512)).astype(x.dtype)
    out = mod.kernel._call_pallas((x, y), None, interpret=interpret_params())
    assert isinstance(out, np.ndarray) and out.dtype == x.dtype and out.shape == (64, 512)
    want = (x.astype(np.float32) + y.astype(np.float32)).astype(x.dtype)
    np.testing.assert_array_equal(out, want)


def test_output_folder_wins_over_an_installed_package_of_the_same_name(tmp_path):
    """`schedgen build -o build` then `import build.add_bf16`: pypa's `build` package must not shadow it."""
    import subprocess
    import sys as _sys
    decoy = tmp_path / "site" / "build"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("DECOY = True\n")
    work = tmp_path / "work"
    built = build_spec(str(spec_files()[0]), cache=Cache(tmp_path / "cache"))
    package(built, work / "build")
    code = f"import build.{built.name} as k; print(k.{built.name}.__name__)"
    env = {"PYTHONPATH": f"{tmp_path / 'site'}:{ROOT}", "PATH": "/usr/bin:/bin"}
    res = subprocess.run([_sys.executable, "-c", code], cwd=work, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-1500:]
    assert res.stdout.strip() == built.name


def _build_into(spec: str, cache_root: str, barrier) -> str:
    """Worker: wait for the others, then build; returns the cubin's hash."""
    barrier.wait()
    built = build_spec(spec, cache=Cache(cache_root))
    return hashlib.sha256(built.files["kernel.cubin"]).hexdigest()


def test_concurrent_builds_of_one_spec_do_not_corrupt_the_cache(tmp_path):
    """Four processes build the same spec into one empty cache at the same moment: all succeed with the same
    artifacts, and the entry left behind is whole (its hashes check) with no temporary folders."""
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    spec = str(spec_files()[0])
    with ctx.Manager() as manager:
        barrier = manager.Barrier(4)
        with ctx.Pool(4) as pool:
            hashes = pool.starmap(_build_into, [(spec, str(tmp_path), barrier)] * 4)
    assert len(set(hashes)) == 1
    entries = [p for p in tmp_path.glob("*/*") if p.is_dir()]
    assert len(entries) == 1 and not entries[0].name.startswith(".")
    assert Cache(tmp_path).get(entries[0].name) is not None
