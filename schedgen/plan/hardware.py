"""The target GPUs: the limits the plan stage checks against, and the throughput figures that bench, explain, draw
and report compare kernels with (one place for both, each figure with where it comes from).

`schedule.target` picks one: sm_90a (the default: NVIDIA H200 SXM, Hopper, wgmma with register accumulators) or
sm_100a (NVIDIA B200, Blackwell, tcgen05 MMA with the accumulator in tensor memory). The sm_100a figures come from
NVIDIA's documents (PTX ISA 8.7+ for tcgen05 / TMEM, the CUDA C++ Programming Guide's compute capability 10.0
table); no kernel of this project has run on a Blackwell GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field


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
    cc: tuple = (9, 0)                # the compute capability the target's cubin runs on (sm_90a: 9.0 only)
    mma: str = "wgmma"                # the tensor-core instruction family: wgmma (Hopper) or tcgen05 (Blackwell)
    # tensor memory (Blackwell): columns x lanes of 32-bit cells per SM; 0 columns: the target has none
    tmem_columns: int = 0
    tmem_lanes: int = 0
    # tcgen05.mma kind::f16 shapes (PTX ISA, "tcgen05 MMA: matrix shape"): (cta_group, M, min N, max N, N step);
    # K is 32 bytes of the input type (16 for bf16 / f16) per instruction. Empty: no tcgen05.
    mma_shapes: tuple = ()
    gpus: str = "H100, H200, GH200"   # the GPUs whose compute capability runs the target's cubin

    def regs_per_block(self, threads: int) -> int:
        """Registers a block of `threads` holds when it runs alone on an SM (`__launch_bounds__(threads, 1)`): the
        per-thread cap, a multiple of 8 up to 256, times the threads. setmaxnreg moves registers among the block's
        warpgroups but never past this: 384 threads get 168 each, 64512 in all, not the SM's 65536."""
        return threads * (min(256, self.regs_per_sm // threads) // 8 * 8)

    @property
    def pair_tile_m(self) -> int:
        """The rows of a CTA pair's MMA tile (tcgen05.mma.cta_group::2, M 256: one tile for the two CTAs of a [2, 1]
        cluster); 0 where the target has no pair MMA."""
        return max((m for group, m, *_ in self.mma_shapes if group == 2), default=0)

    @property
    def mma_instruction(self) -> str:
        """The MMA instruction as messages name it: wgmma (Hopper) or tcgen05.mma (Blackwell)."""
        return "tcgen05.mma" if self.mma == "tcgen05" else self.mma


H200 = Hardware()

# NVIDIA B200 (sm_100a, compute capability 10.0): 148 SMs; SMEM as on Hopper (228 KiB per SM, 227 KiB opt-in per
# block); TMEM 512 columns x 128 lanes x 32 bit (256 KiB) per SM, allocated by tcgen05.alloc in powers of two of at
# least 32 columns; clusters up to 8 CTAs portably (16 non-portable, not used here); 126 MB L2 (datasheet figures,
# NOT measured here: there is no Blackwell GPU on these machines).
B200 = Hardware(
    name="NVIDIA B200", arch="sm_100a", sm_count=148, l2_bytes=126 << 20, cc=(10, 0), mma="tcgen05",
    tmem_columns=512, tmem_lanes=128, gpus="B200, GB200",
    # cta_group::1: M 64 (N 8..256 by 8) or 128 (N 16..256 by 16); cta_group::2 (a CTA pair, each holding half of
    # the A rows and half of the B columns' SMEM): M 128 (N 32..256 by 32) or 256 (N 16..256 by 16)
    mma_shapes=((1, 64, 8, 256, 8), (1, 128, 16, 256, 16), (2, 128, 32, 256, 32), (2, 256, 16, 256, 16)),
)

DEFAULT_TARGET = "sm_90a"
TARGETS = {"sm_90a": H200, "sm_100a": B200}


def for_target(target: str) -> Hardware:
    """The hardware model of a `schedule.target` value (the model's Literal has checked it)."""
    return TARGETS[target]


def target_field():
    """A plan's `target` field: the architecture it was planned for. Left out of plan.json and launch.json while it
    is the default (sm_90a), so Hopper plans and records read as they did before Blackwell; absent means sm_90a."""
    return field(default=DEFAULT_TARGET, metadata={"omit_default": True})


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
