# Issue 18, block-scaled fp8 (4096x7168x16384, 865 TFLOP/s measured, 1200 the target). First one interleaved sweep
# (bench/sweep.py: every variant verified against float64 first, then timed in the same rounds as torch's blockwise
# _scaled_mm and a bf16 cuBLAS GEMM): partial_sums 2 (the planner's pick: the spec as written) against 1 (the old
# k-loop, now without the zeroing), 1 with delay_release 1 (the session-5 sweep's best, 895 TFLOP/s), and each set
# count with scale_prefetch (the scales read a step ahead). Then the block-scaled GPU tests (every partial_sums /
# scale_prefetch choice, ragged sizes, an odd K-block count, split-K, against float64). About 140 s, guarded.
# From the repo root, after `. .devkit/activate`:  OUT=/tmp/o bash bench/calls/gpu_fp8promo.sh
set -u
O=${OUT:-/tmp/schedgen-out}/fp8promo; mkdir -p "$O"
. bench/guard.sh 148
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$O/clocks.txt" 2>&1
timeout "$(cap 90)" python3 bench/sweep.py specs/matmul_fp8_blockscaled_4096x7168x16384.yaml --iters 20 \
  --out "$O/sweep.json" \
  --variant "ps1:schedule.pipeline.partial_sums=1" \
  --variant "ps1_delay1:schedule.pipeline.partial_sums=1;schedule.in_specs.a.delay_release=1;schedule.in_specs.b.delay_release=1" \
  --variant "ps2_pf:schedule.pipeline.scale_prefetch=true" \
  --variant "ps1_pf:schedule.pipeline.partial_sums=1;schedule.pipeline.scale_prefetch=true" \
  > "$O/sweep.out" 2>&1
echo "sweep (rc $?):"; grep -E "verify FAILED|build failed" "$O/sweep.out"; tail -8 "$O/sweep.out" | cut -c1-160
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> "$O/clocks.txt" 2>&1
timeout "$(cap 55)" python3 -m pytest -q -m gpu -p no:cacheprovider -rA tests/families/matmul/test_fp8.py \
  -k "block_scaled" > "$O/tests.log" 2>&1
echo "tests (rc $?):"; grep -E "rel_error|^(PASSED|FAILED|ERROR)|passed|failed" "$O/tests.log" | cut -c1-200
echo done $(( $(date +%s) - START )) s
