"""What an installed schedgen says about itself: its version (CLI and module) and the truth of its extras."""
from __future__ import annotations

import subprocess
import sys
import tomllib

from conftest import ROOT

import schedgen


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_version_is_the_installed_distribution_version():
    from importlib.metadata import version
    assert schedgen.__version__ == version("schedgen") == _project()["version"]


def test_cli_prints_its_version():
    out = subprocess.run([sys.executable, "-m", "schedgen", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"schedgen {schedgen.__version__}"


def test_extras_tell_the_truth():
    proj = _project()
    extras = proj["optional-dependencies"]
    # the Pallas backend on a GPU machine: jax with its CUDA 13 plugin, and the CUPTI binding the benchmarks' kernel
    # time reads (its CUDA major version the plugin's); CPU-only jax is its own extra
    assert extras["pallas"] == ["jax[cuda13]==0.11.2", "cupti-python>=13.0,<14"]
    assert "jax==0.11.2" in extras["pallas-cpu"] and not any("cuda" in x for x in extras["pallas-cpu"])
    # jax 0.11.2 needs 3.12, and 3.12 is what is built and tested
    assert proj["requires-python"] == ">=3.12"
