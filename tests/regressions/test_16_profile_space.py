"""compiler_params.profile_space was broken on the Pallas backend (issue 16).

Before: a spec with profile_space rendered `plgpu.CompilerParams(profile_space=N)` without a profile_dir, which jax
0.11.2 refuses ("Either both profile_space and profile_dir must be set, or neither"), so the kernel never lowered;
the tests only read the rendered text. Now `compiler_params.profile_dir` says where the trace goes (made when the
kernel is built), the pair is checked (both or neither, Pallas only: the CUDA backend has no in-kernel profiler in
this release), and the path reaches the generated code as a Python literal, never as raw text.
"""
from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from conftest import SPECS_DIR, without_warpgroups
from schedgen.build import build_spec, package
from schedgen.cache import Cache
from schedgen.errors import SpecErrors
from schedgen.render import render
from schedgen.runtime.arrays import DTYPES
from schedgen.runtime.kernel import load_package

CASES = {
    # 3 stages: the profiler's buffers (256 ranges x 16 B x 3 warpgroups) take the fourth stage's SMEM
    "matmul": (SPECS_DIR / "matmul_bf16_4096.yaml", {"M": 256, "N": 256, "K": 256,
                                                     "schedule.pipeline.max_concurrent_steps": 3}),
    "map": (SPECS_DIR / "gelu_bias_bf16.yaml", {"M": 64, "N": 512}),
}


def _profiled(tmp_path, case, where):
    path, sizes = CASES[case]
    path = without_warpgroups(path, tmp_path)       # (the CUDA kernel's: an error in a Pallas-only spec)
    return build_spec(str(path), {**sizes, "schedule.backends": ["pallas"],
                                  "schedule.compiler_params.profile_space": 256,
                                  "schedule.compiler_params.profile_dir": str(where)},
                      cache=Cache(tmp_path / "cache"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_profiled_kernel_is_made_with_its_directory(case, tmp_path):
    """The module's make() builds plgpu.CompilerParams (jax refused profile_space alone there) and the directory.
    (Lowering it needs a GPU jax: the trace is dumped by a host callback, which a CPU-only jax cannot lower for
    cuda; the GPU test below runs it.)"""
    where = tmp_path / "traces" / "it's here"           # a quote in the path: it stays data
    built = _profiled(tmp_path, case, where)
    src = render(built.plan, "pallas")
    assert f"profile_dir=_profile_dir({str(where)!r})" in src and "profile_space=256" in src
    kernel = load_package(package(built, tmp_path / "out"))
    assert callable(kernel._pallas.module().make())
    assert where.is_dir()                              # made when the kernel was built


def test_the_profiler_buffer_counts_in_the_smem_check(tmp_path):
    path, sizes = CASES["matmul"]
    with pytest.raises(SpecErrors) as exc:              # 4 stages of 128x256x64 and the profiler's 12 KiB
        build_spec(str(path), {**sizes, "schedule.pipeline.max_concurrent_steps": 4, "schedule.backends": ["pallas"],
                               "schedule.compiler_params.profile_space": 256,
                               "schedule.compiler_params.profile_dir": "p"}, cache=Cache(tmp_path / "c"))
    text = exc.value.render()
    assert "schedule.pipeline.max_concurrent_steps" in text and "profile 12288 B" in text
    assert "at most 3 stages fit this tile beside the profiler's 12288 B" in text


def test_the_pair_and_the_backend_are_checked(tmp_path):
    path, sizes = CASES["matmul"]
    cases = {
        "space without a directory": ({"schedule.backends": ["pallas"], "schedule.compiler_params.profile_space": 64},
                                      "schedule.compiler_params.profile_space", "needs compiler_params.profile_dir"),
        "a directory without space": ({"schedule.compiler_params.profile_dir": "p"},
                                      "schedule.compiler_params.profile_dir", "has no effect without"),
        "the cuda backend": ({"schedule.compiler_params.profile_space": 64, "schedule.compiler_params.profile_dir": "p"},
                             "schedule.compiler_params.profile_space", "the CUDA backend has none in this release"),
    }
    for what, (extra, field, message) in cases.items():
        with pytest.raises(SpecErrors) as exc:
            build_spec(str(path), {**sizes, **extra}, cache=Cache(tmp_path / "c"))
        text = exc.value.render()
        assert field in text and message in text, (what, text)


def test_a_control_character_in_the_directory_is_refused(tmp_path):
    path, sizes = CASES["map"]
    with pytest.raises(SpecErrors) as exc:
        build_spec(str(path), {**sizes, "schedule.backends": ["pallas"], "schedule.compiler_params.profile_space": 8,
                               "schedule.compiler_params.profile_dir": "a\nb"}, cache=Cache(tmp_path / "c"))
    assert "profile_dir" in exc.value.render()


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_profiled_kernel_writes_a_trace_on_the_gpu(case, tmp_path):
    where = tmp_path / "traces"
    built = _profiled(tmp_path, case, where)
    kernel = load_package(package(built, tmp_path / "out"))
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(tuple(o.shape)).astype(DTYPES[o.dtype]) for o in kernel.inputs]
    jax.block_until_ready(kernel(*[jax.numpy.asarray(a) for a in ins], backend="pallas"))
    traces = sorted(where.glob("*-trace.json"))
    assert traces, f"no trace in {where}: {list(where.iterdir())}"
    events = json.loads(traces[0].read_text())
    assert events.get("traceEvents"), list(events)
