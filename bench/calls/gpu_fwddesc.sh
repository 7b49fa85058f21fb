# Issue 17: the attention forward's wgmma descriptors by offset (plan.desc_offsets_of, built in session 14 on the CPU,
# not the default; docs/perf-notes.md "Attention forward, CUDA: wgmma descriptors by offset"). Its GPU test against
# float64 first (a wrong offset reads another k-step's columns; a hang would be a template bug: hence the timeouts),
# then one interleaved timing run of today's kernel, the variant, SDPA cuDNN and flash (bench/attn_fwd_cuda.py: both
# of ours verified on sampled rows before they are timed) at D128 non-causal S4096 and S16384 and causal S4096 and
# S16384. One tarball; guarded.
set -u
O=$OUT/f; mkdir -p $O
. bench/guard.sh 240
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
T=$(cap 90); [ $T -gt 15 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
  tests/families/attention/test_attention_desc_offsets.py > $O/test.log 2>&1
echo "gpu test (rc $?):"; grep -E "^E  |^FAILED|passed|failed" $O/test.log | cut -c1-240 | tail -8
x() {  # label, cap, arguments of bench/attn_fwd_cuda.py
  local label=$1 c=$2 T; shift 2; T=$(cap $c)
  [ $T -gt 15 ] && timeout $T python3 bench/attn_fwd_cuda.py "$@" > $O/$label.log 2>&1
  echo "$label (rc $?):"; tail -8 $O/$label.log | cut -c1-200; }
x s4096 35
x s16384 40 --s 16384
x causal_s4096 35 --causal
x causal_s16384 40 --causal --s 16384
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/fwddesc.tgz -C $OUT f 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
