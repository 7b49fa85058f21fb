"""cluster_m moves the shared operand's collective_axes with the cluster (issue 17): a 1-CTA point of a written
multicast schedule plans; a knob on the field itself wins."""
from __future__ import annotations

from conftest import SPECS_DIR
from schedgen import tune as T


WRITTEN_CLUSTER = """schedule:
  cluster: [2, 1]
  in_specs:
    a: {block_shape: [128, 64], delay_release: 1}
    b: {block_shape: [64, 256], delay_release: 1, collective_axes: [cluster]}
  out_specs:
    out: {block_shape: [128, 256]}
tune:
  params:
    cluster_m: [1, 2]
"""


def test_cluster_m_of_a_written_multicast_schedule(tmp_path):
    """Regression: a written rhs collective_axes made every cluster_m = 1 point a plan error ("only the operand the
    cluster's CTAs share is multicast ...; this launch has no cluster")."""
    path = tmp_path / "mm.yaml"
    path.write_text((SPECS_DIR / "matmul_bf16_4096.yaml").read_text().split("schedule:")[0] + WRITTEN_CLUSTER)
    pruning = T.prune(T.load_space(path))
    assert not pruning.groups and sorted(c.plan.cluster_m for c in pruning.kept) == [1, 2]


def test_a_knob_on_collective_axes_itself_wins_over_cluster_m(tmp_path):
    path = tmp_path / "mm.yaml"
    path.write_text((SPECS_DIR / "matmul_bf16_4096.yaml").read_text().split("schedule:")[0] + WRITTEN_CLUSTER
                    + "    'schedule.in_specs.b.collective_axes[0]': [cluster]\n")
    space = T.load_space(path)
    cluster_m = next(k for k in space.knobs if k.name == "cluster_m")
    assert [str(t) for t in cluster_m.targets] == ["schedule.cluster[0]"]
    cands = list(T.expand(space))
    assert len(cands) == 2 and all(c.overrides["schedule.in_specs.b.collective_axes"] == ["cluster"] for c in cands)


def test_a_following_field_is_hashable_and_never_shared(tmp_path):
    path = tmp_path / "mm.yaml"
    path.write_text((SPECS_DIR / "matmul_bf16_4096.yaml").read_text().split("schedule:")[0] + WRITTEN_CLUSTER)
    cluster_m = next(k for k in T.load_space(path).knobs if k.name == "cluster_m")
    follows = [t for t in cluster_m.targets if t.follows]
    assert [str(t) for t in follows] == ["schedule.in_specs.b.collective_axes"] and len(set(cluster_m.targets)) == 2
    first = follows[0].value_for(2)[1]
    first.append("x")
    assert follows[0].value_for(2) == (True, ["cluster"]) and follows[0].value_for(3) == (False, None)
    assert follows[0].value_for(True) == (False, None)          # true is not 1
