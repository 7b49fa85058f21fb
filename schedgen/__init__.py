"""schedgen: declarative specs -> Hopper GPU kernels (Pallas Mosaic GPU and CUDA C++ with inline PTX)."""
from __future__ import annotations


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("schedgen")
    except PackageNotFoundError:   # run from a checkout on PYTHONPATH, not installed
        return "0+unknown"


__version__ = _version()
