# Session 12 (2026-12-06), the third H200 call: cross-entropy after the log-sum-exp merge change (one exp a partial,
# exp(x - m) as one FFMA + ex2 under approx_math), default and approx_math, at 8192 x 32000 and 4096 x 128256
# (`schedgen bench`: copy, torch, torch.compile in the same run), then the norms' backward (column sums in the kernel), the attention and grouped backward against torch autograd
# (bench/backward_gpu.py: the attention case did not run before), then the rowwise cluster sweep to 262k
# (bench/gpu_rowcluster.sh). Logs in one tarball; guarded.
set -u
O=$OUT/w; mkdir -p $O
. bench/guard.sh 400
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
T=$(cap 60); timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short tests/autodiff/test_rowwise_colgrad.py > $O/t_colgrad.log 2>&1
echo "norm backward's in-kernel column sums, GPU tests (rc $?):"; grep -E "^E  |^FAILED|passed|failed" $O/t_colgrad.log | cut -c1-250 | tail -6
T=$(cap 150); timeout $T python3 bench/backward_gpu.py --only layernorm rmsnorm attention_d128 attention_causal_gqa grouped_moe_silu \
  --iters 30 --out $O/backward > $O/backward.log 2>&1
echo "backward vs torch autograd (rc $?):"; tail -10 $O/backward.log | cut -c1-200
# cross-entropy: is the kernel bound by its instructions (IEEE expf) once the ring overlaps the loads? approx_math
# (ex2.approx, what torch.compile's Triton kernel uses) against the default, at 8192 x 32000 and 4096 x 128256
xb() { local case=$1; shift; T=$(cap 45); [ $T -gt 25 ] && timeout $T python3 -m schedgen bench specs/crossentropy_bf16.yaml \
  --backend cuda "$@" --json $O/$case.json > $O/$case.out 2>&1; echo "$case (rc $?):"; tail -8 $O/$case.out | cut -c1-160; }
xb xent_32000 --at M=8192
xb xent_32000_approx --at M=8192 -D schedule.compiler_params.approx_math=true
# xb xent_32000_approx_wg2 --at M=8192 -D schedule.compiler_params.approx_math=true -D schedule.num_warpgroups=2

xb xent_128256_approx --at M=4096 -D op.sizes.N=128256 -D schedule.compiler_params.approx_math=true
T=$(cap 200); [ $T -gt 60 ] && OUT=$O timeout $T bash bench/gpu_rowcluster.sh > $O/rowcluster.log 2>&1
echo "2 rowcluster:"; tail -20 $O/rowcluster.log | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/s16.tgz -C $OUT w 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
