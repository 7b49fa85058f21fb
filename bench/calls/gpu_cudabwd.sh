# The wgmma attention backward (schedule.pipeline.kind: warp_specialized; FA3's dQ through the runtime's zeroed
# workspace) on the H200, one device call (<= 600 s): (1) its GPU tests, small problems first (-x: the first failure
# with its full traceback), then the bench sizes; (2) bench/attn_bwd_cuda.py non-causal and causal at B1 S4096 H16
# D128 (mma.sync vs wgmma vs cuDNN, each verified against float64 first); (3) the dQ workspace on the eager, CUDA
# graph and torch.compile paths; (4) the one-consumer variant. Logs in $OUT/w and one tarball.
set -u
O=$OUT/w; mkdir -p $O
. bench/guard.sh 560
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long -x -k "not every_call_path" \
  tests/families/attention_backward/test_attention_backward_wgmma.py > $O/t1.log 2>&1
echo "1 wgmma GPU tests:"; grep -E "^E  |^FAILED|passed|failed" $O/t1.log | cut -c1-300 | tail -14
T=$(cap 120); [ $T -gt 40 ] && timeout $T python3 bench/attn_bwd_cuda.py > $O/b1.log 2>&1
echo "2a non-causal:"; tail -8 $O/b1.log | cut -c1-200
T=$(cap 120); [ $T -gt 40 ] && timeout $T python3 bench/attn_bwd_cuda.py --causal > $O/b2.log 2>&1
echo "2b causal:"; tail -8 $O/b2.log | cut -c1-200
T=$(cap 100); [ $T -gt 40 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long -k every_call_path \
  tests/families/attention_backward/test_attention_backward_wgmma.py > $O/t3.log 2>&1
echo "3 call paths:"; grep -E "^E  |^FAILED|passed|failed" $O/t3.log | cut -c1-300 | tail -8
T=$(cap 100); [ $T -gt 40 ] && timeout $T python3 bench/attn_bwd_cuda.py --consumers 1 > $O/b3.log 2>&1
echo "4 one consumer:"; tail -8 $O/b3.log | cut -c1-200
tar czf $OUT/cudabwd.tgz -C $OUT w 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
