"""Issue 16, section 3: `schedgen bench` reported our causal kernel at 0.27x SDPA at Sq = 1024, Skv = 4096 (GQA),
because its SDPA peer ran torch's top-left mask (`is_causal=True`, 7x less work than our bottom-right one) unchecked,
and the FLOP count halved 4 B H Sq Skv D (1.75x too low for bottom-right). Now the count is exact and every peer
runs our mask or is skipped with the reason."""
from __future__ import annotations

import pytest

from conftest import SPECS_DIR
from schedgen.families.attention import peers
from schedgen.frontend.validate import load_spec
from schedgen.plan import plan

ISSUE_SHAPE = {"op.sizes": {"B": 1, "SQ": 1024, "SKV": 4096, "H": 32, "G": 8, "D": 128}, "op.causal": True,
               "op.inputs.q.shape": ["B", "SQ", "H", "D"], "op.outputs.o.shape": ["B", "SQ", "H", "D"],
               "op.inputs.k.shape": ["B", "SKV", "G", "D"], "op.inputs.v.shape": ["B", "SKV", "G", "D"]}


def _plan():
    return plan(*load_spec(str(SPECS_DIR / "attention_bf16_4096.yaml"), ISSUE_SHAPE))


def test_causal_flops_are_the_unmasked_pairs():
    p = _plan()
    assert p.flops == 4 * 128 * 32 * (1024 * 3072 + 1024 * 1025 // 2)
    assert p.flops != 4 * 32 * 1024 * 4096 * 128 // 2


def test_peers_get_our_bottom_right_mask():
    torch = pytest.importorskip("torch")
    p = _plan()
    labels = [label for label, _ in peers.sdpa_masks(torch, p, "cpu")]
    assert labels and all("bottom-right" in label for label in labels), labels
    fn, note = peers.jax_attention_peer(p)
    assert fn is None and "top-left" in note and "bottom-right" in note
