"""What the benchmark report needs of the rowwise family (its rows carry their GB/s)."""
from __future__ import annotations

from ...registry import ReportHooks

REPORT = ReportHooks(order=3, marker="D", legend="rowwise (softmax, norms)",
                     series_labels={"torch": "torch's own op (softmax, layer_norm, rms_norm, logsumexp, cross_entropy)",
                                    "torch_compile": "torch.compile of the same function"},
                     title="Rowwise (softmax, norms, cross-entropy) bandwidth per spec, against a device copy of the "
                           "same bytes")
