# Session 7 (2026-12-05), the one H200 call left after refusals: the most important checks first, each capped,
# a guard keeping the whole under the call's limit. (1) every attention backward GPU test (CUDA and Pallas against
# float64: fixed, dynamic sizes, head_dim 256; torch autograd through a package); (2) `schedgen bench` of the two
# bundled attention backward specs against cuDNN / flash SDPA backward; (3) the backward bench of a few families
# against torch autograd; (4) the autodiff GPU tests; (5) the tuning rate (issue 21); (6) the bucketed package's
# GPU test, the runtime's GPU tests and the sm_100a refusal.
set -u
O=$OUT
START=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - START) )); }
cap() { local want=$1 l; l=$(left); [ $l -lt $want ] && want=$l; echo $want; }
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/attention_backward > $O/ab_tests.log 2>&1
echo "1 attention_backward gpu tests:"; grep -E "^(FAILED|ERROR)|passed|failed" $O/ab_tests.log | cut -c1-220 | tail -8
timeout $(cap 150) python3 -m schedgen bench specs/attention_backward_bf16_4096.yaml specs/attention_backward_causal_bf16_4096.yaml -D B=1 --json $O/attn_bwd.json --markdown $O/attn_bwd.md > $O/ab_bench.log 2>&1
echo "2 bench attention_backward: exit $?"; tail -14 $O/ab_bench.log | cut -c1-250
T=$(cap 110); [ $T -gt 20 ] && timeout $T python3 bench/backward_gpu.py --out $O --iters 30 --only attention_d128 linear_gelu softmax layernorm > $O/bwd_bench.log 2>&1
echo "3 backward bench:"; tail -10 $O/bwd_bench.log | cut -c1-250
T=$(cap 60); [ $T -gt 20 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider tests/autodiff > $O/autodiff.log 2>&1
echo "4 autodiff gpu tests:"; grep -E "^(FAILED|ERROR)|passed|failed" $O/autodiff.log | cut -c1-220 | tail -5
T=$(cap 80); [ $T -gt 30 ] && timeout $T python3 bench/tune_rate.py --out $O/tune_rate.json > $O/tune_rate.log 2>&1
echo "5 tune_rate:"; tail -6 $O/tune_rate.log | cut -c1-200
T=$(cap 90); [ $T -gt 20 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider tests/runtime/test_bucket_dispatch.py tests/runtime/test_gpu.py tests/families/matmul/test_sm100.py tests/families/matmul/test_sm100_pallas.py > $O/rt.log 2>&1
echo "6 runtime/buckets gpu tests:"; grep -E "^(FAILED|ERROR)|passed|failed" $O/rt.log | cut -c1-220 | tail -5
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
T=$(cap 70); [ $T -gt 20 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/rowwise/test_rowwise_gpu.py -k "cluster or 262k" > $O/rowcluster.log 2>&1
echo "7 rowwise cluster gpu tests:"; grep -E "^(FAILED|ERROR)|passed|failed" $O/rowcluster.log | cut -c1-220 | tail -5
