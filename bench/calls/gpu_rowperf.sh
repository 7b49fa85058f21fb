# Row-wise softmax and cross-entropy speed (issue 18's misses) on the H200: the CUDA kernel now prefetches the next
# piece of rows (row block, or the row's next segment) into a two-slot SMEM ring by cp.async while it reduces this one
# (pipeline.kind: emit_pipeline, the default); pipeline.kind: none is the kernel before it (loads straight into the
# registers, one row in flight a row group). First a short run of the rowwise GPU tests (-x, no Pallas, no long
# clusters), then `schedgen bench` of softmax 16384 x 8192, cross-entropy 8192 x 32000 and 4096 x 128256, each with
# the new default ("new"), with approx_math ("new_approx") and with pipeline.kind: none ("old"), while time is left.
# Run from the repo root after `. .devkit/activate`:
#   OUT=/some/dir bash bench/calls/gpu_rowperf.sh          (on the device machine $OUT is set already)
# Writes $OUT/rowperf/{pytest.log, <case>.json, <case>.out, bench.md}; prints a short table last. At most ~200 s:
# 65 s of tests, then each bench (35 s at most, the first of a spec 45 s) started only while fewer than 165 s have
# passed (about 200 s; what is skipped says so).
set -u
O=${OUT:-/tmp/out}/rowperf; mkdir -p "$O"
SECONDS=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$O/clocks.txt" 2>&1
timeout 65 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/families/rowwise/test_rowwise_gpu.py \
  -k "bundled_spec_at or variants or ragged_rows or softmax_131k or xent_c2 or softmax_c2_short" \
  > "$O/pytest.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed|skipped" "$O/pytest.log" | grep -v "^SKIPPED" | cut -c1-400
tail -n 1 "$O/pytest.log" | grep -qE " in [0-9.]+s" || echo "pytest: cut at 65 s (see $O/pytest.log)"
OLD="-D schedule.pipeline.kind=none -D schedule.pipeline.max_concurrent_steps=2"   # (kind none reads no depth)
run() {   # case, spec, --at, extra -D ...
  local case=$1 spec=$2 at=$3; shift 3
  if [ "$SECONDS" -ge 165 ]; then echo "$case: skipped (${SECONDS} s used)"; return; fi
  timeout "${T:-35}" python3 -m schedgen bench "$spec" --backend cuda --at "$at" "$@" --json "$O/$case.json" \
    > "$O/$case.out" 2>&1 || echo "$case: bench exited $? (see $O/$case.out)"
}
# shellcheck disable=SC2086   # OLD and APPROX are -D pairs
{
# the new defaults first (the old kernel's numbers are in docs/benchmarks.md too), approx_math (ex2.approx, and
# softmax's e / sum(e) as one reciprocal a row: is the kernel bound by its instructions once the loads overlap?),
# then the old kernel
APPROX="-D schedule.compiler_params.approx_math=true"
T=45 run softmax_16384x8192_new specs/softmax_bf16.yaml M=16384     # (first of a spec: torch.compile cold, 45 s)
run softmax_16384x8192_new_approx specs/softmax_bf16.yaml M=16384 $APPROX
T=45 run xent_8192x32000_new specs/crossentropy_bf16.yaml M=8192
run xent_4096x128256_new specs/crossentropy_bf16.yaml M=4096 -D op.sizes.N=128256
run softmax_16384x8192_old specs/softmax_bf16.yaml M=16384 $OLD
run xent_8192x32000_old specs/crossentropy_bf16.yaml M=8192 $OLD
run xent_4096x128256_old specs/crossentropy_bf16.yaml M=4096 -D op.sizes.N=128256 $OLD
run xent_8192x32000_new_approx specs/crossentropy_bf16.yaml M=8192 $APPROX
# if time is left: other blockings with the ring (one row in flight, 3 CTAs an SM; two 256-thread CTAs a row each)
run softmax_16384x8192_new_1step specs/softmax_bf16.yaml M=16384 -D schedule.pipeline.max_concurrent_steps=1
run xent_8192x32000_new_2wg specs/crossentropy_bf16.yaml M=8192 -D schedule.num_warpgroups=2
}
echo "(${SECONDS} s)"
python3 - "$O" <<'PY' 2>&1 | tee "$O/bench.md"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print("| case | shape | ms | GB/s | vs copy | vs torch op | vs torch.compile | ok |")
print("|---|---|---|---|---|---|---|---|")
for f in sorted(out.glob("*.json")):
    try:
        data = json.loads(f.read_text())
        rows = data if isinstance(data, list) else data.get("rows", [])
    except Exception as exc:
        print(f"| {f.stem} | unreadable: {exc} |"); continue
    for r in rows:
        peers = r.get("peers") or {}
        def ratio(name):
            p = peers.get(name) or {}
            return f"{p['ratio']:.2f}" if p.get("ratio") else ("skip" if p.get("skipped") else "-")
        shape = " ".join(f"{k}={v}" for k, v in (r.get("shape") or {}).items())
        ms = f"{r['time_ms']:.4f}" if r.get("time_ms") else r.get("error", "-")[:60]
        gbps = f"{r['gbps']:.0f}" if r.get("gbps") else "-"
        print(f"| {f.stem} | {shape} | {ms} | {gbps} | {ratio('copy')} | {ratio('torch')} | "
              f"{ratio('torch_compile')} | {'yes' if r.get('verified') else 'NO'} |")
PY
