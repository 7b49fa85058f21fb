# Issue 17's fused epilogue, its vector operands read from global memory (today's default) or staged in SMEM by a
# producer warp (schedule.epilogue.operands: smem, not yet run on a GPU): the GPU tests of the SMEM form (bias + gelu,
# bias + residual, ragged and full shapes, ping-pong, stream-K, a column operand with direct stores, against float64),
# then bench/epi_smem.py's fused / bare ratio both ways (the bundled bias + gelu spec at 4096^3 and 4096x4096x1024,
# the bias + residual and f16 bias + gelu user shapes at 4096x4096x1024: bare, global and smem verified and timed in
# one interleaved run each), then `schedgen bench` of the bundled spec with smem against cuBLAS and torch if time is
# left. One tarball.
set -u
O=$OUT/epi; mkdir -p $O
. bench/guard.sh 300
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
T=$(cap 100); [ $T -gt 30 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
  tests/families/matmul/test_smem_operands.py > $O/gpu_tests.log 2>&1
echo "smem operands GPU tests (rc $?):"; grep -E "^E  |^FAILED|passed|failed" $O/gpu_tests.log | cut -c1-250 | tail -8
ep() {  # label, spec, -D overrides...
  local label=$1 spec=$2; shift 2; local T; T=$(cap 45)
  [ $T -gt 25 ] && timeout $T python3 bench/epi_smem.py $spec --iters 60 --out $O/$label.json "$@" > $O/$label.out 2>&1
  echo "$label (rc $?):"; grep -E "^(bare|global|smem) " $O/$label.out | cut -c1-160; }
ep gelu_4096 specs/matmul_bias_gelu_bf16.yaml
ep gelu_4096x4096x1024 specs/matmul_bias_gelu_bf16.yaml -D op.sizes.K=1024
ep residual_4096x4096x1024 bench/user_shapes/linear_bias_residual_4096x4096x1024.yaml
ep gelu_f16_4096x4096x1024 bench/user_shapes/linear_bias_gelu_f16_4096x4096x1024.yaml
T=$(cap 60); [ $T -gt 40 ] && timeout $T python3 -m schedgen bench specs/matmul_bias_gelu_bf16.yaml --backend cuda \
  -D 'schedule.backends=[cuda]' -D schedule.epilogue.operands=smem -D op.sizes.K=1024 --json $O/bench_smem.json \
  > $O/bench_smem.out 2>&1; echo "schedgen bench smem 4096x4096x1024 (rc $?):"; tail -7 $O/bench_smem.out | cut -c1-160
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/epi.tgz -C $OUT epi 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
