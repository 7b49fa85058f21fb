# Session 10 (2026-12-06), the H200 call for the attention backward's warp-specialized forms (issue 19's target):
# the bucketed bundled spec's failure with its traceback (issue 21), the one-kernel Pallas backward's and the wgmma
# CUDA backward's GPU tests against float64, then both timed (bench/attention_backward_forms.py: the Pallas forms
# with SDPA cuDNN / flash and JAX's attention_mgpu backward; bench/attn_bwd_cuda.py: the CUDA kernels with SDPA
# cuDNN), then the grouped backward's and the map layout fix's GPU tests. Logs in one tarball; a guard caps the call.
set -u
O=$OUT/w; mkdir -p $O
. bench/guard.sh 550
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 70 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long -x \
  "tests/runtime/test_bucket_dispatch.py::test_bucketed_bundled_spec_on_gpu" > $O/t_bucket.log 2>&1
echo "1 bucketed bundled spec:"; grep -E "^E  |passed|failed" $O/t_bucket.log | cut -c1-300 | tail -10
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
  tests/families/attention_backward/test_attention_backward_fused.py > $O/t_fused.log 2>&1
echo "2 one-kernel Pallas backward GPU tests:"; grep -E "^E  |^FAILED|passed|failed" $O/t_fused.log | cut -c1-300 | tail -10
timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short -x \
  tests/families/attention_backward/test_attention_backward_wgmma.py > $O/t_wgmma.log 2>&1
echo "3 wgmma CUDA backward GPU tests:"; grep -E "^E  |^FAILED|passed|failed" $O/t_wgmma.log | cut -c1-300 | tail -10
T=$(cap 150); [ $T -gt 50 ] && timeout $T python3 bench/attention_backward_forms.py --wgs 2 --iters 30 --out $O/forms > $O/forms.log 2>&1
echo "4 Pallas forms and peers:"; tail -14 $O/forms.log | cut -c1-220
T=$(cap 80); [ $T -gt 40 ] && timeout $T python3 bench/attn_bwd_cuda.py > $O/cuda_bwd.log 2>&1
echo "5 CUDA kernels and cuDNN:"; tail -8 $O/cuda_bwd.log | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
T=$(cap 110); [ $T -gt 40 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long \
  tests/families/grouped_matmul/test_grouped_backward.py "tests/families/grouped_matmul/test_grouped_gpu.py::test_rows_outside_every_group_are_zeros" > $O/t_grouped.log 2>&1
echo "6 grouped backward + rows in no group:"; grep -E "^E  |^FAILED|passed|failed" $O/t_grouped.log | cut -c1-300 | tail -10
T=$(cap 70); [ $T -gt 30 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/families/map/test_map_lowers.py \
  tests/autodiff/test_backward_jax.py -k "gpu" > $O/t_map.log 2>&1
echo "7 map layout fix:"; grep -E "^E  |^FAILED|passed|failed" $O/t_map.log | cut -c1-300 | tail -8
tar czf $OUT/s12.tgz -C $OUT w 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
