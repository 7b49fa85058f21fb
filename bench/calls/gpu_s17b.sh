# Session 12's second H200 call, after bench/calls/gpu_s17c.sh (<= 500 s): the wgmma backward's bulk dQ variant against
# float64 and the three dQ forms causal, the norm backward's in-kernel column sums timed (bench/backward_gpu.py
# against torch autograd with the attention and grouped cases), cross-entropy after the log-sum-exp change (default, now
# approx_math, and IEEE; `schedgen bench`: copy, torch, torch.compile in the same run). One tarball.
set -u
O=$OUT/b; mkdir -p $O
. bench/guard.sh 500
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
T=$(cap 75); timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
  tests/families/attention_backward/test_attention_backward_wgmma.py -k "bulk_variant" > $O/t_bulk.log 2>&1
echo "bulk dQ GPU tests (rc $?):"; grep -E "^E  |^FAILED|passed|failed" $O/t_bulk.log | cut -c1-250 | tail -6
T=$(cap 80); timeout $T python3 bench/attn_bwd_cuda.py --dq-own --dq-bulk --causal > $O/forms_causal.log 2>&1
echo "wgmma dQ forms, causal (rc $?):"; tail -8 $O/forms_causal.log | cut -c1-200
T=$(cap 150); timeout $T python3 bench/backward_gpu.py --only layernorm rmsnorm attention_d128 attention_causal_gqa grouped_moe_silu \
  --iters 30 --out $O/backward > $O/backward.log 2>&1
echo "backward vs torch autograd (rc $?):"; tail -10 $O/backward.log | cut -c1-200
xb() { local case=$1; shift; T=$(cap 45); [ $T -gt 25 ] && timeout $T python3 -m schedgen bench specs/crossentropy_bf16.yaml \
  --backend cuda "$@" --json $O/$case.json > $O/$case.out 2>&1; echo "$case (rc $?):"; tail -8 $O/$case.out | cut -c1-160; }
xb xent_32000 --at M=8192
xb xent_32000_ieee --at M=8192 -D schedule.compiler_params.approx_math=false
xb xent_128256 --at M=4096 -D op.sizes.N=128256
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/s17b.tgz -C $OUT b 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
