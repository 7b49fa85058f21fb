# Issue 17 call 4: ping-pong consumers (schedule.pipeline.consumer_schedule) against the cooperative default and
# cuBLAS at the shapes where the epilogue is exposed (short K, fused epilogues, f32 out); their GPU tests first.
set -u
O=$OUT/l; mkdir -p $O
S=bench/user_shapes
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/matmul/test_pingpong.py > $O/pingpong_tests.log 2>&1; tail -3 $O/pingpong_tests.log
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/attention/test_attention_peers.py tests/families/map/test_map_peers.py tests/families/matmul/test_torch_peers.py > $O/peers_tests.log 2>&1; tail -3 $O/peers_tests.log
run() { local f=$1; shift; timeout 110 python3 bench/sweep.py $f --iters 60 --out $O/$(basename $f .yaml).json "$@" > $O/$(basename $f .yaml).out 2>&1; grep -A12 "^variant" $O/$(basename $f .yaml).out | cut -c1-75; }
pp="schedule.backends=[cuda];schedule.pipeline.consumer_schedule"
t128t="schedule.in_specs.a.block_shape=[128,64];schedule.in_specs.b.block_shape=[128,64];schedule.out_specs.out.block_shape=[128,128];schedule.in_specs.a.out_of_bounds=zero;schedule.in_specs.b.out_of_bounds=zero;schedule.pipeline.max_concurrent_steps=6;schedule.cluster=[2,1];schedule.in_specs.b.collective_axes=[cluster]"
t64t="schedule.in_specs.a.block_shape=[64,64];schedule.in_specs.b.block_shape=[256,64];schedule.out_specs.out.block_shape=[64,256];schedule.in_specs.a.out_of_bounds=zero;schedule.in_specs.b.out_of_bounds=zero;schedule.pipeline.max_concurrent_steps=4"
run $S/linear_bias_gelu_f16_4096x4096x1024.yaml --variant "pp:$pp=pingpong" --variant "ppu:$pp=pingpong_unordered" --variant "pp64x256:$pp=pingpong;$t64t;schedule.pipeline.num_compute_wgs=2"
run $S/linear_bias_residual_4096x4096x1024.yaml --variant "pp:$pp=pingpong" --variant "ppu:$pp=pingpong_unordered"
run $S/gemm_3000x5000x1000.yaml --variant "pp:$pp=pingpong" --variant "pp128c2:$pp=pingpong;$(echo $t128t | sed 's/b.block_shape=\[128,64\]/b.block_shape=[64,128]/')"
run $S/gemm_f32out_4000x6000x3000.yaml --variant "pp:$pp=pingpong" --variant "pp128c2:$pp=pingpong;$(echo $t128t | sed 's/b.block_shape=\[128,64\]/b.block_shape=[64,128]/')"
# the new peers on the GPU: SDPA cuDNN / flash and JAX against our attention; the map against torch's eager op
timeout 150 python3 -m schedgen bench specs/attention_bf16_4096.yaml --json $O/attention_peers.json > $O/attention_peers.out 2>&1; tail -6 $O/attention_peers.out | cut -c1-220
timeout 100 python3 -m schedgen bench specs/add_bf16.yaml -D M=16384 -D N=16384 --backend cuda --json $O/map_peers.json > $O/map_peers.out 2>&1; tail -4 $O/map_peers.out | cut -c1-220
cd $OUT && tar czf l.tgz l
