# Long rows split across a thread-block cluster (issue 18, the rowwise family's DSMEM reduction) on the H200: the GPU
# tests of the cluster path against float64, then `schedgen bench` of softmax over rows of 4 K .. 256 K columns at
# a constant 64 M elements (M x N = 2^26, bf16: 128 MiB in, 128 MiB out) to see whether it stays flat, against a
# device copy and torch's own softmax. Run from the repo root after `. .devkit/activate`:
#   OUT=/some/dir bash bench/calls/gpu_rowcluster.sh       (on the device machine $OUT is set already)
# Writes $OUT/rowcluster/{pytest.log, N<n>.json, N<n>.out}. At most 240 + 6 x 45 s.
set -u
O=${OUT:-/tmp/out}/rowcluster; mkdir -p "$O"
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/rowwise/test_rowwise_gpu.py \
  -k "cluster or 262k" > "$O/pytest.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "$O/pytest.log" | cut -c1-400
# the bundled spec (256 x 262144, a picked cluster of 8 CTAs a row), then shorter rows at the same bytes: N <= 32768
# keeps the row in one CTA (no cluster), 65536 .. 262144 pick clusters of 2 .. 8
for n in 262144 131072 65536 32768 16384 4096; do
  m=$(( 67108864 / n ))
  timeout 45 python3 -m schedgen bench specs/softmax_bf16_262k.yaml -D op.sizes.N=$n -D op.sizes.M=$m --backend cuda \
    --json "$O/N$n.json" > "$O/N$n.out" 2>&1 || echo "N=$n: bench exited $? (see $O/N$n.out)"
  grep -E "copy|torch|ms" "$O/N$n.out" | head -6
done
