"""Plan-level properties: tile orders, the SMEM map, TMA transaction bytes, explain, index-map checks, and
out-of-bounds handling."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, SPECS_DIR, small_legal, spec_files
from schedgen.errors import SpecErrors
from schedgen.explain import explain
from schedgen.plan import plan, to_dict
from schedgen.plan.common import SmemMap, cdiv, planar_snake, tile_index
from schedgen.plan.hardware import H200
from schedgen.frontend.validate import load_spec
from schedgen.render import environment

# jax's docstring of plgpu.planar_snake: shape (8, 8), minor_dim=0, tile_width=2; entry [r][c] is the linear
# index visiting grid point (r, c).
JAX_DOC_TABLE = [
    [0, 2, 4, 6, 8, 10, 12, 14],
    [1, 3, 5, 7, 9, 11, 13, 15],
    [30, 28, 26, 24, 22, 20, 18, 16],
    [31, 29, 27, 25, 23, 21, 19, 17],
    [32, 34, 36, 38, 40, 42, 44, 46],
    [33, 35, 37, 39, 41, 43, 45, 47],
    [62, 60, 58, 56, 54, 52, 50, 48],
    [63, 61, 59, 57, 55, 53, 51, 49],
]


def _plan_file(path, overrides=None):
    spec, src = load_spec(str(path), overrides)
    return plan(spec, src)


def test_planar_snake_matches_jax_docstring_table():
    got = np.full((8, 8), -1)
    for lin in range(64):
        r, c = planar_snake(lin, (8, 8), minor_dim=0, tile_width=2)
        got[r, c] = lin
    assert got.tolist() == JAX_DOC_TABLE


@pytest.mark.parametrize("shape,minor_dim,tile_width", [
    ((8, 8), 0, 2), ((8, 8), 1, 2), ((7, 5), 0, 2), ((7, 5), 1, 2), ((6, 9), 1, 4), ((9, 6), 0, 4),
    ((5, 7), 1, 3), ((10, 3), 0, 3), ((4, 4), 0, 8), ((64, 32), 1, 4), ((1, 5), 1, 2), ((3, 11), 1, 1),
])
def test_planar_snake_matches_jax_implementation(shape, minor_dim, tile_width):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax.experimental.pallas import mosaic_gpu as plgpu
    n = shape[0] * shape[1]
    theirs = jax.jit(jax.vmap(lambda t: jnp.stack(plgpu.planar_snake(t, shape, minor_dim, tile_width))))(
        jnp.arange(n, dtype=jnp.int32))
    ours = [planar_snake(lin, shape, minor_dim, tile_width) for lin in range(n)]
    assert [tuple(map(int, row)) for row in np.asarray(theirs)] == ours
    assert sorted(ours) == [(r, c) for r in range(shape[0]) for c in range(shape[1])]   # a bijection


def test_tile_index_row_major_and_snake_dispatch():
    grid = (3, 4, 5)
    assert [tile_index(t, grid, "row_major", 0, 1) for t in range(60)] == \
        [(a, b, c) for a in range(3) for b in range(4) for c in range(5)]
    assert tile_index(17, (6, 9), "planar_snake", 1, 4) == planar_snake(17, (6, 9), 1, 4)


# ------------------------------------------------------------------------------------------------- SMEM map

@pytest.mark.parametrize("path", spec_files("map"), ids=lambda p: p.stem)
def test_smem_map_aligned_and_disjoint(path):
    p = _plan_file(path)
    spans = []
    by_name = {b.name: b for b in p.smem_buffers}
    for o in p.operands:
        buf = o.smem
        assert by_name[buf.name] == buf
        align = 1024 if o.tma.swizzle else 128
        assert buf.offset % align == 0, (buf.name, buf.offset)
        assert buf.bytes % align == 0 and buf.bytes >= o.block_bytes
        assert buf.count == (p.stages if o.role == "in" else 2)
    assert p.full_barrier.offset % 8 == 0 and p.full_barrier.count == p.stages and p.full_barrier.bytes == 8
    for b in p.smem_buffers:
        spans.append((b.offset, b.offset + b.bytes * b.count, b.name))
    spans.sort()
    for (s0, e0, n0), (s1, e1, n1) in zip(spans, spans[1:]):
        assert e0 <= s1, f"{n0} [{s0}, {e0}) overlaps {n1} [{s1}, {e1})"
    assert p.launch.smem_bytes == spans[-1][1] + 1024 <= H200.smem_per_block


def test_smem_map_allocator_alignment():
    m = SmemMap()
    a = m.alloc("a", 100, 1, align=128)
    b = m.alloc("b", 2048, 2, align=1024)
    c = m.alloc("c", 8, 3, align=8)
    assert (a.offset, b.offset, c.offset) == (0, 1024, 5120) and m.top == 5144


@pytest.mark.parametrize("path", spec_files("map"), ids=lambda p: p.stem)
def test_tx_bytes_is_sum_of_input_boxes(path):
    p = _plan_file(path)
    assert p.tx_bytes == sum(o.tma.box_bytes * o.tma.n_boxes for o in p.inputs)
    # the boxes tile each block exactly, so this is also the bytes of one stage of input blocks
    assert p.tx_bytes == sum(o.block_bytes for o in p.inputs)
    for o in p.operands:
        assert all(b <= 256 for b in o.tma.box)
        assert (o.tma.box[-1] * o.itemsize) % 16 == 0
        if o.tma.swizzle:
            assert o.tma.box[-1] * o.itemsize == o.tma.swizzle


def test_swizzled_plan_details():
    p = _plan_file(SPECS_DIR / "add_bf16_swizzled.yaml")
    x = p.inputs[0]
    assert x.tma.swizzle == 128 and x.tma.box == (64, 64) and x.tma.n_boxes == 2 and x.tiling == (8, 64)
    assert p.tile_order == "planar_snake" and p.grid == (64, 32) and p.minor_dim == 1 and p.tile_width == 4
    assert p.launch.num_blocks == 132 and p.launch.threads == 128


def _index_map_py(p, o) -> tuple[str, ...]:
    """An operand's index map as the Pallas template spells it (filters spelled, pyint)."""
    f = environment().filters
    names = f["spelled"](p.index_roles, grid="g_{}", size=p.sizes)
    return tuple(f["pyint"](e, names) for e in o.block_index)


def _index_map_cxx(p, o) -> tuple[str, ...]:
    """An operand's index map as the CUDA template spells it (filters spelled, cxxint)."""
    f = environment().filters
    names = f["spelled"](p.index_roles, grid="g_{}", size="S_{}")
    return tuple(f["cxxint"](e, names) for e in o.block_index)


def test_broadcast_operand_plan():
    p = _plan_file(SPECS_DIR / "gelu_bias_bf16.yaml")
    b = {o.name: o for o in p.inputs}["b"]
    assert b.block == (256,) and b.tma_dims == (-1, 0) and b.block_index == ("j",) and _index_map_py(p, b) == ("g_j",)
    assert b.tma_shape == (1, 4096) and b.tma.box == (1, 256)   # a vector is one row of a 2-D tensor map
    assert b.row_strides == (0,)          # every row of the tile reads the same bias row
    assert b.minor_bcast is False and p.body_roles["h"] == "temporary"


# --------------------------------------------------------------------------------------------------- explain

def test_explain_mentions_grid_and_smem_total():
    p = _plan_file(SPECS_DIR / "add_bf16.yaml")
    text = explain(p)
    assert "  grid       128 x 16 tiles of 32 x 256 (2048 tiles; grid names i, j; order row_major)" in text
    assert f"SMEM map ({p.launch.smem_bytes} B incl. 1 KiB alignment slack)" in text
    assert f"full[4] (mbarrier, 1 arrival + {p.tx_bytes} B of TMA transactions per stage)" in text


def test_explain_cli(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", "schedgen", "explain", str(SPECS_DIR / "add_bf16_swizzled.yaml"),
                          "-D", "M=1024"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    p = _plan_file(SPECS_DIR / "add_bf16_swizzled.yaml", {"M": 1024})
    assert "grid       16 x 32 tiles of 64 x 128 (512 tiles; grid names i, j; order planar_snake, minor_dim 1, " \
           "tile_width 4)" in res.stdout
    assert f"SMEM map ({p.launch.smem_bytes} B incl. 1 KiB alignment slack)" in res.stdout
    res = subprocess.run([sys.executable, "-m", "schedgen", "explain", "--json", str(SPECS_DIR / "scale_f32.toml")],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    import json
    assert json.loads(res.stdout) == json.loads(json.dumps(to_dict(_plan_file(SPECS_DIR / "scale_f32.toml"))))


# -------------------------------------------------------------------------------------- index-map consistency

SQUARE = (ROOT / "tests" / "data" / "add_bf16.yaml").read_text()   # frozen copy: line numbers below refer to it


def _errors(tmp_path, text, overrides=None):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecErrors) as info:
        _plan_file(path, overrides)
    return [line[len(str(path)):] for line in info.value.lines()]


def test_transposed_index_map_rejected_even_on_square_grid(tmp_path):
    # block 32 x 32 on a 4096 x 4096 array: a 128 x 128 grid, where (j, i) is in bounds everywhere
    text = SQUARE.replace("[32, 256]", "[32, 32]").replace(
        'y: {block_shape: [32, 32], index_map: "(i, j)"}', 'y: {block_shape: [32, 32], index_map: "(j, i)"}')
    assert _errors(tmp_path, text) == [
        ":17:43: schedule.in_specs.y.index_map: index_map (j, i) sends grid point (0, 1) to block (1, 0) of 'y', but "
        "the elementwise body reads block (0, 1) there (numpy broadcasting of the output block)"]


def test_index_map_arithmetic_that_agrees_is_accepted(tmp_path):
    text = SQUARE.replace('x: {block_shape: [32, 256], index_map: "(i, j)"}',
                          'x: {block_shape: [32, 256], index_map: "(i + 0, (j * 2) // 2)"}')
    path = tmp_path / "ok.yaml"
    path.write_text(text)
    p = _plan_file(path)
    assert p.inputs[0].block_index == ("i + 0", "j * 2 // 2")     # the plan: validated trees, as canonical text
    assert _index_map_py(p, p.inputs[0]) == ("(g_i + 0)", "((g_j * 2) // 2)")
    assert _index_map_cxx(p, p.inputs[0]) == ("(g_i + 0)", "sg_floordiv((g_j * 2), 2)")


def _eval_c_int(text: str, env: dict) -> int:
    """Evaluate a rendered C++ int expression with C semantics ('/' truncates toward zero, '%' follows it)."""
    import ast

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return int(node.value)
        if isinstance(node, ast.Name):
            return env[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
            if isinstance(node.op, ast.Div):
                return q
            if isinstance(node.op, ast.Mod):
                return a - q * b
        if isinstance(node, ast.Call) and node.func.id in ("sg_floordiv", "sg_floormod"):
            # the helpers of templates/common/common.cuh.j2, written with C's truncating '/' and '%'
            a, b = (ev(x) for x in node.args)
            q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
            m = a - q * b
            if node.func.id == "sg_floordiv":
                return q - 1 if m != 0 and ((a < 0) != (b < 0)) else q
            return m + b if m != 0 and ((m < 0) != (b < 0)) else m
        raise AssertionError(f"unexpected C++ syntax in {text!r}")
    return ev(ast.parse(text, mode="eval"))


def _cxx_map_agrees(p, operand) -> bool:
    env_sizes = {f"S_{k}": v for k, v in p.sizes.items()}
    import itertools
    for point in itertools.product(*(range(g) for g in p.grid)):
        env = dict(zip(p.grid_vars, point)) | env_sizes
        py = tuple(eval(e, {}, dict(zip(p.grid_vars, point))) for e in _index_map_py(p, operand))
        cxx = tuple(_eval_c_int(e, env) for e in _index_map_cxx(p, operand))
        if py != cxx:
            return False
    return True


@pytest.mark.parametrize("path", spec_files("map"), ids=lambda p: p.stem)
def test_cxx_index_maps_agree_with_python(path):
    sizes = load_spec(str(path))[0].op.sizes
    fixed = {k: v for k, v in {"M": 256, "N": 1024, "B": 2}.items() if k in sizes}
    fixed |= {k: small_legal(v) for k, v in sizes.items() if not isinstance(v, int) and k not in fixed}
    p = _plan_file(path, fixed)
    assert all(_cxx_map_agrees(p, o) for o in p.operands)


def test_cxx_index_map_with_negative_intermediate(tmp_path):
    text = SQUARE.replace('x: {block_shape: [32, 256], index_map: "(i, j)"}',
                          'x: {block_shape: [32, 256], index_map: "((i * 2 - 1) // 2 + 1, j)"}')
    path = tmp_path / "neg.yaml"
    path.write_text(text)
    p = _plan_file(path, {"M": 128, "N": 512})      # accepted: in Python semantics the map is (i, j)
    assert _cxx_map_agrees(p, p.inputs[0])


def test_off_by_one_index_map_rejected(tmp_path):
    text = SQUARE.replace('x: {block_shape: [32, 256], index_map: "(i, j)"}',
                          'x: {block_shape: [32, 256], index_map: "(i, (j + 1) % 16)"}')
    lines = _errors(tmp_path, text)
    assert lines == [":16:44: schedule.in_specs.x.index_map: index_map (i, (j + 1) % 16) sends grid point (0, 0) to "
                     "block (0, 1) of 'x', but the elementwise body reads block (0, 0) there (numpy broadcasting of the "
                     "output block)"]


# ----------------------------------------------------------------------------------------------- out_of_bounds

OOB = SQUARE.replace('index_map: "(i, j)"}', 'index_map: "(i, j)", out_of_bounds: zero}')


def test_out_of_bounds_zero_allows_non_divisible_shapes(tmp_path):
    path = tmp_path / "add_bf16.yaml"
    path.write_text(OOB)
    p = _plan_file(path, {"M": 4100, "N": 1000})
    assert p.grid == (cdiv(4100, 32), cdiv(1000, 256)) == (129, 4)
    assert p.num_tiles == 516
    assert all(o.oob_fill == "zero" and o.tma_shape == (4100, 1000) for o in p.operands)
    assert p.bytes_moved == 3 * 4100 * 1000 * 2


def test_out_of_bounds_nan_fill(tmp_path):
    """NaN fill is the CUDA kernel's (its input tensor maps); outputs are stored, never filled (issue 16: nan on an
    output, and nan with the Pallas backend, changed nothing and are located errors)."""
    path = tmp_path / "add_bf16.yaml"
    path.write_text(OOB.replace("out_of_bounds: zero", "out_of_bounds: nan")   # inputs nan, the output zero
                    .replace('o: {block_shape: [32, 256], index_map: "(i, j)", out_of_bounds: nan}',
                             'o: {block_shape: [32, 256], index_map: "(i, j)", out_of_bounds: zero}'))
    p = _plan_file(path, {"M": 100, "schedule.backends": ["cuda"]})
    assert [o.oob_fill for o in p.operands] == ["nan", "nan", "zero"]
    assert [a.oob_nan for a in p.launch.kernel_args] == [True, True, False]
    lines = _errors(tmp_path, path.read_text(), {"M": 100, "schedule.backends": ["cuda", "pallas"]})
    assert sum("the Pallas map kernel's TMA loads pad a partial block with zeros" in line for line in lines) == 2
    lines = _errors(tmp_path, OOB.replace("out_of_bounds: zero", "out_of_bounds: nan"),
                    {"M": 100, "schedule.backends": ["cuda"]})
    assert [line.split(": ")[1] for line in lines] == ["schedule.out_specs.o.out_of_bounds"], lines
    assert "an output block is stored, never loaded" in lines[0]


def test_rows_not_16B_apart_rejected_even_with_oob_zero(tmp_path):
    # N = 1001 bf16 elements: rows 2002 B apart, which TMA cannot address
    lines = _errors(tmp_path, OOB, {"N": 1001})
    assert ":8:16: op.inputs.x.shape: rows of 'x' along dimension 0 are 2002 B apart; TMA needs a multiple of 16 B " \
           "(pad the minor dimension to a multiple of 8 elements)" in lines


def test_out_of_bounds_zero_runs_in_interpreter(tmp_path):
    pytest.importorskip("jax")
    from schedgen.build import build_spec
    from schedgen.cache import Cache
    from schedgen.verify import verify_built
    path = tmp_path / "add_bf16.yaml"
    path.write_text(OOB)
    built = build_spec(path, {"M": 48, "N": 512}, cache=Cache(tmp_path / "c"))
    assert built.plan.grid == (2, 2)
    (check,) = verify_built(built, ["pallas"], interpret=True, seed=5)
    assert check.ok and check.note == "interpreted, no races", check
