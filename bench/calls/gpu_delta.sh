# The CUDA wgmma backward with pipeline.delta: preprocess (issue 19: delta = rowsum(dO * O) computed once by the
# launch's first blocks, which also zero the dQ sums; a stage of Q, dO, lse, delta; not the default) on the H200:
# first its GPU tests on small cases (float64 reference, fresh random inputs, outputs poisoned; red and bulk dQ), then
# the timing beside the default wgmma kernel (delta in the kernel), the mma.sync kernel and cuDNN, non-causal and
# causal (at 2 stages and at the 3 that now fit; non-causal also the bulk dQ forms), then two eager calls / a CUDA
# graph replay / torch.compile, then the bench sizes under verify. A hang is a flag or barrier bug, hence the
# timeouts. Logs in one tarball; guarded.
set -u
O=$OUT/d; mkdir -p $O
. bench/guard.sh 300
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
t() {  # label, cap, pytest -k expression
  local label=$1 c=$2 k=$3 T; T=$(cap $c)
  [ $T -gt 15 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
    tests/families/attention_backward/test_attention_backward_delta.py -k "$k" > $O/$label.log 2>&1
  echo "$label (rc $?):"; grep -E "^E  |^FAILED|passed|failed" $O/$label.log | cut -c1-240 | tail -8; }
t small 80 "matches_float64"
T=$(cap 85); [ $T -gt 20 ] && timeout $T python3 bench/attn_bwd_cuda.py --delta-preprocess --dq-bulk > $O/time.log 2>&1
echo "time non-causal (rc $?):"; tail -22 $O/time.log | cut -c1-200
T=$(cap 65); [ $T -gt 20 ] && timeout $T python3 bench/attn_bwd_cuda.py --delta-preprocess --causal > $O/time_causal.log 2>&1
echo "time causal (rc $?):"; tail -18 $O/time_causal.log | cut -c1-200
t paths 40 "every_call_path"
t bench_sizes 40 "bench_sizes"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/delta.tgz -C $OUT d 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
