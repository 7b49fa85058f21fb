"""The README's first example: a dynamic-size package called from torch inside torch.compile(fullgraph=True).

    schedgen build specs/linear_gelu_bf16_dynamic.yaml -o build/ && python examples/linear_gelu_torch.py

Checks each result against torch's own linear + gelu and that one graph served every token count."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import build.linear_gelu as k  # noqa: E402  (the package schedgen build wrote)

w = torch.randn(4096, 4096, dtype=torch.bfloat16, device="cuda") * 0.02   # [N, K], torch.nn.Linear's layout
b = torch.randn(4096, dtype=torch.float32, device="cuda")


@torch.compile(fullgraph=True, dynamic=True, backend=sys.argv[1] if len(sys.argv) > 1 else "inductor")
def mlp(x):
    return k.linear_gelu(x, w, b) * 0.5


for tokens in (1, 77, 4096, 65536):
    x = torch.randn(tokens, 4096, dtype=torch.bfloat16, device="cuda")
    y = mlp(x)
    ref = torch.nn.functional.gelu(x.float() @ w.float().T + b, approximate="tanh") * 0.5
    err = ((y.float() - ref).norm() / ref.norm()).item()
    print(f"M={tokens:6d}  rel.error {err:.2e}  {'ok' if err < 1e-2 else 'FAIL'}")
    assert err < 1e-2
print("compiled graphs:", torch._dynamo.utils.counters["stats"]["unique_graphs"])
