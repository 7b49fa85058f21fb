# Session 13's third H200 call, after gpu_s17c.sh and gpu_s17b.sh (<= 420 s): the rowwise family timed with its new
# defaults (approx_math picked for the 16-bit bundled specs): the bundled softmax / layernorm / rmsnorm against copy,
# torch's op and torch.compile, then softmax at a constant 2^26 elements over rows of 4k .. 256k columns (a cluster of
# 2 .. 8 CTAs a row from 64k up: is it flat?). `schedgen bench` verifies each contender first. One tarball.
set -u
O=$OUT/r; mkdir -p $O
. bench/guard.sh 420
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
b() { local label=$1 spec=$2; shift 2; local T; T=$(cap 45); [ $T -gt 25 ] || return 0
  timeout $T python3 -m schedgen bench $spec --backend cuda "$@" --json $O/$label.json > $O/$label.out 2>&1
  echo "$label (rc $?):"; grep -E "copy|torch|ours|ms" $O/$label.out | head -6 | cut -c1-160; }
b softmax specs/softmax_bf16.yaml --at M=16384
b layernorm specs/layernorm_bf16.yaml --at M=16384
b rmsnorm specs/rmsnorm_bf16.yaml --at M=16384
for n in 262144 65536 16384 4096 131072 32768; do
  b softmax_N$n specs/softmax_bf16_262k.yaml -D op.sizes.N=$n -D op.sizes.M=$(( 67108864 / n ))
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tar czf $OUT/s18.tgz -C $OUT r 2>/dev/null; rm -rf $O
echo done $(( $(date +%s) - START )) s
