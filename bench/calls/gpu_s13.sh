# Session 10 (2026-12-06), the second H200 call: the rowwise prefetch ring (bench/calls/gpu_rowperf.sh: GPU tests, softmax
# and cross-entropy against copy / torch / torch.compile, new and old kernels), the rowwise cluster sweep to 262k
# (bench/calls/gpu_rowcluster.sh), then the short training run of the bundled example. Logs in one tarball; guarded.
set -u
O=$OUT/w; mkdir -p $O
. bench/guard.sh 550
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
T=$(cap 215); OUT=$O timeout $T bash bench/calls/gpu_rowperf.sh > $O/rowperf.log 2>&1
echo "1 rowperf:"; tail -22 $O/rowperf.log | cut -c1-220
T=$(cap 170); [ $T -gt 60 ] && OUT=$O timeout $T bash bench/calls/gpu_rowcluster.sh > $O/rowcluster.log 2>&1
echo "2 rowcluster:"; tail -20 $O/rowcluster.log | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
T=$(cap 160); [ $T -gt 60 ] && timeout $T bash -c "python3 -m schedgen build examples/train/qkv.yaml examples/train/proj.yaml examples/train/up.yaml examples/train/down.yaml examples/train/attn.yaml -o build/train > $O/train.log 2>&1 && python3 examples/train_mlp_attention.py --steps 120 --json $O/train.json >> $O/train.log 2>&1"
echo "3 training run:"; tail -6 $O/train.log | cut -c1-220
tar czf $OUT/s13.tgz -C $OUT w 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
