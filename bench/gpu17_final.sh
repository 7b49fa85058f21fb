# The session's last H200 call (2026-12-04): the GPU tests of what landed today (ping-pong, Pallas ragged and
# persistent attention, Pallas column-broadcast maps), each in its own process (one kernel fault cannot take the
# others with it), then the fused Linear against torch eager and torch.compile(max-autotune).
set -u
O=$OUT   # files straight under $OUT: what a step wrote comes back even if the call is cut short
t() { local name=$1 lim=$2; shift 2; timeout $lim python3 -m pytest -q -m gpu -p no:cacheprovider "$@" > $O/$name.log 2>&1; echo "$name: $(tail -1 $O/$name.log)"; }
t pattn 170 tests/families/attention/test_pallas_attention.py
t pbcast 80 tests/families/map/test_map_columns.py
t pingpong 80 tests/families/matmul/test_pingpong.py
timeout 120 python3 -m schedgen bench bench/user_shapes/linear_bias_gelu_f16_4096x4096x1024.yaml --backend cuda --json $O/fused.json > $O/fused.out 2>&1; grep -E "^\| linear|torch_" $O/fused.out | cut -c1-260
timeout 60 python3 -m schedgen bench specs/attention_bf16_16384_persistent.yaml -D "schedule.backends=[cuda,pallas]" --json $O/persistent.json > $O/persistent.out 2>&1; grep -E "^\| attention" $O/persistent.out | cut -c1-200
