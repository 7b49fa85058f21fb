# Session 4 (2026-12-04), second H200 call: the column fix (issue 16), the attention FLOP count against ncu's
# tensor-pipe instruction count (issue 17), and the matmul family's bundled record (one interleaved run).
set -u
O=$OUT; mkdir -p /tmp/s4/ncu /tmp/s4/rec /tmp/s4/t
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/map/test_map_columns.py > /tmp/s4/t/pbcast.log 2>&1; grep -E "^E  |passed|failed" /tmp/s4/t/pbcast.log | cut -c1-800
timeout 60 python3 bench/diag_columns.py > /tmp/s4/t/diag.log 2>&1; grep -c ": ok$" /tmp/s4/t/diag.log; grep -v ": ok$" /tmp/s4/t/diag.log | cut -c1-300
for s in specs/attention_bf16_4096.yaml specs/attention_causal_bf16_4096_dynamic.yaml; do
  b=$(basename $s .yaml); k=$(python3 bench/ncu_flops.py name $s)
  timeout 100 ncu --clock-control none --csv --metrics regex:.*gmma.* -k regex:$k -c 1 python3 bench/ncu_flops.py launch $s > /tmp/s4/ncu/$b.csv 2> /tmp/s4/ncu/$b.err
  python3 bench/ncu_flops.py report $s /tmp/s4/ncu/$b.csv 2>&1 | tee /tmp/s4/ncu/$b.txt | cut -c1-220; tail -3 /tmp/s4/ncu/$b.err | cut -c1-300
done
timeout 430 python3 bench/record17.py --family matmul --set bundled --budget 360 --out /tmp/s4/rec > /tmp/s4/rec/matmul.out 2>&1; tail -22 /tmp/s4/rec/matmul.out | cut -c1-240
tar czf $O/all.tgz -C /tmp/s4 . 2>/dev/null; ls $O
