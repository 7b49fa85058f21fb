# Issue 17, the map family's register path (schedule.pipeline.data_path: registers): its GPU tests (the bundled map
# specs and a mixed-dtype column / row / two-output spec at ragged sizes against float64), then add_bf16 and
# gelu_bias_bf16 at issue 17's 32768 x 16384 through `schedgen bench` (torch eager and a device copy timed in the same
# run) with the TMA ring (the default) and with the register path, and one sweep of register-path variants
# (warpgroups, block rows) of add_bf16 timed together. Run on the H200: bash bench/calls/gpu_mapregs.sh. One tarball.
set -uf   # -f: the overrides carry [brackets], never globs
O=$OUT/mr; mkdir -p $O
. bench/guard.sh 240
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
T=$(cap 60); [ $T -gt 15 ] && timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
  tests/families/map/test_map_registers.py > $O/gpu_test.log 2>&1
echo "gpu tests (rc $?):"; grep -E "^E  |^FAILED|passed|failed" $O/gpu_test.log | cut -c1-250 | tail -8
SZ="-D M=32768 -D N=16384"
REGS="-D schedule.backends=[cuda] -D schedule.pipeline.data_path=registers -D schedule.pipeline.max_concurrent_steps=2"
xb() { local case=$1 spec=$2; shift 2; local T; T=$(cap 40); [ $T -gt 25 ] && timeout $T python3 -m schedgen bench $spec \
  --backend cuda $SZ "$@" --json $O/$case.json > $O/$case.out 2>&1; echo "$case (rc $?):"; tail -7 $O/$case.out | cut -c1-160; }
xb add_tma specs/add_bf16.yaml
xb add_regs specs/add_bf16.yaml $REGS
xb gelu_tma specs/gelu_bias_bf16.yaml
xb gelu_regs specs/gelu_bias_bf16.yaml $REGS
# register-path variants of add_bf16, timed together (bench/sweep.py verifies each first)
R="schedule.backends=[cuda];schedule.pipeline.data_path=registers;schedule.pipeline.max_concurrent_steps=2"
blk() { echo "schedule.in_specs.x.block_shape=[$1,256];schedule.in_specs.y.block_shape=[$1,256];schedule.out_specs.o.block_shape=[$1,256]"; }
T=$(cap 90); [ $T -gt 30 ] && timeout $T python3 bench/sweep.py specs/add_bf16.yaml $SZ --iters 40 --out $O/sweep_add.json \
  --variant "regs:$R" --variant "regs_wg1:$R;schedule.num_warpgroups=1" --variant "regs_r16:$R;$(blk 16)" \
  --variant "regs_r64:$R;$(blk 64)" --variant "regs_once:$R;schedule.persistent.loop=none" > $O/sweep_add.out 2>&1
echo "sweep add_bf16 (rc $?):"; grep -A12 "^variant" $O/sweep_add.out | cut -c1-160
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/mapregs.tgz -C $OUT mr 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
