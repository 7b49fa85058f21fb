"""The attention backward with dynamic sizes: one package for every batch and sequence length its spec allows
(training with variable batch and sequence sizes). On the CPU: the planner's rules (located errors), the CUDA kernel
taking the sizes as arguments (NVRTC, SASS), the Pallas kernels of one module interpreted at two sizes against
float64, and an attention spec with dynamic sizes and a `backward:` section building its backward step. On the GPU
(`-m gpu`): `verify` of the CUDA and Pallas kernels at several sizes of one package, and torch autograd at two
sequence lengths through one attention package."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from conftest import SPECS_DIR, opcodes
from schedgen.build import build_spec
from schedgen.errors import SpecErrors
from schedgen.frontend.validate import load_spec
from schedgen.reference import rel_error, tolerance
from schedgen.toolchain.nvrtc import resource_usage, sass
from schedgen.families.attention_backward.reference import attention_backward_reference, random_inputs

SPEC = SPECS_DIR / "attention_backward_bf16_4096.yaml"
DYN_BS = {"op.sizes": {"B": {"dynamic": True, "max": 4}, "S": {"dynamic": True, "max": 4096, "min": 64,
                                                               "multiple_of": 64}, "H": 2, "D": 64},
          "schedule.in_specs.q.block_shape": [64, 64], "schedule.in_specs.k.block_shape": [64, 64]}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCHEDGEN_CACHE", str(tmp_path_factory.getbasetemp() / "schedgen-cache"))


def _plan(ov):
    from schedgen.plan import plan
    spec, src = load_spec(str(SPEC), ov)
    return plan(spec, src)


def test_the_plan_keeps_the_sizes_dynamic():
    p = _plan({**DYN_BS, "op.causal": True})
    assert [r.name for r in p.launch.dynamic_sizes] == ["B", "S"]
    assert p.causal_offset == 0 and p.group == 1
    assert [a.kind for a in p.launch.kernel_args] == ["ptr"] * 9 + ["i32", "i32"]
    from schedgen.plan import dims as X
    # the grid at a call: (S / 64) x H x B dK/dV blocks, then as many dQ blocks
    assert X.evaluate(p.launch.num_blocks, {"B": 3, "S": 640}) == 2 * (10 * 2 * 3)
    assert p.flops == 10 * 64 * (4096 * 4097 // 2) * 2 * 4          # at the largest sizes


ERRORS = {
    "ragged_multiple": ({"op.sizes.S": {"dynamic": True, "max": 4096, "multiple_of": 32}}, "op.sizes.S",
                        "must be a multiple of 64 at every call"),
    "dynamic_head_dim": ({"op.sizes.D": {"dynamic": True, "max": 128, "multiple_of": 64}}, "op.sizes.D",
                         "head_dim (D) cannot be dynamic"),
    "dynamic_grouped_heads": ({"op.sizes": {"B": 1, "S": 256, "H": {"dynamic": True, "max": 8}, "G": 2, "D": 64},
                               **{f"op.{g}.{n}.shape": ["B", "S", "G", "D"] for g, n in
                                  (("inputs", "k"), ("inputs", "v"), ("outputs", "dk"), ("outputs", "dv"))}},
                              "op.sizes.H", "may be dynamic only as the one size of both q and kv heads"),
    "bottom_right_two_lengths": ({"op.sizes": {"B": 1, "SQ": {"dynamic": True, "max": 1024, "multiple_of": 64},
                                               "SKV": {"dynamic": True, "max": 1024, "multiple_of": 64}, "H": 1,
                                               "D": 128},
                                  **{f"op.inputs.{n}.shape": ["B", "SQ", "H", "D"] for n in ("q", "fwd_o", "grad_o")},
                                  **{f"op.inputs.{n}.shape": ["B", "SKV", "H", "D"] for n in ("k", "v")},
                                  "op.inputs.lse.shape": ["B", "H", "SQ"], "op.outputs.dq.shape": ["B", "SQ", "H", "D"],
                                  "op.outputs.dk.shape": ["B", "SKV", "H", "D"],
                                  "op.outputs.dv.shape": ["B", "SKV", "H", "D"], "op.causal": True},
                                 "op.causal", "takes one size for Sq and Skv"),
}


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_located_errors(case):
    ov, path, text = ERRORS[case]
    with pytest.raises(SpecErrors) as exc:
        _plan(ov)
    msg = str(exc.value)
    assert path in msg and text in msg, msg


def test_cuda_kernel_takes_the_sizes_as_arguments():
    b = build_spec(str(SPEC), {**DYN_BS, "op.causal": True, "schedule.backends": ["cuda"]})
    src = b.files["kernel.cu"].decode()
    assert "int sz_B, int sz_S)" in src and "if (blockIdx.x < (((sz_S / 64) * 2) * sz_B))" in src
    ops = opcodes(sass(b.files["kernel.cubin"]))
    assert "HMMA.16816.F32.BF16" in ops and "LDSM.16.MT88.4" in ops
    u = resource_usage(b.files["kernel.cubin"])[b.plan.launch.kernel_name]
    # the runtime strides cost a few bytes of stack at the register limit: said at the dynamic size, bounded here
    assert u["REG"] <= 255 and u["STACK"] <= 32
    assert all("op.sizes.B" in w for w in b.warnings)


def _module(built, folder):
    path = folder / "pallas_kernel.py"
    path.write_bytes(built.files["pallas_kernel.py"])
    name = f"_test_attn_bwd_dyn_{abs(hash(str(folder)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("causal", [False, True], ids=["plain", "causal"])
def test_one_pallas_module_serves_two_sizes(tmp_path, causal):
    """One rendered module, interpreted at (B, S) = (1, 128) and (2, 192): each against float64."""
    pytest.importorskip("jax")
    import jax.numpy as jnp

    from schedgen.verify import interpret_params, races_found
    built = build_spec(str(SPEC), {**DYN_BS, "op.causal": causal, "schedule.backends": ["pallas"]})
    mod = _module(built, tmp_path)
    plan = built.plan
    for sizes in ({"B": 1, "S": 128, "H": 2, "D": 64}, {"B": 2, "S": 192, "H": 2, "D": 64}):
        ins = random_inputs(built.spec, sizes, np.random.default_rng(0))
        arrays = [jnp.asarray(ins[o.name]) for o in plan.inputs]
        shapes = [(sizes["B"], sizes["S"], 2, 64)] * 3
        outs = mod.run_into(arrays, [jnp.full(s, jnp.nan, jnp.bfloat16) for s in shapes], interpret=interpret_params())
        ref = attention_backward_reference(built.spec, sizes, ins)
        for o, out in zip(plan.outputs, outs):
            out = np.asarray(out)
            assert out.shape == shapes[0]
            assert rel_error(out, ref[o.name]) <= tolerance(o.dtype, plan.approx_math), (sizes, o.name)
    assert races_found() is False


def test_an_attention_spec_with_dynamic_sizes_builds_its_backward(tmp_path):
    """The bundled dynamic attention spec with `backward: {}`: its backward step is one package with the same
    dynamic sizes (before, a located error asked for fixed sizes)."""
    path = tmp_path / "attn_dyn_train.yaml"
    path.write_text((SPECS_DIR / "attention_bf16_dynamic.yaml").read_text() + "backward: {}\n")
    b = build_spec(str(path))
    step = b.backward.steps["attention_bwd"].plan
    assert [(r.name, r.max, r.multiple_of) for r in step.launch.dynamic_sizes] == [("B", 64, 1), ("S", 32768, 128)]
    assert "cuda" in step.launch.backends and step.block_q == 64


# ------------------------------------------------------------------------------ on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "pallas"])
def test_one_package_verifies_at_several_sizes_on_gpu(backend):
    from schedgen.verify import verify_file
    checks = verify_file(str(SPEC), [backend], {**DYN_BS, "op.causal": True}, seed=0, sizes=3)
    assert len(checks) >= 3 and all(c.ok and not c.skipped for c in checks), [c.row() for c in checks if not c.ok]


def test_the_accumulation_depth_of_a_dynamic_plan_is_evaluated_per_call():
    """Regression (found on the H200, 2026-12-06): verify's tolerance asked the family for its accumulation depth
    with `max(seq_q, seq_kv)` of two symbolic sizes ("'>' not supported between instances of 'Dim' and 'Dim'"), so
    verifying a dynamic-size backward failed before any kernel ran."""
    from schedgen.verify import _depth
    plan = build_spec(str(SPEC), {**DYN_BS, "op.causal": True}).plan
    assert _depth(plan, {"B": 2, "S": 384, "H": 16, "D": 128}) == 384
    assert _depth(plan, {"B": 1, "S": 1024, "H": 16, "D": 128}) == 1024
