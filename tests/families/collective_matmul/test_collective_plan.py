"""The collective_matmul planner on the CPU: plan numbers, the ring (which chunk each device multiplies at each step
and where it goes next), the copy units and semaphore counts the kernels wait for, and every rejection located at
its field (the mesh, the output's rows, multimem, device-id expressions, semaphores, what the kernels cannot take
from the matmul family's schedule space, and the matmul family's own rules through the step's plan)."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen.cli import main as cli_main
from schedgen.errors import SpecErrors
from schedgen.plan import plan
from schedgen.frontend.validate import load_spec

SPEC = SPECS_DIR.parent / "tests" / "data" / "collective_matmul_base.yaml"   # a frozen copy of the bundled spec
CUDA = {"schedule.backends": ["cuda"]}


def _plan(ov=None, path=SPEC):
    spec, src = load_spec(str(path), ov)
    return plan(spec, src)


def _devices(d: int, direction: str = "left") -> dict:
    sign = "-" if direction == "left" else "+"
    return {"op.mesh.num_devices": d, "M_total": d * 1024,
            "schedule.collective.remote_refs.gather.device_id": f"(x {sign} 1) % {d}"}


def test_plan_numbers_of_the_bundled_spec():
    p = _plan()
    assert (p.num_devices, p.axis_name, p.m, p.m_total, p.n, p.k) == (2, "x", 1024, 2048, 4096, 4096)
    # one step's matmul is the matmul family's plan of [1024, 4096] @ [4096, 4096]
    mm = p.mm
    assert (mm.m, mm.n, mm.k, mm.tiles.tile_m, mm.tiles.tile_n, mm.tiles.tile_k, mm.pipeline.stages, mm.warps.num_consumers) == \
        (1024, 4096, 4096, 128, 256, 64, 4, 2)
    assert (p.tiles_per_step, p.num_tiles, p.launch.num_blocks, p.launch.threads) == (8 * 16, 2 * 8 * 16, 132, 384)
    assert p.launch.smem_bytes == mm.launch.smem_bytes and (p.producer_regs, p.consumer_regs) == (40, 232)
    assert p.flops == 2 * 2048 * 4096 * 4096 and p.link_bytes == 1024 * 4096 * 2
    # the ring: device 0 sends to 1 and receives from 1
    assert (p.send_to, p.recv_from, p.send_offset, p.chunk_step, p.slots) == ((1, 0), (1, 0), -1, 1, 1)
    # copy units: one 8 KiB row each; received counts per 128-row block: 8 counters, 128 units each per launch
    assert (p.copy_rows, p.unit_bytes, p.units_per_step) == (1, 8192, 1024)
    assert (p.received_per, p.counters_per_step, p.units_per_counter) == ("row_block", 8, 128)
    assert (p.flag_words, p.done_index, p.flags_bytes) == (9, 8, 256)
    assert (p.received_signal, p.done_signal, p.pallas_received_value) == ("semaphore_signal", "semaphore_signal", 1)
    # kernel parameters: tensor maps over lhs, the gather buffer, rhs and the gathered output
    tm = {a.what: a for a in p.launch.kernel_args if a.kind == "tmap"}
    assert tm["lhs"].shape == (1024, 4096) and tm["gather"].shape == (1024, 4096)
    assert tm["out"].shape == (2048, 4096) and tm["out"].box == (64, 64) and tm["rhs"].box == (64, 64)
    assert tm["lhs"].box == (128, 64) and tm["lhs"].swizzle == 128 and tm["lhs"].strides == (8192, 2)
    assert [a.what for a in p.launch.kernel_args if a.kind != "tmap"] == [
        "lhs", "gather", "peer_gather", "flags", "peer_flags_send", "peer_flags_recv", "device", "epoch"]
    # the remote ref's device id: its validated tree (with the range it was proved over), spelled at render time
    assert p.device_id == "(x - 1) % 2" and p.device_id.ranges == {"x": (0, 1)}
    from schedgen.render import render
    assert "    send_dev = ((dev - 1) % 2)  " in render(p, "pallas")


@pytest.mark.parametrize("d", [2, 3, 4, 8])
@pytest.mark.parametrize("direction", ["left", "right"])
def test_ring_forwards_each_chunk_to_the_device_that_multiplies_it_next(d, direction):
    p = _plan(_devices(d, direction))
    assert p.slots == d - 1 and p.m_total == d * 1024 and p.launch.kernel_args[1].shape == ((d - 1) * 1024, 4096)
    for dev in range(d):
        assert p.send_to[dev] == (dev + (-1 if direction == "left" else 1)) % d
        assert p.recv_from[p.send_to[dev]] == dev
        chunks = [p.chunk(dev, s) for s in range(d)]
        assert chunks[0] == dev and sorted(chunks) == list(range(d))     # every row of out, its own first
        for s in range(d - 1):                                           # what it forwards at s, the peer uses at s+1
            assert p.chunk(p.send_to[dev], s + 1) == chunks[s]


def test_received_per_chunk_counts_whole_chunks():
    p = _plan({"schedule.collective.semaphores.received.per": "chunk"})
    assert (p.counters_per_step, p.units_per_counter, p.flag_words, p.done_index) == (1, 1024, 2, 1)
    assert p.pallas_received_value == p.launch.num_blocks      # Pallas: every block signals once per step


def test_copy_units_are_whole_rows_of_at_least_4_KiB():
    p = _plan({"K": 256, "schedule.in_specs.a.block_shape": [128, 64]})
    assert (p.copy_rows, p.unit_bytes, p.units_per_step, p.units_per_counter) == (8, 4096, 128, 16)


def test_defaults_without_a_collective_section(tmp_path):
    text = SPEC.read_text()
    text = text[:text.index("  collective:")]
    path = tmp_path / "nocoll.yaml"
    path.write_text(text)
    p = _plan(path=path)
    assert p.send_to == (1, 0) and p.received_per == "row_block" and p.received_signal == "semaphore_signal"
    assert p.done_signal == "semaphore_signal"
    q = _plan({**CUDA, "schedule.collective.semaphores.received.signal": "semaphore_signal_parallel"})
    assert q.received_signal == "semaphore_signal_parallel" and q.done_signal == "semaphore_signal"


MULTICAST = "NVLink multicast is not supported by this release"
REJECT = [
    ({"op.mesh.num_devices": 1, "M_total": 1024, "schedule.collective.remote_refs.gather.device_id": "x"},
     "op.mesh.num_devices", "a collective matmul runs on at least 2 devices, got 1"),
    ({"M_total": 4096}, "op.outputs.out.shape[0]",
     "out has 4096 rows; the all-gather of 2 devices x 1024 lhs rows gives 2048: the output is [num_devices x M, N] "
     "(set op.sizes.M_total: 2048)"),
    ({"schedule.collective.transport": "multimem_store"}, "schedule.collective.transport", MULTICAST),
    ({"schedule.collective.transport": "multimem_store"}, "schedule.collective.transport",
     "rendered and their PTX assembled to SASS in CI only"),
    ({"schedule.collective.transport": "multimem_load_reduce"}, "schedule.collective.transport",
     "it also reduces across devices (a reduce-scatter)"),
    ({"schedule.collective.remote_refs.gather.device_id": "x"}, "schedule.collective.remote_refs.gather.device_id",
     "the all-gather is a ring: each device sends its chunks to a neighbour, device_id (x - 1) % 2 or (x + 1) % 2; "
     "this one sends 0 -> 0, 1 -> 1"),
    ({"schedule.collective.remote_refs.gather.device_id": "x + 1"}, "schedule.collective.remote_refs.gather.device_id",
     "device_id gives 2 on device 1; device ids along 'x' are 0..1"),
    ({"schedule.collective.remote_refs.gather.device_id": "(y - 1) % 2"},
     "schedule.collective.remote_refs.gather.device_id", "unknown name 'y'"),
    ({"schedule.collective.remote_refs.gather.device_id": "x // (x - x)"},
     "schedule.collective.remote_refs.gather.device_id", "division by zero"),
    ({"schedule.collective.remote_refs.gather.device_id": 'x); system("rm -rf /")'},
     "schedule.collective.remote_refs.gather.device_id", ""),
    ({"schedule.collective.remote_refs.peer": {"device_id": "x"}}, "schedule.collective.remote_refs.peer",
     "the collective matmul's remote ref is 'gather'"),
    ({"schedule.collective.semaphores.ready": {}}, "schedule.collective.semaphores.ready",
     "semaphores are 'received' (chunk arrivals, on the receiver) and 'done'"),
    ({"schedule.collective.semaphores.received.per": "launch"}, "schedule.collective.semaphores.received.per",
     "'received' counts per chunk or per row_block, got per: launch"),
    ({"schedule.collective.semaphores.done.per": "row_block"}, "schedule.collective.semaphores.done.per",
     "'done' counts per launch"),
    ({"schedule.collective.semaphores.received.signal": "semaphore_signal_parallel"},
     "schedule.collective.semaphores.received.signal",
     "jax 0.11.2 lowers semaphore_signal_parallel as a relaxed add followed by fence.release.sys"),
    ({"schedule.collective.semaphores.done.signal": "semaphore_signal_parallel"},
     "schedule.collective.semaphores.done.signal", "or set schedule.backends: [cuda]"),
    ({"schedule.cluster": [2, 1]}, "schedule.cluster", "the collective matmul runs without clusters"),
    ({"schedule.persistent.loop": "none"}, "schedule.persistent.loop", "every block must be resident at once"),
    ({"schedule.persistent.num_blocks": 200}, "schedule.persistent.num_blocks", "exceeds the 132 SMs"),
    ({"schedule.epilogue.store": "direct"}, "schedule.epilogue.store", "stores its tiles by TMA"),
    ({"schedule.pipeline.memory_registers": 24, "schedule.pipeline.compute_registers": 240, **CUDA},
     "schedule.pipeline.memory_registers", "it needs at least 40 registers a thread after setmaxnreg, got 24"),
    ({"M": 1000, "M_total": 2000, **CUDA}, "op.sizes", "M = 1000 is not a multiple of tile_m = 128"),
    ({"schedule.in_specs.a.delay_release": 0, "schedule.in_specs.b.delay_release": 0},
     "schedule.in_specs.a.delay_release", "the Pallas collective matmul sends each lhs stage to the peer from SMEM"),
    ({"op.inputs": {"a": {"shape": ["M", "K"], "dtype": "bf16"}, "mesh": {"shape": ["K", "N"], "dtype": "bf16"}},
      "op.rhs": "mesh"}, "op.inputs.mesh", "'mesh' is reserved"),
    ({"op.mesh.axis_name": "M"}, "op.mesh.axis_name", "the mesh axis 'M' is also an operand or size name"),
    ({"op.rhs": "c"}, "op.rhs", "op.rhs names input 'c', which is not among the inputs"),
    ({"op.inputs.b.dtype": "f16"}, "op.inputs.b.dtype", "lhs is bf16 but rhs is f16"),
    # the matmul family's own rules, through the step's plan, at the same fields
    ({"schedule.pipeline.max_concurrent_steps": 6}, "schedule.pipeline.max_concurrent_steps", "SMEM needed is"),
    ({"schedule.in_specs.b.block_shape": [64, 512], "schedule.out_specs.out.block_shape": [128, 512]},
     "schedule.in_specs.b.block_shape", "it must be a multiple of 8 between 8 and 256"),
    ({"schedule.pipeline.kind": "emit_pipeline"}, "schedule.pipeline.kind", "warp-specialized"),
]


@pytest.mark.parametrize("ov, where, needle", REJECT, ids=[f"{i}-{r[1]}" for i, r in enumerate(REJECT)])
def test_rejections_are_located_at_their_field(ov, where, needle):
    with pytest.raises(SpecErrors) as info:
        _plan(ov)
    lines = info.value.lines()
    hits = [ln for ln in lines if f": {where}: " in ln]
    assert hits and any(needle in ln for ln in hits), lines
    for ln in lines:   # FILE:LINE:COL: path: message
        file, line, col, _ = ln.split(":", 3)
        assert file.endswith(SPEC.name) and int(line) >= 1 and int(col) >= 1, ln


def test_all_problems_at_once():
    with pytest.raises(SpecErrors) as info:
        _plan({"schedule.collective.transport": "multimem_store", "schedule.cluster": [2, 1],
               "schedule.collective.semaphores.ready": {}, "schedule.persistent.loop": "none"})
    paths = {ln.split(": ")[1] for ln in info.value.lines()}
    assert {"schedule.collective.transport", "schedule.cluster", "schedule.collective.semaphores.ready",
            "schedule.persistent.loop"} <= paths


def test_multimem_error_points_at_the_transport_line(tmp_path):
    text = SPEC.read_text().replace("transport: remote_ref", "transport: multimem_load_reduce")
    path = tmp_path / "mm.yaml"
    path.write_text(text)
    with pytest.raises(SpecErrors) as info:
        _plan(path=path)
    (line,) = info.value.lines()
    want = next(i for i, ln in enumerate(text.splitlines(), 1) if "transport: multimem_load_reduce" in ln)
    assert line.startswith(f"{path}:{want}:16: schedule.collective.transport: ") and MULTICAST in line


def test_device_id_expression_errors_point_inside_the_string(tmp_path):
    text = SPEC.read_text().replace('device_id: "(x - 1) % 2"', 'device_id: "(x - 1) % z"')
    path = tmp_path / "expr.yaml"
    path.write_text(text)
    with pytest.raises(SpecErrors) as info:
        _plan(path=path)
    (line,) = info.value.lines()
    row, col = (int(v) for v in line.split(":")[1:3])
    assert text.splitlines()[row - 1][col - 1] == "z", line


def test_collective_section_is_rejected_by_single_gpu_families():
    """schedule.collective is the collective matmul schedule's field (issue 42): an unknown key on another op."""
    with pytest.raises(SpecErrors) as info:
        _plan({"schedule.collective": {"transport": "remote_ref"}}, path=SPECS_DIR / "matmul_bf16_4096.yaml")
    (line,) = info.value.lines()
    assert ": schedule.collective: unknown key 'collective': schedule.collective is a collective_matmul field; the " \
           "matmul family's schedule has: " in line, line


def test_cli_validate_reports_and_exits_2(tmp_path, capsys):
    text = SPEC.read_text().replace("num_devices: 2", "num_devices: 1").replace("transport: remote_ref",
                                                                               "transport: multimem_store")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert cli_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    paths = [e.split(": ")[1] for e in err]
    assert paths == ["op.mesh.num_devices", "op.outputs.out.shape[0]", "schedule.collective.transport",
                     "schedule.collective.remote_refs.gather.device_id"], err


def test_schema_says_multimem_cannot_run_here():
    import json
    from conftest import ROOT
    s = json.loads((ROOT / "schemas" / "schedgen.schema.json").read_text())
    transport = s["definitions"]["Collective"]["properties"]["transport"]
    assert transport["enum"] == ["remote_ref", "multimem_store", "multimem_load_reduce"]
    assert "NVLink multicast, which is not supported by this release" in transport["description"]
    assert "are NOT\nSUPPORTED by this release" in s["definitions"]["Collective"]["description"]


def test_explain_names_the_ring_semaphores_and_the_step_plan(capsys):
    from schedgen.explain import explain
    text = explain(_plan())
    assert text.splitlines()[0].endswith("(family collective_matmul, backends: cuda, pallas)")
    assert "ring       device x sends its chunks to ((x - 1) % 2) (remote_refs.gather): 0 -> 1, 1 -> 0" in text
    assert "step s multiplies chunk (x + s) mod 2 into out rows chunk x 1024: device 0: 0, 1; device 1: 1, 0" in text
    assert "received[1 slot x 8] per row_block, semaphore_signal; a step waits until its row block landed" in text
    assert "TMA        out     box [64, 64] swizzle 128 over [2048, 4096]" in text
    assert "wgmma m64n256k16" in text and "tile loop" not in text        # the step's plan, less its own grid
    four = explain(_plan(_devices(4, "right")))
    assert "0 -> 1, 1 -> 2, 2 -> 3, 3 -> 0" in four and "device 0: 0, 3, 2, 1" in four
    assert "gather buffer 24.0 MiB (3 slots)" in four
    assert cli_main(["explain", str(SPEC)]) == 0 and "family collective_matmul" in capsys.readouterr().out


def test_dynamic_m_per_device_is_a_located_error_for_now():
    """This release keeps M per device fixed in the collective: one located line per dynamic size, the rest planned."""
    with pytest.raises(SpecErrors) as info:
        _plan({"M": {"dynamic": True, "max": 1024, "min": 128, "multiple_of": 128}})
    (line,) = info.value.lines()
    assert "op.sizes.M: M must be fixed in this release (M per device" in line
    assert "use the matmul family, which takes dynamic sizes" in line
