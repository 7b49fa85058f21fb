"""The host side of the multi-device family on the CPU: which peer's buffer each kernel argument points into (and that
the order matches the CUDA kernel's parameters), the tensor maps against the driver's rules, the ring simulated in
numpy against the float64 reference, the reference itself, the generated package's argument checks, and verify /
the CLI saying 'not run' (SKIP, exit 0) where the GPUs or the interpreter cannot run it."""
from __future__ import annotations

import importlib
import os
import re
import sys

import numpy as np
import pytest

from conftest import ROOT, SPECS_DIR
from schedgen.runtime import multidevice as md
from schedgen.build import build_spec, package
from schedgen.cli import main as cli_main
from schedgen.plan import plan
from schedgen.reference import Sampled, random_inputs, reference, rel_error
from schedgen.render import render
from schedgen.frontend.validate import load_spec
from schedgen.families.collective_matmul.verify import INTERPRET_NO_COLLECTIVES
from schedgen.verify import small_overrides, verify_built

BASE = ROOT / "tests" / "data" / "collective_matmul_base.yaml"
BUNDLED = SPECS_DIR / "collective_matmul_bf16_1024x4096.yaml"
SMALL = {"M": 128, "M_total": 256, "N": 256, "K": 128}


def _spec(ov=None):
    spec, src = load_spec(str(BASE), ov)
    return spec, plan(spec, src)


def _ring(d, sign):
    return {"op.mesh.num_devices": d, "M_total": d * 1024,
            "schedule.collective.remote_refs.gather.device_id": f"(x {sign} 1) % {d}"}


def _fake_pointers(p, stride=1 << 32):
    """Distinct, aligned fake addresses: buffer b of ring position d at (d + 1) * stride + index(b) * 2**28."""
    return {(buf, d): (d + 1) * stride + i * (1 << 28) for d in range(p.num_devices)
            for i, buf in enumerate(("lhs", "rhs", "out", "gather", "flags"))}


@pytest.mark.parametrize("d, sign", [(2, "-"), (4, "+"), (4, "-"), (8, "+")])
def test_each_argument_points_into_the_right_device(d, sign):
    _, p = _spec(_ring(d, sign))
    ptrs = _fake_pointers(p)
    for dev in range(d):
        lay = md.arg_layout(p, dev, ptrs, epoch=7)
        by = {a.what: a for a in lay if a.kind != "tmap"}
        tm = {a.what: a for a in lay if a.kind == "tmap"}
        assert all(a.device == dev for a in tm.values())                       # tensor maps: own buffers
        assert tm["gather"].value == ptrs[("gather", dev)] and tm["out"].value == ptrs[("out", dev)]
        assert by["lhs"].value == ptrs[("lhs", dev)] and by["gather"].value == ptrs[("gather", dev)]
        assert by["flags"].value == ptrs[("flags", dev)]
        assert by["peer_gather"].value == ptrs[("gather", p.send_to[dev])]      # chunks go to the ring neighbour
        assert by["peer_flags_send"].value == ptrs[("flags", p.send_to[dev])]  # ... and so do its arrivals
        assert by["peer_flags_recv"].value == ptrs[("flags", p.recv_from[dev])]   # done goes back to the sender
        assert (by["device"].value, by["epoch"].value) == (dev, 7)
        md.validate_layout(lay)                                               # the driver's tensor-map rules


def test_argument_order_is_the_cuda_kernels():
    """The plan's kernel_args (what multidevice packs) in the order of the rendered kernel's parameters."""
    _, p = _spec()
    cu = render(p, "cuda")
    sig = re.search(re.escape(p.launch.kernel_name) + r"\((.*?)\)\s*\{", cu, re.S).group(1)
    params = [re.split(r"[\s*]+", x.strip())[-1] for x in sig.split(",")]
    names = {("tmap", "lhs"): "tm_lhs", ("tmap", "gather"): "tm_gather", ("tmap", "rhs"): "tm_b",
             ("tmap", "out"): "tm_out", ("ptr", "lhs"): "lhs_ptr", ("ptr", "gather"): "gather_ptr",
             ("ptr", "peer_gather"): "peer_gather", ("ptr", "flags"): "flags",
             ("ptr", "peer_flags_send"): "peer_flags_send", ("ptr", "peer_flags_recv"): "peer_flags_recv",
             ("u32", "device"): "dev", ("u32", "epoch"): "epoch"}
    assert params == [names[(a.kind, a.what)] for a in p.launch.kernel_args]
    kinds = [re.search(r"SgTensorMap|uint8_t\*|uint32_t\*|uint32_t", x).group(0) for x in sig.split(",")]
    assert [{"SgTensorMap": "tmap", "uint8_t*": "ptr", "uint32_t*": "ptr", "uint32_t": "u32"}[k] for k in kinds] == \
        [a.kind for a in p.launch.kernel_args]


def test_layout_rejects_bad_pointers_and_epochs():
    _, p = _spec()
    ptrs = _fake_pointers(p)
    with pytest.raises(ValueError, match="epoch"):
        md.arg_layout(p, 0, ptrs, epoch=0)
    with pytest.raises(ValueError, match="not on the ring"):
        md.arg_layout(p, 2, ptrs, epoch=1)
    with pytest.raises(KeyError, match="gather of ring position 1"):
        md.arg_layout(p, 0, {k: v for k, v in ptrs.items() if k != ("gather", 1)}, epoch=1)
    bad = dict(ptrs)
    bad[("lhs", 0)] += 8
    with pytest.raises(ValueError, match="16-byte aligned"):
        md.validate_layout(md.arg_layout(p, 0, bad, epoch=1))


def test_launch_json_drives_the_same_layout(tmp_path):
    """The host works from launch.json (a package's launch record): the same arguments, grid and buffers as from the
    plan object; plan.json (the whole plan) is refused as a record."""
    import json
    from schedgen.plan import to_json
    from schedgen.plan.launch import LaunchRecordError, launch_record
    _, p = _spec()
    ptrs = _fake_pointers(p)
    (tmp_path / "launch.json").write_text(launch_record(p).to_json())
    rec = md.load_launch(tmp_path)
    assert md.arg_layout(rec, 1, ptrs, 3) == md.arg_layout(p, 1, ptrs, 3)
    assert md.arg_layout(json.loads(launch_record(p).to_json()), 0, ptrs, 3) == md.arg_layout(p, 0, ptrs, 3)
    assert md.grid_blocks(rec, 114) == md.grid_blocks(p, 114) and md.buffer_bytes(rec) == md.buffer_bytes(p)
    assert md.peers(rec, 1) == md.peers(p, 1) and md.flops(rec) == md.flops(p)
    with pytest.raises(LaunchRecordError, match="version: missing"):
        md.arg_layout(json.loads(to_json(p)), 1, ptrs, 3)
    (tmp_path / "plan.json").write_text(to_json(p))
    (tmp_path / "launch.json").unlink()
    with pytest.raises(LaunchRecordError, match=r"launch\.json: missing"):
        md.load_launch(tmp_path)


def test_one_gpu_record_is_refused_by_the_ring_host(tmp_path):
    from schedgen.plan.launch import launch_record
    spec, src = load_spec(str(SPECS_DIR / "add_bf16.yaml"))
    (tmp_path / "launch.json").write_text(launch_record(plan(spec, src)).to_json())
    with pytest.raises(ValueError, match="one-GPU kernel"):
        md.load_launch(tmp_path)
    with pytest.raises(ValueError, match="one-GPU kernel"):
        md.grid_blocks(plan(spec, src), 132)


@pytest.mark.parametrize("d, sign", [(2, "-"), (3, "+"), (4, "-")])
def test_ring_simulated_in_numpy_gives_the_reference(d, sign):
    """Each device's kernel as the templates schedule it: at step s it multiplies chunk(dev, s), read from its own lhs
    (s = 0) or from gather slot s - 1, which the device that sends to it filled at its step s - 1 with what it was
    multiplying then; out rows chunk x M. All devices' outs must be the float64 reference's."""
    spec, p = _spec({**_ring(d, sign), "M": 128, "M_total": 128 * d, "N": 256, "K": 64})
    inputs = random_inputs(spec, p.sizes, seed=3)
    a, b = (np.asarray(inputs[n], np.float64) for n in ("a", "b"))
    gather = np.full((d, max(d - 1, 1), p.m, p.k), np.nan)
    source = {}
    for s in range(d):                       # steps run in lockstep here; the semaphores order them on the GPUs
        for dev in range(d):
            src = a[dev] if s == 0 else gather[dev, s - 1]
            source[(dev, s)] = src
            if s < d - 1:                    # forwarded to the neighbour's slot s
                gather[p.send_to[dev], s] = src
    out = np.full((d, p.m_total, p.n), np.nan)
    for dev in range(d):
        for s in range(d):
            c = p.chunk(dev, s)
            out[dev, c * p.m:(c + 1) * p.m] = source[(dev, s)] @ b[dev]
    ref = reference(spec, p.sizes, inputs, sample=False)["out"]
    assert rel_error(out, ref) < 1e-12


def test_reference_gathers_in_device_order_and_samples_consistently():
    spec, p = _spec(SMALL)
    inputs = random_inputs(spec, p.sizes, seed=0)
    assert inputs["a"].shape == (2, 128, 128) and inputs["b"].shape == (2, 128, 256)
    full = reference(spec, p.sizes, inputs, sample=False)["out"]
    a, b = (np.asarray(inputs[n], np.float64) for n in ("a", "b"))
    assert full.shape == (2, 256, 256)
    np.testing.assert_allclose(full[1], np.concatenate([a[0], a[1]]) @ b[1])
    samp = reference(spec, p.sizes, inputs, sample=True, seed=5)["out"]
    assert isinstance(samp, Sampled) and samp.shape == (2, 256, 256)
    assert rel_error(full, samp) == 0.0
    swapped = np.concatenate([full[:, 128:], full[:, :128]], axis=1)       # the chunks in the wrong order
    assert rel_error(swapped, samp) > 0.5
    poisoned = full.copy()
    poisoned[1, 3, 7] = np.nan
    assert rel_error(poisoned, samp) == np.inf


def test_stack_shards_checks_count_shape_and_dtype():
    spec, p = _spec(SMALL)
    inputs = random_inputs(spec, p.sizes, seed=0)
    assert md.stack_shards(p, "a", list(inputs["a"])).shape == (2, 128, 128)
    with pytest.raises(ValueError, match="needs 2 per-device arrays"):
        md.stack_shards(p, "a", [inputs["a"][0]])
    with pytest.raises(ValueError, match=r"a\[1\] must be bf16 \[128, 128\], got float32"):
        md.stack_shards(p, "a", [inputs["a"][0], inputs["a"][1].astype(np.float32)])
    with pytest.raises(ValueError, match="no operand named"):
        md.stack_shards(p, "z", [])


def test_grid_and_buffers():
    _, p = _spec()
    assert md.grid_blocks(p, 132) == 132 and md.grid_blocks(p, 114) == 114      # auto: the SMs of this GPU
    _, q = _spec({"schedule.persistent.num_blocks": 100})
    assert md.grid_blocks(q, 132) == 100
    with pytest.raises(ValueError, match="resident"):
        md.grid_blocks(q, 64)
    assert md.buffer_bytes(p) == {"lhs": 1024 * 4096 * 2, "rhs": 4096 * 4096 * 2, "out": 2048 * 4096 * 2,
                                  "gather": 1024 * 4096 * 2, "flags": 256}


def test_env_keeps_multicast_off(monkeypatch):
    env = md.apply_env({"NCCL_NVLS_ENABLE": "1"})
    assert env == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def test_ipc_handles_round_trip_through_bytes():
    raw = bytes(range(64))
    assert md.ipc_handle_bytes(md.ipc_handle_from(raw)) == raw
    with pytest.raises(ValueError, match="64 bytes"):
        md.ipc_handle_from(b"x" * 63)


def test_small_overrides_plan():
    built = build_spec(str(BUNDLED))
    ov = small_overrides(built)
    assert ov == {"M": 256, "K": 128, "N": 512, "M_total": 512}
    assert build_spec(str(BUNDLED), ov).plan.m_total == 512


def test_verify_without_gpus_says_not_run(tmp_path):
    from schedgen.runtime.driver import available
    if available()[0] and md.gpu_count() >= 2:
        pytest.skip("GPUs present: bench/multi_gpu.py and the gpu tests run it")
    built = build_spec(str(BASE), SMALL)
    checks = verify_built(built, ["cuda", "pallas"], interpret=True)
    assert [(c.backend, c.skipped, c.ok) for c in checks] == [("cuda", True, False), ("pallas", True, False)]
    assert checks[0].note.startswith("not run: needs 2 GPUs") and checks[1].note == f"not run: {INTERPRET_NO_COLLECTIVES}"


def test_cli_verify_prints_skip_and_exits_0(capsys):
    from schedgen.runtime.driver import available
    if available()[0] and md.gpu_count() >= 2:
        pytest.skip("GPUs present")
    assert cli_main(["verify", "--timeout", "0", "--interpret", str(BUNDLED)]) == 4    # all SKIP: nothing verified
    out = capsys.readouterr().out
    assert re.search(r"collective_matmul_bf16_1024x4096\s+pallas .* SKIP  not run: Mosaic GPU interpret mode", out), out
    with pytest.raises(SystemExit) as info:                      # a usage error, like the CLI's others
        cli_main(["bench", str(BUNDLED)])
    assert info.value.code == 2
    assert "runs on 2 GPUs and is timed by bench/multi_gpu.py" in capsys.readouterr().err


def test_generated_package_checks_its_arguments(tmp_path):
    built = build_spec(str(BASE), SMALL)
    dest = package(built, tmp_path / "pkgs")
    sys.path.insert(0, str(tmp_path / "pkgs"))
    try:
        mod = importlib.import_module(built.name)
        fn = getattr(mod, built.name)
        assert mod._launch == md.load_launch(dest) and (dest / "kernel.cubin").exists()
        assert mod._launch.family == "collective_matmul" and mod._launch.ring.num_devices == 2
        assert mod.plan["family"] == "collective_matmul"          # plan.json: still there for people and tools
        assert os.environ["NCCL_NVLS_ENABLE"] == "0"
        spec, p = _spec(SMALL)
        x = random_inputs(spec, p.sizes, seed=1)
        with pytest.raises(ValueError, match="needs 2 per-device arrays"):
            fn(list(x["a"])[:1], list(x["b"]))
        with pytest.raises(ValueError, match="backend must be"):
            fn(list(x["a"]), list(x["b"]), backend="tpu")
        from schedgen.runtime.driver import available
        if not (available()[0] and md.gpu_count() >= 2):
            with pytest.raises(RuntimeError, match="needs 2 GPUs"):
                fn(list(x["a"]), list(x["b"]))
        assert "pallas()" in (mod.__doc__ or "") and callable(mod.pallas().run_shards)
    finally:
        sys.path.remove(str(tmp_path / "pkgs"))
        sys.modules.pop(built.name, None)


def test_verify_runs_the_built_cubin_twice_where_gpus_can(monkeypatch):
    """The CUDA check calls run_cuda with this build's cubin and two launches (the second reuses the gather buffers
    and semaphores); GPUs faked here, so what it returns is only compared, not computed."""
    built = build_spec(str(BASE), SMALL)
    calls = []

    def fake_run_cuda(p, cubin, inputs, devices=None, launches=1):
        calls.append((p, cubin, sorted(inputs), devices, launches))
        return np.zeros((p.num_devices, p.m_total, p.n), np.float32)

    monkeypatch.setattr(md, "can_run", lambda plan, devices=None: (True, ""))
    monkeypatch.setattr(md, "run_cuda", fake_run_cuda)
    (check,) = verify_built(built, ["cuda"])
    assert calls == [(built.plan, built.files["kernel.cubin"], sorted(i.name for i in built.plan.inputs), None, 2)]
    assert check.backend == "cuda" and not check.skipped and not check.ok and check.rel_error > check.tolerance
