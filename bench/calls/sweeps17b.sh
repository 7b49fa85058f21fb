# Issue 17 call 3: the planner's new defaults (wave-quantized tile choice, 2-CTA clusters, skinny K) against
# the old ones and cuBLAS. Run on the H200: bash bench/calls/sweeps17b.sh (writes $OUT/l).
set -u
O=$OUT/l; mkdir -p $O
S=bench/user_shapes
oob="schedule.in_specs.a.out_of_bounds=zero;schedule.in_specs.b.out_of_bounds=zero"
tt() { # name tm tn tk stages cluster: transposed b [N,K]
 echo "$1:schedule.in_specs.a.block_shape=[$2,$4];schedule.in_specs.b.block_shape=[$3,$4];schedule.out_specs.out.block_shape=[$2,$3];schedule.pipeline.max_concurrent_steps=$5;$oob;schedule.cluster=[$6,1]$( [ $6 = 2 ] && echo ';schedule.in_specs.b.collective_axes=[cluster]')"; }
run() { local f=$1; shift; timeout 150 python3 bench/sweep.py $f --iters 60 --out $O/$(basename $f .yaml).json "$@" > $O/$(basename $f .yaml).out 2>&1; grep -A20 "^variant" $O/$(basename $f .yaml).out; }
timeout 200 python3 bench/mm_fair.py --backends cuda --out $O bench/user_shapes/*.yaml > $O/fair.out 2>&1; grep -A20 "^spec " $O/fair.out
c2="schedule.cluster=[2,1];schedule.in_specs.b.collective_axes=[cluster]"
run specs/matmul_bf16_4096.yaml --variant "c2:$c2"
run specs/matmul_bf16_8192x28672x4096.yaml --variant "c2:$c2"
run specs/matmul_bf16_2048x8192x8192.yaml --variant "c2:$c2"
run $S/linear_2777x11008x4096.yaml --variant "$(tt n192c1 128 192 64 4 1)" --variant "$(tt n192c2 128 192 64 4 2)" --variant "$(tt n256c1 128 256 64 4 1)"
run $S/decode_64x8192x8192.yaml --variant "$(tt k64s6 64 64 64 6 1)"
run $S/decode_128x8192x8192.yaml --variant "$(tt k64s6 64 128 64 6 1)" --variant "$(tt k128s4n64 64 64 128 6 1)"
run $S/gemm_1536x3072x1536.yaml --variant "n256:schedule.in_specs.a.block_shape=[128,64];schedule.in_specs.b.block_shape=[64,256];schedule.out_specs.out.block_shape=[128,256]"

mb() { echo "$1:schedule.in_specs.x.block_shape=[$2,$3];schedule.in_specs.y.block_shape=[$2,$3];schedule.out_specs.o.block_shape=[$2,$3];schedule.pipeline.max_concurrent_steps=$4"; }
run specs/add_bf16.yaml -D M=32768 -D N=16384 --variant "$(mb b64x256s2 64 256 2)" --variant "$(mb b32x128s8 32 128 8)" --variant "$(mb b16x256s8 16 256 8)" --variant "$(mb b64x128s4 64 128 4)" --variant "wg1:$(mb x 32 256 4 | cut -d: -f2);schedule.num_warpgroups=1"
cd $OUT && tar czf l.tgz l
