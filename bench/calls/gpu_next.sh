# What the next session runs first on the H200 (written 2026-12-04, when device time ran out):
# 1. the column-broadcast GPU test that failed once (200x640, 40x128 blocks: which backend/output, now printed);
# 2. the shapes users bring on kernel time (CUPTI): `schedgen bench` rows carry both clocks and the ratio basis;
# 3. the issue-17 record per family (bench/record17.py), one process each.
set -u
O=$OUT
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/map/test_map_columns.py -x > $O/pbcast.log 2>&1; tail -3 $O/pbcast.log
timeout 420 python3 bench/record17.py --family matmul --set user --backends cuda --budget 380 --out $O > $O/user_shapes.out 2>&1; tail -24 $O/user_shapes.out | cut -c1-240
