# fp8 GEMMs (issue 18) on the H200: the fp8 GPU tests (both backends built, run with poisoned outputs and checked
# against float64 at 4096^3, ragged sizes and variants), then `schedgen bench` of each bundled fp8 spec (and the
# per-tensor one at 8192^3) against torch._scaled_mm (fast and exact accumulation) and a bf16 cuBLAS GEMM of the
# same values; the table last. About 3-4 minutes. From the repo root, after `. .devkit/activate`:
#     bash bench/calls/gpu_fp8.sh                  # files under $OUT/fp8/ ($OUT defaults to /tmp/schedgen-out)
#     FP8_VARIANTS=1 bash bench/calls/gpu_fp8.sh   # and two schedule variants of the per-tensor spec (for tuning)
set -u
O=${OUT:-/tmp/schedgen-out}/fp8; mkdir -p "$O"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$O/clocks.txt" 2>&1
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rA tests/families/matmul/test_fp8*.py > "$O/tests.log" 2>&1
echo "tests (rc $?):"; grep -E "rel_error|^(PASSED|FAILED|ERROR)|passed|failed" "$O/tests.log" | cut -c1-220
for spec in specs/matmul_fp8_*.yaml; do
  timeout 75 python3 -m schedgen bench "$spec" --backend all --json "$O/fp8.json" --markdown "$O/fp8.md" > "$O/$(basename "$spec" .yaml).log" 2>&1
  echo "bench $(basename "$spec") rc $?"
done
timeout 75 python3 -m schedgen bench specs/matmul_fp8_e4m3_4096.yaml -D M=8192 -D N=8192 -D K=8192 --backend all \
  --json "$O/fp8.json" --markdown "$O/fp8.md" > "$O/matmul_fp8_e4m3_8192.log" 2>&1
echo "bench 8192^3 rc $?"
if [ "${FP8_VARIANTS:-0}" = 1 ]; then   # schedule variants of the per-tensor spec (CUDA), for tuning: ~1 more minute
  timeout 60 python3 -m schedgen bench specs/matmul_fp8_e4m3_4096.yaml --backend cuda -D 'schedule.cluster=[1,1]' \
    -D 'schedule.in_specs.b.collective_axes=[]' --json "$O/fp8.json" --markdown "$O/fp8.md" > "$O/v_nocluster.log" 2>&1
  echo "bench variant no cluster rc $?"
  timeout 60 python3 -m schedgen bench specs/matmul_fp8_e4m3_4096.yaml --backend cuda -D 'schedule.backends=[cuda]' \
    -D schedule.pipeline.consumer_schedule=pingpong -D 'schedule.in_specs.b.block_shape=[128,128]' \
    -D 'schedule.out_specs.out.block_shape=[128,128]' -D schedule.pipeline.max_concurrent_steps=6 \
    --json "$O/fp8.json" --markdown "$O/fp8.md" > "$O/v_pingpong.log" 2>&1
  echo "bench variant pingpong 128x128 rc $?"
fi
cat "$O/fp8.md" 2>/dev/null | cut -c1-400
