"""Defect group 5 (issue 14): the build cache trusted its metadata.

- File names in an entry's index were joined to the output folder as-is: an index naming `../../x.py` made a build
  read it from outside the entry and `package()` write it outside `-o`.
- Malformed entries crashed the build (RecursionError, TypeError, NotADirectoryError, JSONDecodeError/TypeError in
  build_spec for a manifest that hashes right but is not an object) instead of being a miss, rebuilt and replaced.
- A cache root that is a file, read-only or full gave a traceback instead of an uncached build.
- The key hashed the plan and the .j2 templates only: an edit to a Python renderer served the old kernel.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _specs import ADD
from schedgen import cache as C
from schedgen.build import build_spec, package
from schedgen.cache import INDEX, Cache

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"M": 64, "N": 512}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A cache holding add_bf16's entry, and the files of that build."""
    root = tmp_path_factory.mktemp("refcache")
    built = build_spec(ADD, SMALL, cache=Cache(root))
    key = json.loads(built.files["manifest.json"])["cache_key"]
    return root, key, built


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rewrite_index(entry: Path, fn) -> None:
    index = json.loads((entry / INDEX).read_text())
    fn(index)
    (entry / INDEX).write_text(json.dumps(index))


def _replace_file(entry: Path, name: str, data: bytes) -> None:
    """Change one file and its hash in the index consistently (what a checksum cannot catch)."""
    (entry / name).write_bytes(data)
    _rewrite_index(entry, lambda ix: ix["files"].__setitem__(name, _sha(data)))


def _escape(entry: Path) -> None:
    """An index naming a file two levels up, with the right hash of what is there."""
    evil = entry.parent.parent / "evil.py"
    evil.write_bytes(b"EVIL = 1\n")
    _rewrite_index(entry, lambda ix: ix["files"].__setitem__("../../evil.py", _sha(b"EVIL = 1\n")))


def _entry_is_a_file(entry: Path) -> None:
    shutil.rmtree(entry)
    entry.write_text("not a folder")


def _index_is_a_folder(entry: Path) -> None:
    (entry / INDEX).unlink()
    (entry / INDEX).mkdir()


MALFORMED = {
    "index not JSON": lambda e: (e / INDEX).write_text("{not json"),
    "index not UTF-8": lambda e: (e / INDEX).write_bytes(b"\xff\xfe{}"),
    "index empty": lambda e: (e / INDEX).write_text(""),
    "index a list": lambda e: (e / INDEX).write_text("[]"),
    "index nested 100000 deep": lambda e: (e / INDEX).write_text("[" * 100_000 + "]" * 100_000),
    "files missing": lambda e: _rewrite_index(e, lambda ix: ix.pop("files")),
    "files a list": lambda e: _rewrite_index(e, lambda ix: ix.__setitem__("files", list(ix["files"]))),
    "files null": lambda e: _rewrite_index(e, lambda ix: ix.__setitem__("files", None)),
    "hash a number": lambda e: _rewrite_index(e, lambda ix: ix["files"].__setitem__("kernel.cu", 5)),
    "hash a dict": lambda e: _rewrite_index(e, lambda ix: ix["files"].__setitem__("kernel.cu", {"a": [1]})),
    "key another entry's": lambda e: _rewrite_index(e, lambda ix: ix.__setitem__("key", "0" * 32)),
    "a file dropped from index and entry": lambda e: (
        (e / "kernel.cubin").unlink(), _rewrite_index(e, lambda ix: ix["files"].pop("kernel.cubin"))),
    "an extra plain name": lambda e: _replace_file(e, "extra.txt", b"x"),
    "name with ../": _escape,
    "absolute name": lambda e: _rewrite_index(e, lambda ix: ix["files"].__setitem__("/etc/hostname", "0" * 64)),
    "index is a folder": _index_is_a_folder,
    "entry is a file": _entry_is_a_file,
    "a file is a folder": lambda e: ((e / "kernel.cu").unlink(), (e / "kernel.cu").mkdir()),
    "manifest not JSON (hash updated)": lambda e: _replace_file(e, "manifest.json", b"{oops"),
    "manifest a list (hash updated)": lambda e: _replace_file(e, "manifest.json", b"[1, 2]"),
    "manifest of another key (hash updated)": lambda e: _replace_file(
        e, "manifest.json", json.dumps({"cache_key": "0" * 32, "name": "add_bf16"}).encode()),
    "plan.json another plan (hash updated)": lambda e: _replace_file(e, "plan.json", b"{}"),
    "a file truncated": lambda e: (e / "kernel.cubin").write_bytes((e / "kernel.cubin").read_bytes()[:64]),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_entry_is_a_miss_rebuilt_and_replaced(tmp_path, reference, case):
    ref_root, key, ref = reference
    root = tmp_path / "cache"
    shutil.copytree(ref_root, root)
    cache = Cache(root)
    entry = cache.path(key)
    MALFORMED[case](entry)
    built = build_spec(ADD, SMALL, cache=cache)                 # no exception...
    assert built.cache_hit is False                             # ...a miss...
    assert built.files == ref.files                             # ...rebuilt exactly...
    assert cache.get(key) is not None                           # ...and the entry replaced by a whole one
    assert sorted(p.name for p in entry.iterdir()) == sorted([*ref.files, INDEX])
    assert build_spec(ADD, SMALL, cache=cache).cache_hit is True
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".")], "temporary folders left"
    out = tmp_path / "out"
    dest = package(built, out)
    assert sorted(p.name for p in dest.iterdir()) == sorted([*ref.files, "__init__.py"])
    assert sorted(p.name for p in out.iterdir()) == ["__init__.py", "add_bf16"]
    assert not (tmp_path / "evil.py").exists()


def test_put_and_package_refuse_names_that_are_not_plain(tmp_path, reference):
    for name in ("../x", "a/b", "/abs", "..", ".hidden", "", INDEX, "a\0b"):
        with pytest.raises(ValueError, match="plain"):
            Cache(tmp_path).put("ab" + "0" * 30, {name: b"x"})
    _, _, ref = reference
    bad = type(ref)(ref.spec, ref.source, ref.plan, {**ref.files, "../../escape.py": b"x"}, False)
    with pytest.raises(ValueError, match="plain file names"):
        package(bad, tmp_path / "out")
    assert not (tmp_path / "escape.py").exists()


def _file_root(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    root.write_text("a file")
    return root


def _dangling_root(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    root.symlink_to(tmp_path / "nowhere")
    return root


def _read_only_root(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    root.mkdir()
    if os.geteuid() == 0:      # root writes anyway: a read-only file system says EROFS at the first create
        def refuse(*args, **kwargs):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        monkeypatch.setattr(C, "held_temp", refuse)      # the cache's only, not package's
    else:
        root.chmod(0o555)
    return root


def _full_root(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    written = []

    def full(path, data):
        if written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        written.append(path)
        Path(path).write_bytes(data[: len(data) // 2])
    monkeypatch.setattr(C, "write_new", full)
    return root


BAD_ROOTS = {"a file": _file_root, "a dangling symlink": _dangling_root, "read-only": _read_only_root,
             "full (ENOSPC)": _full_root}


@pytest.mark.parametrize("case", BAD_ROOTS)
def test_an_unusable_cache_root_builds_uncached_with_one_warning(tmp_path, monkeypatch, capsys, reference, case):
    from schedgen import cli
    _, _, ref = reference
    root = BAD_ROOTS[case](tmp_path, monkeypatch)
    monkeypatch.setenv("SCHEDGEN_CACHE", str(root))
    out = tmp_path / "out"
    args = ["build", str(ADD), "-D", "M=64", "-D", "N=512", "-o", str(out)]
    assert cli.main(args) == 0
    assert cli.main(args) == 0                                 # a second build in the same process: no new warning
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("schedgen: warning: cache ") and str(root) in lines[0], lines
    assert "building without the cache" in lines[0]
    assert captured.out.count("built map_add_bf16_32x256_s4_wg2") == 2 and "(cached)" not in captured.out
    assert (out / "add_bf16" / "kernel.cubin").read_bytes() == ref.files["kernel.cubin"]
    if root.is_dir() and not root.is_symlink():
        assert not [p for p in root.rglob("*") if p.name.startswith(".")], "temporary folders left in the cache"


KEY_PROBE = r"""
import json, sys
from pathlib import Path
from schedgen.build import build_spec
from schedgen.cache import Cache
import schedgen
b = build_spec(sys.argv[1], {"M": 64, "N": 512}, cache=Cache(Path(sys.argv[2])))
print(json.dumps([schedgen.__file__, b.cache_hit, json.loads(b.files["manifest.json"])["cache_key"],
                  b.files["kernel.cu"].decode()[-200:]]))
"""


def test_an_edit_to_a_python_renderer_changes_the_key(tmp_path):
    """A copy of schedgen whose renderer (render/__init__.py, no template touched) appends a line to every kernel:
    the copy must miss the cache the unedited copy filled, and its kernel must carry the edit; then the same for an
    edit to one of the copy's templates (templates/, beside the package: outside the package's own tree)."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "schedgen", copy / "schedgen", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "templates", copy / "templates")      # beside the package, as in the checkout
    cache = tmp_path / "cache"

    def probe():
        env = dict(os.environ, PYTHONPATH=str(copy))
        res = subprocess.run([sys.executable, "-c", KEY_PROBE, str(ADD), str(cache)], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        where, hit, key, tail = json.loads(res.stdout.splitlines()[-1])
        assert Path(where).is_relative_to(copy)
        return hit, key, tail

    hit0, key0, _ = probe()
    assert (probe()[:2]) == (True, key0)                        # the copy as it is: a hit
    renderer = copy / "schedgen" / "render" / "__init__.py"
    text = renderer.read_text()
    old = "    return environment().get_template(name).render(**ctx)\n"
    assert old in text
    renderer.write_text(text.replace(old, "    return environment().get_template(name).render(**ctx) + "
                                          "\"// renderer edited\\n\"\n"))
    hit1, key1, tail1 = probe()
    assert key1 != key0 and hit1 is False
    assert tail1.endswith("// renderer edited\n")               # not the stale kernel of the old renderer
    # the templates live beside the package (templates/, not under schedgen/): an edit to one changes the key too
    template = copy / "templates" / "map" / "cuda.cu.j2"
    template.write_text(template.read_text() + "// template edited\n")
    hit2, key2, tail2 = probe()
    assert key2 not in (key0, key1) and hit2 is False
    assert tail2.endswith("// template edited\n// renderer edited\n")   # (the renderer's edit still appends)


def test_tree_hash_covers_py_and_j2_only(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.py").write_text("X = 1\n")
    (tmp_path / "a" / "t.cu.j2").write_text("{{ p }}\n")
    h0 = C.tree_hash(tmp_path)
    (tmp_path / "a" / "notes.md").write_text("irrelevant")
    (tmp_path / "a" / "__pycache__").mkdir()
    (tmp_path / "a" / "__pycache__" / "x.cpython-312.py").write_text("cached")
    assert C.tree_hash(tmp_path) == h0
    (tmp_path / "a" / "t.cu.j2").write_text("{{ p }} \n")
    h1 = C.tree_hash(tmp_path)
    assert h1 != h0
    (tmp_path / "a" / "x.py").rename(tmp_path / "a" / "y.py")          # a renamed module is another tree
    assert C.tree_hash(tmp_path) not in (h0, h1)
