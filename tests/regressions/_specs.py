"""Specs the regression tests share (not a test module)."""
from __future__ import annotations

from pathlib import Path

SPECS_DIR = Path(__file__).resolve().parents[2] / "specs"
ADD = SPECS_DIR / "add_bf16.yaml"
MM_TUNE = SPECS_DIR / "matmul_bf16_4096_tune.yaml"


def add_with_tune(tmp_path: Path, tune: str, name: str = "add_tune.yaml") -> Path:
    """add_bf16 (at a small shape) with the given text as its tune section."""
    path = tmp_path / name
    path.write_text(ADD.read_text().replace("sizes: {M: 4096, N: 4096}", "sizes: {M: 1024, N: 4096}") + tune)
    return path


def matmul_with_tune(tmp_path: Path, tune: str, name: str = "mm_tune.yaml") -> Path:
    """matmul_bf16_4096_tune with its tune section replaced by the given text."""
    path = tmp_path / name
    path.write_text(MM_TUNE.read_text().split("\ntune:")[0] + "\n" + tune)
    return path
