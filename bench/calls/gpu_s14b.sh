# Session 11 (2026-12-06), second H200 call (<= 560 s): the grouped backward (torch autograd of a package) and the
# map layout fix with tracebacks; the wgmma backward's dQ workspace on the eager / CUDA graph / torch.compile paths;
# the grouped 2-CTA cluster (tests, then timed against torch._grouped_mm and a cuBLAS loop); the block-scaled fp8 GPU tests; the rowwise prefetch ring (bench/calls/gpu_rowperf.sh). One tarball.
set -u
O=$OUT/w; mkdir -p $O
. bench/guard.sh 560
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long tests/families/grouped_matmul/test_grouped_backward.py \
  "tests/families/grouped_matmul/test_grouped_gpu.py::test_rows_outside_every_group_are_zeros" > $O/t_grouped.log 2>&1
echo "1 grouped backward + rows in no group:"; grep -E "^E  |^FAILED|passed|failed" $O/t_grouped.log | cut -c1-300 | tail -8
timeout 50 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/families/map/test_map_lowers.py \
  tests/autodiff/test_backward_jax.py -k "gpu" > $O/t_map.log 2>&1
echo "2 map layout fix:"; grep -E "^E  |^FAILED|passed|failed" $O/t_map.log | cut -c1-300 | tail -6
T=$(cap 80); [ $T -gt 40 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long -k every_call_path \
  tests/families/attention_backward/test_attention_backward_wgmma.py > $O/t_paths.log 2>&1
echo "3 dQ workspace call paths:"; grep -E "^E  |^FAILED|passed|failed" $O/t_paths.log | cut -c1-300 | tail -6
T=$(cap 125); [ $T -gt 60 ] && OUT=$O timeout $T bash bench/calls/gpu_gcluster.sh > $O/gcluster.log 2>&1
echo "4 grouped 2-CTA cluster:"; tail -12 $O/gcluster.log | cut -c1-200
T=$(cap 55); [ $T -gt 30 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider -rA tests/families/matmul/test_fp8.py \
  -k "block_scaled" > $O/t_fp8.log 2>&1
echo "5 fp8 block-scaled tests:"; grep -E "^(FAILED|ERROR)|passed|failed" $O/t_fp8.log | cut -c1-200 | tail -6
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
T=$(cap 215); [ $T -gt 80 ] && OUT=$O timeout $T bash bench/calls/gpu_rowperf.sh > $O/rowperf.log 2>&1
echo "6 rowperf:"; tail -16 $O/rowperf.log | cut -c1-200
tar czf $OUT/s14b.tgz -C $OUT w 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
