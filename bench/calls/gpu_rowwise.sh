# The rowwise family (issue 18) on the H200: its GPU tests, then `schedgen bench` of each bundled rowwise spec
# against a device copy, torch's own op and torch.compile. Run from the repo root after `. .devkit/activate`:
#   OUT=/some/dir bash bench/calls/gpu_rowwise.sh          (on the device machine $OUT is set already)
# Writes $OUT/rowwise/{pytest.log, <spec>.json, <spec>.out, bench.md}; prints a short table last. At most 120 + 5 x 45 s.
set -u
O=${OUT:-/tmp/out}/rowwise; mkdir -p "$O"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$O/clocks.txt" 2>&1
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/rowwise > "$O/pytest.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "$O/pytest.log" | cut -c1-400
# realistic shapes: M = 16384 rows (8192 for the vocabulary rows); the specs' M is dynamic (up to 65536) and --at
# times the one package at these sizes. The CUDA backend only (the Pallas one, a Mosaic GPU compile a shape, is
# verified by the tests above; time it with --backend pallas when there is time to spare).
for s in softmax_bf16 layernorm_bf16 rmsnorm_bf16 crossentropy_bf16; do
  case $s in crossentropy_bf16) at=M=8192 ;; *) at=M=16384 ;; esac
  timeout 45 python3 -m schedgen bench specs/$s.yaml --backend cuda --at $at --json "$O/$s.json" > "$O/$s.out" 2>&1 \
    || echo "$s: bench exited $? (see $O/$s.out)"
done
# a Llama-3 vocabulary row (128256): the row streams through the registers
timeout 45 python3 -m schedgen bench specs/crossentropy_bf16.yaml -D op.sizes.N=128256 --backend cuda --at M=4096 \
  --json "$O/crossentropy_128256.json" > "$O/crossentropy_128256.out" 2>&1 || echo "crossentropy 128256: bench exited $?"
python3 - "$O" <<'PY' 2>&1 | tee "$O/bench.md"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print("| spec | backend | shape | ms | GB/s | vs copy | vs torch op | vs torch.compile | ok |")
print("|---|---|---|---|---|---|---|---|---|")
for f in sorted(out.glob("*.json")):
    try:
        data = json.loads(f.read_text())
        rows = data if isinstance(data, list) else data.get("rows", [])
    except Exception as exc:
        print(f"| {f.stem} | - | unreadable: {exc} |"); continue
    for r in rows:
        peers = r.get("peers") or {}
        def ratio(name):
            p = peers.get(name) or {}
            return f"{p['ratio']:.2f}" if p.get("ratio") else ("skip" if p.get("skipped") else "-")
        shape = " ".join(f"{k}={v}" for k, v in (r.get("shape") or {}).items())
        ms = f"{r['time_ms']:.4f}" if r.get("time_ms") else r.get("error", "-")[:60]
        gbps = f"{r['gbps']:.0f}" if r.get("gbps") else "-"
        print(f"| {r.get('spec')} | {r.get('backend')} | {shape} | {ms} | {gbps} | {ratio('copy')} | "
              f"{ratio('torch')} | {ratio('torch_compile')} | {'yes' if r.get('verified') else 'NO'} |")
PY
