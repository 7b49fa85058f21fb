# Session 11 (2026-12-06), first H200 call (<= 560 s): the bucketed bundled spec (issue 21) with its traceback; the
# attention backward's warp-specialized forms against float64 (the one-kernel Pallas backward; the wgmma CUDA
# backward, now with FA3's dQ through the runtime's zeroed workspace), then timed (Pallas forms with SDPA cuDNN/flash
# and JAX attention_mgpu; mma.sync vs wgmma vs cuDNN); then the block-scaled fp8 sweep (partial_sums,
# scale_prefetch, against torch's blockwise _scaled_mm). Logs in one tarball.  . .devkit/activate && bash this
set -u
O=$OUT/w; mkdir -p $O
. bench/guard.sh 560
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 70 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long -x \
  "tests/runtime/test_bucket_dispatch.py::test_bucketed_bundled_spec_on_gpu" > $O/t_bucket.log 2>&1
echo "1 bucketed bundled spec:"; grep -E "^E  |passed|failed" $O/t_bucket.log | cut -c1-300 | tail -8
timeout 95 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
  tests/families/attention_backward/test_attention_backward_fused.py > $O/t_fused.log 2>&1
echo "2 one-kernel Pallas backward GPU tests:"; grep -E "^E  |^FAILED|passed|failed" $O/t_fused.log | cut -c1-300 | tail -8
timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long -x -k "not every_call_path" \
  tests/families/attention_backward/test_attention_backward_wgmma.py > $O/t_wgmma.log 2>&1
echo "3 wgmma CUDA backward GPU tests:"; grep -E "^E  |^FAILED|passed|failed" $O/t_wgmma.log | cut -c1-300 | tail -8
T=$(cap 130); [ $T -gt 50 ] && timeout $T python3 bench/attention_backward_forms.py --wgs 2 --iters 30 --out $O/forms > $O/forms.log 2>&1
echo "4 Pallas forms and peers:"; tail -14 $O/forms.log | cut -c1-220
T=$(cap 75); [ $T -gt 40 ] && timeout $T python3 bench/attn_bwd_cuda.py > $O/cuda_bwd.log 2>&1
echo "5 CUDA kernels and cuDNN:"; tail -8 $O/cuda_bwd.log | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
T=$(cap 90); [ $T -gt 50 ] && timeout $T python3 bench/sweep.py specs/matmul_fp8_blockscaled_4096x7168x16384.yaml --iters 20 \
  --out $O/fp8sweep.json \
  --variant "ps1:schedule.pipeline.partial_sums=1" \
  --variant "ps1_delay1:schedule.pipeline.partial_sums=1;schedule.in_specs.a.delay_release=1;schedule.in_specs.b.delay_release=1" \
  --variant "ps2_pf:schedule.pipeline.scale_prefetch=true" \
  --variant "ps1_pf:schedule.pipeline.partial_sums=1;schedule.pipeline.scale_prefetch=true" > $O/fp8sweep.out 2>&1
echo "6 fp8 block-scaled sweep:"; grep -E "verify FAILED|build failed" $O/fp8sweep.out; tail -9 $O/fp8sweep.out | cut -c1-160
tar czf $OUT/s14a.tgz -C $OUT w 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
