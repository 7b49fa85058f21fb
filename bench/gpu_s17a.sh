# Session 12's first H200 call (<= 540 s): the fixed GPU tests (issue 21's bucketed bundled spec through
# torch.compile, issue 19's grouped package under torch autograd), the attention backward's new default verified
# (`schedgen verify` of both bundled specs: the one-kernel Pallas form and the wgmma CUDA kernel), the wgmma kernel's
# bulk dQ variant against float64, its three dQ forms timed in one process (shared dS + red.global, unshared, TMA bulk
# reduce-add; with the mma.sync kernel and cuDNN), and the rowwise GPU tests (new log-sum-exp merges, approx_math
# picked for 16-bit outputs). One tarball.
set -u
O=$OUT/a; mkdir -p $O
. bench/guard.sh 540
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
t() {  # label, cap, pytest args...
  local label=$1 c=$2; shift 2; local T; T=$(cap $c)
  [ $T -gt 15 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short "$@" > $O/$label.log 2>&1
  echo "$label (rc $?):"; grep -E "^E  |^FAILED|passed|failed" $O/$label.log | cut -c1-250 | tail -6; }
t bucket 70 "tests/runtime/test_bucket_dispatch.py::test_bucketed_bundled_spec_on_gpu"
t grouped_autograd 45 "tests/families/grouped_matmul/test_grouped_backward.py::test_gpu_torch_autograd_of_a_grouped_package"
T=$(cap 60); [ $T -gt 20 ] && timeout $T python3 -m schedgen verify --backend all --full-size \
  specs/attention_backward_bf16_4096.yaml specs/attention_backward_causal_bf16_4096.yaml > $O/v_bwd.log 2>&1
echo "attention_backward default verify (rc $?):"; tail -8 $O/v_bwd.log | cut -c1-200
t bulk 75 tests/families/attention_backward/test_attention_backward_wgmma.py -k "bulk_variant_matches"
T=$(cap 100); timeout $T python3 bench/attn_bwd_cuda.py --dq-own --dq-bulk > $O/forms.log 2>&1
echo "wgmma dQ forms, non-causal (rc $?):"; tail -12 $O/forms.log | cut -c1-200
T=$(cap 80); timeout $T python3 bench/attn_bwd_cuda.py --dq-own --dq-bulk --causal > $O/forms_causal.log 2>&1
echo "causal (rc $?):"; tail -8 $O/forms_causal.log | cut -c1-200
t rowwise 70 tests/families/rowwise/test_rowwise_gpu.py \
  -k "crossentropy_variants or bundled_spec_at or (ragged_rows and crossentropy) or (softmax_variants and lse)"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/s17a.tgz -C $OUT a 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
