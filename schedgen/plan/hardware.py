"""The target GPU (NVIDIA H200 SXM, sm_90a): the limits the plan stage checks against, and the throughput figures
that bench, explain, draw and report compare kernels with (one place for both, each figure with where it comes from).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    name: str = "NVIDIA H200"
    arch: str = "sm_90a"
    sm_count: int = 132
    smem_per_block: int = 232448      # 227 KiB: the opt-in maximum of dynamic SMEM per block
    smem_per_sm: int = 233472         # 228 KiB per SM, shared by the blocks resident on it
    smem_reserved_per_block: int = 1024  # the driver keeps 1 KiB per resident block
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    regs_per_sm: int = 65536
    max_cluster_size: int = 8
    tma_max_box: int = 256            # elements per box dimension
    tma_max_rank: int = 5
    swizzles: tuple = (32, 64, 128)
    l2_bytes: int = 60 << 20          # as torch reports it on the H200


    def regs_per_block(self, threads: int) -> int:
        """Registers a block of `threads` holds when it runs alone on an SM (`__launch_bounds__(threads, 1)`): the
        per-thread cap, a multiple of 8 up to 256, times the threads. setmaxnreg moves registers among the block's
        warpgroups but never past this: 384 threads get 168 each, 64512 in all, not the SM's 65536."""
        return threads * (min(256, self.regs_per_sm // threads) // 8 * 8)


H200 = Hardware()


# ---------------------------------------------------------------------------------------------- throughput figures
# Peak dense tensor-core rates, TFLOP/s, from NVIDIA's H200 Tensor Core GPU datasheet (H200 SXM column; the datasheet
# prints the 2:4 structured-sparsity figures, twice these; the same rates as the H100 SXM in the Hopper
# architecture whitepaper). Datasheet figures, NOT measured here: no kernel reaches them (cuBLAS on random bf16
# data runs 770-800 TFLOP/s on these machines, /work/.library/device/KINDS.md and bench/results/matmul.json).
PEAK_TFLOPS_BY_DTYPE = {"bf16": 989.0, "f16": 989.0, "fp8": 1979.0, "tf32": 494.5, "f32": 66.9}  # f32: no tensor core
PEAK_TFLOPS = PEAK_TFLOPS_BY_DTYPE["bf16"]      # dense bf16/f16: the % peak of the matmul rows
# HBM3e bandwidth, GB/s: datasheet (4.8 TB/s, 141 GB); NOT measured. The H100 SXM's 3.35 TB/s for comparison.
HBM_GBPS = 4800.0
# Device-to-device copy, GB/s counting bytes read and written: MEASURED on the H200 machines here (the `copy` peer
# rows of bench/results/map.json, 4.2-4.3 TB/s, 2026-12-02; KINDS.md: about 4.3 TB/s through torch). What a
# memory-bound kernel can reach; used as the bandwidth ceiling rather than the datasheet figure.
COPY_GBPS = 4250.0
# L2 size and SM count: H200.sm_count / H200.l2_bytes above (read off the device by torch: 132 SMs, 60 MB;
# the datasheet's full GH100 has 144 SMs and 60 MB L2, the SXM product enables 132).
L2_BYTES = H200.l2_bytes
SM_COUNT = H200.sm_count


def peak_tflops(dtype: str) -> float:
    """Datasheet dense tensor-core peak for an input dtype (bf16 for anything not listed)."""
    return PEAK_TFLOPS_BY_DTYPE.get(dtype, PEAK_TFLOPS)
