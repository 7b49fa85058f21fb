# Session 11's last H200 call (<= 200 s): the two GPU tests fixed after gpu_s14a/b (the bucketed bundled spec through
# torch.compile, issue 21; the grouped package under torch autograd, issue 19), then the wgmma backward's dQ
# workspace on the eager / CUDA graph / torch.compile paths. One tarball.
set -u
O=$OUT/w; mkdir -p $O
. bench/guard.sh 260
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 70 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
  "tests/runtime/test_bucket_dispatch.py::test_bucketed_bundled_spec_on_gpu" > $O/t_bucket.log 2>&1
echo "1 bucketed bundled spec:"; grep -E "^E  |passed|failed" $O/t_bucket.log | cut -c1-300 | tail -6
T=$(cap 45); timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
  "tests/families/grouped_matmul/test_grouped_backward.py::test_gpu_torch_autograd_of_a_grouped_package" > $O/t_grouped.log 2>&1
echo "2 grouped torch autograd:"; grep -E "^E  |passed|failed" $O/t_grouped.log | cut -c1-300 | tail -6
T=$(cap 100); [ $T -gt 30 ] && timeout $T python3 -m pytest -v -m gpu -p no:cacheprovider --tb=short -k every_call_path \
  tests/families/attention_backward/test_attention_backward_wgmma.py > $O/t_paths.log 2>&1
echo "3 dQ workspace call paths (rc $?):"; grep -E "^E  |PASSED|FAILED|passed|failed" $O/t_paths.log | cut -c1-300 | tail -8
T=$(cap 60); [ $T -gt 20 ] && timeout $T python3 -m schedgen verify --backend all --full-size \
  specs/attention_backward_bf16_4096.yaml specs/attention_backward_causal_bf16_4096.yaml > $O/v_bwd.log 2>&1
echo "4 attention_backward default (warp_specialized) verify (rc $?):"; tail -8 $O/v_bwd.log | cut -c1-200
tar czf $OUT/s14c.tgz -C $OUT w 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
