"""Every broadcast shape the map family takes lowers through Mosaic GPU for CUDA on the CPU, in both lowering
semantics, and with layout inference held to a few tries (columns.py names one register layout for every value
of a block with a broadcast input, so inference is left only the SMEM refs).

Regression (H200, 2026-12-06): the autodiff's saving forward `h = x * w + b; y = h * h` (f32, b [N] against
[M, N], h and y both written) failed "Layout inference failed to find a solution": inference laid the bias out only
by a search that spent all of its 100000 tries (a single output took 37895 and landed on 1-element vectors). The
interpreter checks no layouts, so the CPU tests passed; lowering for cuda on the CPU shows it.

Each kernel also runs in the Pallas interpreter against float64 (poisoned outputs) at the same shapes, and the
sweep of bundled and edge map specs lowers under the same held-down fuel."""
from __future__ import annotations

import pytest

from conftest import ROOT, lower_map_for_cuda, spec_files
from schedgen.frontend.validate import load_spec
from schedgen.verify import verify_file

jax = pytest.importorskip("jax")

FUEL = 1000        # layout-inference tries (jax's default is 100000); the named layouts take about 10
EDGE = ROOT / "tests" / "data" / "edge"


def _spec(name, inputs, outputs, body, block, semantics="warpgroup", sizes=None, dtype="f32"):
    """A map spec over [M, N] (or [B, M, N]) with one block for every full operand (broadcast ones default)."""
    rank = len(block)
    full = ["B", "M", "N"][-rank:]
    shape = {"full": full, "row": ["N"], "row2": [1, "N"], "col": [*full[:-1], 1],
             "mid": ["B", 1, "N"], "lead": [1, "M", "N"], "col3": [1, "M", 1]}
    sizes = sizes or dict(zip(full, [2, 64, 512][-rank:]))
    return {"name": name, "op": {
        "kind": "map", "sizes": sizes,
        "inputs": {n: {"shape": shape[k], "dtype": dtype} for n, k in inputs.items()},
        "outputs": {n: {"shape": full, "dtype": dtype} for n in outputs},
        "body": body},
        "schedule": {"out_specs": {n: {"block_shape": list(block)} for n in outputs},
                     "backends": ["cuda", "pallas"],
                     "pipeline": {"kind": "emit_pipeline", "max_concurrent_steps": 2},
                     "compiler_params": {"lowering_semantics": semantics}}}


SAVING = ({"x": "full", "w": "full", "b": "row"}, ["y", "h"], "h = x * w + b\ny = h * h")
CASES = {   # name: (inputs by kind, outputs, body, block)
    "saving forward (row bias, two outputs)": (*SAVING, (32, 128)),
    "row bias, h only": ({"x": "full", "w": "full", "b": "row"}, ["h"], "h = x * w + b", (32, 128)),
    "row [1, N] then gelu": ({"x": "full", "b": "row2"}, ["y"], "y = gelu(x + b) * b", (32, 256)),
    "column then more arithmetic, two outputs": ({"x": "full", "s": "col"}, ["y", "z"],
                                                 "t = x * s\ny = t * t\nz = t - s", (32, 128)),
    "a literal scalar": ({"x": "full"}, ["y", "z"], "y = x * 0.5\nz = y * y + 2.0", (32, 128)),
    "row, column and a literal scalar": ({"x": "full", "b": "row", "s": "col"}, ["y", "h"],
                                         "h = x * s + b\ny = h * h + 0.25", (16, 128)),
    "only broadcast inputs": ({"b": "row", "s": "col"}, ["y"], "y = b * s", (32, 128)),
    "3-D: [B, 1, N] and [N]": ({"x": "full", "m": "mid", "b": "row"}, ["y", "h"], "h = x * m + b\ny = exp(h)",
                               (1, 16, 128)),
    "3-D: [1, M, N] and [1, M, 1]": ({"x": "full", "l": "lead", "c": "col3"}, ["y", "h"],
                                     "h = x + l * c\ny = h * h", (1, 16, 128)),
}


def _case(case, semantics, dtype="f32"):
    inputs, outputs, body, block = CASES[case]
    name = "m_" + "".join(ch if ch.isalnum() else "_" for ch in case)[:40].strip("_") + "_" + semantics
    return _spec(name, inputs, outputs, body, block, semantics, dtype=dtype)


def test_saving_forward_lowers(tmp_path):
    """The H200's failure, on the CPU."""
    text = lower_map_for_cuda(_spec("fma_saving", *SAVING, (32, 128)), tmp_path)
    assert "mosaic_gpu" in text


@pytest.mark.parametrize("semantics", ["warpgroup", "lane"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_broadcast_shapes_lower_in_few_tries(case, semantics, tmp_path):
    data = _case(case, semantics)
    assert "mosaic_gpu" in lower_map_for_cuda(data, tmp_path, fuel=FUEL)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_saving_forward_lowers_in_half_precision(dtype, tmp_path):
    data = _spec(f"fma_saving_{dtype}", *SAVING, (32, 256), dtype=dtype)
    assert "mosaic_gpu" in lower_map_for_cuda(data, tmp_path, fuel=FUEL)


@pytest.mark.parametrize("semantics", ["warpgroup", "lane"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_broadcast_shapes_match_float64_in_the_interpreter(case, semantics, tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    import yaml
    data = _case(case, semantics)
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    checks = verify_file(str(path), ["pallas"], interpret=True, small=True, seed=7)
    assert checks and all(c.backend == "pallas" for c in checks)
    for c in checks:
        assert c.ok and c.rel_error <= c.tolerance, c


def test_inference_fuel_is_what_held_the_old_kernel_back(tmp_path, monkeypatch):
    """The cap is not vacuous: the saving forward with the named layout turned off (the kernel the H200 ran) fails
    under it, as it failed under jax's own 100000 tries."""
    from schedgen.families.map import plan as map_plan
    monkeypatch.setattr(map_plan, "plan_columns", lambda *a: None)
    with pytest.raises(ValueError, match="Layout inference failed to find a solution"):
        lower_map_for_cuda(_spec("fma_saving_inferred", *SAVING, (32, 128)), tmp_path, fuel=FUEL)


def _map_files():
    return spec_files("map") + sorted(EDGE.glob("*.yaml"))


@pytest.mark.parametrize("path", _map_files(), ids=lambda p: p.stem)
def test_every_bundled_and_edge_map_spec_lowers_in_few_tries(path, tmp_path):
    """Every bundled map spec and edge spec, on Pallas (added to its backends where it names only cuda)."""
    import tomllib

    import yaml
    data = tomllib.loads(path.read_text()) if path.suffix == ".toml" else yaml.safe_load(path.read_text())
    spec, _ = load_spec(str(path))
    if spec.schedule.backends and "pallas" not in spec.schedule.backends:
        data["schedule"]["backends"] = [*spec.schedule.backends, "pallas"]
    assert "mosaic_gpu" in lower_map_for_cuda(data, tmp_path, fuel=FUEL)


# ------------------------------------------------------------------------------------------------ on the H200

@pytest.mark.gpu
@pytest.mark.parametrize("semantics", ["warpgroup", "lane"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_broadcast_shapes_verify_on_gpu(case, semantics, tmp_path, monkeypatch):
    """What the H200 says of the named layouts (the CPU lowers them, the interpreter runs them; only the GPU runs
    the lowered code): both backends against float64, outputs poisoned."""
    import yaml
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    data = _case(case, semantics)
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    checks = verify_file(str(path), ["cuda", "pallas"], seed=11)
    assert {c.backend for c in checks} == {"cuda", "pallas"}
    assert all(c.ok for c in checks), [(c.backend, c.output, c.shape, c.rel_error, c.tolerance, c.note)
                                       for c in checks if not c.ok]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gelu_bias_bf16", "gelu_bias_bf16_dynamic", "bias_add_bf16_dynamic"])
def test_bundled_bias_specs_verify_on_gpu(name, tmp_path, monkeypatch):
    """The bundled bias rows: the tiled layout (gelu_bias_bf16) and the strided one (dynamic M)."""
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path / "cache"))
    checks = verify_file(str(ROOT / "specs" / f"{name}.yaml"), ["pallas"], seed=5)
    assert checks and all(c.ok for c in checks), [(c.output, c.shape, c.rel_error, c.note) for c in checks]
