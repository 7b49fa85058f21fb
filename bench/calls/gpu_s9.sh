# Session 9 (2026-12-06), the second H200 call: what landed this session and the training run. (1) the grouped
# matmul backward's GPU tests (ragged: k CUDA kernel against float64, torch autograd of a grouped package, jax.grad
# compiled) and the grouped forward's GPU regression tests; (2) the backward bench of the grouped MoE case and the
# rest of the families against torch autograd; (3) the short training run of the bundled example (loss against the
# same model from torch ops, step time); (4) the bucketed package (tune five buckets, build --tuned, every variant
# verified and timed). Each step capped; a guard keeps the whole under the call's limit.
set -u
O=$OUT
START=$(date +%s)
LIMIT=${GUARD:-570}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
cap() { local want=$1 l; l=$(left); [ $l -lt $want ] && want=$l; echo $want; }
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/grouped_matmul > $O/grouped_tests.log 2>&1
echo "1 grouped gpu tests:"; grep -E "^(FAILED|ERROR)|passed|failed" $O/grouped_tests.log | cut -c1-220 | tail -8
T=$(cap 150); [ $T -gt 20 ] && timeout $T python3 bench/backward_gpu.py --out $O --iters 30 --only grouped_moe_silu linear_gelu rmsnorm crossentropy > $O/bwd_bench.log 2>&1
echo "2 backward bench:"; tail -10 $O/bwd_bench.log | cut -c1-250
T=$(cap 170); [ $T -gt 40 ] && timeout $T bash -c "python3 -m schedgen build examples/train/qkv.yaml examples/train/proj.yaml examples/train/up.yaml examples/train/down.yaml examples/train/attn.yaml -o build/train > $O/train.log 2>&1 && python3 examples/train_mlp_attention.py --steps 120 --json $O/train.json >> $O/train.log 2>&1"
echo "3 training run:"; tail -5 $O/train.log | cut -c1-220
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
T=$(cap 200); [ $T -gt 60 ] && OUT=$O/buckets timeout $T bash bench/calls/gpu_buckets.sh > $O/buckets.log 2>&1
echo "4 buckets:"; tail -14 $O/buckets.log | cut -c1-200
