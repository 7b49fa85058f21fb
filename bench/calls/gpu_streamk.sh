# Stream-K (schedule.persistent.decomposition: stream_k) on the H200, one call (<= 300 s): the GPU tests
# (float64 at ragged sizes with epilogues, few blocks with many units, a CUDA-graph replay), then stream_k vs
# data_parallel vs cuBLAS at the two user shapes whose waves are part-full (issue 17), each <= 60 s with
# bench/sweep.py (variants verified against float64, then timed in interleaved rounds with the peers).
#   bash bench/calls/gpu_streamk.sh          (writes $OUT/sk; tarball $OUT/sk.tgz)
set -u
O=$OUT/sk; mkdir -p $O
. bench/guard.sh 300
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
T=$(cap 150); timeout $T python3 -m pytest -q -m gpu -p no:cacheprovider --tb=long -rA \
  tests/families/matmul/test_stream_k.py > $O/t_streamk.log 2>&1
echo "1 stream-K GPU tests:"; grep -E "^E  |^FAILED|^PASSED|passed|failed" $O/t_streamk.log | cut -c1-300 | tail -12
S=bench/user_shapes
SK="schedule.persistent.decomposition=stream_k"
T256="schedule.in_specs.a.block_shape=[128,64];schedule.in_specs.b.block_shape=[64,256];schedule.out_specs.out.block_shape=[128,256];schedule.in_specs.a.out_of_bounds=zero;schedule.in_specs.b.out_of_bounds=zero"
# the spec as written is data_parallel with the planner's picks (3000x5000x1000: a 2-CTA cluster); c1: the same
# 1-CTA launch stream_k gets; sk: stream_k with the planner's tile; sk256: stream_k on 128 x 256 tiles
for f in gemm_1536x3072x1536 gemm_3000x5000x1000; do
  T=$(cap 60); [ $T -gt 20 ] && timeout $T python3 bench/sweep.py $S/$f.yaml --iters 60 --out $O/$f.json \
    --variant "c1:schedule.cluster=[1,1]" --variant "sk:$SK" --variant "sk256:$SK;$T256" > $O/$f.out 2>&1
  echo "2 $f:"; grep -A14 "^variant" $O/$f.out | cut -c1-200
done
cd $OUT && tar czf sk.tgz sk
