# Session 4 (2026-12-04), first H200 call: where the column path fails (issue 16), and the issue-17 record of the
# map and attention families (one interleaved run each), under the 10-minute limit.
set -u
O=$OUT; mkdir -p /tmp/s4/diag /tmp/s4/rec
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 100 python3 bench/diag_columns.py --save /tmp/s4/diag/src > /tmp/s4/diag/diag.log 2>&1; grep -v ": ok$" /tmp/s4/diag/diag.log | cut -c1-400
timeout 80 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/map/test_map_columns.py > /tmp/s4/diag/pbcast.log 2>&1; grep -E "^E  |passed|failed" /tmp/s4/diag/pbcast.log | cut -c1-1500
timeout 90 python3 bench/record17.py --family map --budget 60 --out /tmp/s4/rec > /tmp/s4/rec/map.out 2>&1; tail -12 /tmp/s4/rec/map.out | cut -c1-220
timeout 300 python3 bench/record17.py --family attention --budget 200 --out /tmp/s4/rec > /tmp/s4/rec/attention.out 2>&1; tail -24 /tmp/s4/rec/attention.out | cut -c1-240
tar czf $O/all.tgz -C /tmp/s4 . 2>/dev/null; ls $O
