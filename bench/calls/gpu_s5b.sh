# Session 5 (2026-12-04), second H200 call: the short lhs box (a static M below the tile loads M rows, no TMA
# zero-fill) and split-K at decode shapes, verified, then one interleaved sweep per decode shape against cuBLAS.
set -u
START=$(date +%s)
O=$OUT; mkdir -p /tmp/s5/t /tmp/s5/sweep
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/matmul/test_short_lhs.py tests/families/matmul/test_split_k.py > /tmp/s5/t/short_split.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" /tmp/s5/t/short_split.log | cut -c1-600 | tail -12
tar czf $O/t.tgz -C /tmp/s5 t
Z="schedule.backends=[cuda];schedule.in_specs.a.out_of_bounds=zero;schedule.in_specs.b.out_of_bounds=zero;schedule.in_specs.a.delay_release=1;schedule.in_specs.b.delay_release=1"
T() { echo "schedule.in_specs.a.block_shape=[$1,$3];schedule.in_specs.b.block_shape=[$2,$3];schedule.out_specs.out.block_shape=[$1,$2];schedule.pipeline.max_concurrent_steps=$4;schedule.cluster=$5;$Z"; }
timeout 150 python3 bench/sweep.py bench/user_shapes/decode_16x8192x8192.yaml --iters 60 --out /tmp/s5/sweep/decode16.json \
  --variant "n64k128s10:$(T 64 64 128 10 [1])" \
  --variant "n64k256s5:$(T 64 64 256 5 [1])" \
  --variant "n128k64s8_split2:$(T 64 128 64 8 [1,1,2])" \
  --variant "n128k128s4_split2:$(T 64 128 128 4 [1,1,2])" \
  --variant "n256k64s4_split4:$(T 64 256 64 4 [1,1,4])" \
  > /tmp/s5/sweep/decode16.out 2>&1; tail -9 /tmp/s5/sweep/decode16.out | cut -c1-120
tar czf $O/sweep.tgz -C /tmp/s5 sweep
for s in 64 128 256; do
  [ $(( $(date +%s) - START )) -lt 470 ] || break
  timeout 60 python3 bench/sweep.py bench/user_shapes/decode_${s}x8192x8192.yaml --iters 60 --out /tmp/s5/sweep/decode$s.json > /tmp/s5/sweep/decode$s.out 2>&1; tail -3 /tmp/s5/sweep/decode$s.out | cut -c1-120
done
tar czf $O/sweep.tgz -C /tmp/s5 sweep
ls $O
