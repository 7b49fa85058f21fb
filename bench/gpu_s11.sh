# Session 10's first H200 call (2026-12-06): (1) the two GPU failures session 9 left without detail (torch autograd
# of a grouped package, the bucketed bundled spec), with full tracebacks, and the grouped fixes (ragged k's wait, rows
# in no group zeroed); (2) the Pallas map layout fix (jax.grad of the saving graph compiled, the broadcast cases);
# (3) the rowwise prefetch ring (bench/gpu_rowperf.sh); (5) the rowwise cluster sweep while time is left. Every log goes into one tarball (the device returns few files).
set -u
O=$OUT/w; mkdir -p $O
START=$(date +%s)
LIMIT=${GUARD:-480}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
cap() { local want=$1 l; l=$(left); [ $l -lt $want ] && want=$l; echo $want; }
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 130 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long \
  tests/families/grouped_matmul/test_grouped_backward.py "tests/families/grouped_matmul/test_grouped_gpu.py::test_rows_outside_every_group_are_zeros" > $O/t1.log 2>&1
echo "1a grouped backward (torch autograd, ragged k after the wait fix) + rows in no group:"; grep -E "^E  |passed|failed" $O/t1.log | cut -c1-300 | tail -12
timeout 80 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long -x \
  "tests/runtime/test_bucket_dispatch.py::test_bucketed_bundled_spec_on_gpu" > $O/t2.log 2>&1
echo "1b bucketed bundled spec:"; grep -E "^E  |passed|failed" $O/t2.log | cut -c1-300 | tail -12
timeout 80 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/families/map/test_map_lowers.py \
  tests/autodiff/test_backward_jax.py -k "gpu" > $O/t3.log 2>&1
echo "2 map layout fix on the GPU:"; grep -E "^E  |^FAILED|passed|failed" $O/t3.log | cut -c1-300 | tail -10
T=$(cap 210); [ $T -gt 60 ] && OUT=$O timeout $T bash bench/gpu_rowperf.sh > $O/rowperf.log 2>&1
echo "3 rowperf:"; tail -22 $O/rowperf.log | cut -c1-220
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
T=$(cap 150); [ $T -gt 60 ] && OUT=$O timeout $T bash bench/gpu_rowcluster.sh > $O/rowcluster.log 2>&1
echo "5 rowcluster:"; tail -20 $O/rowcluster.log | cut -c1-200
tar czf $OUT/s11.tgz -C $OUT w 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
