# Session 5 (2026-12-04), first H200 call: split-K clusters (issue 17: schedule.cluster [1, 1, S]) verified on the
# GPU, decode sweeps with and without the split against cuBLAS (one interleaved run per shape), ncu's view of the
# decode and fused-epilogue misses, and the rest of the map record. Each step's files go to $OUT when it ends.
set -u
START=$(date +%s)
O=$OUT; mkdir -p /tmp/s5/t /tmp/s5/sweep /tmp/s5/ncu /tmp/s5/map2
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/matmul/test_split_k.py > /tmp/s5/t/split_k.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" /tmp/s5/t/split_k.log | cut -c1-600 | tail -12
tar czf $O/t.tgz -C /tmp/s5 t
Z="schedule.backends=[cuda];schedule.in_specs.a.out_of_bounds=zero;schedule.in_specs.b.out_of_bounds=zero;schedule.in_specs.a.delay_release=1;schedule.in_specs.b.delay_release=1"
T() { echo "schedule.in_specs.a.block_shape=[$1,$3];schedule.in_specs.b.block_shape=[$2,$3];schedule.out_specs.out.block_shape=[$1,$2];schedule.pipeline.max_concurrent_steps=$4;schedule.cluster=$5;$Z"; }
timeout 150 python3 bench/sweep.py bench/user_shapes/decode_16x8192x8192.yaml --iters 60 --out /tmp/s5/sweep/decode16.json \
  --variant "n128k128s3_split2:$(T 64 128 128 3 [1,1,2])" \
  --variant "n128k64s6_split2:$(T 64 128 64 6 [1,1,2])" \
  --variant "n256k64s3_split4:$(T 64 256 64 3 [1,1,4])" \
  --variant "n32k128s8:$(T 64 32 128 8 [1])" \
  > /tmp/s5/sweep/decode16.out 2>&1; tail -12 /tmp/s5/sweep/decode16.out | cut -c1-200
tar czf $O/sweep.tgz -C /tmp/s5 sweep
S16=bench/user_shapes/decode_16x8192x8192.yaml
for c in "plain:" "split2:-D schedule.cluster=[1,1,2] -D schedule.in_specs.a.block_shape=[64,128] -D schedule.in_specs.b.block_shape=[128,128] -D schedule.out_specs.out.block_shape=[64,128] -D schedule.pipeline.max_concurrent_steps=3 -D schedule.in_specs.a.out_of_bounds=zero -D schedule.in_specs.b.out_of_bounds=zero -D schedule.in_specs.a.delay_release=1 -D schedule.in_specs.b.delay_release=1 -D schedule.backends=[cuda]"; do
  n=${c%%:*}; d=${c#*:}; k=$(python3 bench/ncu_flops.py name $S16 $d)
  timeout 45 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy -k regex:$k -c 1 python3 bench/ncu_flops.py launch $S16 $d > /tmp/s5/ncu/decode16_$n.txt 2>&1
  grep -E "DRAM Throughput|Memory Throughput|Duration|Stall|Achieved Occupancy" /tmp/s5/ncu/decode16_$n.txt | head -8 | cut -c1-150
done
for s in bench/user_shapes/linear_bias_gelu_f16_4096x4096x1024.yaml bench/user_shapes/linear_bias_residual_4096x4096x1024.yaml bench/user_shapes/linear_4096x4096x1024_noepi.yaml; do
  b=$(basename $s .yaml); k=$(python3 bench/ncu_flops.py name $s)
  timeout 45 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:$k -c 1 python3 bench/ncu_flops.py launch $s > /tmp/s5/ncu/$b.txt 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|DRAM Throughput" /tmp/s5/ncu/$b.txt | head -3 | cut -c1-150
done
tar czf $O/ncu.tgz -C /tmp/s5 ncu
if [ $(( $(date +%s) - START )) -lt 420 ]; then
timeout 130 python3 bench/sweep.py bench/user_shapes/decode_128x8192x8192.yaml --iters 60 --out /tmp/s5/sweep/decode128.json \
  --variant "t128x128k64s4_split2:$(T 128 128 64 4 [1,1,2])" \
  --variant "t64x128k64s6_split2:$(T 64 128 64 6 [1,1,2])" \
  > /tmp/s5/sweep/decode128.out 2>&1; tail -6 /tmp/s5/sweep/decode128.out | cut -c1-200
fi
tar czf $O/sweep.tgz -C /tmp/s5 sweep
[ $(( $(date +%s) - START )) -lt 470 ] && timeout 100 python3 bench/record17.py --family map --only gelu_bias_bf16_dynamic scale_f32 --budget 100 --append bench/results/raw/2026-12-04-session4/call3/map/map.json --out /tmp/s5/map2 > /tmp/s5/map2/map.out 2>&1; tail -8 /tmp/s5/map2/map.out | cut -c1-200
tar czf $O/map2.tgz -C /tmp/s5 map2
ls $O
