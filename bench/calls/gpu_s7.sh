# Session 7 (2026-12-05), the second H200 call: issue 21 on the GPU. The tuning rate (a 100-candidate space cold,
# then warm: bench/tune_rate.py), the node pool's GPU test, then the bucketed package (bench/calls/gpu_buckets.sh: tune
# five buckets of M, build --tuned, every variant against float64 in eager torch, torch.compile, a CUDA graph and
# Pallas, and each bucket's variant timed against the spec's own schedule). Prints a short table last.
set -u
O=$OUT
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 150 python3 bench/tune_rate.py --out $O/tune_rate.json > $O/tune_rate.log 2>&1; echo "tune_rate: exit $?"
timeout 40 python3 -m pytest -q -m gpu -p no:cacheprovider tests/tune/test_pool.py > $O/pool.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $O/pool.log | cut -c1-200 | tail -3
sed -i 's/^timeout 300 python3 -m schedgen tune/timeout 150 python3 -m schedgen tune/; s/^timeout 150 python3 -m pytest/timeout 100 python3 -m pytest/; s/^timeout 120 python3 - /timeout 60 python3 - /' bench/calls/gpu_buckets.sh
OUT=$O/buckets bash bench/calls/gpu_buckets.sh > $O/buckets.log 2>&1; tail -20 $O/buckets.log | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tail -12 $O/tune_rate.log | cut -c1-200
