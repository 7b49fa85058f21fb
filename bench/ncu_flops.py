"""The attention FLOP count against the tensor pipe (issue 17): ncu counts the wgmma instructions one launch of our
CUDA kernel executes; each is m64 x n x k16 (QK^T: n = the key block, PV: n = D), so their FLOPs are known exactly,
and the ratio to the count the benchmark divides by (attention_flops: 4 D per unmasked score) says whether the
TFLOP/s the record reports are real: 1.000 non-causal (every score computed), a few % above 1 causal (the diagonal
blocks are computed whole and masked).

    python3 bench/ncu_flops.py name SPEC [-D k=v ...]      the kernel's name (for ncu -k)
    python3 bench/ncu_flops.py launch SPEC [-D k=v ...]    one launch on random inputs (run it under ncu)
    python3 bench/ncu_flops.py report SPEC CSV [-D ...]    the instruction count of ncu's CSV against the formula
"""
from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _built(spec: str, defines: list[str]):
    from schedgen.build import build_spec
    from schedgen.frontend.overrides import parse_overrides
    return build_spec(spec, parse_overrides(defines))


def launch(built) -> None:
    from schedgen.build import package
    from schedgen.reference import random_inputs
    from schedgen.runtime import driver
    from schedgen.runtime.kernel import load_package
    from schedgen.verify import device_buffers
    kernel = load_package(package(built, Path(tempfile.mkdtemp())))
    sizes = dict(built.plan.sizes)
    inputs = random_inputs(built.spec, sizes, 1)
    call = kernel.bind([inputs[o.name].shape for o in built.plan.inputs])
    bufs_in, bufs_out = device_buffers(built.plan, inputs, kernel.output_shapes(call))
    kernel._launcher([b.ptr for b in bufs_in], [b.ptr for b in bufs_out], 0, sizes=call)()
    driver.synchronize()


def formula(plan) -> int:
    from schedgen.families.attention.records import attention_flops
    return attention_flops(int(plan.batch), int(plan.heads_q), int(plan.seq_q), int(plan.seq_kv), plan.head_dim,
                           plan.causal_alignment if plan.causal else None)


def report(built, path: str) -> None:
    plan = built.plan
    rows = [r for r in csv.reader(line for line in Path(path).read_text().splitlines() if line.startswith('"'))]
    head, body = rows[0], rows[1:]
    name_i, value_i = head.index("Metric Name"), head.index("Metric Value")
    got = {}
    for r in body:
        try:
            got[r[name_i]] = got.get(r[name_i], 0.0) + float(r[value_i].replace(",", ""))
        except ValueError:
            continue
    want = formula(plan)
    kv = plan.block_kv if hasattr(plan, "block_kv") else 128
    per = 2 * 64 * 16 * (kv + plan.head_dim) / 2     # mean FLOPs of one wgmma (QK^T and PV issue alike counts)
    print(f"{plan.name}: formula {want:.4e} FLOPs (4 D per unmasked score)")
    for name, value in sorted(got.items()):
        if "gmma" in name or "tensor" in name:
            print(f"  {name} = {value:.6e}: as warpgroup instructions x {per:.0f} FLOPs = {value * per / want:.4f} "
                  f"of the formula; as warp instructions (/4) = {value * per / 4 / want:.4f}")


def main(argv: list[str]) -> int:
    mode, spec, rest = argv[0], argv[1], argv[2:]
    csv_path = rest.pop(0) if mode == "report" else None
    defines = [rest[i + 1] for i in range(len(rest)) if rest[i] == "-D"]
    built = _built(spec, defines)
    if mode == "name":
        print(built.plan.kernel_name)
    elif mode == "launch":
        launch(built)
    else:
        report(built, csv_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
