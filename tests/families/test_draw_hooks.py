"""Every family's `explain --draw` hooks (families/<kind>/draw.py): the traversal covers the grid once in the
kernel's order and a bounded one is its prefix; the pipeline's spans sit on its rows; a family without hooks is
refused by name."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR, spec_files
from schedgen import draw, families
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan


def _plans():
    for path in spec_files():
        spec, src = load_spec(str(path))
        if families.of(spec).draw is not None:
            yield pytest.param(path, id=path.stem)


@pytest.mark.parametrize("path", list(_plans()))
def test_traversal_and_pipeline_hooks(path):
    spec, src = load_spec(str(path))
    p = plan(spec, src)
    hooks = families.of(p).draw
    tv = hooks.traversal(p, draw.MAX_TILES)
    assert not tv.sampled and tv.total == len(tv.tiles) == tv.rows * tv.cols
    assert len({(t.row, t.col) for t in tv.tiles}) == tv.total           # every tile once
    orders = [t.order for t in tv.tiles]
    assert orders == sorted(orders) and len(set(orders)) == tv.units     # in the kernel's order, units counted
    assert {t.block for t in tv.tiles} <= set(range(tv.blocks))
    part = hooks.traversal(p, 100)                                       # bounded: the first tiles, same order
    assert part.sampled and part.total == tv.total and 100 - 4 <= len(part.tiles) <= 100
    assert part.tiles == tv.tiles[:len(part.tiles)]
    pl = hooks.pipeline(p)
    assert pl.spans and {s.row for s in pl.spans} <= set(pl.rows) and all(s.end >= s.start for s in pl.spans)
    assert hooks.summary(p)[0] == f"kernel {p.launch.kernel_name}" and hooks.guide(p).startswith("How to read it:")


def test_a_family_without_hooks_is_refused_by_name(tmp_path):
    spec, src = load_spec(str(SPECS_DIR / "collective_matmul_bf16_1024x4096.yaml"))
    p = plan(spec, src)
    drawn = [f.kind for f in families.all_families() if f.draw is not None]
    assert len(drawn) >= 2
    with pytest.raises(draw.DrawError, match=f"--draw knows the {', '.join(drawn[:-1])} and {drawn[-1]} families; "
                                             f"this plan is {p.launch.family}"):
        draw.draw(p, tmp_path / "x.png")
    assert not list(tmp_path.iterdir())


def test_a_cta_a_tile_attention_is_coloured_by_sm_slot():
    # The colour bar of a non-persistent attention grid says "SM slot ... (index mod 132)", but every tile from
    # the 133rd on was given block = its index and drawn in the colour bar's top colour.
    spec, src = load_spec(str(SPECS_DIR / "attention_bf16_4096.yaml"))
    p = plan(spec, src)
    assert not p.persistent and p.num_tiles > 2 * draw.SM_COUNT
    tv = families.of(p).draw.traversal(p, draw.MAX_TILES)
    assert tv.blocks == draw.SM_COUNT and "index mod 132" in tv.colorbar
    assert [t.block for t in tv.tiles] == [t.order % draw.SM_COUNT for t in tv.tiles]
    assert [t.wave for t in tv.tiles] == [t.order // draw.SM_COUNT for t in tv.tiles]


def test_sm100a_drawings_use_the_b200_and_the_tcgen05_roles():
    """issue 20: an sm_100a plan's tile view counts the B200's 148 SM slots (not the H200's 132), and the reading
    guide and pipeline title name the TMA warp / MMA thread or warp and tcgen05.commit, not Hopper's consumers."""
    from schedgen.plan.hardware import B200
    spec, src = load_spec(str(SPECS_DIR / "attention_bf16_4096_sm100_pallas.yaml"))
    p = plan(spec, src)
    hooks = families.of(p).draw
    assert not p.persistent and p.num_tiles > 2 * B200.sm_count
    tv = hooks.traversal(p, draw.MAX_TILES)
    assert tv.blocks == B200.sm_count == 148 and "index mod 148" in tv.colorbar
    assert [t.block for t in tv.tiles] == [t.order % 148 for t in tv.tiles]
    assert [t.wave for t in tv.tiles] == [t.order // 148 for t in tv.tiles]
    text = hooks.guide(p)
    assert "tcgen05.commit" in text and "MMA warp" in text and "consumer" not in text, text
    pl = hooks.pipeline(p)
    assert "the MMA warp issues" in pl.title and "consumer" not in pl.title
    assert pl.legend[0]["label"].startswith("tcgen05.mma")
    for name in ("matmul_bf16_4096_sm100.yaml", "matmul_bf16_4096_sm100_pallas.yaml"):
        spec, src = load_spec(str(SPECS_DIR / name))
        p = plan(spec, src)
        text = families.of(p).draw.guide(p)
        assert "tcgen05.commit" in text and "MMA thread" in text and "consumer" not in text, (name, text)


def test_sm90a_guides_keep_the_hopper_roles():
    for name in ("attention_bf16_4096.yaml", "matmul_bf16_4096.yaml"):
        spec, src = load_spec(str(SPECS_DIR / name))
        p = plan(spec, src)
        text = families.of(p).draw.guide(p)
        assert "consumer" in text and "tcgen05" not in text, (name, text)
