# Session 9's second H200 call (2026-12-06), after the fixes the first one found: the dynamic attention backward's
# verify (the accumulation depth), the autodiff torch tests (the test harness's module import), the attention case of
# the backward bench (a full forward reference), the runtime / bucket / sm_100a-refusal GPU tests (their log did not
# come back), then the grouped matmul's backward and forward GPU tests. Capped; a guard keeps the whole short.
set -u
O=$OUT
START=$(date +%s)
LIMIT=${GUARD:-380}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
cap() { local want=$1 l; l=$(left); [ $l -lt $want ] && want=$l; echo $want; }
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 70 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/attention_backward/test_attention_backward_dynamic.py tests/autodiff/test_backward_torch.py > $O/a.log 2>&1
echo "1 dynamic attention backward + autodiff torch:"; grep -E "^(FAILED|ERROR)|^E  .*Error|passed|failed" $O/a.log | cut -c1-200 | tail -6
T=$(cap 90); [ $T -gt 20 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider tests/runtime/test_bucket_dispatch.py tests/runtime/test_gpu.py tests/families/matmul/test_sm100.py tests/families/matmul/test_sm100_pallas.py > $O/rt.log 2>&1
echo "2 runtime/buckets/sm100-refusal:"; grep -E "^(FAILED|ERROR)|passed|failed" $O/rt.log | cut -c1-200 | tail -6
T=$(cap 120); [ $T -gt 20 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/grouped_matmul > $O/g.log 2>&1
echo "3 grouped gpu tests:"; grep -E "^(FAILED|ERROR)|^E  .*Error|passed|failed" $O/g.log | cut -c1-200 | tail -8
T=$(cap 120); [ $T -gt 40 ] && timeout $T python3 bench/backward_gpu.py --out $O --iters 20 --only attention_d128 > $O/bwd.log 2>&1
echo "4 attention backward bench:"; tail -3 $O/bwd.log | cut -c1-300
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
