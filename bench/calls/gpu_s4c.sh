# Session 4 (2026-12-04), third H200 call: the issue-17 record of map, attention and the matmul shapes users bring,
# one interleaved run per family (each step's files go to $OUT as soon as it ends: a call cut short keeps them).
set -u
O=$OUT; mkdir -p /tmp/s4/map /tmp/s4/attn /tmp/s4/user
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 210 python3 bench/record17.py --family map --budget 170 --out /tmp/s4/map > /tmp/s4/map/map.out 2>&1; tail -15 /tmp/s4/map/map.out | cut -c1-200; tar czf $O/map.tgz -C /tmp/s4 map
timeout 170 python3 bench/record17.py --family attention --budget 130 --out /tmp/s4/attn > /tmp/s4/attn/attention.out 2>&1; tail -16 /tmp/s4/attn/attention.out | cut -c1-220; tar czf $O/attn.tgz -C /tmp/s4 attn
timeout 170 python3 bench/record17.py --family matmul --set user --backends cuda --budget 140 --out /tmp/s4/user > /tmp/s4/user/matmul.out 2>&1; tail -16 /tmp/s4/user/matmul.out | cut -c1-220; tar czf $O/user.tgz -C /tmp/s4 user
ls $O
