# Session 5 (2026-12-04), third H200 call: the L2 prefetch of [M, N] epilogue operands verified, then the issue-17
# record of the matmul shapes users bring (default schedules; one interleaved run) with the short-lhs decode fix.
set -u
O=$OUT; mkdir -p /tmp/s5/t /tmp/s5/user
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/matmul/test_epilogue_prefetch.py tests/families/matmul/test_pingpong.py -k "prefetch or residual" > /tmp/s5/t/prefetch.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" /tmp/s5/t/prefetch.log | cut -c1-600 | tail -8
tar czf $O/t.tgz -C /tmp/s5 t
timeout 200 python3 bench/record17.py --family matmul --set user --backends cuda --budget 170 --out /tmp/s5/user > /tmp/s5/user/matmul.out 2>&1; tail -16 /tmp/s5/user/matmul.out | cut -c1-200
tar czf $O/user.tgz -C /tmp/s5 user
ls $O
