#!/usr/bin/env bash
# grouped_matmul on the H200 (issue 18, part 3): the family's GPU tests, then `schedgen bench` of the two bundled
# grouped specs (Mixtral-like: 8 experts, N = 14336, K = 4096; DeepSeek-like: 64 experts, N = 4096, K = 7168) at a
# few token counts, skewed random expert counts with empty experts (schedgen/families/grouped_matmul/reference.py),
# against torch._grouped_mm, a Python loop of cuBLAS calls (torch.matmul per expert) and a device copy; a short table
# last. Run from the repo root after `. .devkit/activate`:
#     bash bench/calls/gpu_grouped.sh          # writes $OUT/grouped/ (OUT defaults to ./out): logs, grouped.json
# About 3 minutes (most of it host-side: random weights of up to 1.9G elements and float64 reference rows).
set -u
O=${OUT:-out}/grouped
mkdir -p "$O"
SECONDS=0
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/grouped_matmul > "$O/tests.log" 2>&1
echo "gpu tests: $(tail -1 "$O/tests.log")  (${SECONDS}s)"
b() { local name=$1 spec=$2; shift 2
      timeout 170 python3 -m schedgen bench "$spec" --backend cuda --iters 20 "$@" --json "$O/grouped.json" \
          > "$O/$name.out" 2>&1
      echo "bench $name: rc $? (${SECONDS}s)"; }
b mixtral specs/grouped_moe_mixtral_bf16_dynamic.yaml --at T=8192 --at T=32768
b deepseek specs/grouped_moe_deepseek_bf16_dynamic.yaml --at T=16384
python3 - "$O/grouped.json" <<'PY'
import json, sys
from schedgen.families.grouped_matmul.peers import summary
try:
    rows = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"no record: {e}")
print("\n".join(summary(rows)))
for r in rows:
    for name, p in (r.get("peers") or {}).items():
        if p.get("skipped") or p.get("verified") is False:
            print(f"  {r.get('spec')} T={r.get('shape', {}).get('T')}: {name}: {p.get('skipped') or 'NOT verified'}")
    if r.get("verified") is False or r.get("error"):
        print(f"  {r.get('spec')} T={r.get('shape', {}).get('T')}: ours: {r.get('error') or 'NOT verified'}")
PY
