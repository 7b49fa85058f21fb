"""What the benchmark report needs of the map family (its rows carry their GB/s, so no traffic formula)."""
from __future__ import annotations

from ...registry import ReportHooks

REPORT = ReportHooks(order=2, marker="s", legend="map (elementwise)", always_in_legend=True, unlabelled_rows=True,
                     series_labels={"torch_eager": "torch's eager op on the same tensors"},
                     title="Elementwise (map) bandwidth per spec and shape, against a device copy of the same bytes")
