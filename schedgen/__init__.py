"""schedgen: declarative specs -> Hopper GPU kernels (Pallas Mosaic GPU and CUDA C++ with inline PTX)."""
from __future__ import annotations


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("schedgen")
    except PackageNotFoundError:   # run from a checkout on PYTHONPATH, not installed
        return "0+unknown"


def __getattr__(name: str):
    """`schedgen.__version__`, read from the installed metadata when first asked (importlib.metadata costs a tenth
    of a second: `schedgen validate` does not pay it)."""
    if name == "__version__":
        globals()["__version__"] = version = _version()
        return version
    raise AttributeError(f"module 'schedgen' has no attribute {name!r}")
