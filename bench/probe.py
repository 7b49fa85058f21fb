"""First-contact probe of the GPU machine: toolchain compatibility and ceilings.

Run on the device machine: python3 bench/probe.py CUBIN
Checks that a cubin built here by pip's newest NVRTC loads under the machine's driver,
and reads the copy bandwidth ceiling.
"""
import json, sys, subprocess

out = {}
from cuda.bindings import driver as cu
def ck(r):
    err = r[0] if isinstance(r, tuple) else r
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(str(err))
    return r[1:] if isinstance(r, tuple) and len(r) > 2 else (r[1] if isinstance(r, tuple) and len(r) == 2 else None)
ck(cu.cuInit(0))
dev = ck(cu.cuDeviceGet(0))
ctx = ck(cu.cuDevicePrimaryCtxRetain(dev))
ck(cu.cuCtxSetCurrent(ctx))
out["driver_version"] = ck(cu.cuDriverGetVersion())
data = open(sys.argv[1], "rb").read()
r = cu.cuModuleLoadData(data)
out["cubin_13_5_load"] = str(r[0])
if r[0] == cu.CUresult.CUDA_SUCCESS:
    f = ck(cu.cuModuleGetFunction(r[1], b"k"))
    buf = ck(cu.cuMemAlloc(128 * 4))
    import ctypes, numpy as np
    p = ctypes.c_void_p(int(buf))
    args = (ctypes.c_void_p * 1)(ctypes.addressof(p))
    out["launch"] = str(cu.cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, 0, ctypes.addressof(args), 0)[0])
    ck(cu.cuCtxSynchronize())
    h = np.zeros(128, np.float32)
    ck(cu.cuMemcpyDtoH(h.ctypes.data, buf, 512))
    out["launch_ok"] = bool((h == np.arange(128) * 2).all())
import torch
x = torch.randn(1 << 30, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
ts = []
for _ in range(20):
    s.record(); y.copy_(x); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
ts.sort(); t = ts[len(ts)//2]
out["copy_gbps"] = 2 * x.numel() * 2 / (t * 1e-3) / 1e9
import jax
out["jax"] = jax.__version__; out["devices"] = str(jax.devices())
import pydantic; out["pydantic"] = pydantic.VERSION
try:
    from jax.experimental.pallas import mosaic_gpu as plgpu
    out["plgpu_names"] = sorted(n for n in dir(plgpu) if not n.startswith("_"))
except Exception as ex:
    out["plgpu_err"] = repr(ex)
for tool in ["compute-sanitizer", "ncu", "nvcc"]:
    out[tool] = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
out["nvidia-smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem", "--format=csv"], capture_output=True, text=True).stdout
print(json.dumps(out, indent=1))
