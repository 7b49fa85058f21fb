# Session 12, when one H200 call is all there is (<= 540 s): first what confirms this session's default changes
# (issue 21's bucketed bundled spec, issue 19's grouped autograd, `schedgen verify` of the attention backward's new
# default, the rowwise GPU tests after the log-sum-exp and approx_math changes, the norm backward's column sums),
# then the training example, then the wgmma dQ forms (non-causal) while time is left. One tarball.
set -u
O=$OUT/c; mkdir -p $O
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
t rowwise 70 tests/families/rowwise/test_rowwise_gpu.py \
  -k "crossentropy_variants or bundled_spec_at or (ragged_rows and crossentropy) or (softmax_variants and lse)"
t colgrad 60 tests/autodiff/test_rowwise_colgrad.py
T=$(cap 180); timeout $T bash -c "python3 -m schedgen build examples/train/qkv.yaml examples/train/proj.yaml examples/train/up.yaml examples/train/down.yaml examples/train/attn.yaml -o build/train > $O/train.log 2>&1 && python3 examples/train_mlp_attention.py --steps 120 --json $O/train.json >> $O/train.log 2>&1"
echo "training run (rc $?):"; tail -14 $O/train.log | cut -c1-220
T=$(cap 100); [ $T -gt 40 ] && timeout $T python3 bench/attn_bwd_cuda.py --dq-own --dq-bulk > $O/forms.log 2>&1
echo "wgmma dQ forms, non-causal (rc $?):"; tail -12 $O/forms.log | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/s17c.tgz -C $OUT c 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
