# The CUDA wgmma backward's dQ by TMA bulk reduce-add (wgmma.dq_reduce_of "bulk", not the default) on the H200:
# first its GPU tests (float64 on 5 small cases and the bench sizes; two eager calls, a CUDA graph replay and
# torch.compile on 2 cases; a hang there is a barrier bug, hence the timeouts), then the bench beside the default
# (red.global.add), the mma.sync kernel and cuDNN, non-causal and causal. Logs in one tarball; guarded.
set -u
O=$OUT/b; mkdir -p $O
. bench/guard.sh 550
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
T=$(cap 240); timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long tests/families/attention_backward/test_attention_backward_wgmma.py \
  -k "bulk" > $O/tests.log 2>&1
echo "0 bulk GPU tests (rc $?):"; tail -15 $O/tests.log | cut -c1-240
T=$(cap 120); timeout $T python3 bench/attn_bwd_cuda.py --dq-bulk > $O/bulk.log 2>&1
echo "1 non-causal (rc $?):"; tail -16 $O/bulk.log | cut -c1-200
T=$(cap 100); timeout $T python3 bench/attn_bwd_cuda.py --dq-bulk --causal > $O/bulk_causal.log 2>&1
echo "2 causal (rc $?):"; tail -16 $O/bulk_causal.log | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/dq_bulk.tgz -C $OUT b 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
