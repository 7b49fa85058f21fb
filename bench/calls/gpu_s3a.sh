# Session 3 (2026-12-04), first H200 call: what session 2 left owed, in one call under 10 minutes.
set -u
O=$OUT; mkdir -p /tmp/s3
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 60 python3 bench/import_order.py > $O/import_order.log 2>&1; cat $O/import_order.log
timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/map/test_map_columns.py > $O/pbcast.log 2>&1; tail -4 $O/pbcast.log | cut -c1-600
timeout 250 python3 bench/integration_gpu.py --out /tmp/s3/integ torch overhead --budgets torch=160,overhead=80 > $O/integ.out 2>&1; tail -14 $O/integ.out | cut -c1-220
timeout 200 python3 bench/record17.py --family matmul --set user --backends cuda --budget 170 --out /tmp/s3/rec > $O/user_shapes.out 2>&1; tail -22 $O/user_shapes.out | cut -c1-240
tar czf $O/all.tgz -C /tmp/s3 . 2>/dev/null; ls $O
