"""Time built kernels on the GPU against their peers, side by side in one run, verified first.

Rows follow the benchmark record's format (bench/results/<family>.json): family, spec, backend, kernel, shape,
dtype, time_ms with how it was measured (timing, events_ms / cupti_ms / wall_ms, rounds, block, spread), gbps or
tflops, verified, rel_error, date, env; a family's own fields (matmul: flops, pct_peak of the datasheet peak,
sets, iters); `peers`: for each of the family's peers its time_ms, rate, ratio (peer time / our time: above 1
means ours is faster), ratio_basis, verified, rel_error and a note, or `skipped` with the reason; and the flat
peer / peer_time_ms / ratio fields naming the family's main peer (map: `copy`, matmul: `cublas`); gpu_before and
gpu_after: the SM clock, power limit and draw and temperature read just before and just after the timing
(`environment.gpu_state`, {"error": why} where nothing answers).

The package: `timing` (the one interleaved-rounds timing primitive), `cupti` (kernel time: NVIDIA's cupti-python), `environment` (the machine record), `rows`
(row building, the record file, Markdown), `case` (what peers get and give, our kernels as contenders), `run`
(`bench_built`, looking the family's peers up in its manifest: `schedgen/families/<kind>/peers.py`), `torch_expr`
(a checked body as eager torch ops: the torch peers' function).
"""
from __future__ import annotations

from ..plan.hardware import PEAK_TFLOPS
from .case import Case, Peer
from .environment import environment
from .rows import (RecordError, _markdown_bandwidth, compare, compare_markdown, markdown, markdown_bandwidth,
                   merge_rows, print_skips, read_record, recorded_rows, write_record)
from .run import bench_built, check_at, family_peers, gpu_missing, input_sets
from .timing import (MAX_SETS, Contender, cupti_ms, interleaved, matmul_sets, ratio_of, sets_for,
                     time_jax_fn, time_stream_fn)

_sets_for = sets_for

__all__ = ["PEAK_TFLOPS", "MAX_SETS", "Case", "Contender", "Peer", "RecordError", "bench_built", "check_at", "compare", "compare_markdown", "recorded_rows", "cupti_ms",
           "environment", "family_peers", "gpu_missing", "input_sets", "interleaved", "markdown", "markdown_bandwidth",
           "matmul_sets", "merge_rows", "print_skips", "ratio_of", "read_record", "sets_for", "time_jax_fn", "time_stream_fn",
           "write_record", "_markdown_bandwidth", "_sets_for"]
