# Session 14's one H200 call (about 555 s of device time were left, <= 400 s here): first what confirms the unverified
# default changes of sessions 12 and 13 (issue 21's bucketed bundled spec, issue 19's grouped autograd, `schedgen
# verify` of the attention backward's warp-specialized default, the rowwise GPU tests after the log-sum-exp merges and
# approx_math, the norm backward's column sums), then cross-entropy default (approx) vs IEEE and the bundled softmax
# against copy / torch / torch.compile. What gpu_s17c/s17b/s18 hold beyond this waits for the next session. One tarball.
set -u
O=$OUT/s; mkdir -p $O
. bench/guard.sh 400
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
t() {  # label, cap, pytest args...
  local label=$1 c=$2; shift 2; local T; T=$(cap $c)
  [ $T -gt 15 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short "$@" > $O/$label.log 2>&1
  echo "$label (rc $?):"; grep -E "^E  |^FAILED|passed|failed" $O/$label.log | cut -c1-250 | tail -6; }
t bucket 60 "tests/runtime/test_bucket_dispatch.py::test_bucketed_bundled_spec_on_gpu"
t grouped_autograd 40 "tests/families/grouped_matmul/test_grouped_backward.py::test_gpu_torch_autograd_of_a_grouped_package"
T=$(cap 55); [ $T -gt 20 ] && timeout $T python3 -m schedgen verify --backend all --full-size \
  specs/attention_backward_bf16_4096.yaml specs/attention_backward_causal_bf16_4096.yaml > $O/v_bwd.log 2>&1
echo "attention_backward default verify (rc $?):"; tail -8 $O/v_bwd.log | cut -c1-200
t rowwise 60 tests/families/rowwise/test_rowwise_gpu.py \
  -k "crossentropy_variants or bundled_spec_at or (ragged_rows and crossentropy) or (softmax_variants and lse)"
t colgrad 45 tests/autodiff/test_rowwise_colgrad.py
xb() { local case=$1 spec=$2; shift 2; T=$(cap 40); [ $T -gt 25 ] && timeout $T python3 -m schedgen bench $spec \
  --backend cuda "$@" --json $O/$case.json > $O/$case.out 2>&1; echo "$case (rc $?):"; tail -7 $O/$case.out | cut -c1-160; }
xb xent_32000 specs/crossentropy_bf16.yaml --at M=8192
xb xent_32000_ieee specs/crossentropy_bf16.yaml --at M=8192 -D schedule.compiler_params.approx_math=false
xb softmax specs/softmax_bf16.yaml --at M=16384
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/s19.tgz -C $OUT s 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
