# Session 12's second H200 call (<= 500 s): the training example (issue 19; the attention block's backward now the
# planner's wgmma kernel), the norm backward's in-kernel column sums (GPU tests, then bench/backward_gpu.py against
# torch autograd with the attention and grouped cases), cross-entropy after the log-sum-exp change (default and
# approx_math, `schedgen bench`: copy, torch, torch.compile in the same run). One tarball.
set -u
O=$OUT/b; mkdir -p $O
. bench/guard.sh 500
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
T=$(cap 190); timeout $T bash -c "python3 -m schedgen build examples/train/qkv.yaml examples/train/proj.yaml examples/train/up.yaml examples/train/down.yaml examples/train/attn.yaml -o build/train > $O/train.log 2>&1 && python3 examples/train_mlp_attention.py --steps 120 --json $O/train.json >> $O/train.log 2>&1"
echo "training run (rc $?):"; tail -14 $O/train.log | cut -c1-220
T=$(cap 60); timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/autodiff/test_rowwise_colgrad.py > $O/t_colgrad.log 2>&1
echo "norm backward column sums, GPU tests (rc $?):"; grep -E "^E  |^FAILED|passed|failed" $O/t_colgrad.log | cut -c1-250 | tail -6
T=$(cap 150); timeout $T python3 bench/backward_gpu.py --only layernorm rmsnorm attention_d128 attention_causal_gqa grouped_moe_silu \
  --iters 30 --out $O/backward > $O/backward.log 2>&1
echo "backward vs torch autograd (rc $?):"; tail -10 $O/backward.log | cut -c1-200
xb() { local case=$1; shift; T=$(cap 45); [ $T -gt 25 ] && timeout $T python3 -m schedgen bench specs/crossentropy_bf16.yaml \
  --backend cuda "$@" --json $O/$case.json > $O/$case.out 2>&1; echo "$case (rc $?):"; tail -8 $O/$case.out | cut -c1-160; }
xb xent_32000 --at M=8192
xb xent_32000_approx --at M=8192 -D schedule.compiler_params.approx_math=true
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/s17b.tgz -C $OUT b 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
