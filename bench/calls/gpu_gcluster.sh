#!/usr/bin/env bash
# The grouped matmul's 2-CTA cluster (schedule.cluster [1, 2], issue 18) on the H200: the family's GPU tests of the
# cluster variants (float64, poisoned outputs, skewed counts with empty groups; the full-size verify of the
# bundled specs is left to the test file: minutes of host-side weights), then bench/grouped_cluster.py: both builds
# of the Mixtral-like (T 8k, 32k) and DeepSeek-like (T 16k) specs timed interleaved against torch._grouped_mm and a
# cuBLAS loop. Run from the repo root after `. .devkit/activate`:
#     bash bench/calls/gpu_gcluster.sh          # writes $OUT/gcluster/ (OUT defaults to ./out): tests.log, gcluster.json
# At most 120 s: 45 for the tests, 75 for the builds and the timing.
set -u
O=${OUT:-out}/gcluster
mkdir -p "$O"
SECONDS=0
timeout 45 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/grouped_matmul/test_grouped_gpu.py \
  -k "cluster and not bundled" > "$O/tests.log" 2>&1
echo "gpu tests (cluster): $(tail -1 "$O/tests.log")  (${SECONDS}s)"
grep -E "^(FAILED|ERROR)" "$O/tests.log" | cut -c1-300
timeout 75 python3 bench/grouped_cluster.py --json "$O/gcluster.json" 2>&1 | tee "$O/bench.out" | tail -8
echo "bench: ${SECONDS}s"
