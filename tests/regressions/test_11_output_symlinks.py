"""Defect group 11, first half (issue 14): symlinks in the build output were followed.

`package()` wrote `OUT/__init__.py` with a plain write when it did not `exist()`: a dangling symlink there does not
exist, so its target (anywhere) was created. A symlink at `OUT/<name>` (to a folder or dangling) or at the fixed
staging name `OUT/.<name>.tmp` made it crash (rmtree refuses a symlink; a folder cannot be renamed onto one).
Now nothing in the output is written through: files are created with O_EXCL in a fresh staging folder and swapped
in; a symlink at `OUT/<name>` or `OUT/__init__.py` is replaced (its target left as it was). OUT itself may be a
symlink to a folder (the package goes there); OUT as a dangling symlink is an error, and nothing is created.
"""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from _specs import ADD
from schedgen.build import build_spec, package
from schedgen.cache import Cache


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_spec(ADD, {"M": 64, "N": 512}, cache=Cache(tmp_path_factory.mktemp("cache")))


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.py").write_text("KEEP = 1\n")
    return outside


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _importable(dest: Path, built) -> None:
    assert dest.is_dir() and not dest.is_symlink()
    assert sorted(p.name for p in dest.iterdir()) == sorted([*built.files, "__init__.py"])
    assert not any(p.is_symlink() for p in dest.iterdir())
    spec = importlib.util.spec_from_file_location(f"add_bf16_{abs(hash(str(dest)))}", dest / "__init__.py",
                                                  submodule_search_locations=[str(dest)])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert callable(mod.add_bf16)


CASES = {
    # where the symlink is (relative to OUT), and what it points at (relative to tmp_path)
    "dangling OUT/__init__.py": ("__init__.py", "outside/created_by_build.py"),
    "OUT/__init__.py to a file": ("__init__.py", "outside/victim.py"),
    "dangling OUT/<name>/__init__.py": ("add_bf16/__init__.py", "outside/created_by_build.py"),
    "OUT/<name>/kernel.cu to a file": ("add_bf16/kernel.cu", "outside/victim.py"),
    "OUT/<name> to a folder": ("add_bf16", "outside"),
    "dangling OUT/<name>": ("add_bf16", "outside/nothing_here"),
    "OUT/.<name>.tmp to a folder": (".add_bf16.tmp", "outside"),
    "dangling OUT/.<name>.tmp": (".add_bf16.tmp", "outside/nothing_here"),
}


@pytest.mark.parametrize("case", CASES)
def test_symlinks_in_the_output_are_replaced_not_followed(tmp_path, built, case):
    link, target = CASES[case]
    outside = _outside(tmp_path)
    before = _snapshot(outside)
    out = tmp_path / "out"
    package(built, out)                         # an earlier build is there
    path = out / link
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    path.symlink_to(tmp_path / target)
    dest = package(built, out)
    assert dest == out / "add_bf16"
    assert _snapshot(outside) == before, "the build wrote through a symlink"
    assert not (outside / "created_by_build.py").exists() and not (outside / "nothing_here").exists()
    _importable(dest, built)
    init = out / "__init__.py"
    assert init.is_file() and not init.is_symlink()


def test_out_may_be_a_symlink_to_a_folder(tmp_path, built):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real, target_is_directory=True)
    dest = package(built, tmp_path / "out")
    assert (tmp_path / "out").is_symlink()                  # OUT itself is left a symlink...
    _importable(real / "add_bf16", built)                   # ...and the package is in the folder it names
    assert dest == tmp_path / "out" / "add_bf16"


def test_out_as_a_dangling_symlink_is_an_error_and_creates_nothing(tmp_path, built):
    (tmp_path / "out").symlink_to(tmp_path / "missing")
    with pytest.raises(NotADirectoryError, match="not a folder .a symlink to nothing"):
        package(built, tmp_path / "out")
    assert not (tmp_path / "missing").exists()


def test_out_as_a_file_is_an_error(tmp_path, built):
    (tmp_path / "out").write_text("mine")
    with pytest.raises(NotADirectoryError, match="the output is not a folder"):
        package(built, tmp_path / "out")
    assert (tmp_path / "out").read_text() == "mine"
