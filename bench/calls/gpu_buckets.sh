# Issue 21 part 2 on the H200 (many shapes, one package): tune specs/matmul_bf16_dynamic_buckets.yaml's five buckets
# of M into a fresh database, build the bucketed package from it, run the GPU test of a bucketed package (every
# variant against float64: eager torch and numpy, torch.compile, a CUDA graph, Pallas), and time the built package
# at a size of each bucket against the spec's own one-schedule package (bench --at on the plain build).
# Run from the repository root with $OUT set (results land there); about 5 minutes.
set -u
O=${OUT:-/tmp/gpu_buckets}
mkdir -p $O
export XLA_PYTHON_CLIENT_PREALLOCATE=false
DB=$O/tune.sqlite
SPEC=specs/matmul_bf16_dynamic_buckets.yaml
timeout 300 python3 -m schedgen tune $SPEC --db $DB > $O/tune.log 2> $O/tune.err
echo "tune: exit $?"; tail -12 $O/tune.log | cut -c1-200
timeout 120 python3 -m schedgen build $SPEC --tuned --db $DB -o $O/build > $O/build.log 2>&1
echo "build --tuned: exit $?"; cut -c1-200 $O/build.log
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runtime/test_bucket_dispatch.py tests/runtime/test_bucket_backward.py > $O/gputest.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $O/gputest.log | cut -c1-200 | tail -5
# the bucketed package against the spec's own schedule, per bucket (CUDA events, torch tensors, eager)
timeout 120 python3 - "$O" > $O/compare.log 2>&1 <<'PY'
import importlib, sys, torch
from pathlib import Path
out = Path(sys.argv[1])
sys.path.insert(0, str(out / "build"))
bucketed = importlib.import_module("matmul_bf16_dynamic_buckets")
from schedgen.build import build_spec, package
from schedgen.runtime import load_package
own = load_package(package(build_spec("specs/matmul_bf16_dynamic_buckets.yaml"), out / "own"))
def ms(fn, a, b, n=50):
    for _ in range(5): fn(a, b)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): fn(a, b)
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n
for m in (64, 256, 1024, 4096, 16384):
    a = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16); b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    v = bucketed.kernel.variant_for({"M": m}).root.name
    tb, to = ms(bucketed.matmul_bf16_dynamic_buckets, a, b), ms(own, a, b)
    print(f"M={m:6d} variant {v}: bucketed {tb:.4f} ms, spec's own schedule {to:.4f} ms, x{to / tb:.2f}")
PY
cat $O/compare.log | cut -c1-200 | tail -8
