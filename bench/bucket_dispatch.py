"""The per-call host cost of a bucketed package's choice of variant (docs/tuning.md, "Many shapes, one package"), on
the CPU: the launch is faked, so what is timed is the dispatch alone.

    python -m bench.bucket_dispatch [--calls N]

Builds a 3-bucket, 2-variant package of a small dynamic-M map spec (tests/runtime/test_bucket_dispatch.py's) and times:
- `pick`: BucketedKernel.pick on two inputs (a shape read and a bisect);
- `bucketed call`: BucketedKernel.__call__ on torch tensors, eager, each variant's torch fast path (`_call_torch`)
  replaced by its routing test (`plain_context`) and a preallocated result (no launch): the routing, the pick;
- `one-kernel call`: the same faked fast path through a plain Kernel's __call__ (a package without buckets);
- `package function`: the bucketed package's function (one more Python call around `bucketed call`).
The difference of the last two is what the buckets add to an eager torch call. Median of 7 rounds of N calls.
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import torch  # noqa: E402

from schedgen.bucketed import build_bucketed, package_bucketed  # noqa: E402
from schedgen.cache import Cache  # noqa: E402
from schedgen.runtime import torch_op  # noqa: E402
from schedgen.tune import buckets as B  # noqa: E402


def per_call(fn, calls: int) -> float:
    rounds = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - t0) / calls)
    return statistics.median(rounds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    from runtime.test_bucket_dispatch import SPEC, row
    tmp = Path(tempfile.mkdtemp(prefix="bucket-dispatch-"))
    spec = tmp / "add_dyn.yaml"
    spec.write_text(SPEC)
    bk, _ = B.load(spec)
    choices = [({"M": 64}, row(32, 64)), ({"M": 256}, row(64, 256)), ({"M": 1024}, row(32, 1024))]
    bb = build_bucketed(spec, {}, bk, choices, cache=Cache(tmp / "cache"))
    sys.path.insert(0, str(package_bucketed(bb, tmp / "out").parent))
    mod = importlib.import_module("add_dyn")
    k = mod.kernel
    x = torch.ones(288, 256, dtype=torch.bfloat16)
    result = torch.empty_like(x)
    for v in k.variants:   # the fast path's first test (the routing rule) kept; the rest of it, the launch, faked
        v._call_torch = lambda args, out, stream, op=None: result if op.plain_context() else None
    plain = k.variants[0]
    plain.torch_op = k.torch_op             # a one-kernel package's routing, with the same faked fast path
    rows = {"pick": per_call(lambda: k.pick((x, x)), args.calls),
            "bucketed call": per_call(lambda: k(x, x), args.calls),
            "one-kernel call": per_call(lambda: plain(x, x), args.calls),
            "package function": per_call(lambda: mod.add_dyn(x, x), args.calls)}
    assert torch_op.EAGER_DIRECT
    for name, t in rows.items():
        print(f"{name:16} {t * 1e6:7.3f} us")
    print(f"{'added by buckets':16} {(rows['bucketed call'] - rows['one-kernel call']) * 1e6:7.3f} us")


if __name__ == "__main__":
    main()
