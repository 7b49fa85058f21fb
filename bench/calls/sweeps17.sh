set -u
O=$OUT/l; mkdir -p $O
S=bench/user_shapes
oob="schedule.in_specs.a.out_of_bounds=zero;schedule.in_specs.b.out_of_bounds=zero"
t() { # name tm tn tk stages  (b is [K,N])
 echo "$1:schedule.in_specs.a.block_shape=[$2,$4];schedule.in_specs.b.block_shape=[$4,$3];schedule.out_specs.out.block_shape=[$2,$3];schedule.pipeline.max_concurrent_steps=$5;$oob"; }
tt() { # transposed b [N,K]
 echo "$1:schedule.in_specs.a.block_shape=[$2,$4];schedule.in_specs.b.block_shape=[$3,$4];schedule.out_specs.out.block_shape=[$2,$3];schedule.pipeline.max_concurrent_steps=$5;$oob"; }
run() { local f=$1; shift; timeout 150 python3 bench/sweep.py $S/$f.yaml --iters 60 --out $O/$f.json "$@" > $O/$f.out 2>&1; tail -12 $O/$f.out; }
run decode_16x8192x8192 --variant "$(tt k128s6 64 64 128 6)" --variant "$(tt k256s3 64 64 256 3)" --variant "$(tt n32k128s6 64 32 128 6)" --variant "$(tt n32k64s10 64 32 64 10)"
run gemm_3000x5000x1000 --variant "$(t t128x128s6 128 128 64 6)" --variant "$(t t256x128s4 256 128 64 4)" --variant "c2:schedule.cluster=[2,1]" --variant "w16:schedule.persistent.tile_width=16" --variant "w4:schedule.persistent.tile_width=4"
run gemm_f32out_4000x6000x3000 --variant "$(t t128x128s6 128 128 64 6)" --variant "$(t t256x128s4 256 128 64 4)" --variant "c2:schedule.cluster=[2,1]"
run linear_2777x11008x4096 --variant "$(tt t256x128s4 256 128 64 4)" --variant "c2:schedule.cluster=[2,1]" --variant "w16:schedule.persistent.tile_width=16"
run linear_bias_gelu_f16_4096x4096x1024 --variant "approx:schedule.compiler_params.approx_math=true" --variant "$(tt t128x128s6 128 128 64 6)" --variant "$(tt t256x128s4 256 128 64 4)"
cd $OUT && tar czf l.tgz l
