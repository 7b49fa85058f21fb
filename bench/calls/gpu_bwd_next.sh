# Issue 19's three candidates for the CUDA wgmma attention backward (built in session 14 on the CPU, none the default):
# pipeline.delta: preprocess (delta once per tile, a stage without O), wgmma.overlap_of (FlashAttention-3's waits) and
# wgmma.desc_offsets_of (descriptors by offset). Their GPU tests against float64 first (a hang is a flag or barrier bug:
# hence the timeouts), then one interleaved timing run beside today's wgmma kernel, the mma.sync kernel and cuDNN,
# non-causal and causal (bench/attn_bwd_cuda.py: each variant verified before it is timed). One tarball; guarded.
set -u
O=$OUT/n; mkdir -p $O
. bench/guard.sh 420
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
t() {  # label, cap, test file, -k expression
  local label=$1 c=$2 f=$3 k=$4 T; T=$(cap $c)
  [ $T -gt 15 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short $f -k "$k" > $O/$label.log 2>&1
  echo "$label (rc $?):"; grep -E "^E  |^FAILED|passed|failed" $O/$label.log | cut -c1-240 | tail -8; }
t delta 80 tests/families/attention_backward/test_attention_backward_delta.py "matches_float64"
t overlap 80 tests/families/attention_backward/test_attention_backward_wgmma.py "overlap or desc"
T=$(cap 120); [ $T -gt 30 ] && timeout $T python3 bench/attn_bwd_cuda.py --delta-preprocess --dq-bulk --overlap \
  --desc-offsets > $O/time.log 2>&1
echo "time non-causal (rc $?):"; tail -24 $O/time.log | cut -c1-200
T=$(cap 100); [ $T -gt 30 ] && timeout $T python3 bench/attn_bwd_cuda.py --delta-preprocess --overlap --desc-offsets \
  --causal > $O/time_causal.log 2>&1
echo "time causal (rc $?):"; tail -20 $O/time_causal.log | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/bwd_next.tgz -C $OUT n 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
