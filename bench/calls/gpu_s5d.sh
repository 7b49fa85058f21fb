# Session 5 (2026-12-04), fourth H200 call: epilogue operands read in column pairs, verified, then the fused shapes
# of the user record again (one interleaved run against cuBLAS, torch eager and torch.compile).
set -u
O=$OUT; mkdir -p /tmp/s5/t /tmp/s5/user
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/matmul/test_epilogue_loads.py tests/families/matmul/test_pingpong.py -k "pair or residual or gelu" > /tmp/s5/t/pairs.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" /tmp/s5/t/pairs.log | cut -c1-600 | tail -8
tar czf $O/t.tgz -C /tmp/s5 t
timeout 150 python3 bench/record17.py --family matmul --set user --only linear_bias linear_4096x4096x1024_noepi --backends cuda --budget 120 --out /tmp/s5/user > /tmp/s5/user/matmul.out 2>&1; tail -8 /tmp/s5/user/matmul.out | cut -c1-200
tar czf $O/user.tgz -C /tmp/s5 user
ls $O
